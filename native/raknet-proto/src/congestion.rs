//! Congestion control behind a small trait, and a pacer.
//!
//! Two controllers implement [`Controller`], chosen per endpoint with
//! [`crate::CongestionControl`]:
//!
//! - [`Bbr`]: rate- and delay-based, after BBR. It estimates the bottleneck
//!   bandwidth and the round-trip propagation time from delivery-rate samples
//!   ([`DeliverySample`]) and paces at that rate, so random loss does not slow it down.
//! - [`SlidingWindow`] (the default, "Reno"): loss-based, as official RakNet.
//!
//! [`SlidingWindow`] follows official RakNet's `CCRakNetSlidingWindow` (protocol reference
//! §10): a TCP-Reno-like window in bytes, slow start from a small window, congestion
//! avoidance, a halving on NAK and a collapse on retransmission timeout, each at most once
//! per window of datagrams. The window only grows while the sender actually had more data
//! than the window allowed, so an idle connection does not accumulate credit.

use std::fmt;
use std::time::{Duration, Instant};

use crate::seq::DatagramSeq;

mod bbr;

pub use bbr::Bbr;

/// What made the sender suspect congestion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongestionEvent {
    /// The receiver reported a gap (NAK).
    Nak,
    /// A datagram went unacknowledged for the retransmission timeout.
    Timeout,
}

/// What the acknowledgement of one datagram tells about the path: a delivery-rate sample
/// as in draft-cheng-iccrg-delivery-rate-estimation, taken by the in-flight bookkeeping.
///
/// `delivered - prior_delivered` bytes were acknowledged over `interval`: the longer of the
/// time it took to send them and the time it took to acknowledge them, so that neither a
/// burst of sends nor a compressed burst of ACKs inflates the rate. The interval is at
/// least this datagram's round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeliverySample {
    /// When the acknowledgement arrived.
    pub now: Instant,
    /// This datagram's send → acknowledgement time.
    pub rtt: Duration,
    /// This datagram's size in bytes.
    pub bytes: usize,
    /// Bytes acknowledged on the connection so far, this datagram included.
    pub delivered: u64,
    /// Bytes acknowledged when this datagram was sent.
    pub prior_delivered: u64,
    /// The time over which `delivered - prior_delivered` bytes were delivered.
    pub interval: Duration,
    /// The sender had nothing more to send when this datagram went: the rate measures the
    /// application, not the path.
    pub app_limited: bool,
    /// Bytes still in flight after this acknowledgement.
    pub bytes_in_flight: usize,
}

impl DeliverySample {
    /// The delivery rate in bytes per second, if the interval is not zero.
    pub fn rate(&self) -> Option<f64> {
        let secs = self.interval.as_secs_f64();
        (secs > 0.0).then(|| (self.delivered - self.prior_delivered) as f64 / secs)
    }
}

/// A congestion controller: how many bytes may be unacknowledged at once, and how fast they
/// may go.
///
/// The engine calls [`Controller::on_sent`] for every data datagram, then for each one
/// either [`Controller::on_ack`] and [`Controller::on_delivery`], or
/// [`Controller::on_congestion_event`] then [`Controller::on_lost`]. The rate-related
/// methods have defaults, so a purely window-based controller needs only the others.
pub trait Controller: fmt::Debug + Send {
    /// Bytes that may be in flight (sent and not yet acknowledged or declared lost).
    fn window(&self) -> usize;
    /// A datagram of `bytes` was acknowledged. `app_limited` is true when the sender had
    /// no data waiting at the time, in which case the window should not grow.
    fn on_ack(&mut self, seq: DatagramSeq, bytes: usize, app_limited: bool);
    /// The delivery-rate sample of an acknowledged datagram (after [`Controller::on_ack`]).
    fn on_delivery(&mut self, _sample: &DeliverySample) {}
    /// A datagram numbered `seq` was lost.
    fn on_congestion_event(&mut self, seq: DatagramSeq, event: CongestionEvent);
    /// The datagram numbered `seq`, of `bytes`, was declared lost (called right after
    /// [`Controller::on_congestion_event`] for it).
    fn on_lost(&mut self, _seq: DatagramSeq, _bytes: usize) {}
    /// A datagram numbered `seq` was sent.
    fn on_sent(&mut self, seq: DatagramSeq);
    /// Whether the controller is in slow start (reported in the datagram flag byte).
    fn in_slow_start(&self) -> bool;
    /// Heap bytes the controller holds (its filters); 0 for one that holds none.
    fn heap_bytes(&self) -> usize {
        0
    }
    /// The rate at which to pace datagrams, in bytes per second, given the smoothed RTT;
    /// `None` sends as fast as the window allows. The default spreads 1.25 windows over a
    /// round trip (none without an RTT sample).
    fn pacing_rate(&self, srtt: Duration) -> Option<f64> {
        let rtt = srtt.as_secs_f64();
        (rtt > 0.0).then(|| 1.25 * self.window() as f64 / rtt)
    }
}

