//! Clock synchronisation from connected ping/pong and the handshake (protocol reference
//! §13): the remote clock's offset, taken from the lowest-RTT of the recent samples.

/// Samples kept (official RakNet: 5).
const SAMPLES: usize = 5;

#[derive(Debug, Clone, Copy)]
struct Sample {
    ping_ms: u64,
    /// Remote clock minus the local midpoint of the round trip.
    differential: i64,
}

#[derive(Debug, Default)]
pub(crate) struct ClockSync {
    samples: [Option<Sample>; SAMPLES],
    next: usize,
}

impl ClockSync {
    /// Add a sample: we sent at `sent_ms` (local), the peer stamped `remote_ms`, we got
    /// the answer at `now_ms` (local).
    pub(crate) fn add(&mut self, sent_ms: u64, now_ms: u64, remote_ms: u64) {
        if now_ms < sent_ms {
            return;
        }
        let midpoint = now_ms / 2 + sent_ms / 2;
        let sample = Sample {
            ping_ms: now_ms - sent_ms,
            differential: remote_ms.wrapping_sub(midpoint) as i64,
        };
        self.samples[self.next] = Some(sample);
        self.next = (self.next + 1) % SAMPLES;
    }

    fn best(&self) -> Option<Sample> {
        self.samples
            .iter()
            .flatten()
            .min_by_key(|s| s.ping_ms)
            .copied()
    }

    /// Remote clock minus local clock, in milliseconds.
    pub(crate) fn differential(&self) -> Option<i64> {
        self.best().map(|s| s.differential)
    }

    /// The lowest recent ping, in milliseconds.
    pub(crate) fn lowest_ping(&self) -> Option<u64> {
        self.best().map(|s| s.ping_ms)
    }

    /// Convert a remote time to local time.
    pub(crate) fn to_local(&self, remote_ms: u64) -> Option<u64> {
        self.differential()
            .map(|d| (remote_ms as i64).wrapping_sub(d) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_ping_sample_wins() {
        let mut c = ClockSync::default();
        assert_eq!(c.differential(), None);
        // Remote clock is local + 1000; a 20 ms round trip with the stamp at its midpoint.
        c.add(100, 120, 1110);
        assert_eq!(c.differential(), Some(1000));
        // A noisy sample with a long ping does not displace it.
        c.add(200, 400, 1250);
        assert_eq!(c.differential(), Some(1000));
        assert_eq!(c.to_local(5000), Some(4000));
        assert_eq!(c.lowest_ping(), Some(20));
        for i in 0..5 {
            c.add(1000 + i, 1060 + i, 2030 + i);
        }
        assert_eq!(
            c.lowest_ping(),
            Some(60),
            "only the last five samples count"
        );
    }
}
