//! [`Bbr`]: a rate- and delay-based congestion controller.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{CongestionEvent, Controller, DeliverySample};
use crate::seq::DatagramSeq;

/// 2 / ln 2: the smallest gain that doubles the sending rate every round trip.
const STARTUP_GAIN: f64 = 2.885;
/// Window gain in ProbeBW: room for delayed and stretched ACKs, at most a BDP of queue.
const PROBE_BW_CWND_GAIN: f64 = 2.0;
/// Pacing gains of the ProbeBW cycle, one phase per `min_rtt`.
const PROBE_BW_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Round trips over which the bottleneck bandwidth is the largest sample.
const BW_WINDOW_ROUNDS: u64 = 10;
/// How long a `min_rtt` sample stays valid before ProbeRTT measures it again.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long ProbeRTT holds the window at its minimum.
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// Startup ends when the bandwidth estimate grew by less than this factor …
const FULL_BW_GROWTH: f64 = 1.25;
/// … over this many rounds.
const FULL_BW_ROUNDS: u32 = 3;
/// Longest a peer holds its ACKs (official RakNet: 10 ms after arrival on an update tick of up
/// to 10 ms): the ACK-aggregation allowance is at most this much of the bandwidth.
const MAX_ACK_AGGREGATION: Duration = Duration::from_millis(20);
/// Smallest window, in datagrams (also ProbeRTT's window).
const MIN_WINDOW_DATAGRAMS: usize = 4;
/// Share of a round's bytes lost above which the round counts as heavily lossy.
const HEAVY_LOSS: f64 = 0.2;
/// Fewest datagrams lost in a round for it to count as heavily lossy (a small window cannot
/// tell 1 of 4 from congestion).
const HEAVY_LOSS_DATAGRAMS: usize = 4;
/// Consecutive heavily lossy rounds before the controller reacts.
const HEAVY_LOSS_ROUNDS: u32 = 2;
/// The most one reaction to heavy loss cuts the bandwidth estimate by (BBRv2's beta) when
/// the last round was cut short by a retransmission timeout: such a round delivers next to
/// nothing, and restarting from it (256 MiB at 5 % random loss fell from 241 to 2.4 MB/s of
/// estimate) took 150 rounds to climb back (33 MB/s over the transfer's second half). After
/// a round without a timeout the estimate restarts from what it delivered, however low: a
/// path that lost capacity (a shallow buffer, a policer) is followed at once.
const HEAVY_LOSS_DECREASE: f64 = 0.7;
/// Datagrams each flow aims to keep in the bottleneck queue ([`delay_rule_rate`]).
const QUEUE_TARGET_DATAGRAMS: usize = 1;
/// The delay rule cuts the rate by at most half per round.
const MIN_DELAY_FACTOR: f64 = 0.5;
/// Queueing delay that reads as none: RTT noise (jitter on the path, the peer's ACK timing)
/// keeps a round's smallest sample a little above `min_rtt` with no queue at all, and the delay
/// rule would otherwise take it for one and hold the rate down.
const QUEUE_NOISE: Duration = Duration::from_millis(1);
/// Cruising rounds whose smallest RTT samples the delay rule takes the minimum of: delay
/// jitter raises a round's smallest sample at random, a standing queue raises every round's.
const QUEUE_ROUNDS: usize = 4;
/// Queueing delay in a round's own smallest sample that the delay rule takes at once, without
/// waiting for [`QUEUE_ROUNDS`] rounds to agree: a queue growing that fast must be cut before
/// it fills the buffer (jitter of a few milliseconds rarely raises a round's smallest sample
/// this far).
const CLEAR_QUEUE: Duration = Duration::from_millis(3);
/// Queueing delay above which the delay rule starts from what the flow delivered rather than
/// from its sending rate. Below it, RTT noise (jitter, ACK timing) that reads as a little queue
/// cuts only by `min_rtt / rtt`.
const DELIVERED_CUT_QUEUE: Duration = Duration::from_millis(5);
/// Queueing delay that, carried by most rounds over [`COMPETING_ROUNDS`], reads as a queue
/// that someone else keeps (see "Loss-based flows" at [`Bbr`]).
const COMPETING_QUEUE: Duration = Duration::from_millis(5);
/// Rounds in ProbeBW whose median queueing delay tells a standing queue from a passing one
/// (another flow's startup queues for a few rounds; a loss-based flow keeps it).
const COMPETING_ROUNDS: usize = 32;
/// The competing window's cut after a round with losses (as [`crate::SlidingWindow`]'s).
const COMPETING_DECREASE: f64 = 0.7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// The largest value seen over the last `window` rounds: a monotonic deque of at most one
/// entry per round (so at most `window + 1` entries).
#[derive(Debug, Clone, Default)]
struct MaxFilter {
    entries: VecDeque<(u64, f64)>,
}

