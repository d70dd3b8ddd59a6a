//! Engine benchmarks over the simulator (in-process, virtual clock for the network, wall
//! clock for CPU cost). Not a test: it reports numbers and asserts only that the transfer
//! completed.
//!
//! 1. 64-byte RELIABLE_ORDERED messages through two engines on a perfect link:
//!    messages/s and ns of CPU per message (send + receive + ACK processing, both sides).
//! 2. One 16 MiB RELIABLE_ORDERED message over a 10 ms one-way link at 0 %, 1 % and 5 % loss:
//!    completion time and MB/s in virtual time (protocol efficiency), and the CPU it took; with
//!    each congestion controller (BBR, and Reno, the default), then with BBR and room for more
//!    reliable frames in flight. `engine bulk` runs only these. Each is also given as a fraction
//!    of its slow-start bound: the time an ideal sender takes, starting from the controller's
//!    initial window and doubling it every round trip without loss (the transfer's first
//!    rounds are what a 16 MiB message at 20 ms RTT mostly is).
//! 3. 256 MiB as 1 MiB RELIABLE_ORDERED messages with BBR, same link: the steady state, where
//!    slow start no longer dominates (MB/s over the whole transfer and over its second half).
//!    `ENGINE_DEBUG=1` prints both sides' counters at the end of each.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_netsim::{Link, LinkConfig};
use raknet_proto::{
    Bbr, CongestionControl, ConnId, Endpoint, EndpointConfig, Event, Limits, Reliability,
    SendOptions, SlidingWindow, IP_UDP_HEADER_LEN,
};

/// Bytes of a split reliable-ordered frame's header (flags, bit length, reliable, ordering
/// and split fields) and of a datagram's (flags, number).
const SPLIT_FRAME_HEADER: usize = 20;
const DATAGRAM_HEADER: usize = 4;

/// The slow-start bound of sending `size` bytes in datagrams of `mtu` bytes over a path of
/// `rtt` with an initial window of `initial` datagrams: an ideal sender doubles its window
/// every round trip and loses nothing, so round `k` (from 1) sends `initial * 2^(k-1)`
/// datagrams, and the last one arrives half a round trip after its round starts.
fn slow_start_bound(size: usize, mtu: usize, rtt: Duration, initial: usize) -> Duration {
    let payload = mtu - IP_UDP_HEADER_LEN - DATAGRAM_HEADER - SPLIT_FRAME_HEADER;
    let datagrams = size.div_ceil(payload);
    let (mut sent, mut window, mut rounds) = (0usize, initial, 0u32);
    while sent < datagrams {
        sent += window;
        window *= 2;
        rounds += 1;
    }
    rtt * (rounds - 1) + rtt / 2
}

struct Pair {
    now: Instant,
    server: Endpoint,
    client: Endpoint,
    server_addr: SocketAddr,
    client_addr: SocketAddr,
    c2s: Link,
    s2c: Link,
    buf: Vec<u8>,
    delivered: usize,
    delivered_bytes: usize,
}

impl Pair {
    fn new(config: EndpointConfig, link: LinkConfig, seed: u64) -> Self {
        let now = Instant::now();
        let server_addr: SocketAddr = "127.0.0.1:19132".parse().unwrap();
        let client_addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        Self {
            now,
            server: Endpoint::new(
                EndpointConfig {
                    rng_seed: seed,
                    ..config.clone()
                },
                server_addr,
                now,
            ),
            client: Endpoint::new(
                EndpointConfig {
                    rng_seed: seed + 1,
                    ..config
                },
                client_addr,
                now,
            ),
            server_addr,
            client_addr,
            c2s: Link::new(link.clone(), seed + 2),
            s2c: Link::new(link, seed + 3),
            buf: Vec::with_capacity(2048),
            delivered: 0,
            delivered_bytes: 0,
        }
    }

