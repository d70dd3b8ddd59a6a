//! Congestion control over the simulator: bulk throughput under random loss, fairness and
//! queueing delay at a shared bottleneck, loss at a bottleneck narrower than the offered load,
//! and the tail-loss probe. Everything runs on the virtual clock, so the numbers are exact and
//! the same on every run.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::{Link, LinkConfig};
use raknet_proto::{
    CongestionControl, ConnId, Endpoint, EndpointConfig, Event, Limits, Reliability, SendOptions,
};

const ONE_WAY: Duration = Duration::from_millis(10);
const BASE_RTT: Duration = Duration::from_millis(20);

fn config(congestion: CongestionControl) -> EndpointConfig {
    EndpointConfig {
        congestion,
        limits: Limits {
            max_message_bytes: 32 << 20,
            max_send_queue_bytes: 64 << 20,
            // Bulk flows of many small messages: no per-peer message rate.
            max_messages_per_sec: None,
            ..Limits::default()
        },
        timeout: Duration::from_secs(60),
        ..EndpointConfig::default()
    }
}

/// Seconds of virtual time one `size`-byte reliable_ordered message takes from client to
/// server over a 20 ms RTT link with `loss` each way.
fn bulk_seconds(congestion: CongestionControl, size: usize, loss: f64, in_flight: usize) -> f64 {
    let link = LinkConfig::lossy(loss).with_delay(ONE_WAY);
    bulk_seconds_over(congestion, size, link, in_flight, 7)
}

/// Seconds of virtual time one `size`-byte reliable_ordered message takes from client to
/// server over `link` (both ways), the simulation seeded with `seed`.
fn bulk_seconds_over(
    congestion: CongestionControl,
    size: usize,
    link: LinkConfig,
    in_flight: usize,
    seed: u64,
) -> f64 {
    let mut config = config(congestion);
    config.limits.max_reliable_in_flight = in_flight;
    let mut p = Pair::new(seed, config.clone(), config, link);
    let (c, _) = p.connect();
    let start = p.now;
    let done = p.deliver_one(c, size, Duration::from_secs(120));
    assert!(done, "{congestion:?}: transfer did not complete");
    (p.now - start).as_secs_f64()
}

/// The goals of issue #14 for a 16 MiB message at 20 ms RTT, with the default limits: at
/// least 10 MB/s at 1 % loss and 4 MB/s at 5 % (Reno manages 1.0 and 0.4), and at 0 % as
/// close to 100 MB/s as a sound startup gets.
///
/// At 0 % the path has no bottleneck: the rate is what the startup reaches. Its window doubles
/// per round trip (BBR's 2/ln 2 pacing gain is the smallest that lets the delivery rate double
/// per round although the rate samples lag a round behind; growing faster would overshoot a
/// real bottleneck by more than a BDP per round), so from a 10-datagram window (14.6 kB) the
/// 16 MiB have left only after 10.2 round trips: 204 ms plus 10 ms one way, at best about
/// 79 MB/s. It takes 214 ms (78.6 MB/s). Before, the receiver's 10 ms ACK delay lengthened the
/// first round trips (249 ms with 16 384 frames in flight), and the default 1024 frames in
/// flight capped the path near 72 MB/s (47 MB/s on average).
#[test]
fn bbr_keeps_its_rate_under_random_loss() {
    const SIZE: usize = 16 << 20;
    let default = Limits::default().max_reliable_in_flight;
    for (loss, goal) in [(0.0, 75.0), (0.01, 10.0), (0.05, 4.0)] {
        let secs = bulk_seconds(CongestionControl::Bbr, SIZE, loss, default);
        let mbps = SIZE as f64 / secs / 1e6;
        eprintln!("BBR, {:.0} % loss: {mbps:.1} MB/s", loss * 100.0);
        assert!(mbps >= goal, "{:.0} % loss: {mbps:.1} MB/s", loss * 100.0);
    }
}

