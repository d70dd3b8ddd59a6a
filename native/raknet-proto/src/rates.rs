//! Per-second rates, like renet's `network_info`: each connection's bytes, messages and
//! resends per second and its packet loss, and an endpoint's totals with the spread of its
//! connections' round-trip times, computed from [`ConnectionStats`] samples.
//!
//! Sans-IO like the rest: the caller samples (the NIF does once a second, [`SAMPLE_EVERY`],
//! while it has connections) and passes the interval in.

use std::time::{Duration, Instant};

use crate::ConnectionStats;

/// How often the NIF samples the counters.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The engine counters rates are computed from, at one instant.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    bytes_in: u64,
    bytes_out: u64,
    messages_in: u64,
    messages_out: u64,
    resends: u64,
    datagrams_out: u64,
    datagrams_lost: u64,
}

impl Counters {
    /// The counters of a connection's stats.
    pub fn of(s: &ConnectionStats) -> Self {
        Self {
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
            messages_in: s.messages_in,
            messages_out: s.messages_out,
            resends: s.resends,
            datagrams_out: s.datagrams_out,
            datagrams_lost: s.datagrams_lost,
        }
    }
}

/// Rates over the last sampling interval.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Rates {
    /// UDP payload bytes received per second.
    pub bytes_in: f64,
    /// UDP payload bytes sent per second.
    pub bytes_out: f64,
    /// Messages delivered per second.
    pub messages_in: f64,
    /// Messages sent per second.
    pub messages_out: f64,
    /// Reliable frames resent per second.
    pub resends: f64,
    /// Datagrams declared lost over datagrams sent in the interval, 0.0 to 1.0.
    pub packet_loss: f64,
}

impl Rates {
    /// The rates between two samples `secs` apart. Counters only grow; a smaller later value
    /// (never expected) counts as no change rather than wrapping.
    pub fn between(before: &Counters, after: &Counters, secs: f64) -> Self {
        let per_sec = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        let sent = after.datagrams_out.saturating_sub(before.datagrams_out);
        let lost = after.datagrams_lost.saturating_sub(before.datagrams_lost);
        Self {
            bytes_in: per_sec(before.bytes_in, after.bytes_in),
            bytes_out: per_sec(before.bytes_out, after.bytes_out),
            messages_in: per_sec(before.messages_in, after.messages_in),
            messages_out: per_sec(before.messages_out, after.messages_out),
            resends: per_sec(before.resends, after.resends),
            packet_loss: if sent == 0 {
                0.0
            } else {
                (lost as f64 / sent as f64).min(1.0)
            },
        }
    }

    /// Adds another connection's rates to an endpoint total. Loss is summed here and divided
    /// by the connection count in [`EndpointRates::finish`].
    fn add(&mut self, other: &Self) {
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.messages_in += other.messages_in;
        self.messages_out += other.messages_out;
        self.resends += other.resends;
        self.packet_loss += other.packet_loss;
    }
}

/// One connection's sampling state.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnRates {
    last: Counters,
    /// The rates of the last complete interval.
    pub rates: Rates,
}

impl ConnRates {
    /// Takes a sample `secs` after the previous one.
    pub fn sample(&mut self, now: Counters, secs: f64) -> Rates {
        self.rates = Rates::between(&self.last, &now, secs);
        self.last = now;
        self.rates
    }
}

/// How many of the worst connections [`EndpointRates`] names, by round-trip time and by loss.
pub const WORST: usize = 5;

/// One of an endpoint's worst connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worst<K> {
    /// The caller's key for the connection.
    pub key: K,
    /// Smoothed round-trip time, milliseconds.
    pub rtt_ms: f64,
    /// Packet loss over the interval, 0.0 to 1.0.
    pub packet_loss: f64,
}

/// The endpoint's totals over its connections, their round-trip times and its worst ones.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRates<K> {
    /// Sums over the connections; `packet_loss` is their mean.
    pub total: Rates,
    /// Round-trip time percentiles over the connections, in milliseconds: p50, p90, p99, max.
    pub rtt_ms: [f64; 4],
    /// The [`WORST`] connections with the longest round-trip times, longest first.
    pub worst_rtt: Vec<Worst<K>>,
    /// The [`WORST`] connections with the highest loss (and some loss), highest first.
    pub worst_loss: Vec<Worst<K>>,
}

impl<K> Default for EndpointRates<K> {
    fn default() -> Self {
        Self {
            total: Rates::default(),
            rtt_ms: [0.0; 4],
            worst_rtt: Vec::new(),
            worst_loss: Vec::new(),
        }
    }
}