impl MaxFilter {
    fn update(&mut self, round: u64, value: f64, window: u64) {
        while self.entries.back().is_some_and(|&(_, v)| v <= value) {
            self.entries.pop_back();
        }
        match self.entries.back() {
            // A smaller value of the same round expires with the larger one: not needed.
            Some(&(r, _)) if r == round => {}
            _ => self.entries.push_back((round, value)),
        }
        while self
            .entries
            .front()
            .is_some_and(|&(r, _)| r + window <= round)
        {
            self.entries.pop_front();
        }
    }

    fn get(&self) -> f64 {
        self.entries.front().map_or(0.0, |&(_, v)| v)
    }

    fn reset(&mut self, round: u64, value: f64) {
        self.entries.clear();
        self.entries.push_back((round, value));
    }
}

/// The queueing delay a round's RTT samples all carried: how far the smallest (`round_min`)
/// was above `min_rtt`, less what the peer's ACK timing explains. A peer holds an ACK until a
/// few datagrams arrived or its timer fired, so the datagram that arrived last before an ACK
/// went waited about the `spacing` between datagrams (up to [`MAX_ACK_AGGREGATION`]): a sparse
/// round's smallest sample still carries that much without any queue. Up to [`QUEUE_NOISE`]
/// reads as no queue.
fn queue_delay(round_min: Duration, min_rtt: Duration, spacing: Duration) -> Duration {
    let queue = round_min.saturating_sub(min_rtt + spacing.min(MAX_ACK_AGGREGATION));
    if queue <= QUEUE_NOISE {
        Duration::ZERO
    } else {
        queue
    }
}

/// The queueing delay the delay rule acts on, from the smallest RTT sample of each of the last
/// few cruising rounds (`round_mins`, the current round last): the delay all of them carried
/// ([`queue_delay`] of their minimum), or the current round's own if it is above
/// [`CLEAR_QUEUE`].
///
/// A round holds few independent samples (the peer acknowledges up to 16 datagrams at once, so
/// a round of 60 datagrams may bring only four ACKs), and with per-datagram jitter their
/// minimum is often a few milliseconds above `min_rtt`, differently each round. Taken one
/// round at a time, that reads as a queue: each such round cuts the rate by `min_rtt / rtt`
/// while a round without one adds back only a datagram per round trip, so the rate sinks
/// (on a 20 ms path with 5 ms of jitter each way, to about 1.3 MB/s from over 4), and with
/// fewer datagrams per round the noise only grows. A standing queue raises every round's
/// minimum; jitter seldom raises four in a row.
fn filtered_queue_delay(
    round_mins: &VecDeque<Duration>,
    min_rtt: Duration,
    spacing: Duration,
) -> Duration {
    let (Some(&last), Some(&smallest)) = (round_mins.back(), round_mins.iter().min()) else {
        return Duration::ZERO;
    };
    let own = queue_delay(last, min_rtt, spacing);
    if own > CLEAR_QUEUE {
        own
    } else {
        queue_delay(smallest, min_rtt, spacing)
    }
}

/// The delay rule (FAST TCP's window update, in rate): after a round with `queue` of queueing
/// delay, send at `rate × min_rtt / rtt + QUEUE_TARGET / rtt` (`rtt = min_rtt + queue`).
///
/// At equilibrium `rate × queue = QUEUE_TARGET`: every flow keeps
/// [`QUEUE_TARGET_DATAGRAMS`] of its own in the bottleneck queue, so flows that see the same
/// queue converge to the same rate, and the queue stays at a few datagrams per flow. Without a
/// queue the rate grows by a datagram per round trip. `rate` is the sending rate `bw`, or what
/// the flow `delivered` over the round if less and the queue is above
/// [`DELIVERED_CUT_QUEUE`] (the flows together send more than the bottleneck, which a queue
/// that large shows beyond doubt, and what each got through is its share). The cut is at most
/// [`MIN_DELAY_FACTOR`] per round.
fn delay_rule_rate(
    bw: f64,
    delivered: Option<f64>,
    min_rtt: Duration,
    queue: Duration,
    mtu: usize,
) -> f64 {
    let base = min_rtt.as_secs_f64();
    let rtt = (min_rtt + queue).as_secs_f64();
    if rtt <= 0.0 {
        return bw;
    }
    let rate = match delivered {
        Some(delivered) if queue > DELIVERED_CUT_QUEUE => bw.min(delivered),
        _ => bw,
    };
    let factor = (base / rtt).max(MIN_DELAY_FACTOR);
    rate * factor + (QUEUE_TARGET_DATAGRAMS * mtu) as f64 / rtt
}

