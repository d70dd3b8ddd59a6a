//! The peer's message rate ([`Limits::max_messages_per_sec`](crate::Limits::max_messages_per_sec)).

use crate::admission::TokenBucket;

/// Most a pause earns: up to a minute's worth of messages.
const MAX_PAUSE_CREDIT_MS: u64 = 60_000;

/// Messages the peer may still send: `per_sec` a second with bursts of two seconds' worth,
/// plus what it was kept from sending while the application paused receiving, which comes
/// again at once when receiving resumes and is not the peer going too fast. Counted where
/// messages arrive, before the application sees them, so a handler that falls behind does
/// not make its peer look faster than it is.
#[derive(Debug)]
pub(crate) struct MessageRate {
    /// 0: no limit.
    per_sec: u64,
    bucket: TokenBucket,
    /// Messages the peer may send beyond the rate, earned while paused.
    credit: u64,
    paused_at_ms: Option<u64>,
}

impl MessageRate {
    pub(crate) fn new(per_sec: Option<u32>, now_ms: u64) -> Self {
        let per_sec = u64::from(per_sec.unwrap_or(0));
        Self {
            per_sec,
            bucket: TokenBucket::full(2 * per_sec, now_ms),
            credit: 0,
            paused_at_ms: None,
        }
    }

    /// One more message from the peer at `now_ms`: `false` when it is over the rate.
    pub(crate) fn take(&mut self, now_ms: u64) -> bool {
        if self.per_sec == 0 {
            return true;
        }
        if self.credit > 0 {
            self.credit -= 1;
            return true;
        }
        self.bucket.take(now_ms, 1, self.per_sec, 2 * self.per_sec)
    }

    /// Receiving was paused (back-pressure, or no owner yet).
    pub(crate) fn pause(&mut self, now_ms: u64) {
        self.paused_at_ms.get_or_insert(now_ms);
    }

    /// Receiving resumes: the peer may send what it was kept from sending meanwhile (at the
    /// rate, up to a minute's worth) on top of the rate.
    pub(crate) fn resume(&mut self, now_ms: u64) {
        if let Some(at) = self.paused_at_ms.take() {
            let paused = now_ms.saturating_sub(at).min(MAX_PAUSE_CREDIT_MS);
            self.credit = self.credit.saturating_add(paused * self.per_sec / 1_000);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_of_two_seconds_then_the_rate() {
        let mut r = MessageRate::new(Some(100), 0);
        assert_eq!((0..300).filter(|_| r.take(0)).count(), 200);
        // 100 ms earn 10.
        assert_eq!((0..20).filter(|_| r.take(100)).count(), 10);
    }

    #[test]
    fn no_limit_takes_everything() {
        let mut r = MessageRate::new(None, 0);
        assert!((0..1_000_000).all(|_| r.take(0)));
    }

    #[test]
    fn a_pause_earns_what_the_peer_was_kept_from_sending() {
        let mut r = MessageRate::new(Some(100), 0);
        assert_eq!((0..300).filter(|_| r.take(0)).count(), 200);
        r.pause(0);
        // A second pause call does not move the start.
        r.pause(5_000);
        r.resume(10_000);
        // 10 s paused: 1,000 of credit, plus the bucket refilled to its burst (200).
        assert_eq!((0..2_000).filter(|_| r.take(10_000)).count(), 1_200);
        // At most a minute's worth.
        r.pause(20_000);
        r.resume(1_000_000);
        assert_eq!(
            (0..10_000).filter(|_| r.take(1_000_000)).count(),
            6_000 + 200
        );
    }
}