/// The most reliable frames a 16 MiB transfer at 20 ms RTT had in flight, and how long it took,
/// with `limits` and `congestion`.
fn peak_frames_in_flight(congestion: CongestionControl, limits: Limits) -> (usize, f64) {
    const SIZE: usize = 16 << 20;
    let config = EndpointConfig {
        limits,
        ..config(congestion)
    };
    let link = LinkConfig::default().with_delay(ONE_WAY);
    let mut p = Pair::new(7, config.clone(), config, link);
    let (c, _) = p.connect();
    let mut data = vec![0u8; SIZE];
    data[0] = 0x86;
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    p.client.send(p.now, c, Bytes::from(data), opts).unwrap();
    let start = p.now;
    let mut peak = 0;
    let done = p.drive_until(Duration::from_secs(60), |p| {
        let stats = p.client.connection_stats(c).unwrap();
        peak = peak.max(stats.reliable_in_flight);
        p.server_events
            .iter()
            .any(|e| matches!(e, Event::Message { payload, .. } if payload.len() == SIZE))
    });
    assert!(done, "{congestion:?}: transfer did not complete");
    (peak, (p.now - start).as_secs_f64())
}

/// A BBR connection keeps as many reliable frames in flight as its window holds (twice its
/// full-size datagrams), beyond `max_reliable_in_flight` but within
/// `max_bbr_reliable_in_flight`; Reno keeps the fixed limit.
#[test]
fn bbr_frames_in_flight_follow_the_window_within_the_limit() {
    let limits = Limits {
        max_message_bytes: 32 << 20,
        max_send_queue_bytes: 64 << 20,
        ..Limits::default()
    };
    let (bbr, bbr_secs) = peak_frames_in_flight(CongestionControl::Bbr, limits.clone());
    let (reno, _) = peak_frames_in_flight(CongestionControl::Reno, limits.clone());
    let capped = Limits {
        max_bbr_reliable_in_flight: 2000,
        ..limits.clone()
    };
    let (low, low_secs) = peak_frames_in_flight(CongestionControl::Bbr, capped);
    eprintln!(
        "peak frames in flight: BBR {bbr} ({bbr_secs:.3} s), capped at 2000: {low} \
         ({low_secs:.3} s), Reno {reno}"
    );
    assert!(bbr > limits.max_reliable_in_flight, "BBR {bbr}");
    assert!(bbr <= limits.max_bbr_reliable_in_flight, "BBR {bbr}");
    assert!(low <= 2000 && low > 1500, "capped {low}");
    assert!(reno <= limits.max_reliable_in_flight, "Reno {reno}");
}

/// A 1 MiB message at 5 % loss: BBR finishes in a fraction of the time Reno needs, since
/// every random loss halves (0.7×) Reno's window.
#[test]
fn random_loss_does_not_read_as_congestion() {
    const SIZE: usize = 1 << 20;
    let default = Limits::default().max_reliable_in_flight;
    let bbr = bulk_seconds(CongestionControl::Bbr, SIZE, 0.05, default);
    let reno = bulk_seconds(CongestionControl::Reno, SIZE, 0.05, default);
    eprintln!("1 MiB at 5 % loss: BBR {bbr:.2} s, Reno {reno:.2} s");
    assert!(bbr * 4.0 < reno, "BBR {bbr:.2} s, Reno {reno:.2} s");
}

/// A Reno window that random loss keeps small is released by ACKs that come every few
/// datagrams, not once per ACK delay: over a short path (1 ms each way, as on a LAN or
/// loopback) 8 MiB at 5 % loss each way took 6.2-8.4 s on these seeds while the receiver held
/// its ACKs for the 10 ms delay once the sender was out of slow start (the delay was most of
/// the round trip), and takes 1.3-2.1 s now: a sender flags every datagram it sends behind a
/// backlog "continuous send", and a receiver whose waiting datagrams are all so flagged
/// acknowledges every fourth.
#[test]
fn a_reno_window_held_small_by_loss_is_not_paced_by_the_ack_delay() {
    const SIZE: usize = 8 << 20;
    let link = LinkConfig::lossy(0.05).with_delay(Duration::from_millis(1));
    let in_flight = Limits::default().max_reliable_in_flight;
    for seed in 1..=6 {
        let s = bulk_seconds_over(CongestionControl::Reno, SIZE, link.clone(), in_flight, seed);
        eprintln!("seed {seed}: 8 MiB at 5 % loss, 2 ms RTT: Reno {s:.2} s");
        assert!(s < 3.5, "seed {seed}: {s:.2} s");
    }
}

