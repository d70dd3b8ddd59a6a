//! A deterministic, seeded, sans-IO lossy network link, for driving two protocol engines
//! against each other on a virtual clock.
//!
//! A [`Link`] carries datagrams one way. Each datagram may be lost, duplicated, delayed (a base
//! delay plus uniform jitter), held back so that later ones overtake it, serialised through a
//! bandwidth limit with a bounded queue, or dropped for exceeding a path MTU. Every decision
//! comes from a seeded [`Rng`]: the same seed and the same sends give the same deliveries at
//! the same times. Time is passed in; nothing here reads a clock.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use raknet_netsim::{Link, LinkConfig};
//!
//! let t0 = Instant::now();
//! let mut link = Link::new(LinkConfig::default().with_delay(Duration::from_millis(10)), 7);
//! link.send(t0, vec![1, 2, 3]);
//! assert_eq!(link.poll_recv(t0), None); // still in flight
//! let due = link.poll_timeout().unwrap();
//! assert_eq!(due - t0, Duration::from_millis(10));
//! assert_eq!(link.poll_recv(due), Some(vec![1, 2, 3]));
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// SplitMix64: a small deterministic PRNG, plenty for simulation decisions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A float uniformly in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer uniformly in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
        }
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
}

/// How a link misbehaves. The default is a perfect link: no loss, no delay, no limits.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Probability that a datagram is dropped, `0.0..=1.0`.
    pub loss: f64,
    /// Probability that a datagram is delivered twice (the copy gets its own delay).
    pub duplicate: f64,
    /// Probability that a datagram is held back by `reorder_delay`, so later ones overtake it.
    pub reorder: f64,
    /// Extra delay of a reordered datagram.
    pub reorder_delay: Duration,
    /// Base one-way delay.
    pub delay: Duration,
    /// Uniform extra delay in `0..=jitter`. Jitter alone reorders datagrams sent closer
    /// together than the jitter.
    pub jitter: Duration,
    /// Bytes per second; datagrams are serialised through a FIFO at this rate.
    pub bandwidth: Option<u64>,
    /// Most bytes waiting for the bandwidth limit; further datagrams are tail-dropped.
    pub queue_limit: usize,
    /// Datagrams larger than this are dropped, like a path MTU (UDP payload bytes).
    pub mtu: Option<usize>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            bandwidth: None,
            queue_limit: usize::MAX,
            mtu: None,
        }
    }
}

impl LinkConfig {
    /// A link that drops a share `loss` of datagrams and is otherwise perfect.
    pub fn lossy(loss: f64) -> Self {
        Self {
            loss,
            ..Self::default()
        }
    }

    /// Set the base one-way delay.
    #[must_use]
    pub fn with_delay(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    /// Set the jitter.
    #[must_use]
    pub fn with_jitter(self, jitter: Duration) -> Self {
        Self { jitter, ..self }
    }

    /// Limit the bandwidth, with a queue of `queue_limit` bytes.
    #[must_use]
    pub fn with_bandwidth(self, bytes_per_second: u64, queue_limit: usize) -> Self {
        Self {
            bandwidth: Some(bytes_per_second),
            queue_limit,
            ..self
        }
    }
}

/// What a link did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams handed to [`Link::send`].
    pub sent: u64,
    /// Datagrams returned by [`Link::poll_recv`] (copies included).
    pub delivered: u64,
    /// Datagrams dropped by random loss.
    pub lost: u64,
    /// Extra copies scheduled.
    pub duplicated: u64,
    /// Datagrams held back to be overtaken.
    pub reordered: u64,
    /// Datagrams dropped for exceeding the MTU.
    pub dropped_mtu: u64,
    /// Datagrams tail-dropped by the bandwidth queue.
    pub dropped_queue: u64,
    /// Bytes delivered.
    pub bytes: u64,
}

/// One direction of a simulated network path.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: Rng,
    /// (delivery time, insertion counter) → datagram; the counter keeps ties in send order.
    in_flight: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    counter: u64,
    /// When the bandwidth-limited sender is free again.
    link_free_at: Option<Instant>,
    stats: LinkStats,
}

