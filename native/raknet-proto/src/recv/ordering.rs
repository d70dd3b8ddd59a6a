//! Ordered and sequenced delivery per channel, with official RakNet's semantics
//! (protocol reference §5.5).
//!
//! Each channel has one ordering index shared by ordered and sequenced messages, and a
//! sequencing index for sequenced ones. An ordered message waits for every earlier ordered
//! message; a sequenced message is delivered only if nothing newer on its channel was, and
//! it too waits for the ordered message its ordering index names.

use std::collections::HashMap;
use std::time::Instant;

use crate::memory;

use crate::seq::{OrderIndex, SequenceIndex};

/// A message a channel can hold while it waits for a gap: its size is counted, and it is
/// moved into a buffer of its own first.
pub(crate) trait Holdable {
    /// Bytes this message keeps alive.
    fn weight(&self) -> usize;
    /// The same message in a buffer of its own: a small message sliced out of a received
    /// datagram would otherwise keep that whole datagram alive for as long as it waits.
    fn detach(self) -> Self;
}

#[derive(Debug)]
struct Held<T> {
    ordered: Option<T>,
    sequenced: Vec<(SequenceIndex, T)>,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Self {
            ordered: None,
            sequenced: Vec::new(),
        }
    }
}

/// What happened to a message offered to a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Delivered, possibly with held messages behind it.
    Delivered,
    /// Held until the gap before it fills.
    Held,
    /// Older than what was delivered: dropped.
    Stale,
    /// The channel holds as many messages as allowed: refused (leave unacknowledged).
    Full,
}

#[derive(Debug)]
pub(crate) struct Channel<T> {
    expected: OrderIndex,
    next_sequence: SequenceIndex,
    /// Where the sequencing index starts again after each ordered message (0 on the wire).
    sequence_base: SequenceIndex,
    held: HashMap<u32, Held<T>>,
    held_count: usize,
    held_bytes: usize,
    /// The ordering index this channel has waited for since when, while it holds messages.
    stall: Option<(OrderIndex, Instant)>,
}

impl<T> Default for Channel<T> {
    fn default() -> Self {
        Self {
            expected: OrderIndex::ZERO,
            next_sequence: SequenceIndex::ZERO,
            sequence_base: SequenceIndex::ZERO,
            held: HashMap::new(),
            held_count: 0,
            held_bytes: 0,
            stall: None,
        }
    }
}

