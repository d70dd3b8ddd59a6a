//! One endpoint's thread: a current-thread tokio runtime running one loop that receives a
//! batch of datagrams, applies NIF commands, runs the engine's timers, then sends what the
//! engine wrote and delivers its events to BEAM processes.
//!
//! The loop holds the endpoint's state (the [`Driver`]) for each turn and lets go of it while it
//! waits. A send asked for while the thread waits, with nothing queued ahead of it, is carried
//! out on the caller's scheduler thread instead (`Gate::try_send_inline`, in `shared.rs`).

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::hash::OwnKeyMap;
use raknet_proto::{ConnId, DisconnectReason, Endpoint, Event, ReceiptId, Role, SendGate};
use rustler::{Encoder, LocalPid, OwnedEnv, ResourceArc, Term};
use tokio::sync::Notify;

use crate::atoms;
use crate::convert::{self, Reason};
use crate::inbox::Inbox;
use crate::resource::{Command, ConnResource, EndpointResource, Gate, Message};
use raknet_proto::rates::{self, ConnRates, EndpointRates};
use raknet_udp::{Outbox, Received, Udp};

/// Datagrams read per wake-up before the engine's output is flushed (bounds latency); read
/// up to `udp::BATCH` per system call.
const RECV_BATCH: usize = 64;
/// Messages held for a connection until its owner is set before the peer is held back.
const HOLD_BACK_AT: usize = 512;
/// Messages held for a connection until its owner is set, at most; more are dropped. Only a
/// safety net: the peer is held back at [`HOLD_BACK_AT`]; what comes before that takes
/// effect is what one receive batch releases (64 datagrams, and the messages the engine held
/// for ordering that they let through: 4096 per channel at most).
const MAX_HELD: usize = 65_536;
/// Pings awaiting a pong, all addresses together, before they are forgotten.
const MAX_PINGERS: usize = 1024;
/// A ping unanswered for this long is forgotten first (`RakNet.Ping` waits 3 s by default).
const PINGER_EXPIRY: Duration = Duration::from_secs(60);
/// Messages of one connection delivered in one `{:raknet_batch, ...}` at most.
const MAX_BATCH: usize = 256;
/// How often paused connections are checked for an owner that stopped making progress.
const STALL_CHECK: Duration = Duration::from_secs(1);
/// Log lines an endpoint sends its owner per second at most; the rest are counted and
/// reported with the next line (hostile traffic must not flood the logs).
const LOG_LINES_PER_SECOND: u32 = 10;
/// Sends on one connection closer together than this are a burst: they go through the thread,
/// which packs them into a datagram (or a few), instead of one datagram each on the caller's
/// thread.
const INLINE_GAP: Duration = Duration::from_micros(50);
/// Local addresses remembered for peers without a connection, per generation (two are kept).
/// At least `RECV_BATCH`, so that a datagram's replies always find the address it came to.
const LOCAL_ADDRS_PER_GENERATION: usize = 4096;

enum Held {
    Message(Bytes, Duration),
    Disconnect(Reason),
}

struct Slot {
    res: ResourceArc<ConnResource>,
    owner: Option<LocalPid>,
    role: Role,
    connected: bool,
    /// Messages (and a final disconnect) waiting for an owner.
    held: VecDeque<Held>,
    /// The application was already told the connection ended.
    reported: bool,
    dropped: u64,
    /// Set while receiving is paused for back-pressure: when the owner last made progress,
    /// and how many messages it had outstanding then.
    stall: Option<(Instant, usize)>,
    /// The local address the peer last sent to (sockets bound to every address).
    local: Option<IpAddr>,
    /// Bytes, messages and resends per second over the last sampled second.
    rates: ConnRates,
    /// The application's reason for closing (`conn_close/2`), reported instead of
    /// `:local_close`.
    close_reason: Option<Vec<u8>>,
    /// Messages for the owner's next `{:raknet_batch, ...}` (batch delivery only).
    batch: Vec<(Bytes, Duration)>,
    /// The server of an outgoing connection, claimed in `EndpointResource::servers` until
    /// the connection ends.
    server: Option<SocketAddr>,
    /// Closed as overloaded (its owner, if any, was told so).
    overloaded: bool,
}

