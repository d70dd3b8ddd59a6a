//! The endpoint: one UDP socket's worth of RakNet. It demultiplexes datagrams by peer
//! address, answers offline messages (statelessly where it can), and owns its connections.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::addr;
use crate::admission::{Bans, BoundedMap, GuidBans, IpRates, NetworkCounts, TokenBucket};
use crate::codec::Encode;
use crate::config::{CongestionControl, EndpointConfig};
use crate::connection::{ConnEvent, Connection, MemoryShare, Peer, Role};
use crate::error::{ConnectError, DisconnectReason, SendError};
use crate::group::EndpointGroup;
use crate::handshake::{ServerHandshake, Step};
use crate::memory::HeapUsage;
use crate::message::{
    id, AlreadyConnected, ConnectionBanned, IpRecentlyConnected, NoFreeIncomingConnections,
    OfflineMessage, OpenConnectionRequest2, UnconnectedPing, UnconnectedPong,
};
use crate::proxy::{self, Inbound, Outbound, ProxyLayer, ProxyMode};
use crate::rng::derive;
use crate::send::flight::ReceiptOutcome;
use crate::send::gate::{GateOwner, SendGate};
use crate::send::queue::ReceiptId;
use crate::send::queue::SendOptions;
use crate::stats::{ConnectionStats, EndpointStats};

/// Offline replies queued at most; more are dropped (and counted) rather than buffered.
const MAX_OFFLINE_QUEUE: usize = 1024;
/// Bytes of an unconnected pong before its payload: ID, time, GUID, magic.
const PONG_HEADER_LEN: usize = 1 + 8 + 8 + 16;
/// The 0x17 a banned source's connection attempt gets: ID, magic, server GUID.
const BANNED_REPLY_LEN: usize = 1 + 16 + 8;
/// 0x17 replies a second, over all banned sources: enough to tell a banned player why, too
/// few to be worth reflecting.
pub const BANNED_REPLIES_PER_SEC: u64 = 64;
/// Longest offline ping response: a pong must fit one datagram at the largest MTU
/// (1492 − 28 bytes of IP and UDP headers).
pub const MAX_OFFLINE_PING_RESPONSE: usize = 1492 - 28 - PONG_HEADER_LEN;

/// Identifies a connection of an endpoint. Generation-checked: an id of a closed
/// connection never refers to a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

/// Indices from here up name connections of another transport sharing the endpoint's socket
/// ([`ConnId::external`]); the engine's own never get this far (they index its slot table).
const EXTERNAL_INDEX: u32 = 1 << 31;

impl ConnId {
    /// The id as one integer (stable while the connection lives; for logging and maps).
    pub fn as_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The id of the `serial`th connection of another transport on this endpoint (NetherNet
    /// beside RakNet): never equal to an id of the engine's, which ignores it (no method
    /// finds a connection by it). The application's side of the connection contract
    /// (events, sends, closes) is then one map keyed by `ConnId` for both transports.
    pub fn external(serial: u64) -> Self {
        Self {
            index: EXTERNAL_INDEX | (serial as u32 & !EXTERNAL_INDEX),
            generation: (serial >> 31) as u32,
        }
    }

    /// Whether this id came from [`ConnId::external`].
    pub fn is_external(self) -> bool {
        self.index & EXTERNAL_INDEX != 0
    }
}

/// What the endpoint reports to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A connection completed its handshake (either role).
    Connected {
        /// The connection.
        conn: ConnId,
        /// The peer's address.
        addr: SocketAddr,
        /// The peer's GUID.
        guid: u64,
        /// Which side opened it.
        role: Role,
        /// The RakNet protocol version in use.
        protocol: u8,
        /// The negotiated MTU.
        mtu: u16,
    },
    /// A message arrived. `payload` starts with the message ID; an `ID_TIMESTAMP` prefix
    /// has been stripped and turned into `transit`.
    Message {
        /// The connection.
        conn: ConnId,
        /// The message, ID first.
        payload: Bytes,
        /// Estimated one-way transit time.
        transit: Duration,
    },
    /// The fate of a message sent with an ACK receipt; exactly one per receipt.
    Receipt {
        /// The connection.
        conn: ConnId,
        /// The receipt `send` returned.
        receipt: ReceiptId,
        /// `true` if acknowledged, `false` if lost.
        acked: bool,
    },
    /// The connection ended (or an outgoing attempt failed). Exactly one per connection
    /// the application knows of: every outgoing one, and incoming ones after `Connected`.
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: DisconnectReason,
    },
    /// A datagram that is not RakNet, from an address without a connection, starting with
    /// one of [`RawConfig::prefixes`] ([`EndpointConfig::raw`]); answer it with
    /// [`Endpoint::send_raw`].
    Raw {
        /// Who sent it (a proxied client's real address).
        from: SocketAddr,
        /// The datagram, whole.
        datagram: Bytes,
    },
    /// An answer to [`Endpoint::ping`].
    Pong {
        /// Who answered.
        from: SocketAddr,
        /// The pong.
        pong: UnconnectedPong,
        /// Round trip, from the echoed time.
        rtt: Duration,
    },
}