impl Link {
    /// A link behaving as `config`, with decisions drawn from `seed`.
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        Self {
            config,
            rng: Rng::new(seed),
            in_flight: BinaryHeap::new(),
            counter: 0,
            link_free_at: None,
            stats: LinkStats::default(),
        }
    }

    /// Put a datagram on the link at `now`.
    pub fn send(&mut self, now: Instant, datagram: Vec<u8>) {
        self.stats.sent += 1;
        if self.config.mtu.is_some_and(|mtu| datagram.len() > mtu) {
            self.stats.dropped_mtu += 1;
            return;
        }
        // Serialisation through the bandwidth limit happens before loss, like a real
        // bottleneck: a datagram lost later still used the link.
        let departure = match self.config.bandwidth {
            Some(bw) if bw > 0 => {
                let free = self.link_free_at.map_or(now, |t| t.max(now));
                let queued = free.saturating_duration_since(now).as_secs_f64() * bw as f64;
                if queued + datagram.len() as f64 > self.config.queue_limit as f64 {
                    self.stats.dropped_queue += 1;
                    return;
                }
                let done = free + Duration::from_secs_f64(datagram.len() as f64 / bw as f64);
                self.link_free_at = Some(done);
                done
            }
            _ => now,
        };
        if self.rng.chance(self.config.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance(self.config.duplicate) {
            self.stats.duplicated += 1;
            let at = departure + self.one_way_delay();
            self.schedule(at, datagram.clone());
        }
        let at = departure + self.one_way_delay();
        self.schedule(at, datagram);
    }

    fn one_way_delay(&mut self) -> Duration {
        let mut d = self.config.delay;
        let jitter = self.config.jitter.as_nanos() as u64;
        if jitter > 0 {
            d += Duration::from_nanos(self.rng.below(jitter + 1));
        }
        if self.rng.chance(self.config.reorder) {
            self.stats.reordered += 1;
            d += self.config.reorder_delay;
        }
        d
    }

    fn schedule(&mut self, at: Instant, datagram: Vec<u8>) {
        self.counter += 1;
        self.in_flight.push(Reverse((at, self.counter, datagram)));
    }

    /// The earliest time a datagram becomes deliverable.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.in_flight.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The next datagram due at or before `now`, earliest first.
    pub fn poll_recv(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.poll_timeout()? > now {
            return None;
        }
        let Reverse((_, _, datagram)) = self.in_flight.pop()?;
        self.stats.delivered += 1;
        self.stats.bytes += datagram.len() as u64;
        Some(datagram)
    }

    /// What the link did so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Datagrams scheduled and not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(link: &mut Link, until: Instant) -> Vec<(Instant, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = link.poll_timeout().filter(|t| *t <= until) {
            out.push((t, link.poll_recv(t).unwrap()));
        }
        out
    }

    fn lossy_config() -> LinkConfig {
        LinkConfig {
            loss: 0.2,
            duplicate: 0.1,
            reorder: 0.1,
            reorder_delay: Duration::from_millis(30),
            jitter: Duration::from_millis(5),
            ..LinkConfig::default()
        }
        .with_delay(Duration::from_millis(10))
    }

    #[test]
    fn same_seed_same_deliveries() {
        let t0 = Instant::now();
        let run = |seed| {
            let mut link = Link::new(lossy_config(), seed);
            for i in 0..1000u32 {
                link.send(
                    t0 + Duration::from_millis(u64::from(i)),
                    i.to_be_bytes().to_vec(),
                );
            }
            drain(&mut link, t0 + Duration::from_secs(10))
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn loss_rate_matches_the_configuration() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::lossy(0.1), 42);
        for _ in 0..100_000 {
            link.send(t0, vec![0]);
        }
        let lost = link.stats().lost as f64 / 100_000.0;
        assert!((0.095..0.105).contains(&lost), "{lost}");
        assert_eq!(link.in_flight() as u64, 100_000 - link.stats().lost);
    }

    #[test]
    fn duplication_delivers_copies() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                duplicate: 1.0,
                ..LinkConfig::default()
            },
            3,
        );
        link.send(t0, vec![9]);
        assert_eq!(drain(&mut link, t0).len(), 2);
        assert_eq!(link.stats().duplicated, 1);
    }

    #[test]
    fn reordering_lets_later_datagrams_overtake() {
        let t0 = Instant::now();
        let config = LinkConfig {
            reorder: 1.0,
            reorder_delay: Duration::from_millis(50),
            ..LinkConfig::default()
        };
        let mut link = Link::new(config, 4);
        link.send(t0, vec![1]);
        link.config.reorder = 0.0;
        link.send(t0 + Duration::from_millis(1), vec![2]);
        let got: Vec<_> = drain(&mut link, t0 + Duration::from_secs(1))
            .into_iter()
            .map(|(_, d)| d[0])
            .collect();
        assert_eq!(got, [2, 1]);
    }

    #[test]
    fn bandwidth_serialises_and_the_queue_tail_drops() {
        let t0 = Instant::now();
        // 1000 bytes per second, room for 2500 bytes of queue.
        let mut link = Link::new(LinkConfig::default().with_bandwidth(1000, 2500), 5);
        for _ in 0..4 {
            link.send(t0, vec![0; 1000]);
        }
        let times: Vec<_> = drain(&mut link, t0 + Duration::from_secs(10))
            .into_iter()
            .map(|(t, _)| t - t0)
            .collect();
        assert_eq!(times, [Duration::from_secs(1), Duration::from_secs(2)]);
        assert_eq!(link.stats().dropped_queue, 2);
    }

    #[test]
    fn mtu_drops_oversized_datagrams() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                mtu: Some(100),
                ..LinkConfig::default()
            },
            6,
        );
        link.send(t0, vec![0; 101]);
        link.send(t0, vec![0; 100]);
        assert_eq!(drain(&mut link, t0).len(), 1);
        assert_eq!(link.stats().dropped_mtu, 1);
    }

    #[test]
    fn nothing_is_delivered_early() {
        let t0 = Instant::now();
        let mut link = Link::new(lossy_config(), 7);
        for i in 0..100u64 {
            link.send(t0 + Duration::from_millis(i), vec![i as u8]);
        }
        while let Some(t) = link.poll_timeout() {
            assert!(link.poll_recv(t - Duration::from_nanos(1)).is_none());
            assert!(link.poll_recv(t).is_some());
        }
    }
}