pub(crate) struct Driver {
    pub(crate) endpoint: Endpoint,
    pub(crate) socket: Udp,
    pub(crate) me: ResourceArc<EndpointResource>,
    pub(crate) owner: LocalPid,
    pub(crate) env: OwnedEnv,
    /// Keyed by what this program assigned (the engine's ids, the handles' keys): hashed
    /// cheaply. Peer addresses keep SipHash.
    conns: OwnKeyMap<ConnId, Slot>,
    /// Who asked for a pong from an address (`endpoint_ping`); bounded.
    pingers: HashMap<SocketAddr, Vec<(LocalPid, Instant)>>,
    /// Pingers waiting in `pingers`, all addresses together.
    pinger_count: usize,
    keys: OwnKeyMap<u64, ConnId>,
    local_addrs: LocalAddrs,
    stop_deadline: Option<Instant>,
    buf: Vec<u8>,
    /// Datagrams received by one system call, handed to the engine in order.
    inbox: Vec<Received>,
    /// Datagrams the engine wrote, sent a batch per system call.
    outbox: Outbox,
    /// The first datagram of `outbox` not sent yet (all sent: `outbox.len()`).
    sent: usize,
    /// Events the engine produced during inline sends, for the thread to deliver.
    deferred: VecDeque<Event>,
    /// Receipts of inline sends the engine refused, for the thread to report as lost.
    lost: Vec<(LocalPid, ResourceArc<ConnResource>, u32)>,
    /// The deadline the thread sleeps until (`None`: none).
    armed: Option<Instant>,
    /// Sends carried out on a caller's thread, and those of them that woke the thread.
    inline_sends: u64,
    inline_wakeups: u64,
    /// Receive calls that found nothing right after calls of the same turn that read
    /// datagrams: a batch that came back short has emptied the socket and ends the reading,
    /// so only one that came back exactly full (more might have waited) is followed by one.
    recv_trailing_empty: u64,
    /// Outgoing connections reported ended whose engine state still holds the server's
    /// address (draining: acknowledging the peer's last datagrams). The address is given
    /// back to `EndpointResource::servers` once the engine forgot it: until then the socket
    /// cannot connect to that server again, and the node's pool offers another endpoint.
    draining: Vec<(ConnId, SocketAddr)>,
    /// Turns started because the socket had room again for datagrams that waited for it.
    send_waits: u64,
    /// Connections with messages in their `batch` (batch delivery only).
    batched: Vec<ConnId>,
    /// The batches of a turn, delivered once the turn lets go of the driver (see
    /// [`Shared::turn`]).
    mail: Vec<Mail>,
    log_window: Instant,
    log_lines: u32,
    log_suppressed: u64,
    /// When to look at paused connections next (none paused: `None`).
    next_stall_check: Option<Instant>,
    /// When the counters were last sampled for rates, and the endpoint's totals then.
    last_sample: Instant,
    rates: EndpointRates<SocketAddr>,
    /// Commands applied, and the loop turns that applied any: how well commands sent from
    /// the BEAM while this thread was busy or waking up coalesce into one turn.
    commands: u64,
    command_turns: u64,
    /// NetherNet on this socket: hosted here, or handed to the endpoint that hosts it.
    nethernet: Option<NetherNet>,
}

impl Driver {
    pub(crate) fn new(
        endpoint: Endpoint,
        socket: Udp,
        me: ResourceArc<EndpointResource>,
        owner: LocalPid,
    ) -> Self {
        Self {
            endpoint,
            socket,
            me,
            owner,
            env: OwnedEnv::new(),
            conns: OwnKeyMap::default(),
            pingers: HashMap::new(),
            pinger_count: 0,
            keys: OwnKeyMap::default(),
            local_addrs: LocalAddrs::default(),
            stop_deadline: None,
            buf: Vec::with_capacity(2048),
            inbox: Vec::new(),
            outbox: Outbox::default(),
            sent: 0,
            deferred: VecDeque::new(),
            lost: Vec::new(),
            armed: None,
            inline_sends: 0,
            inline_wakeups: 0,
            recv_trailing_empty: 0,
            draining: Vec::new(),
            send_waits: 0,
            batched: Vec::new(),
            mail: Vec::new(),
            log_window: Instant::now(),
            log_lines: 0,
            log_suppressed: 0,
            next_stall_check: None,
            last_sample: Instant::now(),
            rates: EndpointRates::default(),
            commands: 0,
            command_turns: 0,
            nethernet: None,
        }
    }

