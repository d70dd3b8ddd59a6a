//! `raknet-load`: open N RakNet connections to any server, send at a rate, report.
//!
//! Every simulated player has its own UDP socket and client engine; all of them run as tasks
//! on one thread. Each message carries its send time, so when the server echoes (as
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

use std::cell::RefCell;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{Endpoint, EndpointConfig, Event, Limits, Priority, Reliability, SendOptions};
use tokio::net::UdpSocket;

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
    /// The current second's longest lateness of a player's timer: how long the load tester
    /// itself kept a send or a timer waiting (a round trip includes it).
    second_lag_us: u64,
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

async fn player(args: Rc<Args>, totals: Rc<RefCell<Totals>>, start: Instant, id: usize) {
    let bind = if args.server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let Ok(socket) = UdpSocket::bind(bind).await else {
        totals.borrow_mut().failed += 1;
        return;
    };
    let local = socket.local_addr().unwrap_or(args.server);
    let config = EndpointConfig {
        rng_seed: id as u64 ^ 0x10ad,
        protocol_versions: vec![args.protocol],
        accept_incoming: false,
        // The load tester chose its server: no limit on the server's message rate.
        limits: Limits {
            max_messages_per_sec: None,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let mut ep = Endpoint::new(config, local, Instant::now());
    let Ok(conn) = ep.connect(Instant::now(), args.server) else {
        totals.borrow_mut().failed += 1;
        return;
    };
    let interval = Duration::from_secs_f64(1.0 / args.rate.max(0.001));
    // Spread the players' send times over one interval.
    let mut next_send: Option<Instant> = None;
    let stop = start + args.duration;
    let (mut recv, mut buf) = (RecvBufs::default(), Vec::with_capacity(2048));
    let opts = SendOptions {
        reliability: args.reliability,
        channel: args.channel,
        priority: Priority::High,
    };
    let mut seq = 0u64;
    let mut connected = false;
    let mut ever_connected = false;
    // `--verify`: numbers sent per tag, the reliable echoes, the last sequenced echo.
    let mut sent = [0u64; 2];
    let mut reliable = ReliableEchoes::default();
    let mut last_sequenced: Option<u64> = None;
    // A verifying player stays (without sending) until its reliable echoes are all back, for
    // at most `--drain`; it then closes, and leaves a second later.
    let close_by = if args.verify { stop + args.drain } else { stop };
    let mut leave_at = close_by + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        if now >= leave_at {
            break;
        }
        let wake = [
            ep.poll_timeout(),
            next_send.filter(|_| now < stop),
            Some(if connected && now < close_by {
                close_by
            } else {
                leave_at
            }),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now);
        tokio::select! {
            r = socket.readable() => {
                if r.is_ok() {
                    recv_all(&socket, &mut recv, |data, from| {
                        ep.handle(Instant::now(), from, Bytes::copy_from_slice(data));
                    });
                }
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {
                let lag = Instant::now().saturating_duration_since(wake).as_micros() as u64;
                let mut t = totals.borrow_mut();
                t.second_lag_us = t.second_lag_us.max(lag);
            }
        }
        let now = Instant::now();
        ep.handle_timeout(now);
        if connected && now < stop && next_send.is_some_and(|t| now >= t) {
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
                    if ep
                        .send(now, conn, payload(sent[i], reliability), opts)
                        .is_ok()
                    {
                        sent[i] += 1;
                        let mut t = totals.borrow_mut();
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
                if ep
                    .send(now, conn, payload(seq, args.reliability), opts)
                    .is_ok()
                {
                    let mut t = totals.borrow_mut();
                    t.sent += 1;
                    t.bytes_sent += args.size as u64;
                }
                seq += 1;
            }
            next_send = next_send.map(|t| t + interval);
        }
        while let Some(e) = ep.poll_event() {
            let mut t = totals.borrow_mut();
            match e {
                Event::Connected { .. } => {
                    connected = true;
                    ever_connected = true;
                    t.connected += 1;
                    next_send = Some(now + interval.mul_f64((id % 97) as f64 / 97.0));
                }
                Event::Message { payload, .. } => {
                    t.received += 1;
                    t.bytes_received += payload.len() as u64;
                    if payload.len() >= 9 && payload[0] == 0x86 {
                        let sent_us =
                            u64::from_be_bytes(payload[1..9].try_into().unwrap_or([0; 8]));
                        let rtt = (now - start).as_micros() as u64
                            - sent_us.min((now - start).as_micros() as u64);
                        let rtt = rtt.min(u64::from(u32::MAX)) as u32;
                        if sent_us >= args.warmup.as_micros() as u64 {
                            t.rtts_us.push(rtt);
                        }
                        t.second_rtts_us.push(rtt);
                        if args.verify && payload.len() >= HEADER {
                            let n = u64::from_be_bytes(payload[9..17].try_into().unwrap_or([0; 8]));
                            match payload[17] {
                                TAG_RELIABLE_ORDERED => {
                                    reliable.record(n, &mut t.reliable);
                                    t.reliable.rtts_us.push(rtt);
                                }
                                TAG_UNRELIABLE_SEQUENCED => {
                                    if last_sequenced.is_some_and(|last| n <= last) {
                                        t.sequenced.out_of_order += 1;
                                    } else {
                                        last_sequenced = Some(n);
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
                    if args.verify && connected {
                        t.reliable.lost += sent[0] - reliable.count;
                        t.dropped += 1;
                        if t.drop_reasons.len() < 5 {
                            t.drop_reasons
                                .push(format!("{reason} after {} reliable echoes", reliable.count));
                        }
                    }
                    if ever_connected {
                        t.disconnected += 1;
                    } else {
                        t.failed += 1;
                        if t.failures.len() < 5 {
                            t.failures.push(reason.to_string());
                        }
                    }
                    return;
                }
                _ => {}
            }
        }
        while let Some(tx) = ep.poll_transmit(now, &mut buf) {
            let _ = socket.send_to(&buf[..tx.size], tx.destination).await;
        }
        let all_back = reliable.count == sent[0];
        if connected && now >= stop && (!args.verify || all_back || now >= close_by) {
            if args.verify {
                totals.borrow_mut().reliable.lost += sent[0] - reliable.count;
            }
            ep.close(now, conn);
            connected = false;
            next_send = None;
            leave_at = leave_at.min(now + Duration::from_secs(1));
        }
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

/// Hand `f` every datagram waiting on `socket`. On Linux one `recvmmsg` per wake-up: a call
/// that comes back short emptied the socket, and tokio's readiness is cleared then as a
/// `WouldBlock` would clear it (a datagram arriving later raises a new edge-triggered event),
/// without the second call that would find nothing. Load-tester CPU is what the server
/// cannot use on a small machine.
#[cfg(target_os = "linux")]
fn recv_all(socket: &UdpSocket, bufs: &mut RecvBufs, mut f: impl FnMut(&[u8], SocketAddr)) {
    use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;
    let room = bufs.0.len();
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(room, None);
    loop {
        let mut drained = false;
        let read = socket.try_io(tokio::io::Interest::READABLE, || {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
                .0
                .iter_mut()
                .map(|b| [IoSliceMut::new(b.as_mut_slice())])
                .collect();
            let msgs = recvmmsg(
                socket.as_raw_fd(),
                &mut headers,
                iovs.iter_mut(),
                MsgFlags::empty(),
                None,
            )?;
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
                drained = true;
                return Err(ErrorKind::WouldBlock.into());
            }
            Ok(())
        });
        if read.is_err() || drained {
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
    while let Ok((n, from)) = socket.try_recv_from(buf) {
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
        Ok(a) => Rc::new(a),
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(1);
        }
    };
    let totals = Rc::new(RefCell::new(Totals::default()));
    let start = Instant::now();
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
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let mut handles = Vec::new();
        for id in 0..args.connections {
            handles.push(tokio::task::spawn_local(player(
                args.clone(),
                totals.clone(),
                start,
                id,
            )));
        }
        let progress = {
            let totals = totals.clone();
            let args = args.clone();
            tokio::task::spawn_local(async move {
                let mut last = (0u64, 0u64);
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let mut t = totals.borrow_mut();
                    let mut second = std::mem::take(&mut t.second_rtts_us);
                    second.sort_unstable();
                    let p99 = if second.is_empty() {
                        String::new()
                    } else {
                        format!(" p99 {:.1} ms", percentile(&second, 0.99))
                    };
                    let lag = std::mem::take(&mut t.second_lag_us) as f64 / 1000.0;
                    println!(
                        "  {:>5.1}s connected {}/{} failed {} | out {}/s in {}/s{p99}, own timers late by up to {lag:.1} ms",
                        start.elapsed().as_secs_f64(),
                        t.connected - t.disconnected.min(t.connected),
                        args.connections,
                        t.failed,
                        t.sent - last.0,
                        t.received - last.1
                    );
                    last = (t.sent, t.received);
                }
            })
        };
        for h in handles {
            let _ = h.await;
        }
        progress.abort();
    });
    let mut t = totals.take();
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
