//! A deterministic, seeded, sans-IO lossy network link, for driving two protocol engines
//! against each other on a virtual clock.
//!
//! A [`Link`] carries datagrams one way. Each datagram may be dropped for exceeding a path
//! MTU, serialised through a bandwidth limit with a bounded tail-drop queue, lost, duplicated,
//! delayed (a base delay plus uniform jitter), or held back so that later ones overtake it.
//! Every random decision comes from a seeded [`Rng`]: the same seed, configuration and sends
//! give the same deliveries at the same times. Time is passed in as [`Instant`] values; nothing
//! here reads a clock, sleeps, spawns a thread or opens a socket.
//!
//! A test typically keeps a virtual `now`, sends what its engine wants to send, and jumps the
//! clock to the earliest of the engine's own timer and [`Link::poll_timeout`]:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use raknet_netsim::{Link, LinkConfig};
//!
//! let t0 = Instant::now(); // only an origin; the link never reads the clock itself
//! let config = LinkConfig::lossy(0.1)
//!     .with_delay(Duration::from_millis(20))
//!     .with_jitter(Duration::from_millis(5));
//! let mut link = Link::new(config, 42);
//!
//! // Send one datagram every millisecond for 100 ms of virtual time.
//! for i in 0..100u8 {
//!     link.send(t0 + Duration::from_millis(u64::from(i)), vec![i]);
//! }
//!
//! // Drain: jump the virtual clock straight to each delivery time.
//! let mut now = t0;
//! let mut received = Vec::new();
//! while let Some(due) = link.poll_timeout() {
//!     assert_eq!(link.poll_recv(due - Duration::from_nanos(1)), None); // never early
//!     now = now.max(due);
//!     while let Some(datagram) = link.poll_recv(now) {
//!         received.push(datagram);
//!     }
//! }
//!
//! let stats = link.stats();
//! assert_eq!(stats.sent, 100);
//! assert_eq!(stats.delivered, received.len() as u64);
//! assert_eq!(stats.delivered + stats.lost, 100);
//! assert!(now - t0 <= Duration::from_millis(99 + 20 + 5));
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// A small deterministic pseudo-random generator (SplitMix64).
///
/// Plenty for simulation decisions and fully reproducible: the same seed always yields the
/// same sequence, on every platform. Not suitable for anything security related.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`. Every seed, including 0, is fine.
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

    /// A float uniformly distributed in `[0, 1)`, with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer in `0..n` (`0` when `n` is 0), by multiply-and-shift.
    ///
    /// Always consumes exactly one draw. The bias towards some values is at most `n / 2^64`,
    /// far below anything a simulation can observe.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
        }
    }

    /// `true` with probability `p`.
    ///
    /// `p <= 0.0` (or NaN) is always `false` and consumes no draw; `p >= 1.0` is always `true`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
}

