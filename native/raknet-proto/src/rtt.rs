//! Round-trip time estimation and the retransmission timeout (protocol reference §9, §11).

use std::time::Duration;

/// Longest retransmission timeout (official RakNet's cap).
pub const MAX_RTO: Duration = Duration::from_millis(2000);
/// Added to every RTO (official RakNet: 30 ms).
const RTO_MARGIN: Duration = Duration::from_millis(30);
/// Smoothing gain for both mean and deviation, as in official RakNet.
const GAIN: f64 = 0.05;

/// Smoothed RTT and its deviation, fed by datagram send → ACK times.
///
/// The estimates are kept in seconds (`f64`) for the smoothing, and as `Duration`s, computed
/// once per sample: timers read them far more often than samples arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttEstimator {
    srtt: Option<f64>,
    rttvar: f64,
    latest: Duration,
    min: Option<Duration>,
    srtt_duration: Duration,
    rttvar_duration: Duration,
    rto: Duration,
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl RttEstimator {
    /// An estimator without samples.
    pub const fn new() -> Self {
        Self {
            srtt: None,
            rttvar: 0.0,
            latest: Duration::ZERO,
            min: None,
            srtt_duration: Duration::ZERO,
            rttvar_duration: Duration::ZERO,
            rto: MAX_RTO,
        }
    }

    /// Add a sample.
    pub fn update(&mut self, sample: Duration) {
        let s = sample.as_secs_f64();
        self.latest = sample;
        self.min = Some(self.min.map_or(sample, |m| m.min(sample)));
        match self.srtt {
            None => {
                self.srtt = Some(s);
                self.rttvar = s / 2.0;
            }
            Some(srtt) => {
                let delta = s - srtt;
                self.srtt = Some(srtt + GAIN * delta);
                self.rttvar += GAIN * (delta.abs() - self.rttvar);
            }
        }
        let duration = |secs: f64| Duration::try_from_secs_f64(secs).unwrap_or(MAX_RTO);
        self.srtt_duration = duration(self.srtt.unwrap_or(0.0));
        self.rttvar_duration = duration(self.rttvar);
        self.rto = (2 * self.srtt_duration + 4 * self.rttvar_duration + RTO_MARGIN).min(MAX_RTO);
    }

    /// Whether any sample has been taken.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// Smoothed RTT; zero before the first sample.
    pub fn srtt(&self) -> Duration {
        self.srtt_duration
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar_duration
    }

    /// The most recent sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The smallest sample seen.
    pub fn min(&self) -> Duration {
        self.min.unwrap_or(Duration::ZERO)
    }

    /// Retransmission timeout: min(2 s, 2·SRTT + 4·RTTVAR + 30 ms); 2 s without a sample.
    /// Like official RakNet there is no exponential backoff: a dead peer is detected by
    /// the connection timeout instead.
    pub fn rto(&self) -> Duration {
        self.rto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rto_follows_the_official_formula() {
        let mut r = RttEstimator::new();
        assert_eq!(r.rto(), MAX_RTO);
        r.update(Duration::from_millis(100));
        // srtt 100, rttvar 50: 200 + 200 + 30.
        assert_eq!(r.rto().as_millis(), 430);
        for _ in 0..500 {
            r.update(Duration::from_millis(100));
        }
        assert!(r.rto() < Duration::from_millis(240));
        r.update(Duration::from_secs(100));
        assert_eq!(r.rto(), MAX_RTO);
        assert_eq!(r.min(), Duration::from_millis(100));
    }
}
