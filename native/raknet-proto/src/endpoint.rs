//! The endpoint: one UDP socket's worth of RakNet. It demultiplexes datagrams by peer
//! address, answers offline messages (statelessly where it can), and owns its connections.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::addr;
use crate::codec::Encode;
use crate::config::EndpointConfig;
use crate::connection::{ConnEvent, Connection, MemoryShare, Peer, Role};
use crate::error::{ConnectError, DisconnectReason, SendError};
use crate::message::{
    AlreadyConnected, ConnectionBanned, IncompatibleProtocolVersion, NoFreeIncomingConnections,
    OfflineMessage, OpenConnectionReply1, OpenConnectionReply2, OpenConnectionRequest1,
    OpenConnectionRequest2, UnconnectedPing, UnconnectedPong,
};
use crate::rng::{siphash24, Rng};
use crate::send::flight::ReceiptOutcome;
use crate::send::queue::ReceiptId;
use crate::send::queue::SendOptions;
use crate::stats::ConnectionStats;

/// Offline replies queued at most; more are dropped (and counted) rather than buffered.
const MAX_OFFLINE_QUEUE: usize = 1024;
/// Addresses whose OCR1 protocol version is remembered when cookies are off.
const MAX_REMEMBERED_PROTOCOLS: usize = 4096;
/// How long a cookie epoch lasts; cookies of the current and previous epoch are accepted.
const COOKIE_EPOCH_MS: u64 = 2000;

/// Identifies a connection of an endpoint. Generation-checked: an id of a closed
/// connection never refers to a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

impl ConnId {
    /// The id as one integer (stable while the connection lives; for logging and maps).
    pub fn as_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
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
}

/// Endpoint-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Connections currently held (any state).
    pub connections: usize,
    /// Offline messages received.
    pub offline_in: u64,
    /// Unconnected pongs sent.
    pub pongs_sent: u64,
    /// OCR1 refused with 0x19.
    pub incompatible_protocol: u64,
    /// OCR2 refused with 0x14.
    pub refused_full: u64,
    /// OCR2 refused with 0x12.
    pub refused_already_connected: u64,
    /// Datagrams from banned addresses.
    pub banned: u64,
    /// OCR2 with a missing or invalid cookie, dropped.
    pub bad_cookies: u64,
    /// Connected datagrams from addresses without a connection, dropped.
    pub unknown_peer: u64,
    /// Datagrams that were neither a valid offline message nor connected, dropped.
    pub malformed: u64,
    /// Offline replies dropped because the reply queue was full.
    pub offline_queue_full: u64,
    /// Bytes of peer data all connections buffer now (split reassembly, messages held for
    /// ordering); bounded by [`crate::Limits::max_endpoint_buffered_bytes`].
    pub buffered_bytes: usize,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    conn: Option<Connection>,
    scheduled: Option<Instant>,
    ready: bool,
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
#[derive(Debug)]
pub struct Endpoint {
    config: Arc<EndpointConfig>,
    local_addr: SocketAddr,
    guid: u64,
    epoch: Instant,
    cookie_key: (u64, u64),
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_addr: HashMap<SocketAddr, ConnId>,
    by_guid: HashMap<u64, ConnId>,
    live: usize,
    offline_out: VecDeque<(SocketAddr, Vec<u8>)>,
    ready: VecDeque<ConnId>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    events: VecDeque<Event>,
    protocols: HashMap<SocketAddr, u8>,
    banned: HashSet<IpAddr>,
    stats: EndpointStats,
    /// Bytes of peer data all connections buffer (reassembly and ordering holds).
    buffered: Arc<AtomicUsize>,
}

