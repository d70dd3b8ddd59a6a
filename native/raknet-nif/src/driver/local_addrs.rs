//! Which local address each peer sent to, for sockets bound to every address: replies
//! leave from it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use super::LOCAL_ADDRS_PER_GENERATION;

/// The local address each peer without a connection (pings, handshakes) last sent to, for a
/// socket bound to every address: replies leave from it. Connections keep theirs in their
/// `Slot`, for as long as they live. Spoofed sources cannot grow this past two generations:
/// when the current one is full it becomes the previous one, and the previous one is dropped.
#[derive(Default)]
pub(super) struct LocalAddrs {
    pub(super) current: HashMap<SocketAddr, IpAddr>,
    pub(super) previous: HashMap<SocketAddr, IpAddr>,
}

impl LocalAddrs {
    /// `peer` as the engine names it (IPv4 peers of a dual-stack socket unmapped).
    pub(super) fn insert(&mut self, peer: SocketAddr, local: IpAddr) {
        if self.current.len() >= LOCAL_ADDRS_PER_GENERATION && !self.current.contains_key(&peer) {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
        }
        self.current.insert(peer, local);
    }

    pub(super) fn get(&self, peer: &SocketAddr) -> Option<IpAddr> {
        self.current
            .get(peer)
            .or_else(|| self.previous.get(peer))
            .copied()
    }
}