/// Bulk transfers of 16 MiB over a 20 ms path with 5 ms of uniform jitter each way (which
/// also reorders datagrams) and no bottleneck, for four simulation seeds: each runs at 3 MB/s
/// or more.
///
/// The delay rule reads a round's smallest RTT sample above `min_rtt` as a queue. With jitter
/// and the peer's batched ACKs, a round's smallest sample is often a few milliseconds above
/// `min_rtt` with no queue at all, and taken round by round that sank the rate to 1.2–2.3 MB/s
/// on these seeds (Reno: about 1.0). BBR without the delay rule reached 4.1–5.9 MB/s (what
/// caps it there is reordering, not the delay rule; other seeds run at 13–50 MB/s). Taking
/// the minimum over the last four cruising rounds gives 3.4–5.6 MB/s.
///
/// What caps these seeds is the receiver's 5 ms NAK delay: the jitter reorders datagrams by up
/// to 10 ms, 20–30 % of a round's datagrams are NAKed and resent although they arrive, and two
/// such rounds in a row trigger the heavy-loss rule (end of startup, estimate reset). Since
/// the receiver acknowledges a sender in slow start every four datagrams, seeds 10 and 11
/// never meet it and finish in startup (57–59 MB/s), seed 13 only at its end (60 MB/s), seed
/// 14 early and then again and again in ProbeBW (20 MB/s).
#[test]
fn bbr_keeps_its_rate_under_delay_jitter() {
    const SIZE: usize = 16 << 20;
    let link = LinkConfig::default()
        .with_delay(ONE_WAY)
        .with_jitter(Duration::from_millis(5));
    for seed in [10, 11, 13, 14] {
        let secs = bulk_seconds_over(CongestionControl::Bbr, SIZE, link.clone(), 16_384, seed);
        let mbps = SIZE as f64 / secs / 1e6;
        eprintln!("BBR, 5 ms jitter, seed {seed}: {mbps:.2} MB/s");
        assert!(mbps >= 3.0, "seed {seed}: {mbps:.2} MB/s");
    }
}

/// A milder, more common case: a 10 MB/s bottleneck (a queue of two BDPs) on a 20 ms path
/// with 2 ms of jitter each way. BBR keeps most of the link: 7.3–8.2 MB/s on these seeds
/// (the round-by-round delay rule 8.5–8.7, BBR without it 9.0, Reno about 4.2). Jitter also
/// inflates the delivery-rate estimate above the link, a queue builds, and the four-round
/// minimum sees it late: the cut that follows is larger, which costs a little here.
#[test]
fn bbr_uses_a_jittery_bottleneck() {
    const SIZE: usize = 16 << 20;
    const RATE: u64 = 10_000_000;
    let link = LinkConfig::default()
        .with_bandwidth(RATE, 400_000)
        .with_delay(ONE_WAY)
        .with_jitter(Duration::from_millis(2));
    for seed in [7, 8, 9, 10] {
        let secs = bulk_seconds_over(CongestionControl::Bbr, SIZE, link.clone(), 16_384, seed);
        let rate = SIZE as f64 / secs;
        eprintln!(
            "BBR, 10 MB/s + 2 ms jitter, seed {seed}: {:.2} MB/s",
            rate / 1e6
        );
        assert!(rate >= 0.65 * RATE as f64, "seed {seed}: {rate:.0} B/s");
    }
}

