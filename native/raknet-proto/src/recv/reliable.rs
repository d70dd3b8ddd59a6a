//! Duplicate filter over reliable message indices (protocol reference §5.6).
//!
//! Remembers every index below `base` as received, and a bitmap of the indices received
//! ahead of it. Memory is bounded by the configured window (a bitmap allocated on the
//! first out-of-order arrival).

use crate::seq::MessageIndex;

/// How an arriving reliable frame relates to what was received before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Not seen: process it, then [`ReliableWindow::mark`] it.
    Fresh,
    /// Already received.
    Duplicate,
    /// Further ahead of the oldest missing index than the window allows.
    TooFarAhead,
}

#[derive(Debug)]
pub(crate) struct ReliableWindow {
    base: MessageIndex,
    bits: Vec<u64>,
    max_ahead: u32,
}

impl ReliableWindow {
    #[cfg(test)]
    pub(crate) fn new(max_ahead: u32) -> Self {
        Self::starting_at(MessageIndex::ZERO, max_ahead)
    }

    /// A window expecting `first` as the first reliable index (tests of the 2^24 wrap).
    pub(crate) fn starting_at(first: MessageIndex, max_ahead: u32) -> Self {
        Self {
            base: first,
            bits: Vec::new(),
            max_ahead: max_ahead.clamp(64, 1 << 22),
        }
    }

    fn capacity_bits(&self) -> u32 {
        (self.max_ahead + 1).next_power_of_two().max(64)
    }

    fn slot(&self, idx: MessageIndex) -> (usize, u64) {
        let i = idx.get() & (self.capacity_bits() - 1);
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn bit(&self, idx: MessageIndex) -> bool {
        let (w, b) = self.slot(idx);
        self.bits.get(w).is_some_and(|x| x & b != 0)
    }

    pub(crate) fn check(&self, idx: MessageIndex) -> Check {
        if idx == self.base {
            return Check::Fresh;
        }
        if !idx.is_after(self.base) {
            return Check::Duplicate;
        }
        if idx.distance_from(self.base) > self.max_ahead {
            return Check::TooFarAhead;
        }
        if self.bit(idx) {
            Check::Duplicate
        } else {
            Check::Fresh
        }
    }

    /// Record `idx` (which [`Self::check`] called fresh) as received.
    pub(crate) fn mark(&mut self, idx: MessageIndex) {
        if idx == self.base {
            self.base = self.base.next();
            while self.bit(self.base) {
                let (w, b) = self.slot(self.base);
                self.bits[w] &= !b;
                self.base = self.base.next();
            }
        } else {
            if self.bits.is_empty() {
                self.bits = vec![0; (self.capacity_bits() / 64) as usize];
            }
            let (w, b) = self.slot(idx);
            self.bits[w] |= b;
        }
    }

    /// The oldest index not yet received.
    #[cfg(test)]
    pub(crate) fn base(&self) -> MessageIndex {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn m(n: u32) -> MessageIndex {
        MessageIndex::new(n)
    }

    #[test]
    fn in_order_out_of_order_and_limits() {
        let mut w = ReliableWindow::new(100);
        assert_eq!(w.check(m(0)), Check::Fresh);
        w.mark(m(0));
        assert_eq!(w.check(m(0)), Check::Duplicate);
        assert_eq!(w.check(m(2)), Check::Fresh);
        w.mark(m(2));
        assert_eq!(w.check(m(2)), Check::Duplicate);
        assert_eq!(w.base(), m(1));
        w.mark(m(1));
        assert_eq!(w.base(), m(3));
        assert_eq!(w.check(m(3 + 128)), Check::TooFarAhead);
        assert_eq!(w.check(m(3 + 100)), Check::Fresh);
    }

    #[test]
    fn wraps_at_2_pow_24() {
        let mut w = ReliableWindow::new(1000);
        w.base = MessageIndex::MAX.wrapping_sub(5);
        for i in 0..20 {
            let idx = MessageIndex::MAX.wrapping_sub(5).wrapping_add(i);
            assert_eq!(w.check(idx), Check::Fresh);
            w.mark(idx);
            assert_eq!(w.check(idx), Check::Duplicate);
        }
        assert_eq!(w.base(), m(14));
    }

    proptest! {
        /// Against a set model: every index is fresh exactly once.
        #[test]
        fn matches_a_set_model(ops in proptest::collection::vec(0u32..600, 1..2000)) {
            let mut w = ReliableWindow::new(512);
            let mut seen = BTreeSet::new();
            for i in ops {
                let idx = m(i);
                match w.check(idx) {
                    Check::Fresh => {
                        prop_assert!(seen.insert(i), "index {} fresh twice", i);
                        w.mark(idx);
                    }
                    Check::Duplicate => prop_assert!(seen.contains(&i)),
                    Check::TooFarAhead => prop_assert!(i - w.base().get() > 512),
                }
            }
        }
    }
}
