//! What the endpoints of one server share across threads: connection slots, per-network
//! counts, buffered and queued bytes, returning players' IPs, client GUIDs and handshake keys.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use crate::admission::{KnownIps, NetworkCounts};

/// What the endpoints of one server share when it runs several, one per thread (sockets bound
/// to one port with `SO_REUSEPORT`, which the kernel picks by the peer's address): the
/// connection count that [`Limits::max_connections`](crate::Limits::max_connections) bounds,
/// the connections of each IP address
/// ([`AdmissionLimits::max_connections_per_ip`](crate::AdmissionLimits::max_connections_per_ip))
/// and the buffered bytes
/// ([`Limits::max_endpoint_buffered_bytes`](crate::Limits::max_endpoint_buffered_bytes)).
/// Those limits then hold for the group as a whole. A connection slot is taken with an atomic
/// compare-and-add, so two endpoints never both take the last one.
///
/// Give every endpoint of the group a clone of one `Arc` ([`Endpoint::new_in_group`]); an
/// endpoint made with [`Endpoint::new`] has a group of its own.
#[derive(Debug, Default)]
pub struct EndpointGroup {
    live: AtomicUsize,
    /// Connections by network: each host (an IPv4 address, an IPv6 /64) and the wider
    /// networks [`network_caps`](crate::admission::network_caps) names.
    per_ip: Mutex<NetworkCounts>,
    pub(crate) buffered: Arc<AtomicUsize>,
    /// Bytes queued or unacknowledged for sending, all connections together
    /// ([`Limits::max_endpoint_send_bytes`](crate::Limits::max_endpoint_send_bytes)).
    pub(crate) sending: Arc<AtomicUsize>,
    /// Players' IPs, for the returning players' pong budget (see [`KnownIps`]).
    pub(crate) known: KnownIps,
    /// The GUID of each accepted connection and its address: a GUID is one peer's on every
    /// endpoint of the group, and of the groups that share the table.
    guids: Arc<GuidTable>,
    /// The handshake's cookie and time-offset keys, drawn by the group's first endpoint:
    /// a client whose datagrams move to another endpoint half-way (the kernel's
    /// `SO_REUSEPORT` group changed) still has its cookie and echo accepted.
    handshake_keys: std::sync::OnceLock<[u64; 4]>,
}

/// The GUIDs of a server's connections, with their addresses: each belongs to one peer on
/// every endpoint that shares the table ([`EndpointGroup::sharing_guids`]). A server
/// listening on IPv4 and IPv6 has a group per socket (each with the limits of its own) and
/// one table for both, so a second client cannot take a player's GUID over the other family.
#[derive(Debug, Default)]
pub struct GuidTable(Mutex<HashMap<u64, SocketAddr>>);

impl GuidTable {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SocketAddr>> {
        // The map is left consistent at every step, so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// GUIDs held now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no GUID is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl EndpointGroup {
    /// Connections of every endpoint of the group (handshakes completed or under way as a
    /// client).
    pub fn connections(&self) -> usize {
        self.live.load(AtomicOrdering::SeqCst)
    }

    /// Connections from `ip` (IPv6: from its /64, see [`ip_key`]) on every endpoint of the
    /// group.
    pub fn connections_from(&self, ip: IpAddr) -> usize {
        self.ip_map().of_host(ip)
    }

    /// Whether `ip`'s host or one of its wider networks holds as many connections as
    /// [`network_caps`](crate::admission::network_caps) allows, `max_per_ip` for the host.
    pub fn network_full(&self, ip: IpAddr, max_per_ip: usize) -> bool {
        self.ip_map().full(ip, max_per_ip)
    }

    fn ip_map(&self) -> std::sync::MutexGuard<'_, NetworkCounts> {
        // The map is left consistent at every step, so a poisoned lock is still usable.
        self.per_ip.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a connection slot for a peer at `ip` if fewer than `max` are taken and fewer than
    /// `max_per_ip` are `ip`'s. Both counts are checked and raised under the per-IP lock, so
    /// two endpoints never both take the last slot.
    pub(crate) fn take(&self, ip: IpAddr, max: usize, max_per_ip: usize) -> bool {
        let mut map = self.ip_map();
        if map.full(ip, max_per_ip) {
            return false;
        }
        let free = self
            .live
            .fetch_update(AtomicOrdering::SeqCst, AtomicOrdering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if free {
            map.add(ip);
        }
        free
    }

    /// Bytes the group's connections hold queued or unacknowledged for sending, as of each
    /// one's last turn (see [`crate::SendBudget`]).
    pub fn send_backlog(&self) -> usize {
        self.sending.load(AtomicOrdering::Relaxed)
    }

    /// A group of its own (limits counted apart) that shares `guids` with other groups.
    pub fn sharing_guids(guids: Arc<GuidTable>) -> Self {
        Self {
            guids,
            ..Self::default()
        }
    }

    /// The group's GUID table, to share with another group ([`EndpointGroup::sharing_guids`]).
    pub fn guids(&self) -> Arc<GuidTable> {
        self.guids.clone()
    }

    fn guid_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SocketAddr>> {
        self.guids.map()
    }

    /// Whether a connection of the group from another address than `from` has `guid`.
    pub fn guid_taken(&self, guid: u64, from: SocketAddr) -> bool {
        self.guid_map().get(&guid).is_some_and(|a| *a != from)
    }

    /// Claim `guid` for a connection from `from`: false if another address holds it.
    pub(crate) fn claim_guid(&self, guid: u64, from: SocketAddr) -> bool {
        let mut map = self.guid_map();
        match map.get(&guid) {
            Some(a) => *a == from,
            None => {
                map.insert(guid, from);
                true
            }
        }
    }

    /// Give back a GUID claimed by [`EndpointGroup::claim_guid`].
    pub(crate) fn release_guid(&self, guid: u64, from: SocketAddr) {
        let mut map = self.guid_map();
        if map.get(&guid) == Some(&from) {
            map.remove(&guid);
        }
    }

    /// The group's handshake keys, drawn by `draw` the first time.
    pub(crate) fn handshake_keys(&self, draw: impl FnOnce() -> [u64; 4]) -> [u64; 4] {
        *self.handshake_keys.get_or_init(draw)
    }

    /// Give back a slot taken by [`EndpointGroup::take`].
    pub(crate) fn release(&self, ip: IpAddr) {
        let _ = self
            .live
            .fetch_update(AtomicOrdering::SeqCst, AtomicOrdering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            });
        self.ip_map().remove(ip);
    }
}