/// Where to send the datagram [`Endpoint::poll_transmit`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The peer.
    pub destination: SocketAddr,
    /// Bytes written into the buffer.
    pub size: usize,
}

/// A connection's identity: who the peer is and what was negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The peer's address.
    pub addr: SocketAddr,
    /// The peer's GUID.
    pub guid: u64,
    /// Which side opened the connection.
    pub role: Role,
    /// The RakNet protocol version.
    pub protocol: u8,
    /// The MTU.
    pub mtu: u16,
    /// Whether the handshake has completed.
    pub connected: bool,
    /// The congestion controller of this side's sending.
    pub congestion: CongestionControl,
}

impl Drop for Endpoint {
    /// The group's counts forget this endpoint's connections (its thread ended while the
    /// others carry on).
    fn drop(&mut self) {
        for conn in self.slots.iter().filter_map(|s| s.conn.as_ref()) {
            self.group.release(conn.addr().ip());
            if conn.role() == Role::Server {
                self.group.release_guid(conn.peer_guid(), conn.addr());
            }
        }
    }
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    conn: Option<Connection>,
    /// This connection's deadline; `Endpoint::timers` holds it as `(deadline, index)`.
    scheduled: Option<Instant>,
    ready: bool,
}

/// Settings of one outgoing connection ([`Endpoint::connect_with`]); `None` keeps the
/// endpoint's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The congestion controller of this connection's sending side.
    pub congestion: Option<CongestionControl>,
    /// Speak to this server as a proxy would, naming this address as the client (see
    /// [`EndpointConfig::send_proxy_header`], which applies to every connection).
    pub proxy_header: Option<(ProxyMode, SocketAddr)>,
}