/// How a [`Link`] misbehaves.
///
/// The [`Default`] is a perfect link: no loss, no duplication, no reordering, no delay,
/// unlimited bandwidth and no MTU. Fields can be set directly (with `..LinkConfig::default()`)
/// or through the `with_*` builders.
///
/// A datagram's fate is decided when it is sent, in this order: MTU check, bandwidth queue
/// (tail drop), random loss, duplication, then a delay for each copy.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Probability that a datagram is dropped, `0.0..=1.0`.
    pub loss: f64,
    /// Probability that a datagram is delivered twice, `0.0..=1.0`. The copy gets its own
    /// independently drawn delay (jitter and reordering), so it may arrive before or after the
    /// original.
    pub duplicate: f64,
    /// Probability that a datagram (or copy) gets an extra delay of
    /// [`reorder_delay`](Self::reorder_delay), so that later datagrams overtake it.
    pub reorder: f64,
    /// Extra delay of a datagram chosen for reordering.
    pub reorder_delay: Duration,
    /// Base one-way delay, added to every datagram after it leaves the bandwidth queue.
    pub delay: Duration,
    /// Uniform extra delay in `0..=jitter`, drawn per datagram.
    ///
    /// Jitter alone reorders: two datagrams sent less than `jitter` apart may arrive in either
    /// order. Use `jitter: Duration::ZERO` when a test needs in-order delivery.
    pub jitter: Duration,
    /// Bottleneck rate in bytes per second, or `None` for unlimited.
    ///
    /// Datagrams are serialised through a FIFO at this rate: a datagram of `len` bytes sent at
    /// `now` leaves at `max(now, link_free_at) + len / bandwidth`, and then takes
    /// [`delay`](Self::delay) and jitter on top. `Some(0)` is treated as unlimited.
    pub bandwidth: Option<u64>,
    /// Most bytes that may wait for the bandwidth limit (including the datagram being
    /// serialised). A datagram that would push the backlog past this is tail-dropped and
    /// counted in [`LinkStats::dropped_queue`]. Only used with a [`bandwidth`](Self::bandwidth).
    pub queue_limit: usize,
    /// Datagrams longer than this many bytes are dropped and counted in
    /// [`LinkStats::dropped_mtu`], like a path MTU (measured on the UDP payload).
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

    /// Set the probability that a datagram is dropped.
    #[must_use]
    pub fn with_loss(self, loss: f64) -> Self {
        Self { loss, ..self }
    }

    /// Set the probability that a datagram is delivered twice.
    #[must_use]
    pub fn with_duplicate(self, duplicate: f64) -> Self {
        Self { duplicate, ..self }
    }

    /// Hold back a share `reorder` of datagrams by an extra `reorder_delay`.
    #[must_use]
    pub fn with_reorder(self, reorder: f64, reorder_delay: Duration) -> Self {
        Self {
            reorder,
            reorder_delay,
            ..self
        }
    }

    /// Set the base one-way delay.
    #[must_use]
    pub fn with_delay(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    /// Set the jitter (uniform extra delay in `0..=jitter`; this alone can reorder).
    #[must_use]
    pub fn with_jitter(self, jitter: Duration) -> Self {
        Self { jitter, ..self }
    }

    /// Limit the bandwidth to `bytes_per_second`, with a queue of `queue_limit` bytes.
    #[must_use]
    pub fn with_bandwidth(self, bytes_per_second: u64, queue_limit: usize) -> Self {
        Self {
            bandwidth: Some(bytes_per_second),
            queue_limit,
            ..self
        }
    }

    /// Drop datagrams longer than `mtu` bytes.
    #[must_use]
    pub fn with_mtu(self, mtu: usize) -> Self {
        Self {
            mtu: Some(mtu),
            ..self
        }
    }
}

/// Counters of what a [`Link`] did so far.
///
/// Every sent datagram ends up in exactly one of `lost`, `dropped_mtu`, `dropped_queue`, or
/// delivered / still in flight; duplicates add one more delivery each, so
/// `sent + duplicated == delivered + lost + dropped_mtu + dropped_queue + in_flight`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams handed to [`Link::send`].
    pub sent: u64,
    /// Datagrams returned by [`Link::poll_recv`] (copies included).
    pub delivered: u64,
    /// Datagrams dropped by random loss.
    pub lost: u64,
    /// Extra copies scheduled by duplication.
    pub duplicated: u64,
    /// Datagrams (or copies) given the extra reorder delay.
    pub reordered: u64,
    /// Datagrams dropped for exceeding the MTU.
    pub dropped_mtu: u64,
    /// Datagrams tail-dropped by the bandwidth queue.
    pub dropped_queue: u64,
    /// Bytes returned by [`Link::poll_recv`] (copies included).
    pub bytes: u64,
}

/// A datagram waiting for its delivery time, ordered by `(at, seq)` only.
#[derive(Debug)]
struct Pending {
    at: Instant,
    seq: u64,
    datagram: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The bandwidth bottleneck: a FIFO serialising bytes at a fixed rate.
///
/// Departure times are computed from the start of the current busy period and the bytes sent
/// in it, so per-datagram rounding never accumulates.
#[derive(Debug, Default)]
struct Bottleneck {
    /// Start of the current busy period.
    busy_since: Option<Instant>,
    /// Bytes serialised since `busy_since`.
    busy_bytes: u128,
    /// When the last queued byte has left.
    free_at: Option<Instant>,
    /// `(departure, len)` of datagrams not yet fully serialised, oldest first.
    backlog: VecDeque<(Instant, usize)>,
    /// Sum of `len` over `backlog`.
    backlog_bytes: usize,
}

impl Bottleneck {
    /// Departure time of `len` bytes offered at `now`, or `None` if the queue is full.
    fn enqueue(&mut self, now: Instant, len: usize, rate: u64, limit: usize) -> Option<Instant> {
        while let Some(&(done, n)) = self.backlog.front() {
            if done > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= n;
        }
        if self.backlog_bytes.saturating_add(len) > limit {
            return None;
        }
        let start = match (self.busy_since, self.free_at) {
            (Some(since), Some(free)) if free > now => since,
            _ => {
                self.busy_bytes = 0;
                now
            }
        };
        self.busy_since = Some(start);
        self.busy_bytes += len as u128;
        let nanos = (self.busy_bytes * 1_000_000_000).div_ceil(u128::from(rate));
        let done = start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        self.free_at = Some(done);
        self.backlog.push_back((done, len));
        self.backlog_bytes += len;
        Some(done)
    }

