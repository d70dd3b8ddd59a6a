//! `raknet-load`: open N RakNet connections to any server, send at a rate, report.
//!
//! Every simulated player has its own UDP socket and client engine; all of them run on one
//! thread, in one event loop (one `epoll_wait` for every socket, one timer heap). Each message carries its send time, so when the server echoes (as
//! `make server` does) the round trip is measured. Progress is printed every second and a
//! summary at the end.
//!
//! ```text
//! raknet-load [--host 127.0.0.1] [--port 19132] [--connections 100] [--rate 20] [--size 64]
//!             [--reliability reliable_ordered] [--channel 0] [--duration 10] [--protocol 11]
//!             [--verify] [--drain 15] [--warmup 0]
//! ```
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

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
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
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--verify" {
            a.verify = true;
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

#[derive(Default)]
struct Totals {
    connected: usize,
    failed: usize,
    disconnected: usize,
    sent: u64,
    received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    rtts_us: Vec<u32>,
    /// The round trips of the current second, for the progress line's p99.
    second_rtts_us: Vec<u32>,
    failures: Vec<String>,
    /// `--verify`: connections that ended before they closed themselves.
    dropped: usize,
    /// Why the first few of them ended.
    drop_reasons: Vec<String>,
    reliable: Check,
    sequenced: Check,
}

/// What `--verify` found for one reliability, summed over the connections.
#[derive(Default)]
struct Check {
    sent: u64,
    /// Distinct messages echoed.
    echoed: u64,
    lost: u64,
    duplicated: u64,
    /// Echoes that did not come in sending order (reliable: not the next expected number;
    /// sequenced: a number not above the last one echoed).
    out_of_order: u64,
    rtts_us: Vec<u32>,
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

/// One simulated player: its socket, its engine and where its run stands.
struct Player {
    id: usize,
    socket: UdpSocket,
    ep: Endpoint,
    conn: ConnId,
    /// When it sends next (spread over one interval once connected).
    next_send: Option<Instant>,
    seq: u64,
    connected: bool,
    ever_connected: bool,
    /// `--verify`: numbers sent per tag, the reliable echoes, the last sequenced echo.
    sent: [u64; 2],
    reliable: ReliableEchoes,
    last_sequenced: Option<u64>,
    /// A verifying player stays (without sending) until its reliable echoes are all back,
    /// for at most `--drain`; it then closes, and leaves a second later.
    close_by: Instant,
    leave_at: Instant,
    done: bool,
    /// The deadline its entry in the timer heap has (`None`: none).
    armed: Option<Instant>,
}

/// What every player shares: the options, the counters, the buffers.
struct Shared {
    args: Args,
    totals: Totals,
    start: Instant,
    stop: Instant,
    interval: Duration,
    recv: RecvBufs,
    buf: Vec<u8>,
}

impl Player {
    fn new(sh: &mut Shared, id: usize, poll: &Poll) -> Option<Self> {
        let bind: SocketAddr = if sh.args.server.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let mut socket = UdpSocket::bind(bind).ok()?;
        poll.registry()
            .register(&mut socket, Token(id), Interest::READABLE)
            .ok()?;
        let local = socket.local_addr().unwrap_or(sh.args.server);
        let config = EndpointConfig {
            rng_seed: id as u64 ^ 0x10ad,
            protocol_versions: vec![sh.args.protocol],
            accept_incoming: false,
            // The load tester chose its server: no limit on the server's message rate.
            limits: Limits {
                max_messages_per_sec: None,
                ..Limits::default()
            },
            ..EndpointConfig::default()
        };
        let now = Instant::now();
        let mut ep = Endpoint::new(config, local, now);
        let conn = ep.connect(now, sh.args.server).ok()?;
        let close_by = if sh.args.verify {
            sh.stop + sh.args.drain
        } else {
            sh.stop
        };
        Some(Self {
            id,
            socket,
            ep,
            conn,
            next_send: None,
            seq: 0,
            connected: false,
            ever_connected: false,
            sent: [0; 2],
            reliable: ReliableEchoes::default(),
            last_sequenced: None,
            close_by,
            leave_at: close_by + Duration::from_secs(1),
            done: false,
            armed: None,
        })
    }