    /// Serve NetherNet beside RakNet (see `nethernet.rs`).
    pub(crate) fn with_nethernet(mut self, nethernet: NetherNet) -> Self {
        self.nethernet = Some(nethernet);
        self
    }

    /// When the thread must take its next turn without being asked: the engine's next timer,
    /// the next look at paused connections, the next rates sample (while there are
    /// connections; an idle endpoint sleeps).
    fn deadline(&mut self) -> Option<Instant> {
        let sample = (!self.conns.is_empty()).then(|| rates::next_due(self.last_sample));
        let nethernet = self.nethernet_deadline();
        [
            self.endpoint.poll_timeout(),
            self.next_stall_check,
            sample,
            nethernet,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether a send may be carried out on a caller's thread now.
    fn can_send_inline(&self) -> bool {
        self.stop_deadline.is_none() && self.sent == self.outbox.len()
    }

    /// A send on a caller's (scheduler) thread: hand it to the engine and the datagrams to the
    /// socket. Nothing here talks to the BEAM (a scheduler thread must not use an `OwnedEnv`):
    /// events and lost receipts wait for the thread. Returns whether the thread must take a
    /// turn for them, for datagrams left unsent, or for a timer earlier than the one it sleeps
    /// until.
    fn send_inline(&mut self, now: Instant, msg: Message) -> bool {
        self.inline_sends += 1;
        if let Some(lost) = self.apply_send(now, msg) {
            self.lost.push(lost);
        }
        self.settle();
        // One batch at most: a scheduler thread is not the place for another connection's
        // bulk transfer, which the endpoint thread sends (it is woken for it).
        let sent_all = self.transmit(now, 1);
        while let Some(event) = self.endpoint.poll_event() {
            self.deferred.push_back(event);
        }
        // NetherNet's timers too: a send on a session may arm one earlier than the thread's.
        let next = [self.endpoint.poll_timeout(), self.nethernet_deadline()]
            .into_iter()
            .flatten()
            .min();
        let earlier = match (next, self.armed) {
            (Some(timer), Some(armed)) => timer < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let wake = !sent_all || earlier || !self.deferred.is_empty() || !self.lost.is_empty();
        self.inline_wakeups += u64::from(wake);
        wake
    }

    /// Read what waits on the socket (up to [`RECV_BATCH`] datagrams) and hand it to the
    /// engine; `before` runs after each read, before its datagrams are handled.
    fn receive(&mut self, before: &mut dyn FnMut(&mut Driver)) {
        let mut inbox = std::mem::take(&mut self.inbox);
        let (mut read, mut got_data) = (0, false);
        while read < RECV_BATCH {
            let drained = match self.socket.try_recv_batch(&mut inbox) {
                Ok(drained) => drained,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.recv_trailing_empty += u64::from(got_data);
                    break;
                }
                // ICMP port unreachable and the like surface here on Linux: not fatal.
                Err(_) => {
                    read += 1;
                    continue;
                }
            };
            read += inbox.len().max(1);
            got_data = true;
            before(self);
            for Received { data, from, local } in inbox.drain(..) {
                let now = Instant::now();
                if self.nethernet_datagram(now, from, &data) {
                    continue;
                }
                self.endpoint.handle(now, from, data);
                self.received_from(from, local);
            }
            if drained {
                break;
            }
        }
        self.inbox = inbox;
    }

    /// After a datagram from `from`, sent to the local address `local` (when the socket says).
    fn received_from(&mut self, from: SocketAddr, local: Option<IpAddr>) {
        let id = self.endpoint.conn_by_addr(from);
        let Some(local) = local else {
            return;
        };
        match id.and_then(|id| self.conns.get_mut(&id)) {
            Some(slot) => slot.local = Some(local),
            None => self
                .local_addrs
                .insert(raknet_proto::addr::unmap(from), local),
        }
    }

    /// The local address to send to `peer` from, if the socket lets replies choose.
    fn local_for(&self, peer: SocketAddr) -> Option<IpAddr> {
        if !self.socket.pktinfo() {
            return None;
        }
        self.endpoint
            .conn_by_addr(peer)
            .and_then(|id| self.conns.get(&id))
            .and_then(|slot| slot.local)
            .or_else(|| self.local_addrs.get(&peer))
    }

    /// Hand a send to the engine. The NIF admitted it through the connection's gate (see
    /// `raknet_proto::SendGate`); a race can lose it still: such a message is counted, and
    /// one with a receipt is returned, for its owner to learn of its fate.
    fn apply_send(
        &mut self,
        now: Instant,
        msg: Message,
    ) -> Option<(LocalPid, ResourceArc<ConnResource>, u32)> {
        let Message {
            key,
            data,
            opts,
            receipt,
        } = msg;
        let &id = self.keys.get(&key)?;
        if id.is_external() {
            // `conn_send` refused receipts for NetherNet: none to return.
            self.nethernet_send_counted(now, id, &data, opts.reliability);
            return None;
        }
        let slot = self.conns.get_mut(&id)?;
        // The id `conn_send` returned travels through the engine as the receipt's own.
        let cost = SendGate::cost(data.len());
        let tag = receipt.map(ReceiptId);
        match self.endpoint.send_admitted(now, id, data, opts, tag, cost) {
            Ok(_) => None,
            Err(_) => {
                slot.dropped += 1;
                receipt
                    .zip(slot.owner)
                    .map(|(user_id, pid)| (pid, slot.res.clone(), user_id))
            }
        }
    }

    /// Release the gate reservations of the sends applied since the last call: once per
    /// batch of commands (see `Shared::turn`), not per send.
    pub(super) fn settle(&mut self) {
        self.endpoint.release_admitted();
    }

    fn command(&mut self, now: Instant, cmd: Command) {
        match cmd {
            Command::Send(msg) => {
                if let Some((pid, res, user_id)) = self.apply_send(now, msg) {
                    receipt_lost(&mut self.env, &pid, res, user_id);
                }
            }
            Command::Broadcast { keys, data, opts } => {
                for key in keys {
                    let Some(&id) = self.keys.get(&key) else {
                        continue;
                    };
                    if id.is_external() {
                        self.nethernet_send_counted(now, id, &data, opts.reliability);
                        continue;
                    }
                    let Some(slot) = self.conns.get_mut(&id) else {
                        continue;
                    };
                    let cost = SendGate::cost(data.len());
                    if self
                        .endpoint
                        .send_admitted(now, id, data.clone(), opts, None, cost)
                        .is_err()
                    {
                        slot.dropped += 1;
                    }
                }
            }
            Command::Close { key, reason } => {
                if let Some(&id) = self.keys.get(&key) {
                    if let Some(slot) = self.conns.get_mut(&id) {
                        // The first reason given wins, as the first close does.
                        if slot.close_reason.is_none() {
                            slot.close_reason = reason;
                        }
                    }
                    self.close_conn(now, id);
                }
            }
            Command::OwnerDown { key } => {
                if let Some(&id) = self.keys.get(&key) {
                    if let Some(slot) = self.conns.get_mut(&id) {
                        slot.owner = None;
                        slot.reported = true;
                    }
                    self.close_conn(now, id);
                }
            }
            Command::SetOwner { key, pid } => self.set_owner(key, pid),
            Command::SetSuspended(suspended) => self.endpoint.set_suspended(suspended),
            Command::SetMaxConnections(max) => self.endpoint.set_max_connections(max),
            Command::Resume { key } => {
                if let Some(&id) = self.keys.get(&key) {
                    self.endpoint.set_receive_paused(now, id, false);
                    if let Some(slot) = self.conns.get_mut(&id) {
                        slot.stall = None;
                    }
                }
            }
            Command::Connect {
                conn,
                addr,
                owner,
                opts,
            } => match self.endpoint.connect_with(now, addr, opts) {
                Ok(id) => {
                    self.keys.insert(conn.key, id);
                    let mut slot = Slot::new(conn, Some(owner), Role::Client);
                    slot.server = Some(addr);
                    self.conns.insert(id, slot);
                }
                Err(e) => {
                    self.me.release_server(addr);
                    conn.closed.store(true, Ordering::Relaxed);
                    let _ = self.env.send_and_clear(&owner, |env| {
                        (
                            atoms::raknet_connect_failed(),
                            conn,
                            convert::connect_error(env, e),
                        )
                            .encode(env)
                    });
                }
            },
            Command::SetPong(data) => {
                // The NIF checked the size against MAX_OFFLINE_PING_RESPONSE already.
                let _ = self.endpoint.set_offline_ping_response(data);
            }
            Command::SendRaw { to, data, proven } => {
                // Refusals (nothing offered from there, too large) are counted by the engine.
                let _ = self.endpoint.send_raw(now, to, &data, proven);
            }
            Command::Ping { addr, owner } => {
                // Pingers whose server never answered are forgotten: those waiting longer
                // than any ping waits first, then (a flood of pings) all of them.
                if self.pinger_count >= MAX_PINGERS {
                    self.pingers.retain(|_, waiting| {
                        waiting.retain(|(_, sent)| now.duration_since(*sent) < PINGER_EXPIRY);
                        !waiting.is_empty()
                    });
                    self.pinger_count = self.pingers.values().map(Vec::len).sum();
                }
                if self.pinger_count >= MAX_PINGERS {
                    self.pingers.clear();
                    self.pinger_count = 0;
                }
                // Every process pinging an address gets the pong (one overwrote another).
                self.pingers.entry(addr).or_default().push((owner, now));
                self.pinger_count += 1;
                self.endpoint.ping(now, addr);
            }
            Command::Info { key, reply } => {
                let env = OwnedEnv::new();
                let saved = match key {
                    None => Some(env.save(self.endpoint_info_term(&env))),
                    Some(key) => self
                        .keys
                        .get(&key)
                        .and_then(|id| self.conn_info_term(&env, *id))
                        .map(|t| env.save(t)),
                };
                let _ = reply.try_send(saved.map(|s| (env, s)));
            }
            // Unwinds like a panic, through the same recovery, but without running the panic
            // hook: a deliberate fault prints no backtrace into the test output.
            Command::InjectPanic if self.me.fault_injection => {
                std::panic::resume_unwind(Box::new("fault injected by endpoint_inject_fault"))
            }
            Command::InjectPanic => {}
            Command::Ban {
                ip,
                prefix,
                duration,
            } => self.endpoint.ban_prefix(now, ip, prefix, duration),
            Command::Unban { ip, prefix } => self.endpoint.unban_prefix(ip, prefix),
            Command::BanGuid { guid, duration } => self.endpoint.ban_guid(now, guid, duration),
            Command::UnbanGuid(guid) => self.endpoint.unban_guid(guid),
            Command::Banned { reply } => {
                let env = OwnedEnv::new();
                let bans = self.endpoint.banned(now);
                let guids = self.endpoint.banned_guids(now);
                let ms = |left: &Option<Duration>| left.map(|d| d.as_millis() as u64);
                let saved = env.save(env.run(|env| {
                    // A network's ban as its text, a GUID's as `{:guid, guid}`.
                    let networks = bans.iter().map(|(ip, len, left)| {
                        (crate::bans::ban_text(*ip, *len), ms(left)).encode(env)
                    });
                    let guids = guids
                        .iter()
                        .map(|(guid, left)| ((atoms::guid(), *guid), ms(left)).encode(env));
                    networks.chain(guids).collect::<Vec<_>>().encode(env)
                }));
                let _ = reply.try_send(Some((env, saved)));
            }
            Command::NetherNetOffer {
                sdp,
                candidate,
                peer,
                reply_to,
                tag,
            } => self.nethernet_offer(now, &sdp, candidate, peer, reply_to, tag),
            Command::NetherNetDatagram { from, data } => self.nethernet_forwarded(now, from, &data),
            Command::NetherNetConnect {
                conn,
                client,
                server,
                owner,
            } => self.nethernet_connect(conn, client, server, owner),
            Command::NetherNetAnswer { key, answer } => self.nethernet_answer(now, key, &answer),
            Command::Stop(linger) => {
                if self.stop_deadline.is_none() {
                    self.nethernet_shutdown(now);
                    self.endpoint.shutdown(now);
                    self.stop_deadline = Some(now + linger);
                }
            }
        }
    }

    /// A peer's address as the socket takes it: the engine sees IPv4 peers of a dual-stack
    /// socket unmapped; the socket wants them mapped.
    fn socket_addr(&self, peer: SocketAddr) -> SocketAddr {
        match peer {
            SocketAddr::V4(v4) if self.me.dual_stack => {
                SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port())
            }
            other => other,
        }
    }

    /// Close a connection of either transport.
    pub(super) fn close_conn(&mut self, now: Instant, id: ConnId) {
        if id.is_external() {
            self.nethernet_close(now, id);
        } else {
            self.endpoint.close(now, id);
        }
    }

    /// Give back the servers of ended outgoing connections the engine has forgotten.
    fn release_drained(&mut self) {
        if self.draining.is_empty() {
            return;
        }
        let (endpoint, me) = (&self.endpoint, &self.me);
        self.draining.retain(|&(id, server)| {
            let held = endpoint.conn_by_addr(server) == Some(id);
            if !held {
                me.release_server(server);
            }
            held
        });
    }

    fn forget(&mut self, id: ConnId) {
        if let Some(slot) = self.conns.remove(&id) {
            self.keys.remove(&slot.res.key);
        }
    }

    /// Send what the engine wrote, then deliver its events (those of inline sends first).
    /// Returns whether every datagram went: `false` when the socket buffer is full and some
    /// wait for room.
    fn flush(&mut self) -> bool {
        let sent_all = self.transmit(Instant::now(), usize::MAX);
        for (pid, res, user_id) in std::mem::take(&mut self.lost) {
            receipt_lost(&mut self.env, &pid, res, user_id);
        }
        while let Some(event) = self
            .deferred
            .pop_front()
            .or_else(|| self.endpoint.poll_event())
        {
            self.event(event);
        }
        self.nethernet_events();
        for id in std::mem::take(&mut self.batched) {
            self.post_batch(id);
        }
        sent_all
    }

    /// Hand the engine's datagrams to the socket, a batch per system call, until the engine
    /// has none left (`true`), the socket buffer is full (`false`: the rest waits in the
    /// outbox for room), or `batches` batches went (`false`: the engine may have more).
    fn transmit(&mut self, now: Instant, batches: usize) -> bool {
        if !self.send_outbox() {
            return false;
        }
        for _ in 0..batches {
            while !self.outbox.is_full() {
                let Some(t) = self.endpoint.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                let source = self.local_for(t.destination);
                let destination = self.socket_addr(t.destination);
                self.outbox
                    .push(self.buf.get(..t.size).unwrap_or(&[]), destination, source);
            }
            // NetherNet's datagrams after RakNet's, into the same batches.
            while !self.outbox.is_full() {
                let Some((to, data)) = self.nethernet_poll_transmit() else {
                    break;
                };
                let source = self.local_for(to);
                let destination = self.socket_addr(to);
                self.outbox.push(&data, destination, source);
            }
            // Not full: the engine (and the NetherNet host) had no more.
            let drained = !self.outbox.is_full();
            if !self.send_outbox() {
                return false;
            }
            if drained {
                return true;
            }
        }
        false
    }

    /// Send what the outbox holds (from the first datagram not sent yet) and empty it; `false`
    /// when the socket buffer is full and some wait for room.
    fn send_outbox(&mut self) -> bool {
        if self.sent < self.outbox.len() {
            self.sent = self.socket.send_batch(&self.outbox, self.sent);
            if self.sent < self.outbox.len() {
                return false;
            }
        }
        self.outbox.clear();
        self.sent = 0;
        true
    }

    /// Give `res` the engine's send gate of `conn`, once the engine has the connection.
    fn set_gate(&self, conn: ConnId, res: &ConnResource) {
        if let Some(gate) = self.endpoint.send_gate(conn) {
            let _ = res.gate.set(gate);
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Connected {
                conn,
                addr,
                guid,
                role,
                protocol,
                mtu,
            } => match role {
                Role::Server => {
                    let res = ResourceArc::new(self.me.new_conn());
                    self.set_gate(conn, &res);
                    let local = self.local_addrs.get(&addr);
                    self.accepted(conn, res, local, |env| {
                        convert::connection_info(env, addr, guid, protocol, mtu)
                    });
                }
                Role::Client => {
                    let Some(slot) = self.conns.get_mut(&conn) else {
                        return;
                    };
                    slot.connected = true;
                    let res = slot.res.clone();
                    let owner = slot.owner;
                    // Sends are admitted from now on (before, `conn_send` says
                    // `:not_connected`, as the engine would).
                    self.set_gate(conn, &res);
                    if let Some(pid) = owner {
                        let _ = self.env.send_and_clear(&pid, |env| {
                            (
                                atoms::raknet_connected(),
                                res,
                                convert::connection_info(env, addr, guid, protocol, mtu),
                            )
                                .encode(env)
                        });
                    }
                }
            },
            Event::Message {
                conn,
                payload,
                transit,
            } => {
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                match slot.owner {
                    Some(pid) => {
                        let (messages, bytes) = count_delivery(&slot.res, payload.len());
                        if self.me.batch_delivery || slot.res.batch_delivery.load(Ordering::Relaxed)
                        {
                            if slot.batch.is_empty() {
                                self.batched.push(conn);
                            }
                            slot.batch.push((payload, transit));
                            if slot.batch.len() >= MAX_BATCH {
                                let batch = std::mem::take(&mut slot.batch);
                                send_batch(&mut self.env, (pid, slot.res.clone(), batch));
                            }
                        } else {
                            send_message(&mut self.env, &pid, &slot.res, &payload, transit);
                        }
                        let res = &slot.res;
                        if res.flow_controlled.load(Ordering::Relaxed)
                            && res.budget.exceeded(messages, bytes)
                            && !res.paused.load(Ordering::SeqCst)
                        {
                            self.pause(conn);
                        }
                    }
                    None => {
                        // Held until the owner is set, counted against its budget already;
                        // past HOLD_BACK_AT (or the budget) the peer is held back, so that
                        // what it sends meanwhile waits unacknowledged instead of being
                        // dropped.
                        if slot.held.len() >= MAX_HELD {
                            slot.dropped += 1;
                            return;
                        }
                        let (messages, bytes) = count_delivery(&slot.res, payload.len());
                        slot.held.push_back(Held::Message(payload, transit));
                        if (slot.held.len() >= HOLD_BACK_AT
                            || slot.res.budget.exceeded(messages, bytes))
                            && !slot.res.paused.load(Ordering::SeqCst)
                        {
                            self.hold_back(conn);
                        }
                    }
                }
            }
            Event::Receipt {
                conn,
                receipt,
                acked,
            } => {
                // Messages that arrived before stay before.
                self.deliver_batch(conn);
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                let Some(pid) = slot.owner else {
                    return;
                };
                let user_id = receipt.0;
                let res = slot.res.clone();
                let fate = if acked { atoms::acked() } else { atoms::lost() };
                let _ = self.env.send_and_clear(&pid, |env| {
                    (atoms::raknet_receipt(), res, user_id, fate).encode(env)
                });
            }
            Event::Disconnected { conn, reason } => {
                self.deliver_batch(conn);
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                slot.res.closed.store(true, Ordering::Relaxed);
                if let Some(server) = slot.server.take() {
                    // Given back before the owner hears of the end, so that a connect made on
                    // that news may use this socket again; a connection the engine still
                    // holds (draining) gives it back once forgotten.
                    if self.endpoint.conn_by_addr(server) == Some(conn) {
                        self.draining.push((conn, server));
                    } else {
                        self.me.release_server(server);
                    }
                }
                let res = slot.res.clone();
                if slot.reported {
                    self.forget(conn);
                    return;
                }
                slot.reported = true;
                let why = match (reason, slot.close_reason.take()) {
                    (DisconnectReason::LocalClose, _) if slot.overloaded => Reason::Overloaded,
                    (DisconnectReason::LocalClose, Some(term)) => Reason::Closed(term),
                    (reason, _) => Reason::Engine(reason),
                };
                match (slot.owner, slot.role, slot.connected) {
                    (Some(pid), Role::Client, false) => {
                        let _ = self.env.send_and_clear(&pid, |env| {
                            let why = match reason {
                                DisconnectReason::ConnectFailed(e) => {
                                    convert::connect_error(env, e)
                                }
                                other => convert::disconnect_reason(env, &Reason::Engine(other)),
                            };
                            (atoms::raknet_connect_failed(), res, why).encode(env)
                        });
                    }
                    (Some(pid), _, _) => send_disconnect(&mut self.env, &pid, &res, why),
                    (None, _, _) => {
                        // Tell the owner once it is set.
                        slot.held.push_back(Held::Disconnect(why));
                        return;
                    }
                }
                self.forget(conn);
            }
            Event::Raw { from, datagram } => {
                let me = self.me.clone();
                let _ = self.env.send_and_clear(&self.owner, |env| {
                    let mut data = rustler::NewBinary::new(env, datagram.len());
                    data.as_mut_slice().copy_from_slice(&datagram);
                    let data: rustler::Binary = data.into();
                    (
                        atoms::raknet_endpoint(),
                        me,
                        atoms::raw(),
                        convert::address(env, from),
                        data,
                    )
                        .encode(env)
                });
            }
            Event::Pong { from, pong, .. } => {
                // Timed here: the ping's own time field only has millisecond resolution.
                let Some(pingers) = self.pingers.remove(&from) else {
                    return;
                };
                self.pinger_count -= pingers.len();
                for (pid, sent) in pingers {
                    let rtt = sent.elapsed();
                    let me = self.me.clone();
                    let _ = self.env.send_and_clear(&pid, |env| {
                        let mut data = rustler::NewBinary::new(env, pong.data.len());
                        data.as_mut_slice().copy_from_slice(&pong.data);
                        let data: rustler::Binary = data.into();
                        (
                            atoms::raknet_pong(),
                            me,
                            convert::address(env, from),
                            pong.server_guid,
                            data,
                            rtt.as_micros() as u64,
                        )
                            .encode(env)
                    });
                }
            }
            _ => {}
        }
    }

    /// An incoming connection of either transport is up: its slot, and `{:raknet_endpoint,
    /// ref, :connected, conn, info}` for the endpoint's owner.
    pub(super) fn accepted(
        &mut self,
        conn: ConnId,
        res: ResourceArc<ConnResource>,
        local: Option<IpAddr>,
        info: impl for<'a> FnOnce(rustler::Env<'a>) -> Term<'a>,
    ) {
        self.keys.insert(res.key, conn);
        let mut slot = Slot::new(res.clone(), None, Role::Server);
        slot.connected = true;
        slot.local = local;
        self.conns.insert(conn, slot);
        let me = self.me.clone();
        let _ = self.env.send_and_clear(&self.owner, |env| {
            (
                atoms::raknet_endpoint(),
                me,
                atoms::connected(),
                res,
                info(env),
            )
                .encode(env)
        });
    }

