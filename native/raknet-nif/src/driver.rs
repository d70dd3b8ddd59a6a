//! One endpoint's thread: a current-thread tokio runtime running one loop that receives a
//! batch of datagrams, applies NIF commands, runs the engine's timers, then sends what the
//! engine wrote and delivers its events to BEAM processes.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{ConnId, DisconnectReason, Endpoint, Event, ReceiptId, Role};
use rustler::{Encoder, LocalPid, OwnedEnv, ResourceArc, Term};
use tokio::net::UdpSocket;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::atoms;
use crate::command::Command;
use crate::convert::{self, Reason};
use crate::resource::{ConnResource, EndpointResource};

/// Datagrams read per wake-up before the engine's output is flushed (bounds latency).
const RECV_BATCH: usize = 64;
/// Messages held for a connection until its owner is set.
const MAX_HELD: usize = 1024;
/// How long a stopping endpoint waits for peers to acknowledge its disconnection notices.
const STOP_LINGER: Duration = Duration::from_secs(2);
/// Log lines an endpoint sends its owner per second at most; the rest are counted and
/// reported with the next line (hostile traffic must not flood the logs).
const LOG_LINES_PER_SECOND: u32 = 10;

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
    /// Engine receipt id → the id `conn_send` returned.
    receipts: HashMap<ReceiptId, u32>,
    /// The application was already told the connection ended.
    reported: bool,
    dropped: u64,
}

pub(crate) struct Driver {
    pub(crate) endpoint: Endpoint,
    pub(crate) socket: UdpSocket,
    pub(crate) rx: UnboundedReceiver<Command>,
    pub(crate) me: ResourceArc<EndpointResource>,
    pub(crate) owner: LocalPid,
    pub(crate) max_pending: usize,
    pub(crate) env: OwnedEnv,
    conns: HashMap<ConnId, Slot>,
    /// Who asked for a pong from an address (`endpoint_ping`); bounded.
    pingers: HashMap<SocketAddr, (LocalPid, Instant)>,
    keys: HashMap<u64, ConnId>,
    stop_deadline: Option<Instant>,
    buf: Vec<u8>,
    log_window: Instant,
    log_lines: u32,
    log_suppressed: u64,
}

impl Driver {
    pub(crate) fn new(
        endpoint: Endpoint,
        socket: UdpSocket,
        rx: UnboundedReceiver<Command>,
        me: ResourceArc<EndpointResource>,
        owner: LocalPid,
        max_pending: usize,
    ) -> Self {
        Self {
            endpoint,
            socket,
            rx,
            me,
            owner,
            max_pending,
            env: OwnedEnv::new(),
            conns: HashMap::new(),
            pingers: HashMap::new(),
            keys: HashMap::new(),
            stop_deadline: None,
            buf: Vec::with_capacity(2048),
            log_window: Instant::now(),
            log_lines: 0,
            log_suppressed: 0,
        }
    }

    pub(crate) async fn run(mut self) {
        let mut recv = vec![0u8; 2048];
        loop {
            let deadline = self
                .endpoint
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Commands first: one enqueued before a datagram arrived (a new MOTD before a
                // ping, a send before the peer's ACK) is applied before that datagram.
                biased;
                cmd = self.rx.recv() => match cmd {
                    Some(cmd) => {
                        self.command(cmd);
                        while let Ok(cmd) = self.rx.try_recv() {
                            self.command(cmd);
                        }
                    }
                    None => return,
                },
                ready = self.socket.readable() => {
                    if ready.is_ok() {
                        self.receive(&mut recv);
                    }
                }
                () = sleep => {}
            }
            self.endpoint.handle_timeout(Instant::now());
            self.flush().await;
            if let Some(stop) = self.stop_deadline {
                if self.endpoint.stats().connections == 0 || Instant::now() >= stop {
                    self.finish_stop();
                    return;
                }
            }
        }
    }