/// A rate- and delay-based congestion controller after BBR (Cardwell et al., "BBR:
/// Congestion-Based Congestion Control", and draft-cardwell-iccrg-bbr-congestion-control).
///
/// The model has two numbers: the bottleneck bandwidth (`btlbw`, the largest delivery rate
/// measured over the last ten round trips) and the round-trip propagation
/// time (`min_rtt`, the smallest RTT sample over the last 10 s). Their product
/// is the bandwidth-delay product (BDP): what the path holds without a queue. The sender paces
/// at `pacing_gain × btlbw` and keeps at most `cwnd_gain × BDP` in flight, in four phases:
///
/// - **Startup**: gain 2/ln 2 ≈ 2.885 on both, which doubles the delivery rate every round
///   trip, until the bandwidth estimate stops growing (less than 25 % over three rounds).
/// - **Drain**: pacing gain 1/2.885 until the queue startup built is gone (in flight ≤ BDP).
/// - **ProbeBW**: cruise at the estimate, with one round at 1.25 (to find more bandwidth)
///   followed by one at 0.75 (to drain what that queued) every eight rounds; the window is
///   2 BDP, so a wrong estimate cannot build more than a BDP of queue. The estimate is
///   bounded by the delay rule (below). The probe is skipped (that round cruises) when the
///   delay rule found a queue after the last cruising round: the link has no bandwidth to
///   spare, and probing only adds to the queue. Two flows through a 2 MB/s bottleneck with a
///   deep queue (`tests/congestion.rs`) peaked at 13.6–20.2 ms of queueing delay over the
///   initial phases seven seeds pick, and at 11.6–19.7 ms (nine seeds) with the skip.
/// - **ProbeRTT**: when `min_rtt` has not been seen again for 10 s, keep four datagrams in
///   flight for 200 ms and a round trip, so that the queue drains and the propagation time
///   can be measured again (in BBRv1 this is also what slowly lets competing flows converge
///   to a fair share; here the delay rule does it within a few hundred round trips).
///
/// **Loss.** Random loss is not congestion: a 1 % or 5 % lossy link still delivers at the
/// bottleneck rate, and the delivery-rate samples (which count only acknowledged bytes) say
/// so. A single lost datagram, a NAK, changes nothing here (as in BBRv1), so throughput does
/// not collapse the way a loss-based window does (Reno's throughput falls as 1/√loss). The
/// pacing already keeps the queue, and so the drops at a drop-tail bottleneck, small. What
/// BBRv1 lacks is a reaction when its estimate is wrong and the bottleneck overflows anyway
/// (startup overshooting a shallow buffer; several flows whose estimates add up to more than
/// the link). So, as BBRv2 does in spirit, **heavy, persistent loss** is a signal: when more
/// than 20 % of a round's bytes were lost, with at least four
/// datagrams, in two consecutive rounds, startup ends, and in ProbeBW the
/// bandwidth estimate is restarted from what the last round actually delivered (a 0.7x cut
/// at most when a retransmission timeout cut that round short: it delivered next to
/// nothing) and a draining phase begins. Random loss of a few percent essentially never meets that (at 5 % loss a
/// round of 20 datagrams loses 5 or more with probability 0.3 %, twice in a row 10⁻⁵).
///
/// **Delay.** The bandwidth estimate is a maximum, and at a bottleneck shared by several flows
/// each keeps the peaks of its own probing, so together they send more than the link and sit
/// at their window with a standing queue, in shares that probing does not even out. So, after
/// each round spent cruising, a delay rule bounds the rate (`bw_lo`), after FAST TCP: the
/// queueing delay is how far the smallest RTT sample of the last four cruising rounds was
/// above `min_rtt` (less the peer's ACK spacing; the current round's own if above 3 ms, so
/// that a fast-growing queue is cut at once), and the rate becomes `rate × min_rtt / rtt + 1 datagram / rtt`. Each flow thus
/// keeps about one datagram of its own in the queue: flows that share a queue converge to
/// equal rates and the queue stays at a few datagrams per flow, while a flow alone on its
/// path (no queue) grows by a datagram per round until the bound reaches the estimate and is
/// lifted. Rounds with a probing or draining phase do not count; the probe itself paces at
/// 1.25 × the bounded rate. The minimum over four rounds is what keeps delay jitter from
/// reading as a queue ([`filtered_queue_delay`]).
///
/// **Loss-based flows.** A loss-based flow (Reno, CUBIC, official RakNet) fills the bottleneck
/// queue until it overflows, whatever the others do: the delay rule reads that queue as
/// congestion and yields, and against one Reno flow at a 2 MB/s bottleneck this controller
/// kept 0.26 MB/s with a queue of one BDP and 0.07 with four. So, as Copa does, it tells such
/// a queue from one flows of its kind share: those keep a few datagrams queued per flow, and
/// another flow's startup queues for a few rounds; a queue of more than 5 ms in most (the
/// median) of the last 32 rounds in ProbeBW is someone else's. Then it **competes**: its
/// window and rate are those of an AIMD flow in its place (doubling per round from what it
/// had in flight until a round with losses, then a datagram more per round and 0.7× after
/// each round with losses, paced at 1.25 windows per round trip), so that it gets about what
/// a second loss-based flow would (0.77–0.93 MB/s of the 2, `tests/congestion.rs`). It stops
/// when a ProbeRTT finds the queue gone with its own data out of it (within about 10 s of the
/// competitor leaving); if the queue is still there, the propagation time measured before is
/// kept. Flows of this kind alone read as competition too once their datagram or so each in
/// the queue adds up to more than 5 ms (about 7 flows of full datagrams at 2 MB/s, 35 at
/// 10 MB/s): they then share the link as AIMD flows do, with a fuller queue.
///
/// A retransmission timeout (the peer stopped acknowledging anything) limits the window to
/// four datagrams until the next acknowledgement: a dead path must not be paced into
/// at the old rate until the connection times out.
#[derive(Debug, Clone)]
pub struct Bbr {
    mtu: usize,
    max_window: usize,
    mode: Mode,
    cwnd: usize,
    pacing_gain: f64,
    cwnd_gain: f64,
    btlbw: MaxFilter,
    min_rtt: Option<Duration>,
    min_rtt_at: Option<Instant>,
    /// Round trips counted so far: a round ends when a datagram sent after it began is
    /// acknowledged.
    round: u64,
    next_round_delivered: u64,
    delivered: u64,
    /// Startup's plateau detector.
    full_bw: f64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    /// ProbeBW phase and when it began.
    cycle: usize,
    cycle_start: Option<Instant>,
    lost_in_cycle: bool,
    /// ProbeRTT: when it may end, whether a round has passed, the window to return to.
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    prior_cwnd: usize,
    /// This round's accounting, for the heavy-loss rule.
    round_lost_bytes: usize,
    round_lost_datagrams: usize,
    round_delivered_bytes: usize,
    round_max_rate: f64,
    heavy_rounds: u32,
    /// This round's accounting for the delay rule: the smallest RTT sample, whether the whole
    /// round was spent cruising in ProbeBW (pacing gain 1), when it began and the bytes
    /// delivered then, the datagrams acknowledged, and whether any was sent app-limited.
    round_min_rtt: Option<Duration>,
    /// The smallest RTT sample of each of the last [`QUEUE_ROUNDS`] cruising rounds, this
    /// round's last.
    recent_round_mins: VecDeque<Duration>,
    round_cruising: bool,
    round_start: Option<(Instant, u64)>,
    round_delivered_datagrams: u32,
    round_app_limited: bool,
    /// The delay rule's bound on the bandwidth (`None`: the estimate is used as it is).
    bw_lo: Option<f64>,
    /// The queueing delay the delay rule acted on after the last cruising round.
    last_round_queue: Duration,
    /// ACK aggregation: the most acknowledged beyond what `btlbw` explains, over the last
    /// ten rounds, and the current aggregation interval (start, bytes acknowledged in it).
    extra_acked: MaxFilter,
    aggregation_start: Option<Instant>,
    aggregation_bytes: u64,
    /// A retransmission timeout happened and nothing was acknowledged since.
    timed_out: bool,
    /// A retransmission timeout fired during this round (for the heavy-loss rule).
    round_timed_out: bool,
    /// Picks ProbeBW's first phase (flows that start together should not probe in step).
    seed: u64,
    /// The queueing delay of each of the last [`COMPETING_ROUNDS`] rounds in ProbeBW.
    recent_queues: VecDeque<Duration>,
    /// While a loss-based flow keeps the bottleneck queue: the window, in bytes, of an AIMD
    /// flow in this one's place, which replaces the model's window and rate (`None`: not
    /// competing).
    competing_window: Option<usize>,
    /// The competing window doubles per round until a round with losses.
    competing_slow_start: bool,
    /// `min_rtt` before ProbeRTT measured it again while competing.
    rtt_before_probe: Option<Duration>,
    /// When ProbeRTT's window was reached, and the bytes delivered then.
    probe_rtt_start: Option<(Instant, u64)>,
}