    /// Send the owner `{:raknet_endpoint, ref, :log, level, text}`, rate-limited.
    fn log(&mut self, warning: bool, text: String) {
        let now = Instant::now();
        if now.duration_since(self.log_window) >= Duration::from_secs(1) {
            self.log_window = now;
            self.log_lines = 0;
        }
        if self.log_lines >= LOG_LINES_PER_SECOND {
            self.log_suppressed += 1;
            return;
        }
        self.log_lines += 1;
        let text = match std::mem::take(&mut self.log_suppressed) {
            0 => text,
            n => format!("{text} ({n} similar lines suppressed)"),
        };
        let level = if warning {
            atoms::warning()
        } else {
            atoms::info()
        };
        let me = self.me.clone();
        let _ = self.env.send_and_clear(&self.owner, |env| {
            (atoms::raknet_endpoint(), me, atoms::log(), level, text).encode(env)
        });
    }

    fn finish_stop(&mut self) {
        for slot in self.conns.values() {
            slot.res.closed.store(true, Ordering::Relaxed);
            if let (Some(pid), false) = (slot.owner, slot.reported) {
                send_disconnect(
                    &mut self.env,
                    &pid,
                    &slot.res,
                    Reason::Engine(DisconnectReason::Shutdown),
                );
            }
        }
        self.conns.clear();
    }
}

