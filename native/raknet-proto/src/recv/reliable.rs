//! Duplicate filter over reliable message indices (protocol reference §5.6).
//!
//! Remembers every index below `base` as received, and a bitmap of the indices received
//! ahead of it. The bitmap is a ring as large as the furthest index ahead needs (a power of
//! two of bits, 64 at least, up to the configured window): one frame lost ahead of 20 more
//! takes 8 bytes, not the 8 KB the whole window would. [`ReliableWindow::trim`] frees it
//! once nothing is held ahead of `base` (issue #35: allocated whole on a connection's first
//! out-of-order frame and kept for its life, it made a 1,000-connection server's memory
//! creep up by 16 MB as one connection after another met its first reordering).

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
    /// Bit `i mod 64·len` is index `i`'s, for indices after `base` (empty: none held).
    bits: Vec<u64>,
    /// Indices marked ahead of `base`.
    ahead: u32,
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
            ahead: 0,
            max_ahead: max_ahead.clamp(64, 1 << 22),
        }
    }

    fn capacity_bits(&self) -> u32 {
        self.bits.len() as u32 * 64
    }

    fn slot(&self, idx: MessageIndex) -> (usize, u64) {
        let i = idx.get() & (self.capacity_bits() - 1);
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn bit(&self, idx: MessageIndex) -> bool {
        if self.bits.is_empty() {
            return false;
        }
        let (w, b) = self.slot(idx);
        self.bits[w] & b != 0
    }

    pub(crate) fn check(&self, idx: MessageIndex) -> Check {
        if idx == self.base {
            return Check::Fresh;
        }
        if !idx.is_after(self.base) {
            return Check::Duplicate;
        }
        let distance = idx.distance_from(self.base);
        if distance > self.max_ahead {
            return Check::TooFarAhead;
        }
        if distance < self.capacity_bits() && self.bit(idx) {
            Check::Duplicate
        } else {
            Check::Fresh
        }
    }

    /// Record `idx` (which [`Self::check`] called fresh) as received.
    pub(crate) fn mark(&mut self, idx: MessageIndex) {
        if idx == self.base {
            self.base = self.base.next();
            while self.ahead > 0 && self.bit(self.base) {
                let (w, b) = self.slot(self.base);
                self.bits[w] &= !b;
                self.ahead -= 1;
                self.base = self.base.next();
            }
        } else {
            let distance = idx.distance_from(self.base);
            if distance >= self.capacity_bits() {
                self.grow(distance);
            }
            let (w, b) = self.slot(idx);
            self.bits[w] |= b;
            self.ahead += 1;
        }
    }

    /// Make the ring hold indices up to `distance` after `base`, keeping the marks.
    fn grow(&mut self, distance: u32) {
        let bits = (distance + 1).next_power_of_two().max(64);
        let mut grown = Self {
            bits: vec![0; (bits / 64) as usize],
            ..*self
        };
        if self.ahead > 0 {
            let mut idx = self.base;
            for _ in 0..self.capacity_bits() {
                if self.bit(idx) {
                    let (w, b) = grown.slot(idx);
                    grown.bits[w] |= b;
                }
                idx = idx.next();
            }
        }
        self.bits = grown.bits;
    }

    /// Free the bitmap when nothing is held ahead of `base` (once per keep-alive ping).
    pub(crate) fn trim(&mut self) {
        if self.ahead == 0 {
            self.bits = Vec::new();
        }
    }

    /// Heap bytes held: the bitmap.
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::memory::vec(&self.bits)
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

    #[test]
    fn the_bitmap_is_as_large_as_the_gap_and_freed_once_it_fills() {
        let mut w = ReliableWindow::new(65_536);
        for i in 1..=20 {
            w.mark(m(i));
        }
        // Index 0 missing, 20 ahead of it: one word, not the 65,536-bit window.
        assert_eq!(w.heap_bytes(), 8);
        w.trim();
        assert_eq!(w.heap_bytes(), 8, "held marks keep their bitmap");
        w.mark(m(5000));
        assert_eq!(w.heap_bytes(), 8192 / 8, "grown to the furthest index");
        assert_eq!(w.check(m(7)), Check::Duplicate, "marks survive the growth");
        assert_eq!(w.check(m(21)), Check::Fresh);
        w.mark(m(0));
        assert_eq!(w.base(), m(21));
        w.trim();
        assert_eq!(w.heap_bytes(), 1024, "5000 is still held ahead");
        for i in 21..5000 {
            w.mark(m(i));
        }
        assert_eq!(w.base(), m(5001));
        w.trim();
        assert_eq!(w.heap_bytes(), 0);
        assert_eq!(w.check(m(5000)), Check::Duplicate);
        assert_eq!(w.check(m(5001)), Check::Fresh);
    }

    proptest! {
        /// Against a set model: every index is fresh exactly once.
        #[test]
        fn matches_a_set_model(ops in proptest::collection::vec(0u32..600, 1..2000)) {
            let mut w = ReliableWindow::new(512);
            let mut seen = BTreeSet::new();
            for (n, i) in ops.into_iter().enumerate() {
                // Trimming (every 50th step) frees nothing a later check needs.
                if n % 50 == 49 {
                    w.trim();
                }
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