/// A RakNet endpoint: both roles, any number of connections, no I/O.
///
/// Drive it like this, with `now` from your clock:
///
/// 1. feed input: [`Endpoint::handle`] for each received datagram, [`Endpoint::handle_timeout`]
///    when the deadline from [`Endpoint::poll_timeout`] passes, and application commands
///    ([`Endpoint::connect`], [`Endpoint::send`], [`Endpoint::close`], [`Endpoint::ping`]);
/// 2. send every datagram [`Endpoint::poll_transmit`] writes;
/// 3. handle every [`Endpoint::poll_event`];
/// 4. sleep until the next datagram or [`Endpoint::poll_timeout`].
///
/// Read what has already arrived before running timers that are due: the timers judge the
/// peers on what was read, and run behind a backlog in the socket they take the ACKs waiting
/// there for losses and send their datagrams again. A thread that fell behind then stays
/// behind, reading those resends' ACKs too (`raknet-echo` did, until it read up to 1,024
/// waiting datagrams before a due timer: docs/performance.md).
#[derive(Debug)]
pub struct Endpoint {
    config: Arc<EndpointConfig>,
    local_addr: SocketAddr,
    guid: u64,
    epoch: Instant,
    handshake: ServerHandshake,
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_addr: HashMap<SocketAddr, ConnId>,
    by_guid: HashMap<u64, ConnId>,
    live: usize,
    offline_out: VecDeque<(SocketAddr, Vec<u8>)>,
    ready: VecDeque<ConnId>,
    /// Each connection's deadline once, as `(deadline, slot index)`: moving a deadline
    /// replaces its entry. (A heap with stale entries left in it, as this was, held 40-80 of
    /// them per connection under game traffic: each message's ACK deadline moved the
    /// connection's timer and back again.)
    timers: BTreeSet<(Instant, u32)>,
    events: VecDeque<Event>,
    /// Connections with admitted sends not yet released (see [`Endpoint::release_admitted`]).
    admitted: Vec<ConnId>,
    /// Shared with the other endpoints of a server (connection and buffer limits).
    group: Arc<EndpointGroup>,
    /// New connections per IP and second, counted once the address is proven: at OCR2 with
    /// a cookie, at the verified 0x13 without. OCR2s spoofed from a player's IP never
    /// reach it, so they cannot spend that IP's budget.
    new_conn_rates: IpRates,
    pong_rates: IpRates,
    /// Pong bytes for strangers, and for the IPs of players who completed a handshake
    /// (`group.known`): a spoofed ping flood spends the first only.
    pong_budget: TokenBucket,
    known_pong_budget: TokenBucket,
    /// 0x17 replies to banned sources, [`BANNED_REPLIES_PER_SEC`] a second at most.
    banned_reply_budget: TokenBucket,
    bans: Bans,
    guid_bans: GuidBans,
    stats: EndpointStats,
    /// Bytes of peer data all connections buffer (reassembly and ordering holds).
    buffered: Arc<AtomicUsize>,
    /// Not accepting new connections for now ([`Endpoint::set_suspended`]).
    suspended: bool,
    /// Connections without proof of address, per IP (IPv6 by /64, see [`ip_key`]).
    unproven: NetworkCounts,
    /// Real client addresses behind trusted proxies ([`EndpointConfig::proxy`]).
    proxy: Option<ProxyLayer>,
    /// Datagrams offered to the application ([`EndpointConfig::raw`]): per-IP rates, the
    /// global budget, and the offers awaiting their reply.
    raw_rates: IpRates,
    raw_budget: TokenBucket,
    raw_offers: BoundedMap<SocketAddr, raw::Offer>,
    /// A connection of this endpoint was opened with [`ConnectOptions::proxy_header`].
    proxy_headers_sent: bool,
}

impl Endpoint {
    /// An endpoint bound (by its driver) to `local_addr`. `now` starts its RakNet clock.
    pub fn new(config: EndpointConfig, local_addr: SocketAddr, now: Instant) -> Self {
        Self::new_in_group(config, local_addr, now, Arc::default())
    }

    /// Like [`Endpoint::new`], one of several endpoints of one server that share `group`'s
    /// connection and buffer limits (see [`EndpointGroup`]). Give them one
    /// [`EndpointConfig::guid`] too: a client must see one server whichever endpoint answers.
    pub fn new_in_group(
        config: EndpointConfig,
        local_addr: SocketAddr,
        now: Instant,
        group: Arc<EndpointGroup>,
    ) -> Self {
        let guid = config
            .guid
            .unwrap_or_else(|| derive(config.rng_seed, config.secret, b"guid"));
        let handshake = ServerHandshake::new(&config, group.clone());
        let tracked = config.admission.max_tracked_ips;
        let pong_bytes = config.admission.pong_bytes_per_sec;
        let raw_per_sec = config.raw.as_ref().map_or(0, |r| u64::from(r.per_sec));
        // A flow lives as long as a connection or a handshake could without a datagram.
        let flow_idle = config.timeout.max(config.handshake_timeout).as_millis() as u64;
        let proxy = config.proxy.clone().map(|p| ProxyLayer::new(p, flow_idle));
        Self {
            config: Arc::new(config),
            local_addr,
            guid,
            epoch: now,
            handshake,
            slots: Vec::new(),
            free: Vec::new(),
            by_addr: HashMap::new(),
            by_guid: HashMap::new(),
            live: 0,
            offline_out: VecDeque::new(),
            ready: VecDeque::new(),
            timers: BTreeSet::new(),
            events: VecDeque::new(),
            admitted: Vec::new(),
            buffered: group.buffered.clone(),
            group,
            new_conn_rates: IpRates::new(tracked),
            pong_rates: IpRates::new(tracked),
            pong_budget: TokenBucket::full(pong_bytes, 0),
            known_pong_budget: TokenBucket::full(pong_bytes, 0),
            banned_reply_budget: TokenBucket::full(BANNED_REPLIES_PER_SEC, 0),
            bans: Bans::default(),
            guid_bans: GuidBans::default(),
            stats: EndpointStats::default(),
            suspended: false,
            unproven: NetworkCounts::default(),
            proxy,
            raw_rates: IpRates::new(tracked),
            raw_budget: TokenBucket::full(raw_per_sec, 0),
            raw_offers: raw::offers(),
            proxy_headers_sent: false,
        }
    }