/// However the endpoint's thread ends (a panic unwinds through here too), no connection is
/// left without word: every owner not yet told gets `{:raknet_disconnect, conn,
/// :endpoint_down}` and every handle fails fast from now on.
impl Drop for Driver {
    fn drop(&mut self) {
        let mut env = OwnedEnv::new();
        // A turn that ended in a panic may have left its messages in the mail: they come
        // before the news of the end.
        for mail in std::mem::take(&mut self.mail) {
            send_batch(&mut env, mail);
        }
        for slot in self.conns.values() {
            slot.res.closed.store(true, Ordering::Relaxed);
            let Some(pid) = slot.owner.filter(|_| !slot.reported) else {
                continue;
            };
            if slot.role == Role::Client && !slot.connected {
                let res = slot.res.clone();
                let _ = env.send_and_clear(&pid, |env| {
                    let why = convert::disconnect_reason(env, &Reason::EndpointDown);
                    (atoms::raknet_connect_failed(), res, why).encode(env)
                });
            } else {
                send_disconnect(&mut env, &pid, &slot.res, Reason::EndpointDown);
            }
        }
    }
}

mod delivery;
mod info;
mod local_addrs;
mod nethernet;
mod shared;

pub(crate) use nethernet::{reliable_channel, BatchHeader, NetherNet};

use delivery::{count_delivery, receipt_lost, send_batch, send_disconnect, send_message, Mail};
use local_addrs::LocalAddrs;
pub(crate) use shared::{run, Shared};
