//! NetherNet beside RakNet on an endpoint's socket, in both roles.
//!
//! **Server.** The sessions of a server live on one endpoint thread of its group (its first):
//! the kernel spreads a client's datagrams over the group's sockets by address, and an offer
//! is answered before its client's address is known, so the other threads hand the WebRTC
//! datagrams they read (told apart by their first bytes, `raknet_nethernet::host::classify`)
//! to that one.
//!
//! **Client.** `RakNet.connect(..., transport: :nethernet)` makes a session on a client
//! endpoint (`endpoint_nethernet_connect`); the application carries the offer and answer over
//! HTTP.
//!
//! Either way a session takes an id from [`ConnId::external`] and its events become the
//! engine's [`Event`]s: one connection contract, so delivery, owners, batching, closes and
//! telemetry are the same code for both transports.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::SystemTime;

use raknet_nethernet::client::{Client, ClientEvent};
use raknet_nethernet::host::{self, CloseReason, Host, HostEvent, Kind, SessionId};
use raknet_proto::Reliability;

use rustler::Env;

use super::*;
use crate::resource::CommandTx;

/// An endpoint's part in NetherNet.
#[derive(Default)]
pub(crate) struct NetherNet {
    /// The server's sessions, when this thread hosts them.
    hosted: Option<Box<Hosted>>,
    /// Another endpoint of the group hosts them: datagrams for them go there.
    forward: Option<CommandTx>,
    /// Datagrams handed to the hosting endpoint and not yet taken by it, the group's
    /// forwarders together: past [`MAX_FORWARD_QUEUED`] more are dropped (spoofed
    /// DTLS-looking floods must not grow the hosting thread's command queue).
    queued: Arc<AtomicUsize>,
    /// Datagrams dropped for that.
    forward_dropped: u64,
    /// Sessions this endpoint opened as a client.
    clients: HashMap<ConnId, Outgoing>,
    /// The last [`ConnId::external`] serial given.
    serial: u64,
}

/// The server's sessions, and their ids in the connection contract.
struct Hosted {
    host: Host,
    conns: HashMap<SessionId, ConnId>,
    sessions: HashMap<ConnId, SessionId>,
    /// Datagrams other endpoints of the group handed over.
    forwarded: u64,
    header: BatchHeader,
}

/// A session opened as a client.
struct Outgoing {
    client: Box<Client>,
    /// The server's UDP address, as the application named it.
    server: SocketAddr,
}

/// A byte the application's messages carry in front and NetherNet's do not: Bedrock's game
/// packet byte `0xFE` (RakNet carries it; NetherNet does not), so that one handler serves
/// both transports. Given, it is put in front of every message received, and taken off a
/// message sent that starts with it (one that does not is sent as it is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BatchHeader(pub(crate) Option<u8>);

impl BatchHeader {
    /// A received message as the application sees it (the byte goes in front in place when
    /// the buffer has room).
    fn received(self, mut payload: Vec<u8>) -> Bytes {
        if let Some(byte) = self.0 {
            payload.insert(0, byte);
        }
        Bytes::from(payload)
    }

    /// A message to send as it goes on the wire.
    pub(crate) fn to_send(self, data: &[u8]) -> &[u8] {
        match (self.0, data.split_first()) {
            (Some(byte), Some((&first, rest))) if first == byte => rest,
            _ => data,
        }
    }
}

/// Forwarded datagrams waiting for the hosting endpoint, at most (see [`NetherNet`]).
const MAX_FORWARD_QUEUED: usize = 4096;

impl NetherNet {
    /// Hosting a server's sessions, whose messages go without `header`; `queued` is shared
    /// with the group's forwarders.
    pub(crate) fn hosted(host: Host, header: BatchHeader, queued: Arc<AtomicUsize>) -> Self {
        Self {
            hosted: Some(Box::new(Hosted {
                host,
                conns: HashMap::new(),
                sessions: HashMap::new(),
                forwarded: 0,
                header,
            })),
            queued,
            ..Self::default()
        }
    }

    /// Handing the server's datagrams to the endpoint that hosts its sessions.
    pub(crate) fn forward(to: CommandTx, queued: Arc<AtomicUsize>) -> Self {
        Self {
            forward: Some(to),
            queued,
            ..Self::default()
        }
    }