    /// Bytes not yet fully serialised at `now`.
    fn queued(&self, now: Instant) -> usize {
        self.backlog
            .iter()
            .filter(|(done, _)| *done > now)
            .map(|(_, n)| n)
            .sum()
    }

    /// Start a new busy period where the current one ends (the rate is about to change).
    fn rebase(&mut self) {
        self.busy_since = self.free_at;
        self.busy_bytes = 0;
    }
}

/// One direction of a simulated network path.
///
/// Feed it with [`send`](Self::send), ask [`poll_timeout`](Self::poll_timeout) when the next
/// datagram is due, and take due datagrams with [`poll_recv`](Self::poll_recv). For a
/// two-way path use two links with different seeds.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: Rng,
    /// Min-heap on (delivery time, insertion counter); the counter keeps ties in send order.
    pending: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    bottleneck: Bottleneck,
    stats: LinkStats,
}

impl Link {
    /// A link behaving as `config`, with its random decisions drawn from `seed`.
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        Self {
            config,
            rng: Rng::new(seed),
            pending: BinaryHeap::new(),
            seq: 0,
            bottleneck: Bottleneck::default(),
            stats: LinkStats::default(),
        }
    }

    /// The link's current behaviour.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Change the behaviour from now on, for example to cut the wire or add delay mid-test.
    ///
    /// Datagrams already in flight keep their delivery times; the bandwidth queue keeps its
    /// backlog, and a new rate applies to datagrams sent afterwards.
    pub fn set_config(&mut self, config: LinkConfig) {
        if config.bandwidth != self.config.bandwidth {
            self.bottleneck.rebase();
        }
        self.config = config;
    }

    /// Put a datagram on the link at `now`.
    ///
    /// Its fate is decided here: it may be dropped (MTU, full bandwidth queue, random loss), or
    /// scheduled for delivery once, or twice when duplicated. Calls should be made with
    /// non-decreasing `now` for the bandwidth model to be meaningful.
    pub fn send(&mut self, now: Instant, datagram: Vec<u8>) {
        self.stats.sent += 1;
        if self.config.mtu.is_some_and(|mtu| datagram.len() > mtu) {
            self.stats.dropped_mtu += 1;
            return;
        }
        // Serialisation through the bottleneck happens before loss, like a real bottleneck:
        // a datagram lost further along the path still used the link.
        let departure = match self.config.bandwidth {
            Some(rate) if rate > 0 => {
                let limit = self.config.queue_limit;
                match self.bottleneck.enqueue(now, datagram.len(), rate, limit) {
                    Some(departure) => departure,
                    None => {
                        self.stats.dropped_queue += 1;
                        return;
                    }
                }
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

    /// Base delay, plus jitter, plus the reorder delay when chosen for reordering.
    fn one_way_delay(&mut self) -> Duration {
        let mut d = self.config.delay;
        let jitter = u64::try_from(self.config.jitter.as_nanos()).unwrap_or(u64::MAX - 1);
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
        self.seq += 1;
        self.pending.push(Reverse(Pending {
            at,
            seq: self.seq,
            datagram,
        }));
    }

    /// The earliest time a pending datagram becomes deliverable, or `None` when nothing is in
    /// flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.peek().map(|Reverse(p)| p.at)
    }

    /// The next datagram due at or before `now`, earliest delivery time first; datagrams due
    /// at the same time come out in the order they were scheduled. `None` when nothing is due
    /// yet.
    pub fn poll_recv(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.poll_timeout()? > now {
            return None;
        }
        let Reverse(Pending { datagram, .. }) = self.pending.pop()?;
        self.stats.delivered += 1;
        self.stats.bytes += datagram.len() as u64;
        Some(datagram)
    }

    /// What the link did so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Datagrams (copies included) scheduled and not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Bytes waiting in the bandwidth queue at `now` (the datagram being serialised included):
    /// the queueing delay is this over the bandwidth. Always 0 without a bandwidth limit.
    pub fn queued_bytes(&self, now: Instant) -> usize {
        self.bottleneck.queued(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    // proptest's prelude has an `Rng` trait; the glob above must not hide ours.
    use super::Rng;

    /// Everything due by `until`, with the time each became due.
    fn drain(link: &mut Link, until: Instant) -> Vec<(Instant, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = link.poll_timeout().filter(|t| *t <= until) {
            out.push((t, link.poll_recv(t).unwrap()));
        }
        out
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn lossy_config() -> LinkConfig {
        LinkConfig::lossy(0.2)
            .with_duplicate(0.1)
            .with_reorder(0.1, ms(30))
            .with_delay(ms(10))
            .with_jitter(ms(5))
    }

    #[test]
    fn rng_matches_the_splitmix64_reference() {
        // Reference outputs of SplitMix64 seeded with 0.
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn rng_helpers_stay_in_range() {
        let mut rng = Rng::new(99);
        for _ in 0..10_000 {
            let f = rng.next_f64();
            assert!((0.0..1.0).contains(&f));
            assert!(rng.below(7) < 7);
        }
        assert_eq!(rng.below(0), 0);
        assert!(!rng.chance(0.0));
        assert!(!rng.chance(f64::NAN));
        assert!(rng.chance(1.0));
        let mut a = Rng::new(5);
        let mut b = Rng::new(5);
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
    }

    #[test]
    fn same_seed_gives_identical_deliveries_and_times() {
        let t0 = Instant::now();
        let run = |seed| {
            let mut link = Link::new(lossy_config(), seed);
            for i in 0..1000u32 {
                link.send(t0 + ms(u64::from(i)), i.to_be_bytes().to_vec());
            }
            let out = drain(&mut link, t0 + Duration::from_secs(10));
            (out, link.stats())
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1).0, run(2).0);
    }

    #[test]
    fn loss_rate_matches_the_configuration() {
        let t0 = Instant::now();
        for (seed, loss) in [(42, 0.1), (43, 0.01), (44, 0.5)] {
            let mut link = Link::new(LinkConfig::lossy(loss), seed);
            for _ in 0..100_000 {
                link.send(t0, vec![0]);
            }
            let rate = link.stats().lost as f64 / 100_000.0;
            // Five standard deviations of a binomial share.
            let tolerance = 5.0 * (loss * (1.0 - loss) / 100_000.0).sqrt();
            assert!((rate - loss).abs() < tolerance, "loss {loss}: got {rate}");
            assert_eq!(link.in_flight() as u64, 100_000 - link.stats().lost);
        }
    }

    #[test]
    fn full_loss_delivers_nothing() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::lossy(1.0), 1);
        for _ in 0..100 {
            link.send(t0, vec![1]);
        }
        assert_eq!(link.poll_timeout(), None);
        assert_eq!(link.stats().lost, 100);
    }

    #[test]
    fn duplication_delivers_copies() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default().with_duplicate(1.0), 3);
        link.send(t0, vec![9]);
        assert_eq!(link.in_flight(), 2);
        let got: Vec<_> = drain(&mut link, t0).into_iter().map(|(_, d)| d).collect();
        assert_eq!(got, [vec![9], vec![9]]);
        let stats = link.stats();
        assert_eq!((stats.duplicated, stats.delivered, stats.bytes), (1, 2, 2));
    }

    #[test]
    fn duplicate_copies_get_their_own_delay() {
        let t0 = Instant::now();
        let config = LinkConfig::default()
            .with_duplicate(1.0)
            .with_delay(ms(10))
            .with_jitter(ms(10));
        let mut link = Link::new(config, 8);
        let mut differing = 0;
        for i in 0..100u64 {
            let sent = t0 + Duration::from_secs(i);
            link.send(sent, vec![0]);
            let times: Vec<_> = drain(&mut link, sent + ms(20))
                .into_iter()
                .map(|(t, _)| t - sent)
                .collect();
            assert_eq!(times.len(), 2);
            assert!(times.iter().all(|d| (ms(10)..=ms(20)).contains(d)));
            differing += usize::from(times[0] != times[1]);
        }
        assert!(differing > 90, "{differing}");
    }

    #[test]
    fn reordering_lets_later_datagrams_overtake() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default().with_reorder(1.0, ms(50)), 4);
        link.send(t0, vec![1]);
        link.set_config(LinkConfig::default());
        link.send(t0 + ms(1), vec![2]);
        let got: Vec<_> = drain(&mut link, t0 + Duration::from_secs(1))
            .into_iter()
            .map(|(t, d)| (t - t0, d[0]))
            .collect();
        assert_eq!(got, [(ms(1), 2), (ms(50), 1)]);
        assert_eq!(link.stats().reordered, 1);
    }

    #[test]
    fn jitter_alone_can_reorder() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default().with_jitter(ms(20)), 11);
        for i in 0..200u8 {
            link.send(t0 + ms(u64::from(i)), vec![i]);
        }
        let got: Vec<u8> = drain(&mut link, t0 + Duration::from_secs(1))
            .into_iter()
            .map(|(_, d)| d[0])
            .collect();
        assert_eq!(got.len(), 200);
        assert!(got.windows(2).any(|w| w[0] > w[1]));
        assert_eq!(link.stats().reordered, 0);
    }

    #[test]
    fn without_jitter_or_reordering_order_is_kept() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::lossy(0.3).with_delay(ms(25)), 12);
        for i in 0..200u8 {
            link.send(t0 + ms(u64::from(i) / 3), vec![i]);
        }
        let got: Vec<u8> = drain(&mut link, t0 + Duration::from_secs(1))
            .into_iter()
            .map(|(_, d)| d[0])
            .collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn ties_come_out_in_send_order() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default().with_delay(ms(5)), 13);
        for i in 0..50u8 {
            link.send(t0, vec![i]);
        }
        let due = t0 + ms(5);
        assert_eq!(link.poll_timeout(), Some(due));
        let got: Vec<u8> = std::iter::from_fn(|| link.poll_recv(due))
            .map(|d| d[0])
            .collect();
        assert_eq!(got, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn bandwidth_serialises_at_len_over_rate() {
        let t0 = Instant::now();
        // 10 000 bytes per second: 100 bytes take 10 ms, 250 bytes take 25 ms.
        let config = LinkConfig::default()
            .with_bandwidth(10_000, usize::MAX)
            .with_delay(ms(3));
        let mut link = Link::new(config, 5);
        for len in [100, 250, 100, 50] {
            link.send(t0, vec![0; len]);
        }
        // Sent while the link is idle again: starts serialising at its own send time.
        link.send(t0 + ms(100), vec![0; 100]);
        let times: Vec<_> = drain(&mut link, t0 + Duration::from_secs(1))
            .into_iter()
            .map(|(t, _)| t - t0)
            .collect();
        assert_eq!(
            times,
            [ms(3 + 10), ms(3 + 35), ms(3 + 45), ms(3 + 50), ms(3 + 110)]
        );
    }

    #[test]
    fn bandwidth_does_not_accumulate_rounding() {
        let t0 = Instant::now();
        // 3 bytes per second: each byte takes 333.33… ms.
        let mut link = Link::new(LinkConfig::default().with_bandwidth(3, usize::MAX), 5);
        for _ in 0..3000 {
            link.send(t0, vec![0]);
        }
        let last = drain(&mut link, t0 + Duration::from_secs(2000))
            .pop()
            .unwrap();
        assert_eq!(last.0 - t0, Duration::from_secs(1000));
    }

    #[test]
    fn queue_limit_tail_drops() {
        let t0 = Instant::now();
        // 1000 bytes per second, room for 2500 bytes of queue.
        let mut link = Link::new(LinkConfig::default().with_bandwidth(1000, 2500), 5);
        for _ in 0..4 {
            link.send(t0, vec![0; 1000]);
        }
        assert_eq!(link.stats().dropped_queue, 2);
        // Once the first datagram has left, there is room for one more.
        link.send(t0 + Duration::from_secs(1), vec![0; 1000]);
        link.send(t0 + Duration::from_secs(1), vec![0; 1000]);
        let times: Vec<_> = drain(&mut link, t0 + Duration::from_secs(10))
            .into_iter()
            .map(|(t, _)| t - t0)
            .collect();
        let secs = Duration::from_secs;
        assert_eq!(times, [secs(1), secs(2), secs(3)]);
        assert_eq!(link.stats().dropped_queue, 3);
        assert_eq!(link.queued_bytes(t0 + Duration::from_secs(10)), 0);
    }

    #[test]
    fn queued_bytes_drain_at_the_rate() {
        let t0 = Instant::now();
        // 1000 bytes per second: three 500-byte datagrams leave at 0.5, 1 and 1.5 s.
        let mut link = Link::new(LinkConfig::default().with_bandwidth(1000, usize::MAX), 5);
        assert_eq!(link.queued_bytes(t0), 0);
        for _ in 0..3 {
            link.send(t0, vec![0; 500]);
        }
        assert_eq!(link.queued_bytes(t0), 1500);
        assert_eq!(link.queued_bytes(t0 + ms(500)), 1000);
        assert_eq!(link.queued_bytes(t0 + ms(1499)), 500);
        assert_eq!(link.queued_bytes(t0 + ms(1500)), 0);
        let unlimited = Link::new(LinkConfig::default(), 5);
        assert_eq!(unlimited.queued_bytes(t0), 0);
    }

    #[test]
    fn mtu_drops_oversized_datagrams() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default().with_mtu(100), 6);
        link.send(t0, vec![0; 101]);
        link.send(t0, vec![0; 100]);
        link.send(t0, vec![0; 1500]);
        let got = drain(&mut link, t0);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.len(), 100);
        assert_eq!(link.stats().dropped_mtu, 2);
    }

    #[test]
    fn poll_timeout_is_the_earliest_pending_delivery() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default(), 7);
        assert_eq!(link.poll_timeout(), None);
        link.set_config(LinkConfig::default().with_delay(ms(30)));
        link.send(t0, vec![1]);
        assert_eq!(link.poll_timeout(), Some(t0 + ms(30)));
        link.set_config(LinkConfig::default().with_delay(ms(5)));
        link.send(t0 + ms(1), vec![2]);
        assert_eq!(link.poll_timeout(), Some(t0 + ms(6)));
        assert_eq!(link.poll_recv(t0 + ms(6)), Some(vec![2]));
        assert_eq!(link.poll_timeout(), Some(t0 + ms(30)));
        assert_eq!(link.poll_recv(t0 + ms(29)), None);
        assert_eq!(link.poll_recv(t0 + ms(30)), Some(vec![1]));
        assert_eq!(link.poll_timeout(), None);
        assert_eq!(link.in_flight(), 0);
    }

    #[test]
    fn nothing_is_delivered_early() {
        let t0 = Instant::now();
        let mut link = Link::new(lossy_config(), 7);
        for i in 0..100u64 {
            link.send(t0 + ms(i), vec![i as u8]);
        }
        while let Some(t) = link.poll_timeout() {
            assert!(link.poll_recv(t - Duration::from_nanos(1)).is_none());
            assert!(link.poll_recv(t).is_some());
        }
    }

    proptest! {
        #[test]
        fn any_config_delivers_in_time_order_never_early_and_accounts_for_everything(
            seed: u64,
            loss in 0.0..=1.0f64,
            duplicate in 0.0..=1.0f64,
            reorder in 0.0..=1.0f64,
            reorder_ms in 0..100u64,
            delay_ms in 0..100u64,
            jitter_ms in 0..50u64,
            bandwidth in proptest::option::of(1..100_000u64),
            queue_limit in 0..20_000usize,
            mtu in proptest::option::of(0..1500usize),
            sends in proptest::collection::vec((0..20u64, 0..1600usize), 0..200),
        ) {
            let config = LinkConfig {
                loss,
                duplicate,
                reorder,
                reorder_delay: ms(reorder_ms),
                delay: ms(delay_ms),
                jitter: ms(jitter_ms),
                bandwidth,
                queue_limit,
                mtu,
            };
            let t0 = Instant::now();
            let mut link = Link::new(config, seed);
            let mut now = t0;
            let mut last_delivery = t0;
            let mut check = |link: &mut Link, now: Instant| -> Result<(), TestCaseError> {
                while let Some(t) = link.poll_timeout().filter(|t| *t <= now) {
                    prop_assert!(t >= last_delivery);
                    last_delivery = t;
                    prop_assert!(link.poll_recv(t - Duration::from_nanos(1)).is_none());
                    prop_assert!(link.poll_recv(t).is_some());
                }
                Ok(())
            };
            for (gap, len) in sends {
                now += ms(gap);
                check(&mut link, now)?;
                link.send(now, vec![0; len]);
            }
            check(&mut link, now + Duration::from_secs(3600))?;
            let s = link.stats();
            prop_assert_eq!(link.in_flight(), 0);
            prop_assert_eq!(
                s.sent + s.duplicated,
                s.delivered + s.lost + s.dropped_mtu + s.dropped_queue
            );
        }
    }
}