/// Several clients whose uplinks share one bottleneck to a server; the downlink is
/// uncongested. Each datagram on the shared links carries its client's index first.
struct Net {
    now: Instant,
    start: Instant,
    server: Endpoint,
    server_addr: SocketAddr,
    clients: Vec<Endpoint>,
    client_addrs: Vec<SocketAddr>,
    conns: Vec<Option<ConnId>>,
    up: Link,
    down: Link,
    /// Server connection → client index.
    by_conn: HashMap<ConnId, usize>,
    /// (arrival time, client, bytes) of every message the server got.
    arrivals: Vec<(Duration, usize, usize)>,
    /// When each client starts sending, if it does.
    starts: Vec<Option<Duration>>,
    /// When each client stops topping up its queue, if it does.
    stops: Vec<Option<Duration>>,
    buf: Vec<u8>,
}

const MESSAGE: usize = 1000;

impl Net {
    fn new(congestion: CongestionControl, clients: usize, bottleneck: LinkConfig) -> Self {
        Self::mixed(&vec![congestion; clients], bottleneck)
    }

    /// One client per entry of `controllers`, with that congestion controller.
    fn mixed(controllers: &[CongestionControl], bottleneck: LinkConfig) -> Self {
        Self::seeded(controllers, bottleneck, 100)
    }

    /// [`Net::mixed`] with the clients' engines seeded from `seed` (`seed + i`).
    fn seeded(controllers: &[CongestionControl], bottleneck: LinkConfig, seed: u64) -> Self {
        let clients = controllers.len();
        let start = Instant::now();
        let server_addr: SocketAddr = "127.0.0.1:19132".parse().unwrap();
        let client_addrs: Vec<SocketAddr> = (0..clients)
            .map(|i| format!("127.0.0.{}:{}", i + 2, 40000 + i).parse().unwrap())
            .collect();
        let cfg = config(CongestionControl::default());
        Self {
            now: start,
            start,
            server: Endpoint::new(cfg.clone(), server_addr, start),
            server_addr,
            clients: client_addrs
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let c = EndpointConfig {
                        rng_seed: seed + i as u64,
                        congestion: controllers[i],
                        ..cfg.clone()
                    };
                    Endpoint::new(c, *a, start)
                })
                .collect(),
            client_addrs,
            conns: vec![None; clients],
            up: Link::new(bottleneck, 11),
            down: Link::new(LinkConfig::default().with_delay(ONE_WAY), 12),
            by_conn: HashMap::new(),
            arrivals: Vec::new(),
            starts: vec![None; clients],
            stops: vec![None; clients],
            buf: Vec::with_capacity(2048),
        }
    }

    fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn settle(&mut self) {
        loop {
            let mut moved = false;
            for (i, c) in self.clients.iter_mut().enumerate() {
                while let Some(t) = c.poll_transmit(self.now, &mut self.buf) {
                    let mut d = vec![i as u8];
                    d.extend_from_slice(&self.buf[..t.size]);
                    self.up.send(self.now, d);
                    moved = true;
                }
            }
            while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf) {
                if let Some(i) = self.client_addrs.iter().position(|a| *a == t.destination) {
                    let mut d = vec![i as u8];
                    d.extend_from_slice(&self.buf[..t.size]);
                    self.down.send(self.now, d);
                }
                moved = true;
            }
            while let Some(d) = self.up.poll_recv(self.now) {
                let from = self.client_addrs[usize::from(d[0])];
                self.server
                    .handle(self.now, from, Bytes::copy_from_slice(&d[1..]));
                moved = true;
            }
            while let Some(d) = self.down.poll_recv(self.now) {
                self.clients[usize::from(d[0])].handle(
                    self.now,
                    self.server_addr,
                    Bytes::copy_from_slice(&d[1..]),
                );
                moved = true;
            }
            let at = self.elapsed();
            while let Some(e) = self.server.poll_event() {
                match e {
                    Event::Connected { conn, addr, .. } => {
                        if let Some(i) = self.client_addrs.iter().position(|a| *a == addr) {
                            self.by_conn.insert(conn, i);
                        }
                    }
                    Event::Message { conn, payload, .. } => {
                        if let Some(&i) = self.by_conn.get(&conn) {
                            self.arrivals.push((at, i, payload.len()));
                        }
                    }
                    _ => {}
                }
            }
            for c in &mut self.clients {
                while c.poll_event().is_some() {}
            }
            if !moved {
                return;
            }
        }
    }

    /// Keep every started client's send queue topped up (an application with a backlog).
    fn feed(&mut self) {
        let at = self.elapsed();
        for i in 0..self.clients.len() {
            let (Some(c), Some(start)) = (self.conns[i], self.starts[i]) else {
                continue;
            };
            if at < start || self.stops[i].is_some_and(|stop| at >= stop) {
                continue;
            }
            let queued = self.clients[i]
                .connection_stats(c)
                .map_or(usize::MAX, |s| s.send_queue_bytes);
            if queued < 64 * MESSAGE {
                for _ in 0..64 {
                    let mut m = vec![0u8; MESSAGE];
                    m[0] = 0x86;
                    self.clients[i]
                        .send(
                            self.now,
                            c,
                            Bytes::from(m),
                            SendOptions::new(Reliability::Reliable),
                        )
                        .unwrap();
                }
            }
        }
    }

    fn step(&mut self) {
        self.feed();
        self.settle();
        let next = self
            .clients
            .iter_mut()
            .map(|c| c.poll_timeout())
            .chain([
                self.server.poll_timeout(),
                self.up.poll_timeout(),
                self.down.poll_timeout(),
            ])
            .flatten()
            .min();
        // Also wake for the next client due to start.
        let next_start = self
            .starts
            .iter()
            .flatten()
            .map(|s| self.start + *s)
            .filter(|t| *t > self.now)
            .min();
        let next = [next, next_start].into_iter().flatten().min();
        self.now = next
            .unwrap_or(self.now + Duration::from_millis(1))
            .max(self.now + Duration::from_micros(1));
        self.server.handle_timeout(self.now);
        for c in &mut self.clients {
            c.handle_timeout(self.now);
        }
        self.settle();
    }

    fn connect_all(&mut self) {
        for i in 0..self.clients.len() {
            self.conns[i] = Some(
                self.clients[i]
                    .connect(self.now, self.server_addr)
                    .expect("connect"),
            );
        }
        let deadline = self.now + Duration::from_secs(5);
        while self.by_conn.len() < self.clients.len() {
            assert!(self.now < deadline, "handshakes did not complete");
            self.step();
        }
        // Let the handshakes' last messages be acknowledged.
        let settle = self.now + Duration::from_millis(100);
        while self.now < settle {
            self.step();
        }
    }

    /// Run until `until` (from the start), calling `sample` every `every`.
    fn run(&mut self, until: Duration, every: Duration, mut sample: impl FnMut(&mut Self)) {
        let mut next = self.elapsed();
        while self.elapsed() < until {
            if self.elapsed() >= next {
                sample(self);
                next += every;
            }
            self.step();
        }
    }

    /// Bytes client `i` delivered between `from` and `to` (from the start).
    fn delivered(&self, i: usize, from: Duration, to: Duration) -> usize {
        self.arrivals
            .iter()
            .filter(|(at, c, _)| *c == i && *at >= from && *at < to)
            .map(|(_, _, n)| n)
            .sum()
    }
}

