//! NetherNet beside RakNet on an endpoint's socket.
//!
//! The sessions of a server live on one endpoint thread of its group (its first): the
//! kernel spreads a client's datagrams over the group's sockets by address, and an offer is
//! answered before its client's address is known, so the other threads hand the WebRTC
//! datagrams they read (told apart by their first bytes, `raknet_nethernet::host::classify`)
//! to that one. There the host's sessions take ids from [`ConnId::external`] and their events
//! become the engine's [`Event`]s: one connection contract, so delivery, owners, batching,
//! closes and telemetry are the same code for both transports.

use std::collections::HashMap;
use std::time::SystemTime;

use raknet_nethernet::host::{self, CloseReason, Host, HostEvent, Kind, SessionId};
use raknet_proto::Reliability;

use rustler::Env;

use super::*;
use crate::resource::CommandTx;

/// How an endpoint takes part in NetherNet.
pub(crate) enum NetherNet {
    /// This thread hosts the server's sessions.
    Hosted(Box<Hosted>),
    /// Another endpoint of the group hosts them: WebRTC datagrams go to it.
    Forward(CommandTx),
}

/// The sessions, and their ids in the connection contract.
pub(crate) struct Hosted {
    host: Host,
    conns: HashMap<SessionId, ConnId>,
    sessions: HashMap<ConnId, SessionId>,
    serial: u64,
    /// Datagrams other endpoints of the group handed over.
    forwarded: u64,
}

impl NetherNet {
    pub(crate) fn hosted(host: Host) -> Self {
        Self::Hosted(Box::new(Hosted {
            host,
            conns: HashMap::new(),
            sessions: HashMap::new(),
            serial: 0,
            forwarded: 0,
        }))
    }

    fn hosted_mut(&mut self) -> Option<&mut Hosted> {
        match self {
            Self::Hosted(h) => Some(h),
            Self::Forward(_) => None,
        }
    }