    // ---- getters -------------------------------------------------------------------

    /// This endpoint's GUID.
    pub fn guid(&self) -> u64 {
        self.guid
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Endpoint-wide counters.
    pub fn stats(&self) -> EndpointStats {
        EndpointStats {
            connections: self.live,
            buffered_bytes: self.buffered.load(std::sync::atomic::Ordering::Relaxed),
            send_backlog_bytes: self
                .group
                .sending
                .load(std::sync::atomic::Ordering::Relaxed),
            half_open: self.handshake.half_open(),
            half_open_reserved: self.handshake.reserved(),
            reservations_lapsed: self.handshake.reservations_lapsed(),
            strict: self.handshake.strict(),
            unproven: self.unproven.total(),
            proxy: self
                .proxy
                .as_ref()
                .map(ProxyLayer::stats)
                .unwrap_or_default(),
            ..self.stats
        }
    }

    /// Heap bytes this endpoint holds, by structure, its connections' summed: what to look
    /// at when memory grows (see [`HeapUsage`]). O(connections).
    pub fn heap_usage(&self) -> HeapUsage {
        use crate::memory::{deque, map, vec};
        let mut usage = HeapUsage::default();
        for conn in self.slots.iter().filter_map(|s| s.conn.as_ref()) {
            usage += conn.heap_usage();
        }
        // A BTreeSet entry: the key and about as much again of node space.
        let timers = self.timers.len() * 2 * std::mem::size_of::<(Instant, u32)>();
        usage.connections = vec(&self.slots)
            + vec(&self.free)
            + map(&self.by_addr)
            + map(&self.by_guid)
            + deque(&self.ready)
            + timers;
        usage.handshakes = self.handshake.heap_bytes();
        usage.admission = self.new_conn_rates.heap_bytes()
            + self.pong_rates.heap_bytes()
            + self.bans.heap_bytes()
            + self.guid_bans.heap_bytes()
            + self.unproven.heap_bytes()
            + self.raw_rates.heap_bytes()
            + self.raw_offers.heap_bytes()
            + self.proxy.as_ref().map_or(0, ProxyLayer::heap_bytes);
        let offline: usize = self.offline_out.iter().map(|(_, d)| d.capacity()).sum();
        usage.endpoint_queues = deque(&self.offline_out) + offline + deque(&self.events);
        usage
    }

    fn conn(&self, id: ConnId) -> Option<&Connection> {
        let slot = self.slots.get(id.index as usize)?;
        (slot.generation == id.generation)
            .then_some(slot.conn.as_ref())
            .flatten()
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Connection> {
        let slot = self.slots.get_mut(id.index as usize)?;
        (slot.generation == id.generation)
            .then_some(slot.conn.as_mut())
            .flatten()
    }

    /// The longest message [`Endpoint::send`] takes on a connection (see
    /// [`Limits::max_message_bytes`](crate::Limits::max_message_bytes)): the fragment limit
    /// bounds it below that at small MTUs. `None` if the connection does not exist.
    pub fn max_message_len(&self, id: ConnId) -> Option<usize> {
        self.conn(id).map(Connection::max_message_len)
    }

    /// A connection's counters, if it exists.
    pub fn connection_stats(&self, id: ConnId) -> Option<ConnectionStats> {
        self.conn(id).map(Connection::stats)
    }

    /// A connection's identity, if it exists.
    pub fn connection_info(&self, id: ConnId) -> Option<ConnectionInfo> {
        self.conn(id).map(|c| ConnectionInfo {
            addr: c.addr(),
            guid: c.peer_guid(),
            role: c.role(),
            protocol: c.protocol(),
            mtu: c.mtu(),
            connected: c.is_connected(),
            congestion: c.congestion(),
        })
    }

    /// The connection with peer `addr`, if any.
    pub fn conn_by_addr(&self, addr: SocketAddr) -> Option<ConnId> {
        self.by_addr.get(&addr::unmap(addr)).copied()
    }

    /// Bytes a connection has queued or sent without acknowledgement (what
    /// [`Limits::max_send_queue_bytes`](crate::Limits::max_send_queue_bytes) bounds).
    pub fn send_backlog(&self, id: ConnId) -> Option<usize> {
        self.conn(id).map(Connection::send_backlog)
    }

    /// A connection's peer address, if it exists.
    pub fn remote_addr(&self, id: ConnId) -> Option<SocketAddr> {
        self.conn(id).map(Connection::addr)
    }

    /// A connection's MTU, if it exists.
    pub fn mtu(&self, id: ConnId) -> Option<u16> {
        self.conn(id).map(Connection::mtu)
    }

    /// Whether a connection exists and has completed its handshake.
    pub fn is_connected(&self, id: ConnId) -> bool {
        self.conn(id).is_some_and(Connection::is_connected)
    }

    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    // ---- application commands ------------------------------------------------------

    /// Stop (`true`) or resume (`false`) accepting new connections; current ones carry on.
    /// While suspended, connection attempts are refused with "no free incoming connections"
    /// and pings are still answered (a server list still shows the server).
    pub fn set_suspended(&mut self, suspended: bool) {
        self.suspended = suspended;
    }

    /// Change the most connections this endpoint holds ([`crate::Limits::max_connections`]); a
    /// lower value refuses new connections until enough current ones end; it closes none.
    pub fn set_max_connections(&mut self, max: usize) {
        Arc::make_mut(&mut self.config).limits.max_connections = max;
    }

    /// Replace the unconnected pong payload (a Bedrock MOTD, say), effective at once.
    /// Longer than [`MAX_OFFLINE_PING_RESPONSE`] (one datagram) is refused with
    /// [`SendError::TooLarge`]. Pongs larger than
    /// [`AdmissionLimits::pong_amplification`](crate::AdmissionLimits::pong_amplification)
    /// times the ping are not sent (counted in `pongs_too_large`): with the default 3 and a
    /// 33-byte ping, a payload up to 66 bytes is always answered.
    pub fn set_offline_ping_response(&mut self, data: Bytes) -> Result<(), SendError> {
        if data.len() > MAX_OFFLINE_PING_RESPONSE {
            return Err(SendError::TooLarge);
        }
        Arc::make_mut(&mut self.config).offline_ping_response = data;
        Ok(())
    }

    /// Back-pressure: while `paused`, the connection refuses the peer's reliable messages
    /// (their datagrams stay unacknowledged, so the peer backs off and resends) and drops
    /// unreliable ones; resuming asks the peer for what was refused at once (NAK). For an
    /// application that cannot keep up with a fast sender. Unknown ids are ignored.
    pub fn set_receive_paused(&mut self, now: Instant, id: ConnId, paused: bool) {
        if let Some(c) = self.conn_mut(id) {
            c.set_receive_paused(now, paused);
        }
        self.touch(id);
    }

    /// Send an unconnected ping; the answer arrives as [`Event::Pong`].
    pub fn ping(&mut self, now: Instant, to: SocketAddr) {
        let ping = UnconnectedPing {
            only_if_open: false,
            time: self.ms(now),
            client_guid: Some(self.guid),
        };
        self.queue_offline(to, &ping);
    }

    /// Start connecting to a server; the outcome arrives as [`Event::Connected`] or
    /// [`Event::Disconnected`] with [`DisconnectReason::ConnectFailed`].
    pub fn connect(&mut self, now: Instant, to: SocketAddr) -> Result<ConnId, ConnectError> {
        self.connect_with(now, to, ConnectOptions::default())
    }

    /// [`Endpoint::connect`] with settings of this connection's own.
    pub fn connect_with(
        &mut self,
        now: Instant,
        to: SocketAddr,
        opts: ConnectOptions,
    ) -> Result<ConnId, ConnectError> {
        let to = addr::unmap(to);
        if self.by_addr.contains_key(&to) {
            return Err(ConnectError::AddressInUse);
        }
        // The server's per-IP admission limit is not ours to apply to where we connect.
        if !self
            .group
            .take(to.ip(), self.config.limits.max_connections, usize::MAX)
        {
            return Err(ConnectError::TooManyConnections);
        }
        let mut config = self.config.clone();
        if let Some(congestion) = opts.congestion.filter(|&c| c != config.congestion) {
            // Copy-on-write: only a connection that differs gets a config of its own.
            std::sync::Arc::make_mut(&mut config).congestion = congestion;
        }
        if let Some(header) = opts.proxy_header {
            std::sync::Arc::make_mut(&mut config).send_proxy_header = Some(header);
            self.proxy_headers_sent = true;
        }
        let conn = Connection::client(config, to, self.local_addr, self.guid, self.epoch, now);
        let id = self.insert(conn);
        self.touch(id);
        Ok(id)
    }

    /// Queue a message. Returns the receipt id for the `*WithAckReceipt` reliabilities.
    pub fn send(
        &mut self,
        now: Instant,
        conn: ConnId,
        payload: Bytes,
        opts: SendOptions,
    ) -> Result<Option<ReceiptId>, SendError> {
        let c = self.conn_mut(conn).ok_or(SendError::Closed)?;
        let receipt = c.send(now, payload, opts, None);
        // Not admitted through the gate: what it holds is published at once.
        c.gate.publish();
        let receipt = receipt?;
        self.touch(conn);
        Ok(receipt)
    }

    /// [`Endpoint::send`] of a send another thread admitted through the connection's
    /// [`SendGate`] ([`Endpoint::send_gate`]). Its reservation of `cost` bytes is released
    /// (whether the engine takes the send or not) at the next
    /// [`Endpoint::release_admitted`]: a driver that applies sends in batches releases them
    /// once per batch, so the threads admitting sends meanwhile do not share a cache line
    /// with it on every send. A reliability with a receipt
    /// reports `tag` in its [`Event::Receipt`] if given (a driver hands its application's ids
    /// through, with no map of its own: keep them apart from the ids [`Endpoint::send`]
    /// picks by using one or the other on a connection).
    pub fn send_admitted(
        &mut self,
        now: Instant,
        conn: ConnId,
        payload: Bytes,
        opts: SendOptions,
        tag: Option<ReceiptId>,
        cost: usize,
    ) -> Result<Option<ReceiptId>, SendError> {
        let c = self.conn_mut(conn).ok_or(SendError::Closed)?;
        let sent = c.send(now, payload, opts, tag);
        let first = c.admitted == 0;
        c.admitted += cost;
        if first {
            self.admitted.push(conn);
        }
        if sent.is_ok() {
            self.touch(conn);
        }
        sent
    }

    /// Release the reservations of the sends [`Endpoint::send_admitted`] took since the last
    /// call (after the engine published what each connection now holds, so a gate that sees
    /// a reservation gone sees its bytes held).
    pub fn release_admitted(&mut self) {
        let mut ids = std::mem::take(&mut self.admitted);
        for id in ids.drain(..) {
            if let Some(c) = self.conn_mut(id) {
                c.gate.publish();
                c.gate.release(std::mem::take(&mut c.admitted));
            }
        }
        self.admitted = ids;
    }

    /// The gate through which other threads admit sends to `conn` (see [`SendGate`]): the
    /// connection's limits and budget, what it holds for sending, and whether it is open.
    pub fn send_gate(&self, id: ConnId) -> Option<Arc<SendGate>> {
        self.conn(id).map(|c| c.gate.gate.clone())
    }

    /// Close a connection gracefully (0x15, then wait for acknowledgement).
    pub fn close(&mut self, now: Instant, conn: ConnId) {
        if let Some(c) = self.conn_mut(conn) {
            c.close(now, DisconnectReason::LocalClose);
            self.touch(conn);
        }
    }

    /// Close every connection gracefully with [`DisconnectReason::Shutdown`].
    pub fn shutdown(&mut self, now: Instant) {
        let ids: Vec<ConnId> = self.by_addr.values().copied().collect();
        for id in ids {
            if let Some(c) = self.conn_mut(id) {
                c.close(now, DisconnectReason::Shutdown);
                self.touch(id);
            }
        }
    }

    /// Run the timers that are due. Each connection is visited at most once per call: a
    /// deadline that is still due afterwards (an ACK waiting for [`Endpoint::poll_transmit`],
    /// say) is served by the next call.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(proxy) = self.proxy.as_mut() {
            proxy.tick(now.saturating_duration_since(self.epoch).as_millis() as u64);
        }
        self.handshake.expire(&self.config, self.ms(now));
        self.handshake
            .update_pressure(&self.config, self.ms(now), &mut self.stats);
        let mut due = Vec::new();
        while let Some(&(t, index)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if let Some(slot) = self.slots.get_mut(index as usize) {
                debug_assert!(slot.conn.is_some(), "a timer entry outlived its connection");
                slot.scheduled = None;
                due.push(ConnId {
                    index,
                    generation: slot.generation,
                });
            }
        }
        for id in due {
            if let Some(c) = self.conn_mut(id) {
                c.handle_timeout(now);
            }
            self.touch(id);
        }
    }