/// 2 MB/s bottleneck, 20 ms base RTT: a BDP of 40 kB.
const BOTTLENECK: u64 = 2_000_000;

fn bottleneck(queue: usize) -> LinkConfig {
    LinkConfig::default()
        .with_bandwidth(BOTTLENECK, queue)
        .with_delay(ONE_WAY)
}

/// Two flows through one bottleneck, the second starting a second after the first, get within
/// 20 % of each other's throughput once both run, and together use the link.
///
/// BBR's bandwidth estimate is a maximum that keeps each flow's probing peaks, so on its own it
/// leaves the flows at 0.72 and 1.24 MB/s of the 2 MB/s (Reno: 0.87 and 1.10). The delay
/// rule bounds each flow's rate so that it keeps about one datagram of its own in the queue
/// (FAST TCP's equilibrium), which evens the rates out: about 0.93 and 0.88 MB/s here.
#[test]
fn two_flows_share_a_bottleneck_fairly() {
    let bdp = (BOTTLENECK as f64 * BASE_RTT.as_secs_f64()) as usize;
    let mut net = Net::new(CongestionControl::Bbr, 2, bottleneck(4 * bdp));
    net.connect_all();
    let t0 = net.elapsed();
    net.starts = vec![Some(t0), Some(t0 + Duration::from_secs(1))];
    let (from, to) = (t0 + Duration::from_secs(4), t0 + Duration::from_secs(12));
    net.run(to, Duration::from_secs(1), |_| {});
    let secs = (to - from).as_secs_f64();
    let a = net.delivered(0, from, to) as f64 / secs;
    let b = net.delivered(1, from, to) as f64 / secs;
    eprintln!("flow rates {a:.0} and {b:.0} B/s over a {BOTTLENECK} B/s bottleneck");
    assert!(a.min(b) >= 0.8 * a.max(b), "unfair: {a:.0} vs {b:.0} B/s");
    assert!(a + b >= 0.85 * BOTTLENECK as f64, "{a:.0} + {b:.0} B/s");
}