    fn hosted_ref(&self) -> Option<&Hosted> {
        match self {
            Self::Hosted(h) => Some(h),
            Self::Forward(_) => None,
        }
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

impl Driver {
    fn hosted(&mut self) -> Option<&mut Hosted> {
        self.nethernet.as_mut().and_then(NetherNet::hosted_mut)
    }

    /// Take a datagram if it is NetherNet's (STUN or DTLS) and this endpoint serves
    /// NetherNet; `false`: it is the engine's.
    pub(super) fn nethernet_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
    ) -> bool {
        let Some(nethernet) = &mut self.nethernet else {
            return false;
        };
        if host::classify(data) == Kind::Other {
            return false;
        }
        let from = raknet_proto::addr::unmap(from);
        match nethernet {
            NetherNet::Hosted(h) => {
                h.host.handle(now, from, data);
            }
            NetherNet::Forward(tx) => {
                let data = Bytes::copy_from_slice(data);
                let _ = tx.send(Command::NetherNetDatagram { from, data });
            }
        }
        true
    }

    /// A datagram another endpoint of the group handed over.
    pub(super) fn nethernet_forwarded(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
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
                    .accept_offer(now, unix_now(), sdp, &candidates)
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

    /// Send on a session: `Err` when the host refused (counted as the connection's drop).
    pub(super) fn nethernet_send(
        &mut self,
        now: Instant,
        conn: ConnId,
        data: &[u8],
        reliability: Reliability,
    ) -> Result<(), host::SendError> {
        let h = self.hosted().ok_or(host::SendError::Closed)?;
        let &id = h.sessions.get(&conn).ok_or(host::SendError::Closed)?;
        h.host.send(now, id, reliable_channel(reliability), data)
    }

    /// Close a session (its `Disconnected` follows through [`Driver::nethernet_events`]).
    pub(super) fn nethernet_close(&mut self, now: Instant, conn: ConnId) {
        if let Some(h) = self.hosted() {
            if let Some(&id) = h.sessions.get(&conn) {
                h.host.close(now, id);
            }
        }
    }

    /// Close every session (the endpoint stops).
    pub(super) fn nethernet_shutdown(&mut self, now: Instant) {
        if let Some(h) = self.hosted() {
            let ids: Vec<SessionId> = h.conns.keys().copied().collect();
            for id in ids {
                h.host.close(now, id);
            }
        }
    }

    /// Run the host's timers.
    pub(super) fn nethernet_timeout(&mut self, now: Instant) {
        if let Some(h) = self.hosted() {
            h.host.handle_timeout(now);
        }
    }

    /// When the host's next timer is due.
    pub(super) fn nethernet_deadline(&mut self) -> Option<Instant> {
        self.hosted().and_then(|h| h.host.poll_timeout())
    }

    /// The host's next datagram.
    pub(super) fn nethernet_poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.hosted().and_then(|h| h.host.poll_transmit())
    }

    /// Deliver the host's events as the engine's.
    pub(super) fn nethernet_events(&mut self) {
        loop {
            let Some(h) = self.hosted() else {
                return;
            };
            let Some(event) = h.host.poll_event() else {
                return;
            };
            match event {
                HostEvent::Connected { id, addr, identity } => {
                    h.serial += 1;
                    let conn = ConnId::external(h.serial);
                    h.conns.insert(id, conn);
                    h.sessions.insert(conn, id);
                    self.nethernet_connected(conn, addr, identity);
                }
                HostEvent::Message { id, payload, .. } => {
                    if let Some(&conn) = h.conns.get(&id) {
                        self.event(Event::Message {
                            conn,
                            payload: Bytes::from(payload),
                            transit: Duration::ZERO,
                        });
                    }
                }
                HostEvent::Disconnected { id, reason } => {
                    if let Some(conn) = h.conns.remove(&id) {
                        h.sessions.remove(&conn);
                        let reason = match reason {
                            CloseReason::Timeout => DisconnectReason::Timeout,
                            CloseReason::PeerClosed => DisconnectReason::PeerClosed,
                            CloseReason::LocalClose => DisconnectReason::LocalClose,
                            CloseReason::Failed => {
                                DisconnectReason::ProtocolViolation("WebRTC (DTLS or SCTP) failed")
                            }
                        };
                        self.event(Event::Disconnected { conn, reason });
                    }
                }
            }
        }
    }

    /// A session opened: a connection for the owner, as the engine's `Connected` makes.
    fn nethernet_connected(
        &mut self,
        conn: ConnId,
        addr: SocketAddr,
        identity: Option<raknet_nethernet::identity::Identity>,
    ) {
        let res = ResourceArc::new(self.me.new_nethernet_conn());
        self.keys.insert(res.key, conn);
        let mut slot = Slot::new(res.clone(), None, Role::Server);
        slot.connected = true;
        self.conns.insert(conn, slot);
        let me = self.me.clone();
        let _ = self.env.send_and_clear(&self.owner, |env| {
            (
                atoms::raknet_endpoint(),
                me,
                atoms::connected(),
                res,
                convert::nethernet_info(env, addr, identity.as_ref()),
            )
                .encode(env)
        });
    }

    /// `endpoint_info`'s `nethernet` entry (`nil` where this thread hosts no sessions).
    pub(super) fn nethernet_info_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        let Some(h) = self.nethernet.as_ref().and_then(NetherNet::hosted_ref) else {
            return atoms::nil().encode(env);
        };
        let s = h.host.stats();
        let pairs: [(&str, u64); 9] = [
            ("sessions", h.host.len() as u64),
            ("negotiating", h.host.negotiating() as u64),
            ("offers_answered", s.offers_answered),
            ("offers_refused", s.offers_refused),
            ("negotiations_expired", s.negotiations_expired),
            ("datagrams_unmatched", s.datagrams_unmatched),
            ("frames_dropped", s.frames_dropped),
            ("sends_refused", s.sends_refused),
            ("datagrams_forwarded", h.forwarded),
        ];
        convert::map(env, &pairs)
    }

    /// `conn_info` for a session.
    pub(super) fn nethernet_conn_info<'a>(&self, env: Env<'a>, conn: ConnId) -> Option<Term<'a>> {
        let h = self.nethernet.as_ref().and_then(NetherNet::hosted_ref)?;
        let &id = h.sessions.get(&conn)?;
        let (addr, identity) = h.host.session(id)?;
        Some(convert::nethernet_info(env, addr, identity))
    }
}