impl Bbr {
    /// Datagrams in the initial window (RFC 6928's ten segments).
    /// Datagrams in the initial window.
    pub const INITIAL_DATAGRAMS: usize = 10;

    /// A controller for datagrams of up to `mtu` bytes (UDP payload), with the window capped
    /// at `max_window` bytes. `seed` varies the phase of the bandwidth probing between
    /// connections.
    pub fn new(mtu: usize, max_window: usize, seed: u64) -> Self {
        let mtu = mtu.max(1);
        let cwnd = mtu * Self::INITIAL_DATAGRAMS;
        Self {
            mtu,
            max_window: max_window.max(mtu * MIN_WINDOW_DATAGRAMS),
            mode: Mode::Startup,
            cwnd,
            pacing_gain: STARTUP_GAIN,
            cwnd_gain: STARTUP_GAIN,
            btlbw: MaxFilter::default(),
            min_rtt: None,
            min_rtt_at: None,
            round: 0,
            next_round_delivered: 0,
            delivered: 0,
            full_bw: 0.0,
            full_bw_rounds: 0,
            filled_pipe: false,
            cycle: 0,
            cycle_start: None,
            lost_in_cycle: false,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            prior_cwnd: cwnd,
            round_lost_bytes: 0,
            round_lost_datagrams: 0,
            round_delivered_bytes: 0,
            round_max_rate: 0.0,
            heavy_rounds: 0,
            round_min_rtt: None,
            recent_round_mins: VecDeque::new(),
            round_cruising: false,
            round_start: None,
            round_delivered_datagrams: 0,
            round_app_limited: false,
            bw_lo: None,
            last_round_queue: Duration::ZERO,
            extra_acked: MaxFilter::default(),
            aggregation_start: None,
            aggregation_bytes: 0,
            timed_out: false,
            round_timed_out: false,
            seed,
            recent_queues: VecDeque::new(),
            competing_window: None,
            competing_slow_start: false,
            rtt_before_probe: None,
            probe_rtt_start: None,
        }
    }