/// A bottleneck with a deep queue (ten BDPs): a loss-based controller fills it (its RTT
/// grows to several times the base), BBR keeps it short. The queueing delay, sampled every
/// 5 ms after startup, of two flows over six runs (the clients' engines seeded apart): its
/// p99 stays under one base RTT (RTT under twice the base), its mean under a quarter of one,
/// its largest sample under one and a half.
///
/// Reno fills it (mean 154 ms, the full 200 ms queue). BBR's estimates alone add up to more
/// than the link, and the two flows sit at their window (2 BDP plus the ACK aggregation
/// allowance): mean 49 ms, maximum 58 ms. With the delay rule each flow cuts its rate by
/// `min_rtt / rtt` after a round that kept a queue, and the queue stays at a few datagrams:
/// mean about 3.4 ms; a run's largest sample (a probing round's queue) is 10-25 ms from one
/// seed to the next, which is why one run's maximum is no measure.
#[test]
fn queueing_delay_stays_under_the_base_rtt() {
    let bdp = (BOTTLENECK as f64 * BASE_RTT.as_secs_f64()) as usize;
    let mut delays = Vec::new();
    for seed in [100, 1, 2, 3, 4, 5] {
        let mut net = Net::seeded(
            &[CongestionControl::Bbr, CongestionControl::Bbr],
            bottleneck(10 * bdp),
            seed,
        );
        net.connect_all();
        let t0 = net.elapsed();
        net.starts = vec![Some(t0), Some(t0)];
        let warm = t0 + Duration::from_secs(1);
        net.run(
            t0 + Duration::from_secs(6),
            Duration::from_millis(5),
            |net| {
                if net.elapsed() >= warm {
                    let queued = net.up.queued_bytes(net.now) as f64;
                    delays.push(Duration::from_secs_f64(queued / BOTTLENECK as f64));
                }
            },
        );
        let delivered = net.delivered(0, warm, t0 + Duration::from_secs(6))
            + net.delivered(1, warm, t0 + Duration::from_secs(6));
        assert!(
            delivered as f64 / 5.0 >= 0.85 * BOTTLENECK as f64,
            "seed {seed}: {delivered} bytes in 5 s"
        );
    }
    delays.sort();
    let p99 = delays[delays.len() * 99 / 100];
    let max = *delays.last().unwrap();
    let mean = delays.iter().sum::<Duration>() / delays.len() as u32;
    eprintln!("queueing delay over 6 runs: mean {mean:?}, p99 {p99:?}, max {max:?}");
    assert!(p99 < BASE_RTT, "p99 {p99:?} (mean {mean:?}, max {max:?})");
    // The largest sample of the six runs: over one base RTT already when the ACK went ahead
    // of the data (21.7 ms; 25.3 now).
    assert!(max < BASE_RTT * 3 / 2, "max {max:?} (p99 {p99:?})");
    assert!(mean < BASE_RTT / 4, "mean {mean:?}");
}

