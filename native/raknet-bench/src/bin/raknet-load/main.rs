//! `raknet-load`: open N RakNet connections to any server, send at a rate, report.
//!
//! Every simulated player has its own UDP socket and client engine; all of them run on one
//! thread, in one `epoll` loop. Each message carries its send time, so when the server echoes (as
//! `make server` does) the round trip is measured. Progress is printed every second and a
//! summary at the end. After `--duration` each player stops sending and waits (up to a
//! second) for the echoes still on their way before it closes: those missing then count as
//! unanswered.
//!
//! ```text
//! raknet-load [--host 127.0.0.1] [--port 19132] [--connections 100] [--rate 20] [--size 64]
//!             [--reliability reliable_ordered] [--channel 0] [--duration 10] [--protocol 11]
//!             [--verify] [--drain 15] [--warmup 0] [--raw] [--ack-delay 0]
//! ```
//!
//! `--ack-delay MS` is how long a player's engine may hold the ACK of a datagram it received
//! (default 0: it leaves in the same wake-up, as the `--raw` reference's answer does). The
//! engine's own default (and official RakNet's update tick) is 10 ms: a server then handles
//! each ACK some 10 ms after the echo it acknowledges, when that connection's state has left
//! the CPU's cache, which made the engine's echo ~2 µs dearer at 1,000 players (16.2-16.5
//! against 13.8-14.5 µs), and the load tester wakes once more per echo.
//!
//! `--raw` speaks plain UDP to `raknet-echo --raw`, the reference for what RakNet costs: each
//! message is a datagram of its own, echoed with a 7-byte datagram beside it, and each echo
//! answered with one: the four datagrams of a RakNet echo (message, ACK, echo, ACK), without
//! the protocol's work.
//!
//! The summary's `protocol` line sums what the players' engines counted by the time they
//! closed: the server's datagrams that arrived twice (it resent what had arrived: its
//! acknowledgement came too late, or it was held up), the NAKs the players sent (gaps in the
//! server's datagrams), and the players' own resends and datagrams declared lost.
//!
//! `--warmup SECS` leaves the round trips of messages sent in the first SECS seconds (the
//! connection ramp) out of the summary's percentiles; every message still counts as answered
//! or not. Each progress line has the p99 of the round trips measured in that second.
//!
//! Every message is `0x86`, its send time (µs since start, u64 BE), its number (u64 BE, counted
//! per connection and reliability from 0), a reliability tag (0 reliable_ordered,
//! 1 unreliable_sequenced, 2 any other) and its channel, then zero padding up to `--size`. A
//! server that echoes with the tagged reliability on the tagged channel (as `make soak`'s does)
//! lets `--verify` check the echoes.
//!
//! `--verify` sends, at each tick, one reliable_ordered and one unreliable_sequenced message on
//! `--channel` (`--reliability` is ignored), and checks the echoes per connection: every
//! reliable one must come back exactly once and in order, and the unreliable-sequenced ones
//! that come back must come in increasing numbers (losses are allowed). After `--duration` each
//! player stops sending and waits up to `--drain` seconds for its missing reliable echoes
//! before it closes. The summary then has `reliable`, `sequenced`, `dropped` and `verify` lines.

mod recv;
mod report;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use recv::{recv_all, RecvBufs};
use report::{Check, Progress, Totals};

use raknet_proto::{
    ConnId, Endpoint, EndpointConfig, Event, Limits, Priority, Reliability, SendOptions,
};

struct Args {
    server: SocketAddr,
    connections: usize,
    rate: f64,
    size: usize,
    reliability: Reliability,
    channel: u8,
    duration: Duration,
    protocol: u8,
    verify: bool,
    drain: Duration,
    /// Round trips of messages sent before this point (from the start) are left out of the
    /// percentiles: the connection ramp is not the steady state.
    warmup: Duration,
    /// `--raw`: plain UDP instead of RakNet, the reference for what the protocol costs.
    raw: bool,
    /// `--ack-delay MS`: how long a player's engine may hold an ACK (0: none; the engine's
    /// default, as official RakNet's update tick, is 10).
    ack_delay: Duration,
}