    fn receive(&mut self, recv: &mut [u8]) {
        for _ in 0..RECV_BATCH {
            match self.socket.try_recv_from(recv) {
                Ok((n, from)) => {
                    let now = Instant::now();
                    self.endpoint
                        .handle(now, from, Bytes::copy_from_slice(&recv[..n]));
                    self.update_backlog_of(from);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // ICMP port unreachable and the like surface here on Linux: not fatal.
                Err(_) => continue,
            }
        }
    }

    fn update_backlog_of(&self, from: SocketAddr) {
        if let Some(id) = self.endpoint.conn_by_addr(from) {
            self.update_backlog(id);
        }
    }

    fn update_backlog(&self, id: ConnId) {
        if let (Some(slot), Some(backlog)) = (self.conns.get(&id), self.endpoint.send_backlog(id)) {
            slot.res.backlog.store(backlog, Ordering::Relaxed);
        }
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now();
        match cmd {
            Command::Send {
                key,
                data,
                opts,
                receipt,
            } => {
                let Some(&id) = self.keys.get(&key) else {
                    return;
                };
                let Some(slot) = self.conns.get_mut(&id) else {
                    return;
                };
                slot.res
                    .pending_bytes
                    .fetch_sub(data.len(), Ordering::Relaxed);
                match self.endpoint.send(now, id, data, opts) {
                    Ok(Some(engine_id)) => {
                        if let Some(user_id) = receipt {
                            slot.receipts.insert(engine_id, user_id);
                        }
                    }
                    Ok(None) => {}
                    Err(_) => {
                        // The NIF checked closed/size/budget already; a race lost it. The
                        // application learns of a receipt message's fate; others are counted.
                        slot.dropped += 1;
                        if let (Some(user_id), Some(pid)) = (receipt, slot.owner) {
                            let res = slot.res.clone();
                            let _ = self.env.send_and_clear(&pid, |env| {
                                (atoms::raknet_receipt(), res, user_id, atoms::lost()).encode(env)
                            });
                        }
                    }
                }
                self.update_backlog(id);
            }
            Command::Close { key } => {
                if let Some(&id) = self.keys.get(&key) {
                    self.endpoint.close(now, id);
                }
            }
            Command::OwnerDown { key } => {
                if let Some(&id) = self.keys.get(&key) {
                    if let Some(slot) = self.conns.get_mut(&id) {
                        slot.owner = None;
                        slot.reported = true;
                    }
                    self.endpoint.close(now, id);
                }
            }
            Command::SetOwner { key, pid } => self.set_owner(key, pid),
            Command::Connect { conn, addr, owner } => match self.endpoint.connect(now, addr) {
                Ok(id) => {
                    self.keys.insert(conn.key, id);
                    self.conns
                        .insert(id, Slot::new(conn, Some(owner), Role::Client));
                }
                Err(e) => {
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
            Command::Ping { addr, owner } => {
                if self.pingers.len() >= 1024 {
                    self.pingers.clear();
                }
                self.pingers.insert(addr, (owner, now));
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
            Command::Ban { ip, duration } => self.endpoint.ban(now, ip, duration),
            Command::Unban(ip) => self.endpoint.unban(ip),
            Command::Banned { reply } => {
                let env = OwnedEnv::new();
                let bans = self.endpoint.banned(now);
                let saved = env.save(env.run(|env| {
                    bans.iter()
                        .map(|(ip, left)| {
                            let left = left.map(|d| d.as_millis() as u64);
                            (ip.to_string(), left).encode(env)
                        })
                        .collect::<Vec<_>>()
                        .encode(env)
                }));
                let _ = reply.try_send(Some((env, saved)));
            }
            Command::Stop => {
                if self.stop_deadline.is_none() {
                    self.endpoint.shutdown(now);
                    self.stop_deadline = Some(now + STOP_LINGER);
                }
            }
        }
    }

    fn endpoint_info_term<'a>(&self, env: &'a OwnedEnv) -> Term<'a> {
        env.run(|env| {
            let s = self.endpoint.stats();
            let stats = convert::map(
                env,
                &[
                    ("connections", s.connections as u64),
                    ("offline_in", s.offline_in),
                    ("pongs_sent", s.pongs_sent),
                    ("incompatible_protocol", s.incompatible_protocol),
                    ("refused_full", s.refused_full),
                    ("refused_already_connected", s.refused_already_connected),
                    ("banned", s.banned),
                    ("bad_cookies", s.bad_cookies),
                    ("unknown_peer", s.unknown_peer),
                    ("malformed", s.malformed),
                    ("offline_queue_full", s.offline_queue_full),
                    ("half_open", s.half_open as u64),
                    ("half_open_evicted", s.half_open_evicted),
                    ("half_open_per_ip_full", s.half_open_per_ip_full),
                    ("refused_ip_connections", s.refused_ip_connections),
                    ("refused_recently_connected", s.refused_recently_connected),
                    ("bad_echo", s.bad_echo),
                    ("handshake_dropped", s.handshake_dropped),
                    ("refused_full_late", s.refused_full_late),
                    ("amplification_limited", s.amplification_limited),
                    ("ocr1_too_small", s.ocr1_too_small),
                    ("offline_ignored", s.offline_ignored),
                    ("pongs_rate_limited", s.pongs_rate_limited),
                    ("pongs_budget_exhausted", s.pongs_budget_exhausted),
                    ("pongs_too_large", s.pongs_too_large),
                    ("recv_buffer_bytes", self.me.buffers.0 as u64),
                    ("send_buffer_bytes", self.me.buffers.1 as u64),
                ],
            );
            let keys = [
                atoms::port(),
                atoms::address(),
                atoms::guid(),
                atoms::connections(),
                atoms::stats(),
            ]
            .map(|a| a.encode(env));
            let values = [
                self.me.local.port().encode(env),
                convert::address(env, self.me.local),
                self.me.guid.encode(env),
                s.connections.encode(env),
                stats,
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        })
    }

    fn conn_info_term<'a>(&self, env: &'a OwnedEnv, id: ConnId) -> Option<Term<'a>> {
        let slot = self.conns.get(&id)?;
        let stats = self.endpoint.connection_stats(id)?;
        let addr = self.endpoint.remote_addr(id)?;
        let info = self.endpoint.connection_info(id)?;
        Some(env.run(|env| {
            let keys = [
                atoms::address(),
                atoms::local_address(),
                atoms::guid(),
                atoms::protocol(),
                atoms::mtu(),
                atoms::rtt_ms(),
                atoms::stats(),
            ]
            .map(|a| a.encode(env));
            let values = [
                convert::address(env, addr),
                convert::address(env, self.me.local),
                info.guid.encode(env),
                info.protocol.encode(env),
                info.mtu.encode(env),
                (stats.srtt.as_micros() as f64 / 1000.0).encode(env),
                convert::connection_stats(env, &stats, slot.dropped),
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        }))
    }

    fn set_owner(&mut self, key: u64, pid: LocalPid) {
        let Some(&id) = self.keys.get(&key) else {
            return;
        };
        let Some(slot) = self.conns.get_mut(&id) else {
            return;
        };
        slot.owner = Some(pid);
        let held: Vec<Held> = slot.held.drain(..).collect();
        let res = slot.res.clone();
        let mut done = false;
        for h in held {
            match h {
                Held::Message(payload, transit) => {
                    res.undelivered.fetch_add(1, Ordering::Relaxed);
                    send_message(&mut self.env, &pid, &res, &payload, transit);
                }
                Held::Disconnect(reason) => {
                    send_disconnect(&mut self.env, &pid, &res, reason);
                    done = true;
                }
            }
        }
        if done {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: ConnId) {
        if let Some(slot) = self.conns.remove(&id) {
            self.keys.remove(&slot.res.key);
        }
    }

    async fn flush(&mut self) {
        let now = Instant::now();
        while let Some(t) = self.endpoint.poll_transmit(now, &mut self.buf) {
            let data = &self.buf[..t.size];
            // The engine sees IPv4 peers of a dual-stack socket unmapped; the socket wants them
            // mapped.
            let destination = match t.destination {
                SocketAddr::V4(v4) if self.me.dual_stack => {
                    SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port())
                }
                other => other,
            };
            match self.socket.try_send_to(data, destination) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let _ = self.socket.send_to(data, destination).await;
                }
                // Unreachable peers and the like: the engine's timers handle the silence.
                Err(_) => {}
            }
        }
        while let Some(event) = self.endpoint.poll_event() {
            self.event(event);
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
                            convert::connection_info(env, addr, guid, protocol, mtu),
                        )
                            .encode(env)
                    });
                }
                Role::Client => {
                    let Some(slot) = self.conns.get_mut(&conn) else {
                        return;
                    };
                    slot.connected = true;
                    let res = slot.res.clone();
                    if let Some(pid) = slot.owner {
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
                        let pending = slot.res.undelivered.fetch_add(1, Ordering::Relaxed) + 1;
                        send_message(&mut self.env, &pid, &slot.res, &payload, transit);
                        if pending > self.max_pending
                            && !slot.reported
                            && slot.res.flow_controlled.load(Ordering::Relaxed)
                        {
                            // The owner is hopelessly behind: stop feeding it (bounded memory).
                            slot.reported = true;
                            send_disconnect(&mut self.env, &pid, &slot.res, Reason::Overloaded);
                            slot.res.closed.store(true, Ordering::Relaxed);
                            self.endpoint.close(Instant::now(), conn);
                            let max = self.max_pending;
                            self.log(true, format!("closed an overloaded connection: its owner fell {max} messages behind"));
                        }
                    }
                    None if slot.held.len() < MAX_HELD => {
                        slot.held.push_back(Held::Message(payload, transit))
                    }
                    None => slot.dropped += 1,
                }
            }
            Event::Receipt {
                conn,
                receipt,
                acked,
            } => {
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                let (Some(user_id), Some(pid)) = (slot.receipts.remove(&receipt), slot.owner)
                else {
                    return;
                };
                let res = slot.res.clone();
                let fate = if acked { atoms::acked() } else { atoms::lost() };
                let _ = self.env.send_and_clear(&pid, |env| {
                    (atoms::raknet_receipt(), res, user_id, fate).encode(env)
                });
            }
            Event::Disconnected { conn, reason } => {
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                slot.res.closed.store(true, Ordering::Relaxed);
                let res = slot.res.clone();
                if slot.reported {
                    self.forget(conn);
                    return;
                }
                slot.reported = true;
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
                    (Some(pid), _, _) => {
                        send_disconnect(&mut self.env, &pid, &res, Reason::Engine(reason))
                    }
                    (None, _, _) => {
                        // Tell the owner once it is set.
                        slot.held
                            .push_back(Held::Disconnect(Reason::Engine(reason)));
                        return;
                    }
                }
                self.forget(conn);
            }
            Event::Pong { from, pong, .. } => {
                // Timed here: the ping's own time field only has millisecond resolution.
                let Some((pid, sent)) = self.pingers.remove(&from) else {
                    return;
                };
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
            _ => {}
        }
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
        let me = self.me.clone();
        let _ = self.env.send_and_clear(&self.owner, |env| {
            (atoms::raknet_endpoint(), me, atoms::stopped()).encode(env)
        });
    }
}