/// A bottleneck narrower than what the sender could offer, with a shallow queue (half a
/// BDP): the controller settles at the bottleneck rate and the queue drops stay a small
/// share of what was sent.
#[test]
fn loss_stays_bounded_at_a_narrow_bottleneck() {
    let bdp = (BOTTLENECK as f64 * BASE_RTT.as_secs_f64()) as usize;
    let mut net = Net::new(CongestionControl::Bbr, 1, bottleneck(bdp / 2));
    net.connect_all();
    let t0 = net.elapsed();
    net.starts = vec![Some(t0)];
    let to = t0 + Duration::from_secs(5);
    net.run(to, Duration::from_secs(1), |_| {});
    let stats = net.up.stats();
    let dropped = stats.dropped_queue as f64 / stats.sent as f64;
    let rate = net.delivered(0, t0 + Duration::from_secs(1), to) as f64 / 4.0;
    eprintln!(
        "dropped {} of {} datagrams ({:.2} %), {rate:.0} B/s",
        stats.dropped_queue,
        stats.sent,
        dropped * 100.0
    );
    assert!(dropped < 0.03, "{:.2} % dropped", dropped * 100.0);
    assert!(rate >= 0.85 * BOTTLENECK as f64, "{rate:.0} B/s");
}

/// The last datagram of a burst is lost: nothing after it can reveal the gap, so without a
/// probe it waits for the retransmission timeout. The tail-loss probe resends it after about
/// two RTTs.
#[test]
fn a_lost_last_datagram_is_recovered_by_the_tail_loss_probe() {
    for congestion in [CongestionControl::Bbr, CongestionControl::Reno] {
        let link = LinkConfig::default().with_delay(ONE_WAY);
        let mut p = Pair::new(3, config(congestion), config(congestion), link);
        let (c, _) = p.connect();
        // Some traffic, so that the RTT estimate is settled.
        for i in 0..50u8 {
            p.client
                .send(
                    p.now,
                    c,
                    Bytes::from(vec![0x86, i]),
                    SendOptions::new(Reliability::ReliableOrdered),
                )
                .unwrap();
            p.drive_until(Duration::from_millis(30), |_| false);
        }
        p.server_events.clear();
        let before = p.client.connection_stats(c).unwrap();
        // The only datagram of the message is lost on the way (with anything else the client
        // sends at that moment).
        p.client
            .send(
                p.now,
                c,
                Bytes::from_static(&[0x86, 0xff]),
                SendOptions::new(Reliability::ReliableOrdered),
            )
            .unwrap();
        let sent = p.now;
        let mut buf = Vec::new();
        let mut dropped = 0;
        while p.client.poll_transmit(p.now, &mut buf).is_some() {
            dropped += 1;
        }
        assert!(dropped >= 1, "{congestion:?}");
        let arrived = p.drive_until(Duration::from_secs(2), |p| {
            p.server_events
                .iter()
                .any(|e| matches!(e, Event::Message { payload, .. } if payload[..] == [0x86, 0xff]))
        });
        assert!(arrived);
        let took = p.now - sent;
        let after = p.client.connection_stats(c).unwrap();
        eprintln!(
            "{congestion:?}: recovered in {took:?} (srtt {:?}, RTO {:?})",
            before.srtt, before.rto
        );
        assert_eq!(
            after.tail_probes - before.tail_probes,
            1,
            "{congestion:?}: {took:?}"
        );
        // About two round trips (the probe timeout is SRTT + 4 RTTVAR + 20 ms of ACK delay,
        // then a one-way trip), and at least a round trip before the RTO alone would have
        // recovered it (RTO + one way).
        assert!(
            took <= before.srtt * 2 + ONE_WAY * 2,
            "{congestion:?}: {took:?}"
        );
        assert!(
            took + BASE_RTT <= before.rto + ONE_WAY,
            "{congestion:?}: {took:?}"
        );
    }
}

/// The queueing delay at the shared bottleneck now.
fn queueing_delay(net: &Net) -> Duration {
    Duration::from_secs_f64(net.up.queued_bytes(net.now) as f64 / BOTTLENECK as f64)
}