    /// The bottleneck bandwidth estimate in bytes per second (0 before the first sample).
    pub fn bandwidth(&self) -> f64 {
        self.btlbw.get()
    }

    /// The round-trip propagation time estimate.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Whether startup has ended (the bottleneck bandwidth was found).
    pub fn filled_pipe(&self) -> bool {
        self.filled_pipe
    }

    fn min_window(&self) -> usize {
        self.mtu * MIN_WINDOW_DATAGRAMS
    }

    fn initial_window(&self) -> usize {
        self.mtu * Self::INITIAL_DATAGRAMS
    }

    /// The bandwidth the sender uses: the estimate, bounded by the delay rule's `bw_lo`.
    fn bw(&self) -> f64 {
        self.bw_lo
            .map_or(self.btlbw.get(), |lo| lo.min(self.btlbw.get()))
    }

    /// `gain` × the bandwidth-delay product, in bytes; `None` before there is a model.
    fn bdp(&self, gain: f64) -> Option<usize> {
        let bw = self.bw();
        let rtt = self.min_rtt?;
        (bw > 0.0).then_some((gain * bw * rtt.as_secs_f64()) as usize)
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = PROBE_BW_CWND_GAIN;
        self.bw_lo = None;
        self.recent_round_mins.clear();
        self.last_round_queue = Duration::ZERO;
        // Any phase but the draining one (as BBR: start cruising or probing, at random).
        self.seed = self
            .seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let phases = PROBE_BW_GAINS.len() as u64;
        self.cycle = match (self.seed >> 33) % (phases - 1) {
            0 => 0,
            n => n as usize + 1,
        };
        self.start_phase(now);
    }

    fn start_phase(&mut self, now: Instant) {
        self.cycle_start = Some(now);
        self.lost_in_cycle = false;
        self.pacing_gain = PROBE_BW_GAINS[self.cycle];
        if self.pacing_gain > 1.0 && self.last_round_queue > Duration::ZERO {
            // The probe looks for bandwidth the estimate does not know of; a queue says the
            // link has none to spare, and probing would only add to it. Cruise instead.
            self.pacing_gain = 1.0;
        }
    }

    fn advance_cycle(&mut self, now: Instant, bytes_in_flight: usize) {
        let (Some(start), Some(min_rtt)) = (self.cycle_start, self.min_rtt) else {
            return self.start_phase(now);
        };
        let elapsed = now.saturating_duration_since(start);
        let full_length = elapsed > min_rtt;
        let gain = self.pacing_gain;
        let next = if gain > 1.0 {
            // Probe until the extra data is in flight (or it caused loss); at most 2 rounds
            // in case the sender cannot put that much in flight.
            full_length
                && (self.lost_in_cycle
                    || self.bdp(gain).is_none_or(|t| bytes_in_flight >= t)
                    || elapsed > min_rtt * 2)
        } else if gain < 1.0 {
            full_length || self.bdp(1.0).is_none_or(|t| bytes_in_flight <= t)
        } else {
            full_length
        };
        if next {
            self.cycle = (self.cycle + 1) % PROBE_BW_GAINS.len();
            self.start_phase(now);
        }
    }