/// Official RakNet's sliding window, with explicit bounds.
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    mtu: usize,
    cwnd: usize,
    ssthresh: usize,
    max_window: usize,
    /// The next datagram number sent; congestion reactions apply once per "block":
    /// a loss of a datagram sent before the last reaction is not reacted to again.
    next_seq: DatagramSeq,
    block_end: Option<DatagramSeq>,
}

impl SlidingWindow {
    /// Datagrams in the initial window.
    pub const INITIAL_DATAGRAMS: usize = 4;

    /// A controller for datagrams of up to `mtu` bytes (UDP payload), with the window
    /// capped at `max_window` bytes.
    pub fn new(mtu: usize, max_window: usize) -> Self {
        let mtu = mtu.max(1);
        Self {
            mtu,
            cwnd: mtu * Self::INITIAL_DATAGRAMS,
            ssthresh: usize::MAX,
            max_window: max_window.max(mtu * 2),
            next_seq: DatagramSeq::ZERO,
            block_end: None,
        }
    }

    fn in_reacted_block(&self, seq: DatagramSeq) -> bool {
        self.block_end
            .is_some_and(|end| !seq.is_after(end) && seq != end)
    }
}

impl Controller for SlidingWindow {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn on_ack(&mut self, _seq: DatagramSeq, bytes: usize, app_limited: bool) {
        if app_limited {
            return;
        }
        let growth = if self.cwnd < self.ssthresh {
            bytes
        } else {
            (self.mtu * bytes / self.cwnd.max(1)).max(1)
        };
        self.cwnd = (self.cwnd + growth).min(self.max_window);
    }

    fn on_congestion_event(&mut self, seq: DatagramSeq, event: CongestionEvent) {
        if self.in_reacted_block(seq) {
            return;
        }
        self.block_end = Some(self.next_seq);
        // A NAK reduces the window to 0.7x (CUBIC's factor; official RakNet only lowers
        // ssthresh, Reno halves): enough to yield under congestion without collapsing on
        // random loss. A timeout means the path went quiet: start again from two datagrams.
        self.ssthresh = (self.cwnd * 7 / 10).max(self.mtu * 2);
        self.cwnd = match event {
            CongestionEvent::Nak => self.ssthresh,
            CongestionEvent::Timeout => self.mtu * 2,
        };
    }

    fn on_sent(&mut self, seq: DatagramSeq) {
        self.next_seq = seq.next();
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }
}

/// How much sending a pacer lets accrue between two wake-ups of the caller: runtimes' timers
/// fire with about a millisecond of granularity, so a bucket smaller than what the rate earns in
/// that time would cap the rate at `burst` per timer tick (about 12 k datagrams/s for 8
/// datagrams), far below what loopback or a LAN carries.
pub(crate) const PACING_GRANULARITY: Duration = Duration::from_millis(2);

/// Spreads a window's worth of datagrams over a round trip instead of sending it in one
/// burst: a token bucket refilled at 1.25 × window / RTT, holding at most a burst (or what the
/// rate earns over [`PACING_GRANULARITY`], if more).
#[derive(Debug, Clone)]
pub struct Pacer {
    tokens: f64,
    burst: f64,
    last: Option<Instant>,
}

impl Pacer {
    /// A pacer that allows bursts of `burst` bytes.
    pub fn new(burst: usize) -> Self {
        Self {
            tokens: burst as f64,
            burst: burst as f64,
            last: None,
        }
    }

    /// When a datagram of `bytes` may go, given the window and smoothed RTT (paced at 1.25
    /// windows per RTT): `None` means now. A zero RTT (no sample, or loopback) disables
    /// pacing.
    pub fn delay(
        &mut self,
        now: Instant,
        bytes: usize,
        window: usize,
        srtt: Duration,
    ) -> Option<Instant> {
        self.delay_at(now, bytes, Self::rate(window, srtt), window)
    }