/// One BBR flow and one Reno flow through the 2 MB/s bottleneck, the second starting a second
/// after the first, with a drop-tail queue of one and of four BDPs: over seconds 4 to 20 each
/// gets at least a third of the link, together at least 85 %. Then the Reno flow stops, and
/// once a ProbeRTT found the queue gone (within about 10 s) BBR keeps it short again: under a
/// base RTT over seconds 34 to 38.
///
/// Without a reaction to it, the delay rule yields to a Reno flow: Reno fills the queue until
/// it overflows, the delay rule reads that as congestion and cuts, and BBR (first) got 0.26
/// MB/s of the 2 with a 1-BDP queue (Reno 1.71) and 0.07 with 4 BDPs (Reno first: 0.13).
/// BBRv1 without the delay rule takes the other extreme at 1 BDP (1.88, Reno 0.08) and
/// 0.63 / 1.35 at 4 BDPs. With the competing mode (see `Bbr`), BBR first: 0.93 / 1.04 MB/s
/// (1 BDP), 0.88 / 1.10 (4 BDPs); Reno first: 1.09 / 0.88 and 1.15 / 0.83 (Reno's rate
/// first); mean queueing delay 12 and 60 ms. Over six seeds of the simulation (which move
/// BBR's probing phases) BBR gets 0.77–0.93 MB/s, about what a second Reno flow gets (0.96
/// / 1.02 at 1 BDP, 0.93 / 1.05 at 4), and alone afterwards keeps a queue of 1.3–6.7 ms on
/// average, at most 14 ms. Not asserted: a 10-BDP queue (200 ms), where within these 16 s a
/// flow that joins a Reno flow gets little whatever it runs (Reno after Reno 0.01 MB/s, BBR
/// after Reno 0.03) and BBR first keeps 0.34–0.67 MB/s.
#[test]
fn bbr_and_reno_share_a_bottleneck() {
    use CongestionControl::{Bbr, Reno};
    let bdp = (BOTTLENECK as f64 * BASE_RTT.as_secs_f64()) as usize;
    for queue in [bdp, 4 * bdp] {
        for controllers in [[Bbr, Reno], [Reno, Bbr]] {
            let mut net = Net::mixed(&controllers, bottleneck(queue));
            net.connect_all();
            let t0 = net.elapsed();
            net.starts = vec![Some(t0), Some(t0 + Duration::from_secs(1))];
            let reno = controllers.iter().position(|c| *c == Reno).unwrap();
            net.stops[reno] = Some(t0 + Duration::from_secs(20));
            let (from, to) = (t0 + Duration::from_secs(4), t0 + Duration::from_secs(20));
            let (mut shared, mut alone) = (Vec::new(), Vec::new());
            let calm = t0 + Duration::from_secs(34);
            net.run(
                calm + Duration::from_secs(4),
                Duration::from_millis(5),
                |net| {
                    let at = net.elapsed();
                    if at >= from && at < to {
                        shared.push(queueing_delay(net));
                    } else if at >= calm {
                        alone.push(queueing_delay(net));
                    }
                },
            );
            let secs = (to - from).as_secs_f64();
            let rate = |i| net.delivered(i, from, to) as f64 / secs;
            let (a, b) = (rate(0), rate(1));
            let mean = |d: &[Duration]| d.iter().sum::<Duration>() / d.len().max(1) as u32;
            let alone_max = alone.iter().max().copied().unwrap_or_default();
            eprintln!(
                "{controllers:?}, {} BDP queue: {a:.0} and {b:.0} B/s, queueing delay {:?}; \
                 BBR alone: mean {:?}, max {alone_max:?}",
                queue / bdp,
                mean(&shared),
                mean(&alone)
            );
            let link = BOTTLENECK as f64;
            assert!(
                a.min(b) >= link / 3.0,
                "{controllers:?}: {a:.0} and {b:.0} B/s"
            );
            assert!(a + b >= 0.85 * link, "{controllers:?}: {a:.0} + {b:.0} B/s");
            assert!(
                alone_max < BASE_RTT,
                "{controllers:?}: BBR alone, {alone_max:?}"
            );
        }
    }
}