    /// Startup's plateau detector, once per round.
    fn check_full_pipe(&mut self, app_limited: bool) {
        if self.filled_pipe || app_limited {
            return;
        }
        let bw = self.btlbw.get();
        if bw >= self.full_bw * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            return;
        }
        self.full_bw_rounds += 1;
        if self.full_bw_rounds >= FULL_BW_ROUNDS {
            self.filled_pipe = true;
        }
    }

    /// The heavy-loss rule, at the end of each round.
    fn end_round(&mut self, now: Instant) {
        let lost = self.round_lost_bytes as f64;
        let total = lost + self.round_delivered_bytes as f64;
        let heavy = self.round_lost_datagrams >= HEAVY_LOSS_DATAGRAMS && lost > HEAVY_LOSS * total;
        self.heavy_rounds = if heavy { self.heavy_rounds + 1 } else { 0 };
        if self.heavy_rounds >= HEAVY_LOSS_ROUNDS {
            self.heavy_rounds = 0;
            match self.mode {
                Mode::Startup => self.filled_pipe = true,
                Mode::ProbeBw | Mode::Drain => {
                    // The estimate is more than the path delivers: start again from what it
                    // did deliver last round (at most a 0.7x cut after a round a timeout cut
                    // short: persistent heavy loss cuts again two rounds later), and drain
                    // the queue that built up.
                    if self.round_max_rate > 0.0 {
                        let floor = if self.round_timed_out {
                            self.btlbw.get() * HEAVY_LOSS_DECREASE
                        } else {
                            0.0
                        };
                        self.btlbw.reset(self.round, self.round_max_rate.max(floor));
                    }
                    if self.mode == Mode::ProbeBw {
                        self.cycle = 1;
                        self.start_phase(now);
                    }
                }
                Mode::ProbeRtt => {}
            }
        }
        self.check_competition(now);
        if self.round_cruising && !self.round_app_limited && self.competing_window.is_none() {
            self.apply_delay_rule(now);
        }
        self.round_start = Some((now, self.delivered));
        self.round_lost_bytes = 0;
        self.round_lost_datagrams = 0;
        self.round_timed_out = false;
        self.round_delivered_bytes = 0;
        self.round_max_rate = 0.0;
        self.round_min_rtt = None;
        self.round_delivered_datagrams = 0;
        self.round_app_limited = false;
        self.round_cruising = self.mode == Mode::ProbeBw && self.pacing_gain == 1.0;
    }

    /// Whether a loss-based flow keeps the bottleneck queue, at the end of each round (see
    /// "Loss-based flows" at [`Bbr`]); while competing, the window's cut after a round with
    /// losses.
    fn check_competition(&mut self, now: Instant) {
        let lost = self.round_lost_datagrams > 0;
        if let Some(window) = self.competing_window.as_mut() {
            if lost {
                self.competing_slow_start = false;
                *window = ((*window as f64 * COMPETING_DECREASE) as usize)
                    .max(self.mtu * MIN_WINDOW_DATAGRAMS);
            }
            return;
        }
        let (Some(round_min), Some(min_rtt), Some((start, _))) =
            (self.round_min_rtt, self.min_rtt, self.round_start)
        else {
            return;
        };
        if self.mode != Mode::ProbeBw
            || self.round_app_limited
            || self.round_delivered_datagrams == 0
        {
            self.recent_queues.clear();
            return;
        }
        let spacing = now.saturating_duration_since(start) / self.round_delivered_datagrams;
        self.recent_queues
            .push_back(queue_delay(round_min, min_rtt, spacing));
        if self.recent_queues.len() > COMPETING_ROUNDS {
            self.recent_queues.pop_front();
        }
        if self.recent_queues.len() < COMPETING_ROUNDS {
            return;
        }
        let mut queues: Vec<Duration> = self.recent_queues.iter().copied().collect();
        let (_, &mut median, _) = queues.select_nth_unstable(COMPETING_ROUNDS / 2);
        if median <= COMPETING_QUEUE {
            return;
        }
        self.recent_queues.clear();
        // Start from what the flow kept in flight over the round: cut as after a loss if it
        // lost some, else doubling per round until it does (a Reno flow's slow start).
        let in_flight = self.round_rate(now).unwrap_or(0.0) * round_min.as_secs_f64();
        let window = if lost {
            in_flight * COMPETING_DECREASE
        } else {
            in_flight
        };
        self.competing_slow_start = !lost;
        self.competing_window = Some((window as usize).max(self.min_window()));
    }

    /// The rate delivered over the last round.
    fn round_rate(&self, now: Instant) -> Option<f64> {
        let (start, delivered) = self.round_start?;
        let secs = now.saturating_duration_since(start).as_secs_f64();
        (secs > 0.0).then(|| (self.delivered - delivered) as f64 / secs)
    }

    /// The delay rule, at the end of a round spent cruising: see [`queue_delay`] and
    /// [`delay_rule_rate`]. The result bounds the bandwidth (`bw_lo`) until the rule lifts
    /// it again or the flow leaves ProbeBW.
    fn apply_delay_rule(&mut self, now: Instant) {
        let (Some(round_min), Some(min_rtt), Some((start, _))) =
            (self.round_min_rtt, self.min_rtt, self.round_start)
        else {
            return;
        };
        if self.round_delivered_datagrams == 0 {
            return;
        }
        let spacing = now.saturating_duration_since(start) / self.round_delivered_datagrams;
        self.recent_round_mins.push_back(round_min);
        if self.recent_round_mins.len() > QUEUE_ROUNDS {
            self.recent_round_mins.pop_front();
        }
        let queue = filtered_queue_delay(&self.recent_round_mins, min_rtt, spacing);
        self.last_round_queue = queue;
        let target = delay_rule_rate(self.bw(), self.round_rate(now), min_rtt, queue, self.mtu);
        self.bw_lo = (target < self.btlbw.get()).then_some(target);
    }

    fn update_min_rtt(&mut self, now: Instant, rtt: Duration, bytes_in_flight: usize) {
        let expired = self
            .min_rtt_at
            .is_some_and(|at| now.saturating_duration_since(at) > MIN_RTT_WINDOW);
        if expired && self.competing_window.is_some() {
            self.rtt_before_probe = self.min_rtt;
        }
        if self.min_rtt.is_none_or(|m| rtt < m) || expired {
            self.min_rtt = Some(rtt);
            self.min_rtt_at = Some(now);
        }
        if expired && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.prior_cwnd = self.cwnd;
            self.probe_rtt_done = None;
        }
        if self.mode == Mode::ProbeRtt {
            self.handle_probe_rtt(now, bytes_in_flight);
        }
    }

    fn handle_probe_rtt(&mut self, now: Instant, bytes_in_flight: usize) {
        match self.probe_rtt_done {
            None if bytes_in_flight <= self.min_window() => {
                self.probe_rtt_done = Some(now + PROBE_RTT_TIME);
                self.probe_rtt_start = Some((now, self.delivered));
                self.probe_rtt_round_done = false;
                self.next_round_delivered = self.delivered;
            }
            None => {}
            Some(done) if self.probe_rtt_round_done && now >= done => {
                self.min_rtt_at = Some(now);
                if let (Some(before), Some(measured), Some((start, delivered))) = (
                    self.rtt_before_probe.take(),
                    self.min_rtt,
                    self.probe_rtt_start,
                ) {
                    // The few datagrams in flight wait for the peer's ACK delay: discount
                    // their spacing, as the delay rule does.
                    let datagrams = (self.delivered - delivered) / self.mtu as u64;
                    let spacing =
                        now.saturating_duration_since(start) / datagrams.clamp(1, 1 << 20) as u32;
                    if queue_delay(measured, before, spacing) <= COMPETING_QUEUE {
                        // With this flow's data out of it the queue drained: it was this
                        // flow's own.
                        self.competing_window = None;
                    }
                    // Either way the propagation time is the one measured before (ProbeRTT's
                    // samples carry the peer's ACK delay).
                    self.min_rtt = Some(before.min(measured));
                }
                self.cwnd = self.cwnd.max(self.prior_cwnd);
                if self.filled_pipe {
                    self.enter_probe_bw(now);
                } else {
                    self.mode = Mode::Startup;
                    self.pacing_gain = STARTUP_GAIN;
                    self.cwnd_gain = STARTUP_GAIN;
                }
            }
            Some(_) => {}
        }
    }

    /// Track how much more arrives in ACK bursts than the bandwidth explains (the peer
    /// acknowledges every 10 ms or every few datagrams, official RakNet once per update): the
    /// window must hold that much beyond the BDP, or on a short path with batched ACKs it
    /// would shrink to a few datagrams (BBRv2's `extra_acked`).
    fn update_aggregation(&mut self, now: Instant, acked: usize) {
        let bw = self.btlbw.get();
        let start = *self.aggregation_start.get_or_insert(now);
        let mut expected = bw * now.saturating_duration_since(start).as_secs_f64();
        if self.aggregation_bytes as f64 <= expected {
            // The ACKs kept up with the estimate: a new interval starts.
            self.aggregation_start = Some(now);
            self.aggregation_bytes = 0;
            expected = 0.0;
        }
        self.aggregation_bytes += acked as u64;
        // At most what the bandwidth delivers while a peer holds its ACKs (a longer burst is
        // not aggregation), and at most the window.
        let cap = if bw > 0.0 {
            (bw * MAX_ACK_AGGREGATION.as_secs_f64()).max(self.initial_window() as f64)
        } else {
            f64::MAX
        };
        let extra = (self.aggregation_bytes as f64 - expected)
            .min(self.cwnd as f64)
            .min(cap);
        self.extra_acked
            .update(self.round, extra.max(0.0), BW_WINDOW_ROUNDS);
    }

    fn set_cwnd(&mut self, acked: usize) {
        // The path holds the BDP plus what the peer's ACKs hold back (aggregation). In startup
        // the gain applies to both, so that with batched ACKs the window still doubles per
        // round; afterwards the aggregation is allowed for once.
        let extra_gain = if self.filled_pipe {
            1.0
        } else {
            self.cwnd_gain
        };
        let extra = extra_gain * self.extra_acked.get();
        let target = match self.bdp(self.cwnd_gain) {
            Some(bdp) => bdp + extra as usize + 3 * self.mtu,
            None => self.initial_window(),
        };
        if self.filled_pipe {
            self.cwnd = (self.cwnd + acked).min(target);
        } else if self.cwnd < target || self.delivered < self.initial_window() as u64 {
            self.cwnd += acked;
        }
        self.cwnd = self.cwnd.clamp(self.min_window(), self.max_window);
    }
}