impl Slot {
    fn new(res: ResourceArc<ConnResource>, owner: Option<LocalPid>, role: Role) -> Self {
        Self {
            res,
            owner,
            role,
            connected: false,
            held: VecDeque::new(),
            receipts: HashMap::new(),
            reported: false,
            dropped: 0,
        }
    }
}

/// `{:raknet, conn_ref, type, payload, transit_time}`: the first byte is the type.
fn send_message(
    env: &mut OwnedEnv,
    pid: &LocalPid,
    res: &ResourceArc<ConnResource>,
    payload: &Bytes,
    transit: Duration,
) {
    let res = res.clone();
    let _ = env.send_and_clear(pid, |env| {
        let kind = payload.first().copied().unwrap_or(0);
        let rest = payload.get(1..).unwrap_or(&[]);
        let mut bin = rustler::NewBinary::new(env, rest.len());
        bin.as_mut_slice().copy_from_slice(rest);
        let bin: rustler::Binary = bin.into();
        (atoms::raknet(), res, kind, bin, transit.as_millis() as u64).encode(env)
    });
}

fn send_disconnect(
    env: &mut OwnedEnv,
    pid: &LocalPid,
    res: &ResourceArc<ConnResource>,
    reason: Reason,
) {
    let res = res.clone();
    let _ = env.send_and_clear(pid, |env| {
        (
            atoms::raknet_disconnect(),
            res,
            convert::disconnect_reason(env, &reason),
        )
            .encode(env)
    });
}