/// Accumulates one sampling pass over the connections, each named by a key `K`.
#[derive(Debug)]
pub struct Pass<K> {
    total: Rates,
    rtts_us: Vec<u64>,
    conns: Vec<Worst<K>>,
}

impl<K> Default for Pass<K> {
    fn default() -> Self {
        Self {
            total: Rates::default(),
            rtts_us: Vec::new(),
            conns: Vec::new(),
        }
    }
}

impl<K: Copy> Pass<K> {
    /// Adds one connection's rates and smoothed round-trip time.
    pub fn add(&mut self, key: K, rates: &Rates, srtt: Duration) {
        self.total.add(rates);
        self.rtts_us.push(srtt.as_micros() as u64);
        self.conns.push(Worst {
            key,
            rtt_ms: srtt.as_micros() as f64 / 1000.0,
            packet_loss: rates.packet_loss,
        });
    }

    /// The endpoint's totals, round-trip percentiles and worst connections.
    pub fn finish(mut self) -> EndpointRates<K> {
        let worst = |conns: &mut Vec<Worst<K>>, by: fn(&Worst<K>) -> f64| {
            conns.sort_unstable_by(|a, b| by(b).total_cmp(&by(a)));
            conns.iter().take(WORST).copied().collect::<Vec<_>>()
        };
        let worst_rtt = worst(&mut self.conns, |w| w.rtt_ms);
        self.conns.retain(|w| w.packet_loss > 0.0);
        let worst_loss = worst(&mut self.conns, |w| w.packet_loss);
        let n = self.rtts_us.len();
        if n > 0 {
            self.total.packet_loss /= n as f64;
        }
        self.rtts_us.sort_unstable();
        let pct = |p: usize| -> f64 {
            if n == 0 {
                return 0.0;
            }
            // Nearest rank: the smallest value with at least p % of the samples at or below it.
            let rank = (p * n).div_ceil(100).clamp(1, n);
            self.rtts_us[rank - 1] as f64 / 1000.0
        };
        EndpointRates {
            total: self.total,
            rtt_ms: [pct(50), pct(90), pct(99), pct(100)],
            worst_rtt,
            worst_loss,
        }
    }
}

/// When the next sample is due, given when the last one was taken.
pub fn next_due(last: Instant) -> Instant {
    last + SAMPLE_EVERY
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(bytes: u64, msgs: u64, out: u64, lost: u64, resends: u64) -> Counters {
        Counters {
            bytes_in: bytes,
            bytes_out: 2 * bytes,
            messages_in: msgs,
            messages_out: 2 * msgs,
            resends,
            datagrams_out: out,
            datagrams_lost: lost,
        }
    }

    #[test]
    fn rates_are_deltas_over_the_interval() {
        let mut c = ConnRates::default();
        c.sample(counters(1_000, 10, 100, 0, 0), 1.0);
        let r = c.sample(counters(5_000, 50, 300, 20, 6), 2.0);
        assert_eq!(
            r,
            Rates {
                bytes_in: 2_000.0,
                bytes_out: 4_000.0,
                messages_in: 20.0,
                messages_out: 40.0,
                resends: 3.0,
                packet_loss: 0.1,
            }
        );
        // Nothing sent in the next interval: no loss rather than a division by zero.
        let r = c.sample(counters(5_000, 50, 300, 20, 6), 1.0);
        assert_eq!(r, Rates::default());
    }

    #[test]
    fn the_endpoint_sums_rates_and_ranks_round_trip_times() {
        let mut pass = Pass::default();
        for ms in 1..=100u64 {
            let r = Rates {
                bytes_in: 10.0,
                packet_loss: if ms <= 50 { 0.2 } else { 0.0 },
                ..Rates::default()
            };
            pass.add(ms, &r, Duration::from_millis(ms));
        }
        let e = pass.finish();
        assert_eq!(e.total.bytes_in, 1_000.0);
        assert!((e.total.packet_loss - 0.1).abs() < 1e-9);
        assert_eq!(e.rtt_ms, [50.0, 90.0, 99.0, 100.0]);
        let keys = |w: &[Worst<u64>]| w.iter().map(|w| w.key).collect::<Vec<_>>();
        assert_eq!(keys(&e.worst_rtt), [100, 99, 98, 97, 96]);
        // Only connections with loss: the five lossy ones with the highest keys come first
        // among equals in no particular order, so check the loss and that they are lossy.
        assert_eq!(e.worst_loss.len(), WORST);
        assert!(e
            .worst_loss
            .iter()
            .all(|w| w.key <= 50 && w.packet_loss == 0.2));
        assert_eq!(Pass::<u64>::default().finish(), EndpointRates::default());
    }
}