impl Controller for Bbr {
    fn heap_bytes(&self) -> usize {
        use crate::memory::deque;
        deque(&self.btlbw.entries)
            + deque(&self.extra_acked.entries)
            + deque(&self.recent_round_mins)
            + deque(&self.recent_queues)
    }

    fn window(&self) -> usize {
        let cwnd = self.competing_window.unwrap_or(self.cwnd);
        if self.mode == Mode::ProbeRtt || self.timed_out {
            cwnd.min(self.min_window())
        } else {
            cwnd
        }
    }

    fn on_ack(&mut self, _seq: DatagramSeq, _bytes: usize, _app_limited: bool) {}

    fn on_delivery(&mut self, s: &DeliverySample) {
        self.timed_out = false;
        self.delivered = s.delivered;
        self.round_delivered_bytes += s.bytes;
        self.round_delivered_datagrams += 1;
        self.round_app_limited |= s.app_limited;
        let round_start = s.prior_delivered >= self.next_round_delivered;
        if round_start {
            self.next_round_delivered = s.delivered;
            self.round += 1;
            self.end_round(s.now);
            if self.mode == Mode::ProbeRtt && self.probe_rtt_done.is_some() {
                self.probe_rtt_round_done = true;
            }
        }
        if let Some(rate) = s.rate() {
            self.round_max_rate = self.round_max_rate.max(rate);
            // An application-limited sample only counts if it shows more than we knew.
            if !s.app_limited || rate >= self.btlbw.get() {
                self.btlbw.update(self.round, rate, BW_WINDOW_ROUNDS);
            }
        }
        if round_start && self.mode == Mode::Startup {
            self.check_full_pipe(s.app_limited);
        }
        if self.mode == Mode::Startup && self.filled_pipe {
            self.mode = Mode::Drain;
            self.pacing_gain = 1.0 / STARTUP_GAIN;
            self.cwnd_gain = STARTUP_GAIN;
        }
        if self.mode == Mode::Drain && self.bdp(1.0).is_some_and(|t| s.bytes_in_flight <= t) {
            self.enter_probe_bw(s.now);
        }
        if self.mode == Mode::ProbeBw {
            self.advance_cycle(s.now, s.bytes_in_flight);
        }
        if self.mode != Mode::ProbeBw || self.pacing_gain != 1.0 {
            self.round_cruising = false;
        }
        self.round_min_rtt = Some(self.round_min_rtt.map_or(s.rtt, |m| m.min(s.rtt)));
        self.update_min_rtt(s.now, s.rtt, s.bytes_in_flight);
        self.update_aggregation(s.now, s.bytes);
        self.set_cwnd(s.bytes);
        if let Some(window) = self.competing_window.as_mut().filter(|_| !s.app_limited) {
            // Slow start, or a datagram per window acknowledged (congestion avoidance).
            let growth = if self.competing_slow_start {
                s.bytes
            } else {
                (self.mtu * s.bytes / (*window).max(1)).max(1)
            };
            *window = (*window + growth).min(self.max_window);
        }
    }