impl<T: Holdable> Channel<T> {
    /// Heap bytes held: the map of held messages and their payloads (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        let sequenced: usize = self.held.values().map(|h| memory::vec(&h.sequenced)).sum();
        memory::map(&self.held) + sequenced + self.held_bytes
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        memory::trim_map(&mut self.held);
        for h in self.held.values_mut() {
            memory::trim_vec(&mut h.sequenced);
        }
    }

    /// A channel expecting `first` as its first ordering and sequencing index (tests of the
    /// 2^24 wrap).
    pub(crate) fn starting_at(first: OrderIndex) -> Self {
        let base = SequenceIndex::new(first.get());
        Self {
            expected: first,
            next_sequence: base,
            sequence_base: base,
            ..Self::default()
        }
    }

    /// Count ordering index `order` as delivered before the channel existed (a client's
    /// 0x09 sent ordered, which the handshake took): the channel expects the next one.
    pub(crate) fn delivered_before(&mut self, order: OrderIndex) {
        self.expected = order.next();
        self.next_sequence = self.sequence_base;
    }

    /// Messages held waiting for a gap.
    pub(crate) fn held(&self) -> usize {
        self.held_count
    }

    /// Whether a message with ordering index `order` would wait (rather than be delivered
    /// or dropped as stale).
    pub(crate) fn would_hold(&self, order: OrderIndex) -> bool {
        order != self.expected && order.is_after(self.expected)
    }

    /// Bytes of the messages held waiting for a gap.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Note the time after offering messages: a channel that holds messages has waited for
    /// its expected ordering index since the first moment it was noted waiting for it.
    pub(crate) fn note_stall(&mut self, now: Instant) {
        self.stall = match self.stall {
            _ if self.held_count == 0 => None,
            Some((index, since)) if index == self.expected => Some((index, since)),
            _ => Some((self.expected, now)),
        };
    }

    /// Start the clock of the current wait again (the gap could not be filled meanwhile).
    pub(crate) fn restart_stall(&mut self, now: Instant) {
        if let Some((_, since)) = &mut self.stall {
            *since = now;
        }
    }

    /// Since when the channel has waited for one ordering index with messages held behind
    /// it (as of the last [`Channel::note_stall`]); `None` while it holds nothing.
    pub(crate) fn stalled_since(&self) -> Option<Instant> {
        self.stall.map(|(_, since)| since)
    }

    /// Whether a message with ordering index `order` would be taken: the expected one
    /// always is (it may release held ones), others only while fewer than `max_held` wait.
    pub(crate) fn can_take(&self, order: OrderIndex, max_held: usize) -> bool {
        order == self.expected || self.held_count < max_held
    }

    /// Offer a message; delivered messages are pushed to `out` in delivery order.
    /// `sequence` is `Some` for sequenced messages.
    pub(crate) fn offer(
        &mut self,
        order: OrderIndex,
        sequence: Option<SequenceIndex>,
        msg: T,
        max_held: usize,
        out: &mut Vec<T>,
    ) -> Outcome {
        if order != self.expected {
            if !order.is_after(self.expected) {
                return Outcome::Stale;
            }
            if self.held_count >= max_held {
                return Outcome::Full;
            }
            let slot = self.held.entry(order.get()).or_default();
            if sequence.is_none() && slot.ordered.is_some() {
                // Impossible with a sane peer (reliable frames are deduplicated).
                return Outcome::Stale;
            }
            let msg = msg.detach();
            self.held_bytes += msg.weight();
            match sequence {
                Some(s) => slot.sequenced.push((s, msg)),
                None => slot.ordered = Some(msg),
            }
            self.held_count += 1;
            return Outcome::Held;
        }
        match sequence {
            Some(s) => {
                if !self.accept_sequenced(s) {
                    return Outcome::Stale;
                }
                out.push(msg);
            }
            None => {
                out.push(msg);
                self.advance();
                self.drain(out);
            }
        }
        Outcome::Delivered
    }

    fn accept_sequenced(&mut self, s: SequenceIndex) -> bool {
        if s == self.next_sequence || s.is_after(self.next_sequence) {
            self.next_sequence = s.next();
            true
        } else {
            false
        }
    }

    fn advance(&mut self) {
        self.expected = self.expected.next();
        self.next_sequence = self.sequence_base;
    }

    fn drain(&mut self, out: &mut Vec<T>) {
        while let Some(mut slot) = self.held.remove(&self.expected.get()) {
            self.held_count -= slot.sequenced.len() + usize::from(slot.ordered.is_some());
            self.held_bytes -= slot
                .sequenced
                .iter()
                .map(|(_, m)| m.weight())
                .sum::<usize>()
                + slot.ordered.as_ref().map_or(0, Holdable::weight);
            // Sequenced messages of an ordering index come before its ordered message.
            // By distance from the next sequence index expected: a total order whatever the
            // peer's indexes (the half-range comparison is not one, and a sort may panic on
            // an inconsistent order).
            let from = self.next_sequence;
            slot.sequenced.sort_by_key(|(s, _)| s.distance_from(from));
            for (s, msg) in slot.sequenced {
                if self.accept_sequenced(s) {
                    out.push(msg);
                }
            }
            match slot.ordered {
                Some(msg) => {
                    out.push(msg);
                    self.advance();
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Holdable for &'static str {
        fn weight(&self) -> usize {
            self.len()
        }
        fn detach(self) -> Self {
            self
        }
    }

    impl Holdable for i32 {
        fn weight(&self) -> usize {
            4
        }
        fn detach(self) -> Self {
            self
        }
    }

    impl Holdable for u32 {
        fn weight(&self) -> usize {
            4
        }
        fn detach(self) -> Self {
            self
        }
    }

    fn o(n: u32) -> OrderIndex {
        OrderIndex::new(n)
    }
    fn s(n: u32) -> Option<SequenceIndex> {
        Some(SequenceIndex::new(n))
    }

    #[test]
    fn ordered_messages_wait_for_gaps() {
        let mut c = Channel::default();
        let mut out = Vec::new();
        assert_eq!(c.offer(o(1), None, "b", 10, &mut out), Outcome::Held);
        assert_eq!(c.offer(o(2), None, "cc", 10, &mut out), Outcome::Held);
        assert!(out.is_empty());
        assert_eq!(c.held_bytes(), 3, "held messages are weighed");
        assert_eq!(c.offer(o(0), None, "a", 10, &mut out), Outcome::Delivered);
        assert_eq!(out, ["a", "b", "cc"]);
        assert_eq!((c.held(), c.held_bytes()), (0, 0));
        assert_eq!(c.offer(o(1), None, "b", 10, &mut out), Outcome::Stale);
    }

    #[test]
    fn sequenced_never_goes_backward_and_waits_for_ordered() {
        let mut c = Channel::default();
        let mut out = Vec::new();
        c.offer(o(0), s(1), "s1", 10, &mut out);
        assert_eq!(c.offer(o(0), s(0), "s0", 10, &mut out), Outcome::Stale);
        assert_eq!(out, ["s1"]);
        // After ordered #0 the sequenced ones of ordering index 1 follow.
        assert_eq!(c.offer(o(1), s(0), "t0", 10, &mut out), Outcome::Held);
        c.offer(o(0), None, "ord0", 10, &mut out);
        assert_eq!(out, ["s1", "ord0", "t0"]);
        // A sequenced message sent before ordered #1 but arriving after it is dropped.
        c.offer(o(1), None, "ord1", 10, &mut out);
        assert_eq!(c.offer(o(1), s(5), "late", 10, &mut out), Outcome::Stale);
    }

    #[test]
    fn held_sequenced_messages_come_in_order_whatever_their_indexes() {
        // Indexes a peer chose across the whole 24-bit range: no consistent half-range
        // order exists among them; they come from the next one expected (0) upward.
        let mut c = Channel::default();
        let mut out = Vec::new();
        let picks = [0x80_0001, 3, 0xFF_FFFF, 0x40_0000, 0x80_0000, 1, 0xC0_0000];
        for (i, &n) in picks.iter().enumerate() {
            let message = u32::try_from(i).unwrap();
            assert_eq!(c.offer(o(1), s(n), message, 10, &mut out), Outcome::Held);
        }
        c.offer(o(0), None, 99, 10, &mut out);
        // Ordered #0, then the held ones ascending from 0 while each is ahead of the last.
        assert_eq!(out[0], 99);
        let delivered: Vec<u32> = out[1..].iter().map(|&m| picks[m as usize]).collect();
        assert!(delivered.windows(2).all(|w| w[0] < w[1]), "{delivered:x?}");
        assert_eq!(delivered[..3], [1, 3, 0x40_0000]);
    }

    #[test]
    fn held_limit_refuses() {
        let mut c = Channel::default();
        let mut out = Vec::new();
        assert_eq!(c.offer(o(1), None, 1, 1, &mut out), Outcome::Held);
        assert_eq!(c.offer(o(2), None, 2, 1, &mut out), Outcome::Full);
        c.offer(o(0), None, 0, 1, &mut out);
        assert_eq!(out, [0, 1]);
    }

    #[test]
    fn ordering_index_wraps() {
        let mut c: Channel<u32> = Channel {
            expected: OrderIndex::MAX,
            ..Channel::default()
        };
        let mut out = Vec::new();
        assert_eq!(c.offer(o(0), None, 2, 10, &mut out), Outcome::Held);
        c.offer(OrderIndex::MAX, None, 1, 10, &mut out);
        assert_eq!(out, [1, 2]);
    }
}