/// The tag of a message's reliability in its payload, which an echo server sends back with.
const TAG_RELIABLE_ORDERED: u8 = 0;
/// See [`TAG_RELIABLE_ORDERED`].
const TAG_UNRELIABLE_SEQUENCED: u8 = 1;
/// See [`TAG_RELIABLE_ORDERED`].
const TAG_OTHER: u8 = 2;
/// Bytes before the padding: id, send time, number, reliability tag, channel.
const HEADER: usize = 1 + 8 + 8 + 1 + 1;

fn tag(reliability: Reliability) -> u8 {
    match reliability {
        Reliability::ReliableOrdered => TAG_RELIABLE_ORDERED,
        Reliability::UnreliableSequenced => TAG_UNRELIABLE_SEQUENCED,
        _ => TAG_OTHER,
    }
}

fn parse_args() -> Result<Args, String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = 19132u16;
    let mut a = Args {
        server: "127.0.0.1:19132".parse().unwrap_or_else(|_| unreachable!()),
        connections: 100,
        rate: 20.0,
        size: 64,
        reliability: Reliability::ReliableOrdered,
        channel: 0,
        duration: Duration::from_secs(10),
        protocol: 11,
        verify: false,
        drain: Duration::from_secs(15),
        warmup: Duration::ZERO,
        raw: false,
        ack_delay: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--verify" {
            a.verify = true;
            continue;
        }
        if flag == "--raw" {
            a.raw = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |_: std::num::ParseIntError| format!("bad value for {flag}: {value}");
        let badf = |_: std::num::ParseFloatError| format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--host" => host = value.clone(),
            "--port" => port = value.parse().map_err(bad)?,
            "--connections" => a.connections = value.parse().map_err(bad)?,
            "--rate" => a.rate = value.parse().map_err(badf)?,
            "--size" => a.size = value.parse::<usize>().map_err(bad)?.max(HEADER),
            "--channel" => a.channel = value.parse().map_err(bad)?,
            "--duration" => a.duration = Duration::from_secs_f64(value.parse().map_err(badf)?),
            "--protocol" => a.protocol = value.parse().map_err(bad)?,
            "--drain" => a.drain = Duration::from_secs_f64(value.parse().map_err(badf)?),
            "--warmup" => a.warmup = Duration::from_secs_f64(value.parse().map_err(badf)?),
            "--ack-delay" => {
                a.ack_delay = Duration::from_secs_f64(value.parse::<f64>().map_err(badf)? / 1000.0)
            }
            "--reliability" => {
                a.reliability = match value.as_str() {
                    "unreliable" => Reliability::Unreliable,
                    "unreliable_sequenced" => Reliability::UnreliableSequenced,
                    "reliable" => Reliability::Reliable,
                    "reliable_ordered" => Reliability::ReliableOrdered,
                    "reliable_sequenced" => Reliability::ReliableSequenced,
                    other => return Err(format!("unknown reliability {other}")),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.raw && a.verify {
        return Err("--raw sends plain UDP: nothing to --verify".into());
    }
    let ip = if host == "localhost" {
        "127.0.0.1".to_string()
    } else {
        host
    };
    a.server = SocketAddr::new(
        ip.parse()
            .map_err(|_| format!("host must be an IP address: {ip}"))?,
        port,
    );
    Ok(a)
}

/// One connection's reliable-ordered echoes: which numbers came back, and which one is next.
#[derive(Default)]
struct ReliableEchoes {
    seen: Vec<u64>,
    next: u64,
    count: u64,
}

impl ReliableEchoes {
    /// Record echo `n`; count it into `check` as in order, duplicated or out of order.
    fn record(&mut self, n: u64, check: &mut Check) {
        let (word, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & bit != 0 {
            check.duplicated += 1;
            return;
        }
        self.seen[word] |= bit;
        self.count += 1;
        check.echoed += 1;
        if n != self.next {
            check.out_of_order += 1;
        }
        self.next = self.next.max(n + 1);
    }
}

/// What every player shares: the arguments, the run's start and when sending stops.
struct Run {
    args: Args,
    start: Instant,
    stop: Instant,
    interval: Duration,
    /// The players' engines' seeds count from here: different every run.
    seed: u64,
}

/// One simulated player: its socket, its client engine and what it has sent and received.
struct Player {
    id: usize,
    socket: UdpSocket,
    ep: Endpoint,
    /// The RakNet connection; `None` with `--raw`.
    conn: Option<ConnId>,
    next_send: Option<Instant>,
    seq: u64,
    connected: bool,
    ever_connected: bool,
    /// `--verify`: numbers sent per tag, the reliable echoes, the last sequenced echo.
    sent: [u64; 2],
    reliable: ReliableEchoes,
    last_sequenced: Option<u64>,
    /// After the run a player stays (without sending) until its echoes are back (a verifying
    /// one: its reliable echoes), for at most a second (`--drain`); it then closes, and
    /// leaves a second later. Closing at once counted the echoes of its last messages, still
    /// on their way, as unanswered: hundreds of them when the server lagged at that moment.
    close_by: Instant,
    /// Messages sent and echoes received.
    messages: u64,
    echoes: u64,
    leave_at: Instant,
    /// The deadline the player is filed under in the loop's timer set.
    filed: Option<Instant>,
    /// When the kernel received the last datagram this wake-up read (Linux: its
    /// `SO_TIMESTAMPNS`), so that an echo's round trip ends when it arrived, not when the
    /// load tester came round to it.
    arrived: Option<Instant>,
}

impl Player {
    fn new(run: &Run, id: usize) -> Option<Self> {
        let bind = if run.args.server.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            SocketAddr::from(([0u16; 8], 0))
        };
        let socket = UdpSocket::bind(bind).ok()?;
        // Connected, as a game client's socket usually is: the kernel keeps the route to the
        // server instead of looking it up for every datagram sent.
        socket.connect(run.args.server).ok()?;
        // Best effort: without it, a round trip ends when the datagram is read.
        #[cfg(target_os = "linux")]
        let _ = nix::sys::socket::setsockopt(
            &socket,
            nix::sys::socket::sockopt::ReceiveTimestampns,
            &true,
        );
        let local = socket.local_addr().unwrap_or(run.args.server);
        let config = EndpointConfig {
            // A GUID per player and run: a server still closing the last run's connections
            // refuses a GUID it knows from another address as already connected.
            rng_seed: run.seed ^ id as u64,
            protocol_versions: vec![run.args.protocol],
            accept_incoming: false,
            // `--ack-delay`, 0 by default: an echo's ACK leaves as soon as the echo is read,
            // in the same wake-up (as the plain-UDP reference's answer does), not from a timer
            // that wakes the load tester again for each echo.
            ack_delay: run.args.ack_delay,
            // The load tester chose its server: no limit on the server's message rate.
            limits: Limits {
                max_messages_per_sec: None,
                ..Limits::default()
            },
            ..EndpointConfig::default()
        };
        let now = Instant::now();
        let mut ep = Endpoint::new(config, local, now);
        let conn = if run.args.raw {
            None
        } else {
            Some(ep.connect(now, run.args.server).ok()?)
        };
        let close_by = if run.args.verify {
            run.stop + run.args.drain
        } else {
            run.stop + Duration::from_secs(1)
        };
        Some(Self {
            id,
            socket,
            ep,
            // `--raw` has no handshake: the first step starts sending.
            next_send: conn.is_none().then_some(now),
            conn,
            seq: 0,
            connected: false,
            ever_connected: false,
            sent: [0; 2],
            reliable: ReliableEchoes::default(),
            last_sequenced: None,
            close_by,
            messages: 0,
            echoes: 0,
            leave_at: close_by + Duration::from_secs(1),
            filed: None,
            arrived: None,
        })
    }

    /// When the player next has something to do without a datagram arriving.
    fn deadline(&mut self, now: Instant, run: &Run) -> Instant {
        [
            self.ep.poll_timeout(),
            self.next_send.filter(|_| now < run.stop),
            Some(if self.connected && now < self.close_by {
                self.close_by
            } else {
                self.leave_at
            }),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now)
    }

    /// Hand the engine every datagram waiting on the socket.
    fn receive(&mut self, now: Instant, run: &Run, bufs: &mut RecvBufs, t: &mut Totals) {
        if self.conn.is_none() {
            return self.receive_raw(now, run, bufs, t);
        }
        let (ep, arrived) = (&mut self.ep, &mut self.arrived);
        recv_all(&self.socket, bufs, |data, from, at| {
            let at = at.unwrap_or(now).min(now);
            *arrived = Some(arrived.map_or(at, |a| a.max(at)));
            ep.handle(now, from, Bytes::copy_from_slice(data));
        });
        if let Some(at) = self.arrived {
            let late = now.saturating_duration_since(at).as_micros() as u64;
            t.second_read_lag_us = t.second_read_lag_us.max(late);
        }
    }

    /// `--raw`: count each echo, and answer it with a datagram the size of a RakNet ACK of
    /// one datagram, as a RakNet client's engine would (`raknet-echo --raw` sends one back
    /// with each echo): the four datagrams of a RakNet echo, without the protocol.
    fn receive_raw(&mut self, now: Instant, run: &Run, bufs: &mut RecvBufs, t: &mut Totals) {
        let mut echoes = Vec::new();
        recv_all(&self.socket, bufs, |data, _, at| {
            if data.first() == Some(&0x86) {
                echoes.push((at.unwrap_or(now).min(now), data.to_vec()));
            }
        });
        for (at, echo) in echoes {
            let late = now.saturating_duration_since(at).as_micros() as u64;
            t.second_read_lag_us = t.second_read_lag_us.max(late);
            self.echoed(at, run, t, &echo);
            let _ = self.socket.send(&RAW_ACK);
        }
    }

    /// Run the engine's timers if due, send when the player's tick has come, take its
    /// events and send its datagrams. `false` once the player has left.
    fn step(&mut self, now: Instant, run: &Run, t: &mut Totals, buf: &mut Vec<u8>) -> bool {
        let args = &run.args;
        if now >= self.leave_at {
            if !self.ever_connected {
                // The run ended before the server answered the handshake.
                t.failure("no connection by the end of the run".into());
            }
            return false;
        }
        let Some(conn) = self.conn else {
            return self.step_raw(now, run, t);
        };
        if self.ep.poll_timeout().is_some_and(|due| due <= now) {
            self.ep.handle_timeout(now);
        }
        if self.connected && now < run.stop && self.next_send.is_some_and(|at| now >= at) {
            self.send_tick(now, run, t);
            self.next_send = self.next_send.map(|at| at + run.interval);
        }
        while let Some(e) = self.ep.poll_event() {
            match e {
                Event::Connected { .. } => {
                    self.connected = true;
                    self.ever_connected = true;
                    t.connected += 1;
                    // Spread the players' send times over one interval.
                    self.next_send = Some(now + run.interval.mul_f64((self.id % 97) as f64 / 97.0));
                }
                Event::Message { payload, .. } => {
                    let at = self.arrived.unwrap_or(now);
                    self.echoed(at, run, t, &payload);
                }
                Event::Disconnected { reason, .. } => {
                    // Still connected: the server closed it (or it timed out) before the
                    // player closed it itself.
                    if self.connected {
                        t.dropped += 1;
                        let reason = if args.verify {
                            t.reliable.lost += self.sent[0] - self.reliable.count;
                            format!("{reason} after {} reliable echoes", self.reliable.count)
                        } else {
                            reason.to_string()
                        };
                        if t.drop_reasons.len() < 5 && !t.drop_reasons.contains(&reason) {
                            t.drop_reasons.push(reason);
                        }
                    }
                    if self.ever_connected {
                        t.disconnected += 1;
                    } else {
                        t.failure(reason.to_string());
                    }
                    return false;
                }
                _ => {}
            }
        }
        self.arrived = None;
        while let Some(tx) = self.ep.poll_transmit(now, buf) {
            // A full socket buffer drops the datagram, as the network would. The socket is
            // connected to the only destination there is.
            let _ = self.socket.send(&buf[..tx.size]);
        }
        let all_back = if args.verify {
            self.reliable.count == self.sent[0]
        } else {
            self.echoes >= self.messages
        };
        if self.connected && now >= run.stop && (all_back || now >= self.close_by) {
            if args.verify {
                t.reliable.lost += self.sent[0] - self.reliable.count;
            }
            if let Some(s) = self.ep.connection_stats(conn) {
                t.duplicates += s.duplicates;
                t.resends += s.resends;
                t.naks_sent += s.naks_sent;
                t.datagrams_lost += s.datagrams_lost;
                t.expired_unsent += s.expired_unsent;
                t.held_at_close += s.held_for_ordering as u64;
            }
            if !all_back {
                t.closed_waiting += 1;
            }
            self.ep.close(now, conn);
            self.connected = false;
            self.next_send = None;
            self.leave_at = self.leave_at.min(now + Duration::from_secs(1));
        }
        true
    }

    /// `--raw`: send each tick's message as a datagram of its own; stop at the end of the
    /// run and leave a second later (the echoes still on their way are counted).
    fn step_raw(&mut self, now: Instant, run: &Run, t: &mut Totals) -> bool {
        if !self.ever_connected {
            self.connected = true;
            self.ever_connected = true;
            t.connected += 1;
            self.next_send = Some(now + run.interval.mul_f64((self.id % 97) as f64 / 97.0));
        }
        if self.connected && now < run.stop && self.next_send.is_some_and(|at| now >= at) {
            let payload = message(run, now, self.seq, run.args.reliability);
            if self.socket.send(&payload).is_ok() {
                t.sent += 1;
                self.messages += 1;
                t.bytes_sent += payload.len() as u64;
            }
            self.seq += 1;
            self.next_send = self.next_send.map(|at| at + run.interval);
        }
        if self.connected && now >= run.stop {
            self.connected = false;
            self.next_send = None;
            self.leave_at = self.leave_at.min(now + Duration::from_secs(1));
        }
        true
    }

    /// Send this tick's message (`--verify`: one of each checked reliability).
    fn send_tick(&mut self, now: Instant, run: &Run, t: &mut Totals) {
        let Some(conn) = self.conn else {
            return;
        };
        let args = &run.args;
        let opts = SendOptions {
            reliability: args.reliability,
            channel: args.channel,
            priority: Priority::High,
        };
        let payload = |n: u64, reliability| Bytes::from(message(run, now, n, reliability));
        if !args.verify {
            if self
                .ep
                .send(now, conn, payload(self.seq, args.reliability), opts)
                .is_ok()
            {
                t.sent += 1;
                self.messages += 1;
                t.bytes_sent += args.size as u64;
            }
            self.seq += 1;
            return;
        }
        for (i, reliability) in [
            Reliability::ReliableOrdered,
            Reliability::UnreliableSequenced,
        ]
        .into_iter()
        .enumerate()
        {
            let opts = SendOptions {
                reliability,
                ..opts
            };
            if self
                .ep
                .send(now, conn, payload(self.sent[i], reliability), opts)
                .is_ok()
            {
                self.sent[i] += 1;
                t.sent += 1;
                t.bytes_sent += args.size as u64;
                if i == 0 {
                    t.reliable.sent += 1;
                } else {
                    t.sequenced.sent += 1;
                }
            }
        }
    }

    /// Count an echo that arrived at `now`: its round trip and, with `--verify`, its order.
    fn echoed(&mut self, now: Instant, run: &Run, t: &mut Totals, payload: &[u8]) {
        t.received += 1;
        self.echoes += 1;
        t.bytes_received += payload.len() as u64;
        if payload.len() < 9 || payload[0] != 0x86 {
            return;
        }
        let sent_us = u64::from_be_bytes(payload[1..9].try_into().unwrap_or([0; 8]));
        let elapsed = (now - run.start).as_micros() as u64;
        let rtt = (elapsed - sent_us.min(elapsed)).min(u64::from(u32::MAX)) as u32;
        if sent_us >= run.args.warmup.as_micros() as u64 {
            t.rtts_us.push(rtt);
        }
        t.second_rtts_us.push(rtt);
        if !run.args.verify || payload.len() < HEADER {
            return;
        }
        let n = u64::from_be_bytes(payload[9..17].try_into().unwrap_or([0; 8]));
        match payload[17] {
            TAG_RELIABLE_ORDERED => {
                self.reliable.record(n, &mut t.reliable);
                t.reliable.rtts_us.push(rtt);
            }
            TAG_UNRELIABLE_SEQUENCED => {
                if self.last_sequenced.is_some_and(|last| n <= last) {
                    t.sequenced.out_of_order += 1;
                } else {
                    self.last_sequenced = Some(n);
                    t.sequenced.echoed += 1;
                }
                t.sequenced.rtts_us.push(rtt);
            }
            _ => {}
        }
    }
}

/// A message sent at `now`: its id, send time, number, reliability tag and channel, padded to
/// `--size`.
fn message(run: &Run, now: Instant, n: u64, reliability: Reliability) -> Vec<u8> {
    let mut payload = Vec::with_capacity(run.args.size);
    payload.push(0x86);
    payload.extend_from_slice(&(now - run.start).as_micros().to_be_bytes()[8..]);
    payload.extend_from_slice(&n.to_be_bytes());
    payload.push(tag(reliability));
    payload.push(run.args.channel);
    payload.resize(run.args.size, 0);
    payload
}

/// `--raw`: what a player sends back for each echo, the size of a RakNet ACK of one datagram
/// (`0xC0`, one range, one datagram number).
const RAW_ACK: [u8; 7] = [0xC0, 0, 1, 1, 0, 0, 0];

/// Every player on one thread: one `epoll` set of their sockets, one ordered set of their
/// deadlines. A wake-up serves every socket that is readable and every deadline that is due,
/// and a player is stepped only then: no task, future or timer registration per player.
fn run_players(run: &Run, t: &mut Totals) -> std::io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut players: Vec<Option<Player>> = Vec::with_capacity(run.args.connections);
    let mut timers: BTreeSet<(Instant, usize)> = BTreeSet::new();
    let (mut bufs, mut buf) = (RecvBufs::default(), Vec::with_capacity(2048));
    let now = Instant::now();
    for id in 0..run.args.connections {
        let player = Player::new(run, id).and_then(|mut p| {
            poll.registry()
                .register(&mut p.socket, Token(id), Interest::READABLE)
                .ok()?;
            Some(p)
        });
        match player {
            Some(mut p) => {
                let at = p.deadline(now, run);
                p.filed = Some(at);
                timers.insert((at, id));
                players.push(Some(p));
            }
            None => {
                t.failure("no socket (bind, connect or epoll failed)".into());
                players.push(None);
            }
        }
    }
    let mut live = players.iter().flatten().count();
    let mut progress = Progress::new(run);
    let mut woken: Vec<usize> = Vec::new();
    while live > 0 {
        let now = Instant::now();
        let next = timers
            .first()
            .map_or(progress.next, |&(at, _)| at.min(progress.next));
        // `mio` rounds a timeout up to the next millisecond, as tokio's timer did.
        match poll.poll(&mut events, Some(next.saturating_duration_since(now))) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r?,
        }
        let now = Instant::now();
        for event in events.iter() {
            let id = event.token().0;
            if let Some(Some(p)) = players.get_mut(id) {
                p.receive(now, run, &mut bufs, t);
                woken.push(id);
            }
        }
        while let Some(&(at, id)) = timers.first() {
            if at > now {
                break;
            }
            timers.pop_first();
            if let Some(Some(p)) = players.get_mut(id) {
                p.filed = None;
            }
            t.second_lag_us = t
                .second_lag_us
                .max(now.saturating_duration_since(at).as_micros() as u64);
            woken.push(id);
        }
        woken.sort_unstable();
        woken.dedup();
        for id in woken.drain(..) {
            let Some(slot) = players.get_mut(id) else {
                continue;
            };
            let Some(p) = slot.as_mut() else {
                continue;
            };
            if !p.step(now, run, t, &mut buf) {
                if let Some(at) = p.filed {
                    timers.remove(&(at, id));
                }
                let _ = poll.registry().deregister(&mut p.socket);
                *slot = None;
                live -= 1;
                continue;
            }
            let at = p.deadline(now, run);
            if p.filed != Some(at) {
                if let Some(old) = p.filed.replace(at) {
                    timers.remove(&(old, id));
                }
                timers.insert((at, id));
            }
        }
        if now >= progress.next {
            progress.print(now, run, t);
        }
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "raknet-load: {} connections to {} at {}/s each, {} B {:?} on channel {}, {:?}",
        args.connections,
        args.server,
        args.rate,
        args.size,
        args.reliability,
        args.channel,
        args.duration
    );
    let start = Instant::now();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x10ad, |d| d.as_nanos() as u64)
        << 20;
    let run = Run {
        seed,
        start,
        stop: start + args.duration,
        interval: Duration::from_secs_f64(1.0 / args.rate.max(0.001)),
        args,
    };
    let mut t = Totals::default();
    if let Err(e) = run_players(&run, &mut t) {
        eprintln!("raknet-load: {e}");
        std::process::exit(1);
    }
    report::summary(&run.args, &mut t);
    if t.connected == 0 {
        std::process::exit(1);
    }
}