    /// When a datagram of `bytes` may go at `rate` bytes per second (`None`: unpaced), with
    /// bursts of at most `window` bytes: `None` means now.
    pub fn delay_at(
        &mut self,
        now: Instant,
        bytes: usize,
        rate: Option<f64>,
        window: usize,
    ) -> Option<Instant> {
        let rate = rate.filter(|r| r.is_finite() && *r > 0.0)?;
        let last = *self.last.get_or_insert(now);
        // At least the configured burst; at most a window.
        let burst = (rate * PACING_GRANULARITY.as_secs_f64())
            .min(window as f64)
            .max(self.burst);
        self.tokens =
            (self.tokens + now.saturating_duration_since(last).as_secs_f64() * rate).min(burst);
        self.last = Some(now);
        let need = bytes as f64;
        if self.tokens >= need {
            None
        } else {
            Some(now + Duration::from_secs_f64((need - self.tokens) / rate))
        }
    }

    /// Spend the tokens for a datagram of `bytes` that was sent.
    pub fn on_sent(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }

    fn rate(window: usize, srtt: Duration) -> Option<f64> {
        let rtt = srtt.as_secs_f64();
        (rtt > 0.0).then(|| 1.25 * window as f64 / rtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_avoidance_then_backoff_once_per_block() {
        let mut cc = SlidingWindow::new(1000, 1 << 20);
        assert_eq!(cc.window(), 4000);
        assert!(cc.in_slow_start());
        for i in 0..4 {
            cc.on_sent(DatagramSeq::new(i));
            cc.on_ack(DatagramSeq::new(i), 1000, false);
        }
        assert_eq!(cc.window(), 8000);
        cc.on_ack(DatagramSeq::new(4), 1000, true);
        assert_eq!(cc.window(), 8000, "app-limited ACKs do not grow the window");
        cc.on_congestion_event(DatagramSeq::new(2), CongestionEvent::Nak);
        assert_eq!(cc.window(), 5600);
        assert!(!cc.in_slow_start());
        cc.on_congestion_event(DatagramSeq::new(3), CongestionEvent::Nak);
        assert_eq!(cc.window(), 5600, "one reaction per block");
        cc.on_ack(DatagramSeq::new(5), 1000, false);
        assert_eq!(cc.window(), 5778);
        cc.on_sent(DatagramSeq::new(9));
        cc.on_congestion_event(DatagramSeq::new(8), CongestionEvent::Timeout);
        assert_eq!(cc.window(), 2000);
    }

    #[test]
    fn pacer_spreads_a_window_over_the_rtt() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2000);
        let rtt = Duration::from_millis(100);
        assert_eq!(p.delay(t0, 1000, 10_000, rtt), None);
        p.on_sent(1000);
        assert_eq!(p.delay(t0, 1000, 10_000, rtt), None);
        p.on_sent(1000);
        let wait = p.delay(t0, 1000, 10_000, rtt).unwrap() - t0;
        // 1000 bytes at 125 000 B/s.
        assert_eq!(wait.as_millis(), 8);
        assert_eq!(p.delay(t0, 1000, 10_000, Duration::ZERO), None);
    }

    #[test]
    fn pacer_bucket_holds_a_timer_tick_of_a_fast_rate() {
        // 1 MB window over a 1 ms RTT: 1.25 GB/s, 2.5 MB per 2 ms tick, capped at the window.
        let t0 = Instant::now();
        let mut p = Pacer::new(12_000);
        let (window, rtt) = (1_000_000, Duration::from_millis(1));
        assert_eq!(p.delay(t0, 1_500, window, rtt), None);
        p.on_sent(12_000);
        // After a 1 ms timer tick, 1.25 MB were earned: the bucket keeps a window, not 8 datagrams.
        let t1 = t0 + Duration::from_millis(1);
        for _ in 0..600 {
            assert_eq!(p.delay(t1, 1_500, window, rtt), None);
            p.on_sent(1_500);
        }
        // A slow rate keeps the configured burst: 10 kB window over 100 ms, 250 B per tick.
        let mut slow = Pacer::new(2_000);
        let t2 = t0 + Duration::from_secs(10);
        assert_eq!(
            slow.delay(t0, 1_000, 10_000, Duration::from_millis(100)),
            None
        );
        slow.on_sent(1_000);
        assert_eq!(
            slow.delay(t2, 1_000, 10_000, Duration::from_millis(100)),
            None
        );
        slow.on_sent(1_000);
        assert_eq!(
            slow.delay(t2, 1_000, 10_000, Duration::from_millis(100)),
            None
        );
        slow.on_sent(1_000);
        assert!(slow
            .delay(t2, 1_000, 10_000, Duration::from_millis(100))
            .is_some());
    }
}