    /// When the player must be looked at again without a datagram.
    fn deadline(&mut self, now: Instant, stop: Instant) -> Instant {
        [
            self.ep.poll_timeout(),
            self.next_send.filter(|_| now < stop),
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

    /// Hand the engine what waits on the socket.
    fn receive(&mut self, sh: &mut Shared) {
        let ep = &mut self.ep;
        recv_all(&self.socket, &mut sh.recv, |data, from| {
            ep.handle(Instant::now(), from, Bytes::copy_from_slice(data));
        });
    }

    /// Timers, the send that is due, events, datagrams, and the end of the run.
    fn service(&mut self, sh: &mut Shared, now: Instant) {
        if now >= self.leave_at {
            self.done = true;
            return;
        }
        let args = &sh.args;
        self.ep.handle_timeout(now);
        if self.connected && now < sh.stop && self.next_send.is_some_and(|t| now >= t) {
            let start = sh.start;
            let payload = |n: u64, reliability| {
                let mut payload = Vec::with_capacity(args.size);
                payload.push(0x86);
                payload.extend_from_slice(&(now - start).as_micros().to_be_bytes()[8..]);
                payload.extend_from_slice(&n.to_be_bytes());
                payload.push(tag(reliability));
                payload.push(args.channel);
                payload.resize(args.size, 0);
                Bytes::from(payload)
            };
            let opts = SendOptions {
                reliability: args.reliability,
                channel: args.channel,
                priority: Priority::High,
            };
            let t = &mut sh.totals;
            if args.verify {
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
                    let message = payload(self.sent[i], reliability);
                    if self.ep.send(now, self.conn, message, opts).is_ok() {
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
            } else {
                let message = payload(self.seq, args.reliability);
                if self.ep.send(now, self.conn, message, opts).is_ok() {
                    t.sent += 1;
                    t.bytes_sent += args.size as u64;
                }
                self.seq += 1;
            }
            self.next_send = self.next_send.map(|t| t + sh.interval);
        }
        while let Some(e) = self.ep.poll_event() {
            let t = &mut sh.totals;
            match e {
                Event::Connected { .. } => {
                    self.connected = true;
                    self.ever_connected = true;
                    t.connected += 1;
                    let spread = sh.interval.mul_f64((self.id % 97) as f64 / 97.0);
                    self.next_send = Some(now + spread);
                }
                Event::Message { payload, .. } => {
                    t.received += 1;
                    t.bytes_received += payload.len() as u64;
                    if payload.len() >= 9 && payload[0] == 0x86 {
                        let sent_us =
                            u64::from_be_bytes(payload[1..9].try_into().unwrap_or([0; 8]));
                        let now_us = (now - sh.start).as_micros() as u64;
                        let rtt = now_us - sent_us.min(now_us);
                        let rtt = rtt.min(u64::from(u32::MAX)) as u32;
                        if sent_us >= args.warmup.as_micros() as u64 {
                            t.rtts_us.push(rtt);
                        }
                        t.second_rtts_us.push(rtt);
                        if args.verify && payload.len() >= HEADER {
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
                }
                Event::Disconnected { reason, .. } => {
                    if args.verify && self.connected {
                        t.reliable.lost += self.sent[0] - self.reliable.count;
                        t.dropped += 1;
                        if t.drop_reasons.len() < 5 {
                            t.drop_reasons.push(format!(
                                "{reason} after {} reliable echoes",
                                self.reliable.count
                            ));
                        }
                    }
                    if self.ever_connected {
                        t.disconnected += 1;
                    } else {
                        t.failed += 1;
                        if t.failures.len() < 5 {
                            t.failures.push(reason.to_string());
                        }
                    }
                    self.done = true;
                    return;
                }
                _ => {}
            }
        }
        while let Some(tx) = self.ep.poll_transmit(now, &mut sh.buf) {
            // A full socket buffer loses the datagram, as the network would.
            let _ = self.socket.send_to(&sh.buf[..tx.size], tx.destination);
        }
        let all_back = self.reliable.count == self.sent[0];
        if self.connected && now >= sh.stop && (!args.verify || all_back || now >= self.close_by) {
            if args.verify {
                sh.totals.reliable.lost += self.sent[0] - self.reliable.count;
            }
            self.ep.close(now, self.conn);
            self.connected = false;
            self.next_send = None;
            self.leave_at = self.leave_at.min(now + Duration::from_secs(1));
            while let Some(tx) = self.ep.poll_transmit(now, &mut sh.buf) {
                let _ = self.socket.send_to(&sh.buf[..tx.size], tx.destination);
            }
        }
    }
}

/// Look at `p` now (its socket readable or its deadline passed), then re-arm its timer.
fn run_player(
    p: &mut Player,
    sh: &mut Shared,
    timers: &mut BinaryHeap<Reverse<(Instant, usize)>>,
    readable: bool,
) {
    if p.done {
        return;
    }
    if readable {
        p.receive(sh);
    }
    let now = Instant::now();
    p.service(sh, now);
    if p.done {
        p.armed = None;
        return;
    }
    let deadline = p.deadline(now, sh.stop);
    if p.armed != Some(deadline) {
        p.armed = Some(deadline);
        timers.push(Reverse((deadline, p.id)));
    }
}

/// Room for the datagrams one receive call takes.
struct RecvBufs(Vec<Vec<u8>>);

impl Default for RecvBufs {
    fn default() -> Self {
        Self(vec![vec![0; 2048]; RECV_BATCH])
    }
}

/// Datagrams one receive call takes at most.
const RECV_BATCH: usize = 8;

/// Hand `f` every datagram waiting on `socket` (registered edge-triggered). On Linux one
/// `recvmmsg` per call: a call that comes back short emptied the socket, and a datagram
/// arriving later raises a new edge, so no second call is made to find nothing. Load-tester
/// CPU is what the server cannot use on a small machine.
#[cfg(target_os = "linux")]
fn recv_all(socket: &UdpSocket, bufs: &mut RecvBufs, mut f: impl FnMut(&[u8], SocketAddr)) {
    use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;
    let room = bufs.0.len();
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(room, None);
    loop {
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
            .0
            .iter_mut()
            .map(|b| [IoSliceMut::new(b.as_mut_slice())])
            .collect();
        let Ok(msgs) = recvmmsg(
            socket.as_raw_fd(),
            &mut headers,
            iovs.iter_mut(),
            MsgFlags::empty(),
            None,
        ) else {
            // WouldBlock (nothing there), or an ICMP error surfacing: either way, done.
            return;
        };
        let mut n = 0;
        for msg in msgs {
            n += 1;
            let from = msg.address.as_ref().and_then(|a| {
                match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
                    (Some(v4), _) => Some(SocketAddr::V4((*v4).into())),
                    (None, Some(v6)) => Some(SocketAddr::V6((*v6).into())),
                    (None, None) => None,
                }
            });
            if let (Some(from), Some(data)) = (from, msg.iovs().next()) {
                f(data, from);
            }
        }
        if n < room {
            return;
        }
    }
}

/// Elsewhere: one call per datagram, until the socket says it is empty.
#[cfg(not(target_os = "linux"))]
fn recv_all(socket: &UdpSocket, bufs: &mut RecvBufs, mut f: impl FnMut(&[u8], SocketAddr)) {
    let Some(buf) = bufs.0.first_mut() else {
        return;
    };
    while let Ok((n, from)) = socket.recv_from(buf) {
        f(buf.get(..n).unwrap_or(&[]), from);
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// The `--verify` lines of the summary.
fn verify_summary(t: &mut Totals) {
    let r = &mut t.reliable;
    r.rtts_us.sort_unstable();
    println!(
        "  reliable      sent {}, echoed {}, lost {}, duplicated {}, out of order {}, p99 {:.3} ms",
        r.sent,
        r.echoed,
        r.lost,
        r.duplicated,
        r.out_of_order,
        percentile(&r.rtts_us, 0.99)
    );
    let q = &mut t.sequenced;
    q.rtts_us.sort_unstable();
    q.lost = q.sent.saturating_sub(q.echoed);
    println!(
        "  sequenced     sent {}, echoed {}, lost {} ({:.2} %), out of sequence {}, p99 {:.3} ms",
        q.sent,
        q.echoed,
        q.lost,
        q.lost as f64 * 100.0 / q.sent.max(1) as f64,
        q.out_of_order,
        percentile(&q.rtts_us, 0.99)
    );
    if t.drop_reasons.is_empty() {
        println!("  dropped       {} connections ended early", t.dropped);
    } else {
        println!(
            "  dropped       {} connections ended early ({})",
            t.dropped,
            t.drop_reasons.join("; ")
        );
    }
    let ok = t.failed == 0
        && t.dropped == 0
        && r.lost == 0
        && r.duplicated == 0
        && r.out_of_order == 0
        && r.echoed == r.sent
        && q.out_of_order == 0;
    println!("  verify        {}", if ok { "ok" } else { "FAILED" });
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(2);
        }
    };
    let mut poll = match Poll::new() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(1);
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
    let mut sh = Shared {
        interval: Duration::from_secs_f64(1.0 / args.rate.max(0.001)),
        stop: start + args.duration,
        args,
        totals: Totals::default(),
        start,
        recv: RecvBufs::default(),
        buf: Vec::with_capacity(2048),
    };
    // Every player on this one thread: one `epoll_wait` for all their sockets, one heap for
    // all their timers (a task and a timer per player cost twice the CPU).
    // A player whose socket or connect failed is `None` (counted as failed).
    let mut players: Vec<Option<Player>> = Vec::with_capacity(sh.args.connections);
    let mut timers = BinaryHeap::new();
    for id in 0..sh.args.connections {
        let player = Player::new(&mut sh, id, &poll);
        if player.is_none() {
            sh.totals.failed += 1;
        }
        players.push(player);
    }
    for p in players.iter_mut().flatten() {
        run_player(p, &mut sh, &mut timers, false);
    }
    let mut events = Events::with_capacity(1024);
    let mut last = (0u64, 0u64);
    let mut next_progress = start + Duration::from_secs(1);
    let mut lag_us = 0u64;
    while players.iter().flatten().any(|p| !p.done) {
        let now = Instant::now();
        let next = timers
            .peek()
            .map_or(next_progress, |Reverse((t, _))| (*t).min(next_progress));
        let wait = next.saturating_duration_since(now);
        if poll.poll(&mut events, Some(wait)).is_err() {
            continue;
        }
        for event in &events {
            if let Some(Some(p)) = players.get_mut(event.token().0) {
                run_player(p, &mut sh, &mut timers, true);
            }
        }
        let now = Instant::now();
        while let Some(&Reverse((deadline, id))) = timers.peek() {
            if deadline > now {
                break;
            }
            timers.pop();
            let Some(Some(p)) = players.get_mut(id) else {
                continue;
            };
            // An entry the player re-armed since is stale.
            if p.armed != Some(deadline) {
                continue;
            }
            lag_us = lag_us.max(now.saturating_duration_since(deadline).as_micros() as u64);
            p.armed = None;
            run_player(p, &mut sh, &mut timers, false);
        }
        if now >= next_progress {
            next_progress += Duration::from_secs(1);
            let t = &mut sh.totals;
            let mut second = std::mem::take(&mut t.second_rtts_us);
            second.sort_unstable();
            let p99 = if second.is_empty() {
                String::new()
            } else {
                format!(" p99 {:.1} ms", percentile(&second, 0.99))
            };
            let lag = std::mem::take(&mut lag_us) as f64 / 1000.0;
            println!(
                "  {:>5.1}s connected {}/{} failed {} | out {}/s in {}/s{p99}, own timers late by up to {lag:.1} ms",
                start.elapsed().as_secs_f64(),
                t.connected - t.disconnected.min(t.connected),
                sh.args.connections,
                t.failed,
                t.sent - last.0,
                t.received - last.1
            );
            last = (t.sent, t.received);
        }
    }
    let args = &sh.args;
    let mut t = std::mem::take(&mut sh.totals);
    t.rtts_us.sort_unstable();
    let secs = args.duration.as_secs_f64();
    println!("summary:");
    println!(
        "  connections   {} ok, {} failed{}",
        t.connected,
        t.failed,
        if t.failures.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.failures.join("; "))
        }
    );
    println!(
        "  sent          {} messages ({:.0}/s, {:.2} MB/s)",
        t.sent,
        t.sent as f64 / secs,
        t.bytes_sent as f64 / secs / 1e6
    );
    println!(
        "  received      {} messages ({:.0}/s, {:.2} MB/s)",
        t.received,
        t.received as f64 / secs,
        t.bytes_received as f64 / secs / 1e6
    );
    if !t.rtts_us.is_empty() {
        println!(
            "  round trip    p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} echoes{})",
            percentile(&t.rtts_us, 0.5),
            percentile(&t.rtts_us, 0.99),
            percentile(&t.rtts_us, 1.0),
            t.rtts_us.len(),
            if args.warmup.is_zero() {
                String::new()
            } else {
                format!(" sent after a {:?} warm-up", args.warmup)
            }
        );
        let lost = t.sent.saturating_sub(t.received);
        println!(
            "  unanswered    {lost} ({:.2} %)",
            lost as f64 * 100.0 / t.sent.max(1) as f64
        );
    }
    if args.verify {
        verify_summary(&mut t);
    }
    if t.connected == 0 {
        std::process::exit(1);
    }
}