    // ---- output --------------------------------------------------------------------

    /// Write the next datagram to send into `buf`; `None` when there is nothing to send.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let now_ms = self.ms(now);
        let mut tx = loop {
            let mut tx = self.poll_transmit_to_peer(now, buf)?;
            // A client behind a proxy is reached through the proxy's flow (Spectrum's with
            // its header in front); one whose route is gone is not reached at all.
            let Some(proxy) = self.proxy.as_mut().filter(|p| p.carries_any()) else {
                break tx;
            };
            match proxy.outbound(now_ms, tx.destination) {
                Outbound::Direct => break tx,
                Outbound::Drop => continue,
                Outbound::Via(via, header) => {
                    if let Some(header) = header {
                        buf.splice(0..0, header.iter().copied());
                        tx.size = buf.len();
                    }
                    tx.destination = via;
                    break tx;
                }
            }
        };
        if let Some((mode, source)) = self.sent_proxy_header(tx.destination) {
            let offline = buf.first().is_some_and(|b| b & crate::flags::VALID == 0);
            if mode != ProxyMode::V2First || offline {
                let mut header = Vec::with_capacity(proxy::SPP_LEN);
                match mode {
                    ProxyMode::Spectrum => proxy::write_spp(source, tx.destination, &mut header),
                    _ => proxy::write_v2(source, tx.destination, &mut header),
                }
                buf.splice(0..0, header);
                tx.size = buf.len();
            }
        }
        Some(tx)
    }

    /// The proxy header this endpoint puts in front of what it sends to `peer`, if any
    /// ([`EndpointConfig::send_proxy_header`], [`ConnectOptions::proxy_header`]).
    #[inline]
    fn sent_proxy_header(&self, peer: SocketAddr) -> Option<(ProxyMode, SocketAddr)> {
        if let Some(header) = self.config.send_proxy_header {
            return Some(header);
        }
        // Checked first: a peer lookup for every datagram would cost every endpoint.
        if !self.proxy_headers_sent {
            return None;
        }
        let id = self.by_addr.get(&peer)?;
        self.conn(*id)?.config().send_proxy_header
    }

    /// [`Endpoint::poll_transmit`] with the peer's own address (a proxied client's real one).
    fn poll_transmit_to_peer(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((to, data)) = self.offline_out.pop_front() {
            buf.clear();
            buf.extend_from_slice(&data);
            return Some(Transmit {
                destination: to,
                size: buf.len(),
            });
        }
        while let Some(&id) = self.ready.front() {
            let wrote = match self.conn_mut(id) {
                Some(c) => c.poll_transmit(now, buf).then(|| c.addr()),
                None => None,
            };
            if let Some(destination) = wrote {
                // Round robin: one datagram per connection per turn.
                self.ready.rotate_left(1);
                return Some(Transmit {
                    destination,
                    size: buf.len(),
                });
            }
            self.ready.pop_front();
            let Some(slot) = self.slots.get_mut(id.index as usize) else {
                continue;
            };
            slot.ready = false;
            if slot.conn.is_none() {
                // Closed while queued: the slot could not be reused until now.
                self.free.push(id.index);
            } else {
                self.touch_quiet(id);
            }
        }
        None
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Endpoint::handle_timeout`] must next be called. Call
    /// [`Endpoint::poll_transmit`] until it returns `None` first.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let handshake = self
            .handshake
            .next_expiry(&self.config)
            .map(|ms| self.epoch + Duration::from_millis(ms));
        match self.timers.first() {
            Some(&(t, _)) => Some(handshake.map_or(t, |h| h.min(t))),
            None => handshake,
        }
    }

    // ---- internals -----------------------------------------------------------------

    fn queue_offline(&mut self, to: SocketAddr, msg: &impl Encode) {
        self.queue_offline_bytes(to, msg.to_vec());
    }

    fn queue_offline_bytes(&mut self, to: SocketAddr, data: Vec<u8>) {
        if self.offline_out.len() >= MAX_OFFLINE_QUEUE {
            self.stats.offline_queue_full += 1;
            return;
        }
        self.offline_out.push_back((to, data));
    }

    fn insert(&mut self, mut conn: Connection) -> ConnId {
        conn.memory = MemoryShare::new(self.buffered.clone());
        conn.gate = GateOwner::new(&self.config.limits, self.group.sending.clone());
        conn.gate.set_max_message(conn.max_message_len());
        let addr = conn.addr();
        // The group's slot was taken by `EndpointGroup::take`.
        self.live += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: None,
                    scheduled: None,
                    ready: false,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.conn = Some(conn);
        let id = ConnId {
            index,
            generation: slot.generation,
        };
        self.by_addr.insert(addr, id);
        id
    }

    /// After any input to a connection: collect its events, queue it for transmission,
    /// re-arm its timer, and free it once closed.
    fn touch(&mut self, id: ConnId) {
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        if slot.generation != id.generation || slot.conn.is_none() {
            return;
        }
        if !slot.ready {
            slot.ready = true;
            self.ready.push_back(id);
        }
        self.touch_quiet(id);
    }

    fn touch_quiet(&mut self, id: ConnId) {
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        if slot.generation != id.generation {
            return;
        }
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        let announce = conn.role() == Role::Client || conn.ever_connected();
        while let Some(e) = conn.poll_event() {
            let event = match e {
                ConnEvent::Connected => Event::Connected {
                    conn: id,
                    addr: conn.addr(),
                    guid: conn.peer_guid(),
                    role: conn.role(),
                    protocol: conn.protocol(),
                    mtu: conn.mtu(),
                },
                ConnEvent::Message { payload, transit } => Event::Message {
                    conn: id,
                    payload,
                    transit,
                },
                ConnEvent::Receipt(ReceiptOutcome::Acked(receipt)) => Event::Receipt {
                    conn: id,
                    receipt,
                    acked: true,
                },
                ConnEvent::Receipt(ReceiptOutcome::Lost(receipt)) => Event::Receipt {
                    conn: id,
                    receipt,
                    acked: false,
                },
                ConnEvent::Closed(reason) => {
                    if !(announce || conn.ever_connected()) {
                        continue;
                    }
                    Event::Disconnected { conn: id, reason }
                }
            };
            self.events.push_back(event);
        }
        if conn.is_closed() {
            let (addr, guid, role) = (conn.addr(), conn.peer_guid(), conn.role());
            if conn.unproven() {
                self.unproven.remove(addr.ip());
            }
            slot.conn = None;
            if let Some(t) = slot.scheduled.take() {
                self.timers.remove(&(t, id.index));
            }
            slot.generation = slot.generation.wrapping_add(1);
            if !slot.ready {
                self.free.push(id.index);
            }
            if self.by_addr.get(&addr) == Some(&id) {
                self.by_addr.remove(&addr);
            }
            if self.by_guid.get(&guid) == Some(&id) {
                self.by_guid.remove(&guid);
            }
            if role == Role::Server {
                self.group.release_guid(guid, addr);
            }
            self.live -= 1;
            self.group.release(addr.ip());
            return;
        }
        let t = conn.poll_timeout();
        if t != slot.scheduled {
            if let Some(old) = std::mem::replace(&mut slot.scheduled, t) {
                self.timers.remove(&(old, id.index));
            }
            if let Some(t) = t {
                self.timers.insert((t, id.index));
            }
        }
    }
}

mod bans;
mod input;
mod raw;

pub use raw::{RawConfig, RawReplyError};

#[cfg(test)]
mod tests;