    fn next_id(&mut self) -> ConnId {
        self.serial += 1;
        ConnId::external(self.serial)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Which data channel a reliability goes on: the unreliable kinds on the unreliable one.
pub(crate) fn reliable_channel(reliability: Reliability) -> bool {
    !matches!(
        reliability,
        Reliability::Unreliable | Reliability::UnreliableSequenced
    )
}

fn disconnect_reason(reason: CloseReason) -> DisconnectReason {
    match reason {
        CloseReason::Timeout => DisconnectReason::Timeout,
        CloseReason::PeerClosed => DisconnectReason::PeerClosed,
        CloseReason::LocalClose => DisconnectReason::LocalClose,
        CloseReason::Failed => DisconnectReason::ProtocolViolation("WebRTC (DTLS or SCTP) failed"),
    }
}

impl Driver {
    fn hosted(&mut self) -> Option<&mut Hosted> {
        self.nethernet
            .as_mut()
            .and_then(|n| n.hosted.as_deref_mut())
    }

    fn hosted_ref(&self) -> Option<&Hosted> {
        self.nethernet.as_ref().and_then(|n| n.hosted.as_deref())
    }

    /// Take a datagram if it is NetherNet's (STUN or DTLS) and a session of this endpoint's,
    /// or of the server it serves, wants it; `false`: it is the engine's.
    pub(super) fn nethernet_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
    ) -> bool {
        let Some(n) = &mut self.nethernet else {
            return false;
        };
        if host::classify(data) == Kind::Other {
            return false;
        }
        let from = raknet_proto::addr::unmap(from);
        if n.clients
            .values_mut()
            .any(|o| o.client.handle(now, from, data))
        {
            return true;
        }
        if let Some(h) = &mut n.hosted {
            h.host.handle(now, from, data);
            return true;
        }
        if let Some(tx) = &n.forward {
            if n.queued.fetch_add(1, Ordering::Relaxed) >= MAX_FORWARD_QUEUED {
                n.queued.fetch_sub(1, Ordering::Relaxed);
                n.forward_dropped += 1;
                return true;
            }
            let data = Bytes::copy_from_slice(data);
            if tx.send(Command::NetherNetDatagram { from, data }).is_err() {
                n.queued.fetch_sub(1, Ordering::Relaxed);
            }
            return true;
        }
        false
    }

    /// A datagram another endpoint of the group handed over.
    pub(super) fn nethernet_forwarded(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        if let Some(n) = &self.nethernet {
            n.queued.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(h) = self.hosted() {
            h.forwarded += 1;
            h.host.handle(now, from, data);
        }
    }

    /// Answer an offer: `{:raknet_nethernet_answer, tag, {:ok, sdp} | {:error, reason}}`.
    pub(super) fn nethernet_offer(
        &mut self,
        now: Instant,
        sdp: &str,
        candidate: Option<IpAddr>,
        peer: Option<IpAddr>,
        reply_to: LocalPid,
        tag: u64,
    ) {
        let port = self.me.local.port();
        let answer = match self.hosted() {
            Some(h) => {
                let candidates: Vec<SocketAddr> = candidate
                    .map(|ip| SocketAddr::new(ip, port))
                    .into_iter()
                    .collect();
                h.host
                    .accept_offer(now, unix_now(), sdp, &candidates, peer)
                    .map(|(_, answer)| answer)
                    .map_err(|e| e.to_string())
            }
            None => Err("this endpoint does not host NetherNet".to_owned()),
        };
        let _ = self.env.send_and_clear(&reply_to, |env| {
            let result = match &answer {
                Ok(sdp) => (atoms::ok(), sdp.as_str()).encode(env),
                Err(reason) => (atoms::error(), reason.as_str()).encode(env),
            };
            (atoms::raknet_nethernet_answer(), tag, result).encode(env)
        });
    }

    /// A session opened as a client (its offer is on its way to the server).
    pub(super) fn nethernet_connect(
        &mut self,
        conn: ResourceArc<ConnResource>,
        client: Box<Client>,
        server: SocketAddr,
        owner: LocalPid,
    ) {
        let n = self.nethernet.get_or_insert_with(NetherNet::default);
        let id = n.next_id();
        n.clients.insert(id, Outgoing { client, server });
        self.keys.insert(conn.key, id);
        self.conns
            .insert(id, Slot::new(conn, Some(owner), Role::Client));
    }

    /// The server's answer to a client session's offer; a bad one ends the attempt.
    pub(super) fn nethernet_answer(&mut self, now: Instant, key: u64, answer: &str) {
        let Some(&id) = self.keys.get(&key) else {
            return;
        };
        let Some(outgoing) = self.nethernet.as_mut().and_then(|n| n.clients.get_mut(&id)) else {
            return;
        };
        if let Err(e) = outgoing.client.accept_answer(now, unix_now(), answer) {
            let why = match e {
                raknet_nethernet::client::AnswerError::Identity(_) => {
                    "the server's identity assertion does not verify"
                }
                _ => "the server's answer was refused",
            };
            outgoing.client.close(now);
            // The client's own end (LocalClose) is replaced by why the attempt failed.
            while outgoing.client.poll_event().is_some() {}
            if let Some(n) = &mut self.nethernet {
                n.clients.remove(&id);
            }
            self.event(Event::Disconnected {
                conn: id,
                reason: DisconnectReason::ProtocolViolation(why),
            });
        }
    }

    /// Send on a session; one it refused counts as the connection's drop.
    pub(super) fn nethernet_send_counted(
        &mut self,
        now: Instant,
        conn: ConnId,
        data: &[u8],
        reliability: Reliability,
    ) {
        if self.nethernet_send(now, conn, data, reliability).is_err() {
            if let Some(slot) = self.conns.get_mut(&conn) {
                slot.dropped += 1;
            }
        }
    }

    /// Send on a session: `Err` when it refused.
    fn nethernet_send(
        &mut self,
        now: Instant,
        conn: ConnId,
        data: &[u8],
        reliability: Reliability,
    ) -> Result<(), host::SendError> {
        let data = self.nethernet_header(conn).to_send(data);
        let n = self.nethernet.as_mut().ok_or(host::SendError::Closed)?;
        let reliable = reliable_channel(reliability);
        if let Some(o) = n.clients.get_mut(&conn) {
            return o.client.send(now, reliable, data);
        }
        let h = n.hosted.as_deref_mut().ok_or(host::SendError::Closed)?;
        let &id = h.sessions.get(&conn).ok_or(host::SendError::Closed)?;
        h.host.send(now, id, reliable, data)
    }

    /// Close a session (its `Disconnected` follows through [`Driver::nethernet_events`]).
    pub(super) fn nethernet_close(&mut self, now: Instant, conn: ConnId) {
        let Some(n) = &mut self.nethernet else {
            return;
        };
        if let Some(o) = n.clients.get_mut(&conn) {
            o.client.close(now);
        } else if let Some(h) = &mut n.hosted {
            if let Some(&id) = h.sessions.get(&conn) {
                h.host.close(now, id);
            }
        }
    }

    /// Close every session (the endpoint stops).
    pub(super) fn nethernet_shutdown(&mut self, now: Instant) {
        let Some(n) = &mut self.nethernet else {
            return;
        };
        for o in n.clients.values_mut() {
            o.client.close(now);
        }
        if let Some(h) = &mut n.hosted {
            let ids: Vec<SessionId> = h.conns.keys().copied().collect();
            for id in ids {
                h.host.close(now, id);
            }
        }
    }

    /// Run the sessions' timers.
    pub(super) fn nethernet_timeout(&mut self, now: Instant) {
        let Some(n) = &mut self.nethernet else {
            return;
        };
        for o in n.clients.values_mut() {
            if o.client.poll_timeout().is_some_and(|t| t <= now) {
                o.client.handle_timeout(now);
            }
        }
        if let Some(h) = &mut n.hosted {
            h.host.handle_timeout(now);
        }
    }

    /// When the sessions' next timer is due.
    pub(super) fn nethernet_deadline(&mut self) -> Option<Instant> {
        let n = self.nethernet.as_mut()?;
        let clients = n
            .clients
            .values()
            .filter_map(|o| o.client.poll_timeout())
            .min();
        let host = n.hosted.as_mut().and_then(|h| h.host.poll_timeout());
        clients.into_iter().chain(host).min()
    }

    /// The sessions' next datagram.
    pub(super) fn nethernet_poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        let n = self.nethernet.as_mut()?;
        n.clients
            .values_mut()
            .find_map(|o| o.client.poll_transmit())
            .or_else(|| n.hosted.as_mut().and_then(|h| h.host.poll_transmit()))
    }

    /// Deliver the sessions' events as the engine's.
    pub(super) fn nethernet_events(&mut self) {
        self.nethernet_client_events();
        loop {
            let Some(h) = self.hosted() else {
                return;
            };
            let Some(event) = h.host.poll_event() else {
                return;
            };
            match event {
                HostEvent::Connected { id, addr, identity } => {
                    let Some(n) = self.nethernet.as_mut() else {
                        return;
                    };
                    let conn = n.next_id();
                    if let Some(h) = n.hosted.as_deref_mut() {
                        h.conns.insert(id, conn);
                        h.sessions.insert(conn, id);
                    }
                    self.nethernet_accepted(conn, addr, identity);
                }
                HostEvent::Message { id, payload, .. } => {
                    if let Some(&conn) = h.conns.get(&id) {
                        self.nethernet_message(conn, payload);
                    }
                }
                HostEvent::Disconnected { id, reason } => {
                    if let Some(conn) = h.conns.remove(&id) {
                        h.sessions.remove(&conn);
                        let reason = disconnect_reason(reason);
                        self.event(Event::Disconnected { conn, reason });
                    }
                }
            }
        }
    }

    /// The batch header of a session's messages: its resource's (one owner of the fact, for
    /// `conn_send`'s size rule and for the thread alike).
    fn nethernet_header(&self, conn: ConnId) -> BatchHeader {
        self.conns
            .get(&conn)
            .and_then(|slot| slot.res.nethernet)
            .unwrap_or_default()
    }

    /// A session's message, as the connection contract delivers it.
    fn nethernet_message(&mut self, conn: ConnId, payload: Vec<u8>) {
        let payload = self.nethernet_header(conn).received(payload);
        self.event(Event::Message {
            conn,
            payload,
            transit: Duration::ZERO,
        });
    }

    /// The client sessions' events.
    fn nethernet_client_events(&mut self) {
        let Some(n) = &mut self.nethernet else {
            return;
        };
        let mut events = Vec::new();
        n.clients.retain(|&id, o| {
            let mut ended = false;
            while let Some(event) = o.client.poll_event() {
                ended |= matches!(event, ClientEvent::Disconnected { .. });
                events.push((id, o.server, event));
            }
            !ended
        });
        for (conn, server, event) in events {
            match event {
                ClientEvent::Connected => self.nethernet_client_connected(conn, server),
                ClientEvent::Message { payload, .. } => self.nethernet_message(conn, payload),
                ClientEvent::Disconnected { reason } => self.event(Event::Disconnected {
                    conn,
                    reason: disconnect_reason(reason),
                }),
            }
        }
    }

    /// A client session's channels opened: `{:raknet_connected, conn, info}`, as for RakNet.
    fn nethernet_client_connected(&mut self, conn: ConnId, server: SocketAddr) {
        let identity = self
            .nethernet
            .as_ref()
            .and_then(|n| n.clients.get(&conn))
            .and_then(|o| o.client.server_identity().cloned());
        let Some(slot) = self.conns.get_mut(&conn) else {
            return;
        };
        slot.connected = true;
        let (res, owner) = (slot.res.clone(), slot.owner);
        if let Some(pid) = owner {
            let _ = self.env.send_and_clear(&pid, |env| {
                let info = convert::nethernet_info(env, server, identity.as_ref());
                (atoms::raknet_connected(), res, info).encode(env)
            });
        }
    }

    /// A server session opened: a connection for the owner, as the engine's `Connected`
    /// makes.
    fn nethernet_accepted(
        &mut self,
        conn: ConnId,
        addr: SocketAddr,
        identity: Option<raknet_nethernet::identity::Identity>,
    ) {
        let header = self.hosted_ref().map(|h| h.header).unwrap_or_default();
        let res = ResourceArc::new(self.me.new_nethernet_conn(header));
        self.accepted(conn, res, None, |env| {
            convert::nethernet_info(env, addr, identity.as_ref())
        });
    }

    /// `endpoint_info`'s `nethernet` entry: the host's counters, a forwarder's drops, or
    /// `nil` (no NetherNet server on this socket).
    pub(super) fn nethernet_info_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        let Some(h) = self.hosted_ref() else {
            return match &self.nethernet {
                Some(n) if n.forward.is_some() => {
                    convert::map(env, &[("forward_dropped", n.forward_dropped)])
                }
                _ => atoms::nil().encode(env),
            };
        };
        let s = h.host.stats();
        let pairs: [(&str, u64); 10] = [
            ("sessions", h.host.len() as u64),
            ("negotiating", h.host.negotiating() as u64),
            ("offers_answered", s.offers_answered),
            ("offers_refused", s.offers_refused),
            ("negotiations_expired", s.negotiations_expired),
            ("negotiations_evicted", s.negotiations_evicted),
            ("datagrams_unmatched", s.datagrams_unmatched),
            ("frames_dropped", s.frames_dropped),
            ("sends_refused", s.sends_refused),
            ("datagrams_forwarded", h.forwarded),
        ];
        convert::map(env, &pairs)
    }

    /// `conn_info` for a session.
    pub(super) fn nethernet_conn_info<'a>(&self, env: Env<'a>, conn: ConnId) -> Option<Term<'a>> {
        let n = self.nethernet.as_ref()?;
        if let Some(o) = n.clients.get(&conn) {
            return Some(convert::nethernet_info(
                env,
                o.server,
                o.client.server_identity(),
            ));
        }
        let h = n.hosted.as_deref()?;
        let &id = h.sessions.get(&conn)?;
        let (addr, identity) = h.host.session(id)?;
        Some(convert::nethernet_info(env, addr, identity))
    }
}