    fn settle(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.client.poll_transmit(self.now, &mut self.buf) {
                self.c2s.send(self.now, self.buf[..t.size].to_vec());
                moved = true;
            }
            while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf) {
                self.s2c.send(self.now, self.buf[..t.size].to_vec());
                moved = true;
            }
            while let Some(d) = self.c2s.poll_recv(self.now) {
                self.server
                    .handle(self.now, self.client_addr, Bytes::from(d));
                moved = true;
            }
            while let Some(d) = self.s2c.poll_recv(self.now) {
                self.client
                    .handle(self.now, self.server_addr, Bytes::from(d));
                moved = true;
            }
            while let Some(e) = self.server.poll_event() {
                if let Event::Message { payload, .. } = e {
                    self.delivered += 1;
                    self.delivered_bytes += payload.len();
                }
            }
            while self.client.poll_event().is_some() {}
            if !moved {
                return;
            }
        }
    }

    fn step(&mut self) -> bool {
        self.settle();
        let next = [
            self.server.poll_timeout(),
            self.client.poll_timeout(),
            self.c2s.poll_timeout(),
            self.s2c.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        self.now = next.max(self.now + Duration::from_micros(1));
        self.server.handle_timeout(self.now);
        self.client.handle_timeout(self.now);
        true
    }

    fn connect(&mut self) -> ConnId {
        let id = self.client.connect(self.now, self.server_addr).unwrap();
        while !self.client.is_connected(id) || self.server.stats().connections == 0 {
            assert!(self.step(), "handshake stalled");
        }
        self.settle();
        id
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn small_messages() {
    const MESSAGES: usize = 200_000;
    const BATCH: usize = 1000;
    let mut rates = Vec::new();
    let mut ns = Vec::new();
    for run in 0..5 {
        // A benchmark of the engine's own cost: no per-peer message rate.
        let config = EndpointConfig {
            limits: Limits {
                max_messages_per_sec: None,
                ..Limits::default()
            },
            ..EndpointConfig::default()
        };
        let mut p = Pair::new(config, LinkConfig::default(), 10 + run);
        let c = p.connect();
        let payload = Bytes::from(vec![0x86; 64]);
        let opts = SendOptions::new(Reliability::ReliableOrdered);
        let start = Instant::now();
        let mut sent = 0;
        while p.delivered < MESSAGES {
            // Keep a bounded backlog, as an application would.
            while sent < MESSAGES && sent - p.delivered < BATCH * 4 {
                p.client.send(p.now, c, payload.clone(), opts).unwrap();
                sent += 1;
            }
            if !p.step() {
                p.settle();
            }
        }
        let wall = start.elapsed().as_secs_f64();
        rates.push(MESSAGES as f64 / wall);
        ns.push(wall * 1e9 / MESSAGES as f64);
    }
    println!(
        "64 B reliable_ordered, perfect link: median {:.0} messages/s, {:.0} ns/message (CPU, both engines; {} runs x {MESSAGES})",
        median(rates),
        median(ns.clone()),
        ns.len()
    );
}

/// Queue one reliable_ordered message of `size` bytes (0x86 then zeros) on the client.
fn send_message(p: &mut Pair, c: ConnId, size: usize) {
    let mut data = vec![0u8; size];
    data[0] = 0x86;
    p.client
        .send(
            p.now,
            c,
            Bytes::from(data),
            SendOptions::new(Reliability::ReliableOrdered),
        )
        .unwrap();
}

fn bulk(loss: f64, congestion: CongestionControl) {
    const SIZE: usize = 16 << 20;
    let limits = Limits {
        max_message_bytes: 32 << 20,
        max_send_queue_bytes: 64 << 20,
        ..Limits::default()
    };
    // Reno's reliable frames in flight are capped at a fixed count; BBR's follow its window,
    // up to a larger cap.
    let max_reliable_in_flight = match congestion {
        CongestionControl::Bbr => limits.max_bbr_reliable_in_flight,
        _ => limits.max_reliable_in_flight,
    };
    let config = EndpointConfig {
        limits,
        timeout: Duration::from_secs(60),
        congestion,
        ..EndpointConfig::default()
    };
    let link = LinkConfig {
        loss,
        ..LinkConfig::default()
    }
    .with_delay(Duration::from_millis(10));
    let mut virtual_s = Vec::new();
    let mut cpu_s = Vec::new();
    let mut mtu = 1492;
    for run in 0..3 {
        let mut p = Pair::new(config.clone(), link.clone(), 100 + run);
        let c = p.connect();
        mtu = p
            .client
            .connection_info(c)
            .map_or(1492, |i| usize::from(i.mtu));
        let start_virtual = p.now;
        let start = Instant::now();
        send_message(&mut p, c, SIZE);
        while p.delivered == 0 {
            assert!(p.step(), "transfer stalled");
            assert!(
                p.now - start_virtual < Duration::from_secs(600),
                "transfer took over 600 s virtual"
            );
        }
        assert_eq!(p.delivered_bytes, SIZE);
        virtual_s.push((p.now - start_virtual).as_secs_f64());
        cpu_s.push(start.elapsed().as_secs_f64());
    }
    let v = median(virtual_s);
    let initial = match congestion {
        CongestionControl::Bbr => Bbr::INITIAL_DATAGRAMS,
        _ => SlidingWindow::INITIAL_DATAGRAMS,
    };
    let bound = slow_start_bound(SIZE, mtu, Duration::from_millis(20), initial);
    println!(
        "16 MiB reliable_ordered, 10 ms one way, {:>2.0} % loss, {:<4} {:>5} in flight: median {:.2} s virtual = {:.1} MB/s; CPU {:.2} s = {:.0} MB/s of engine throughput; slow-start bound {:.3} s = {:.1} MB/s (initial window {initial}, MTU {mtu}): {:.2} of it",
        loss * 100.0,
        format!("{congestion:?}"),
        max_reliable_in_flight,
        v,
        SIZE as f64 / v / 1e6,
        median(cpu_s.clone()),
        SIZE as f64 / median(cpu_s) / 1e6,
        bound.as_secs_f64(),
        SIZE as f64 / bound.as_secs_f64() / 1e6,
        bound.as_secs_f64() / v
    );
}

/// 256 MiB as 1 MiB reliable_ordered messages with BBR over a 10 ms one-way link: the
/// steady state. Messages are queued as the previous ones are delivered (at most 8 ahead), as
/// an application streaming a file would.
fn steady(loss: f64) {
    const MESSAGE: usize = 1 << 20;
    const COUNT: usize = 256;
    let config = EndpointConfig {
        limits: Limits {
            max_send_queue_bytes: 64 << 20,
            ..Limits::default()
        },
        timeout: Duration::from_secs(60),
        congestion: CongestionControl::Bbr,
        ..EndpointConfig::default()
    };
    let link = LinkConfig {
        loss,
        ..LinkConfig::default()
    }
    .with_delay(Duration::from_millis(10));
    let mut p = Pair::new(config, link, 700);
    let c = p.connect();
    let start_virtual = p.now;
    let start = Instant::now();
    let mut queued = 0;
    let mut half = None;
    while p.delivered < COUNT {
        while queued < COUNT && queued < p.delivered + 8 {
            send_message(&mut p, c, MESSAGE);
            queued += 1;
        }
        if half.is_none() && p.delivered >= COUNT / 2 {
            half = Some(p.now);
        }
        assert!(p.step(), "transfer stalled");
        assert!(
            p.now - start_virtual < Duration::from_secs(600),
            "transfer took over 600 s virtual"
        );
    }
    if std::env::var_os("ENGINE_DEBUG").is_some() {
        eprintln!("client {:?}", p.client.connection_stats(c));
        eprintln!("server {:?}", p.server.stats());
    }
    let total = (p.now - start_virtual).as_secs_f64();
    let second_half = (p.now - half.unwrap_or(start_virtual)).as_secs_f64();
    let bytes = (MESSAGE * COUNT) as f64;
    println!(
        "256 MiB as 1 MiB reliable_ordered, 10 ms one way, {:>2.0} % loss, Bbr: {:.2} s virtual = {:.1} MB/s, second half {:.1} MB/s; CPU {:.2} s",
        loss * 100.0,
        total,
        bytes / total / 1e6,
        bytes / 2.0 / second_half / 1e6,
        start.elapsed().as_secs_f64()
    );
}

fn main() {
    // `engine bulk` runs only the transfers.
    if std::env::args().nth(1).as_deref() != Some("bulk") {
        small_messages();
    }
    // Both controllers with the default limits.
    for congestion in [CongestionControl::Bbr, CongestionControl::Reno] {
        for loss in [0.0, 0.01, 0.05] {
            bulk(loss, congestion);
        }
    }
    for loss in [0.0, 0.01, 0.05] {
        steady(loss);
    }
}