impl Endpoint {
    /// An endpoint bound (by its driver) to `local_addr`. `now` starts its RakNet clock.
    pub fn new(config: EndpointConfig, local_addr: SocketAddr, now: Instant) -> Self {
        let mut rng = Rng::new(config.rng_seed);
        let guid = config.guid.unwrap_or_else(|| rng.next_u64());
        let cookie_key = (rng.next_u64(), rng.next_u64());
        Self {
            config: Arc::new(config),
            local_addr,
            guid,
            epoch: now,
            cookie_key,
            slots: Vec::new(),
            free: Vec::new(),
            by_addr: HashMap::new(),
            by_guid: HashMap::new(),
            live: 0,
            offline_out: VecDeque::new(),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            events: VecDeque::new(),
            protocols: HashMap::new(),
            banned: HashSet::new(),
            stats: EndpointStats::default(),
            buffered: Arc::new(AtomicUsize::new(0)),
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
            ..self.stats
        }
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

    /// Replace the unconnected pong payload (a Bedrock MOTD, say), effective at once.
    pub fn set_offline_ping_response(&mut self, data: Bytes) {
        Arc::make_mut(&mut self.config).offline_ping_response = data;
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

    /// Refuse everything from `ip` (answered with 0x17) until [`Endpoint::unban`].
    pub fn ban(&mut self, ip: IpAddr) {
        self.banned.insert(ip);
    }

    /// Lift a ban.
    pub fn unban(&mut self, ip: IpAddr) {
        self.banned.remove(&ip);
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
        let to = addr::unmap(to);
        if self.by_addr.contains_key(&to) {
            return Err(ConnectError::AddressInUse);
        }
        if self.live >= self.config.limits.max_connections {
            return Err(ConnectError::TooManyConnections);
        }
        let conn = Connection::client(
            self.config.clone(),
            to,
            self.local_addr,
            self.guid,
            self.epoch,
            now,
        );
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
        let receipt = c.send(now, payload, opts)?;
        self.touch(conn);
        Ok(receipt)
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

    // ---- input ---------------------------------------------------------------------

    /// Process a datagram received from `from`.
    pub fn handle(&mut self, now: Instant, from: SocketAddr, datagram: Bytes) {
        let from = addr::unmap(from);
        let Some(&first) = datagram.first() else {
            self.stats.malformed += 1;
            return;
        };
        if self.banned.contains(&from.ip()) {
            self.stats.banned += 1;
            if OfflineMessage::is_offline(&datagram) {
                self.queue_offline(
                    from,
                    &ConnectionBanned {
                        server_guid: self.guid,
                    },
                );
            }
            return;
        }
        if first & crate::flags::VALID != 0 {
            match self.by_addr.get(&from).copied() {
                Some(id) => {
                    if let Some(c) = self.conn_mut(id) {
                        c.handle_datagram(now, datagram);
                    }
                    self.touch(id);
                }
                None => self.stats.unknown_peer += 1,
            }
            return;
        }
        if !OfflineMessage::is_offline(&datagram) {
            self.stats.malformed += 1;
            return;
        }
        self.stats.offline_in += 1;
        let msg = match OfflineMessage::decode(&mut datagram.clone(), self.config.use_cookies) {
            Ok(m) => m,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if let Some(&id) = self.by_addr.get(&from) {
            if self.conn(id).is_some_and(Connection::in_offline_handshake) {
                if let Some(c) = self.conn_mut(id) {
                    c.handle_offline(now, msg);
                }
                self.touch(id);
                return;
            }
        }
        match msg {
            OfflineMessage::UnconnectedPing(ping) => self.on_ping(from, ping),
            OfflineMessage::UnconnectedPong(pong) => {
                let rtt = Duration::from_millis(self.ms(now).saturating_sub(pong.time));
                self.events.push_back(Event::Pong { from, pong, rtt });
            }
            OfflineMessage::OpenConnectionRequest1(req) => self.on_ocr1(now, from, req),
            OfflineMessage::OpenConnectionRequest2(req) => self.on_ocr2(now, from, req),
            _ => {}
        }
    }

    fn has_free_slot(&self) -> bool {
        self.config.accept_incoming && self.live < self.config.limits.max_connections
    }

    fn on_ping(&mut self, from: SocketAddr, ping: UnconnectedPing) {
        if ping.only_if_open && !self.has_free_slot() {
            return;
        }
        let pong = UnconnectedPong {
            time: ping.time,
            server_guid: self.guid,
            data: self.config.offline_ping_response.clone(),
        };
        self.stats.pongs_sent += 1;
        self.queue_offline(from, &pong);
    }

    fn cookie(&self, from: SocketAddr, epoch: u64, protocol: u8) -> u32 {
        let mut data = [0u8; 16 + 2 + 8 + 1];
        let ip = match from.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        data[..16].copy_from_slice(&ip);
        data[16..18].copy_from_slice(&from.port().to_be_bytes());
        data[18..26].copy_from_slice(&epoch.to_be_bytes());
        data[26] = protocol;
        // The low byte carries the protocol, so OCR2 needs no server state.
        (siphash24(self.cookie_key.0, self.cookie_key.1, &data) as u32 & !0xff)
            | u32::from(protocol)
    }

    fn on_ocr1(&mut self, now: Instant, from: SocketAddr, req: OpenConnectionRequest1) {
        if !self.config.protocol_versions.contains(&req.protocol) {
            self.stats.incompatible_protocol += 1;
            let protocol = self.config.protocol_versions.first().copied().unwrap_or(6);
            return self.queue_offline(
                from,
                &IncompatibleProtocolVersion {
                    protocol,
                    server_guid: self.guid,
                },
            );
        }
        let cookie = self
            .config
            .use_cookies
            .then(|| self.cookie(from, self.ms(now) / COOKIE_EPOCH_MS, req.protocol));
        if cookie.is_none() {
            if self.protocols.len() >= MAX_REMEMBERED_PROTOCOLS {
                self.protocols.clear();
            }
            self.protocols.insert(from, req.protocol);
        }
        let mtu = req.mtu.clamp(self.config.min_mtu, self.config.max_mtu);
        self.queue_offline(
            from,
            &OpenConnectionReply1 {
                server_guid: self.guid,
                cookie,
                server_public_key: None,
                mtu,
            },
        );
    }

    fn on_ocr2(&mut self, now: Instant, from: SocketAddr, req: OpenConnectionRequest2) {
        let protocol = if self.config.use_cookies {
            let Some(cookie) = req.cookie else {
                self.stats.bad_cookies += 1;
                return;
            };
            let protocol = (cookie & 0xff) as u8;
            let epoch = self.ms(now) / COOKIE_EPOCH_MS;
            let valid = self.config.protocol_versions.contains(&protocol)
                && (cookie == self.cookie(from, epoch, protocol)
                    || (epoch > 0 && cookie == self.cookie(from, epoch - 1, protocol)));
            if !valid {
                self.stats.bad_cookies += 1;
                return;
            }
            protocol
        } else {
            self.protocols
                .remove(&from)
                .unwrap_or_else(|| self.config.protocol_versions.first().copied().unwrap_or(6))
        };
        let mtu = req.mtu.clamp(self.config.min_mtu, self.config.max_mtu);
        let reply2 = |this: &Self, mtu| OpenConnectionReply2 {
            server_guid: this.guid,
            client_address: from,
            mtu,
            security_answer: None,
        };
        if let Some(&id) = self.by_addr.get(&from) {
            let same_pending = self
                .conn(id)
                .is_some_and(|c| c.is_unverified() && c.peer_guid() == req.client_guid);
            if same_pending {
                // Our Reply2 was lost: send it again (official §4.9).
                let mtu = self.conn(id).map_or(mtu, Connection::mtu);
                return self.queue_offline(from, &reply2(self, mtu));
            }
            self.stats.refused_already_connected += 1;
            return self.queue_offline(
                from,
                &AlreadyConnected {
                    server_guid: self.guid,
                },
            );
        }
        if self.by_guid.contains_key(&req.client_guid) {
            self.stats.refused_already_connected += 1;
            return self.queue_offline(
                from,
                &AlreadyConnected {
                    server_guid: self.guid,
                },
            );
        }
        if !self.has_free_slot() {
            self.stats.refused_full += 1;
            return self.queue_offline(
                from,
                &NoFreeIncomingConnections {
                    server_guid: self.guid,
                },
            );
        }
        let peer = Peer {
            role: Role::Server,
            addr: from,
            local_addr: self.local_addr,
            our_guid: self.guid,
            peer_guid: req.client_guid,
            protocol,
            mtu,
        };
        let conn = Connection::server(self.config.clone(), peer, self.epoch, now);
        let id = self.insert(conn);
        self.by_guid.insert(req.client_guid, id);
        self.queue_offline(from, &reply2(self, mtu));
        self.touch(id);
    }

    /// Run the timers that are due. Each connection is visited at most once per call: a
    /// deadline that is still due afterwards (an ACK waiting for [`Endpoint::poll_transmit`],
    /// say) is served by the next call.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = Vec::new();
        while let Some(&Reverse((t, index, generation))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(slot) = self.slots.get_mut(index as usize) else {
                continue;
            };
            if slot.generation == generation && slot.scheduled == Some(t) {
                slot.scheduled = None;
                due.push(ConnId { index, generation });
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
        while let Some(&Reverse((t, index, generation))) = self.timers.peek() {
            let live = self
                .slots
                .get(index as usize)
                .is_some_and(|s| s.generation == generation && s.scheduled == Some(t));
            if live {
                return Some(t);
            }
            self.timers.pop();
        }
        None
    }

    // ---- internals -----------------------------------------------------------------

    fn queue_offline(&mut self, to: SocketAddr, msg: &impl Encode) {
        if self.offline_out.len() >= MAX_OFFLINE_QUEUE {
            self.stats.offline_queue_full += 1;
            return;
        }
        self.offline_out.push_back((to, msg.to_vec()));
    }

    fn insert(&mut self, mut conn: Connection) -> ConnId {
        conn.memory = MemoryShare::new(self.buffered.clone());
        let addr = conn.addr();
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
            let (addr, guid) = (conn.addr(), conn.peer_guid());
            slot.conn = None;
            slot.scheduled = None;
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
            self.live -= 1;
            return;
        }
        let t = conn.poll_timeout();
        if t != slot.scheduled {
            slot.scheduled = t;
            if let Some(t) = t {
                self.timers.push(Reverse((t, id.index, id.generation)));
            }
        }
    }
}