    fn on_congestion_event(&mut self, _seq: DatagramSeq, event: CongestionEvent) {
        if event == CongestionEvent::Timeout {
            self.timed_out = true;
            self.round_timed_out = true;
            if let Some(window) = self.competing_window.as_mut() {
                self.competing_slow_start = false;
                *window = self.mtu * MIN_WINDOW_DATAGRAMS;
            }
        }
    }

    fn on_lost(&mut self, _seq: DatagramSeq, bytes: usize) {
        self.round_lost_bytes += bytes;
        self.round_lost_datagrams += 1;
        self.lost_in_cycle = true;
    }

    fn on_sent(&mut self, _seq: DatagramSeq) {}

    fn in_slow_start(&self) -> bool {
        self.mode == Mode::Startup || (self.competing_window.is_some() && self.competing_slow_start)
    }

    fn pacing_rate(&self, srtt: Duration) -> Option<f64> {
        if let Some(window) = self.competing_window {
            // As a window-based controller: 1.25 windows per round trip.
            let rtt = srtt.as_secs_f64();
            return (rtt > 0.0).then(|| 1.25 * window as f64 / rtt);
        }
        let rate = self.pacing_gain * self.bw();
        if self.filled_pipe {
            return Some(rate);
        }
        // Until the pipe is full the rate never falls below the initial window over the RTT:
        // the first samples (a ping, a window delayed by the peer's ACK delay) underestimate.
        let rtt = self.min_rtt.unwrap_or(srtt).as_secs_f64();
        let initial = self.pacing_gain * self.initial_window() as f64 / rtt;
        if rtt > 0.0 {
            Some(rate.max(initial))
        } else {
            (rate > 0.0).then_some(rate)
        }
    }
}

#[cfg(test)]
mod tests;
