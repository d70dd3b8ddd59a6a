//! Datagram-number bookkeeping: duplicate datagrams, gaps to NAK, and the pending
//! ACK/NAK sets (protocol reference §5.2).

use std::collections::VecDeque;
use std::time::Instant;

use crate::datagram::AckRange;
use crate::memory;
use crate::seq::DatagramSeq;

/// Datagram numbers remembered for duplicate detection, behind the highest received.
const HISTORY: u32 = 1024;
/// Datagram numbers, behind and including the highest, whose content fingerprint is kept: a
/// repeated number with other content is a new datagram (a peer that restarted its
/// numbering), not a copy.
const FINGERPRINTED: u32 = 64;
/// Most numbers NAKed for one gap (official 1000).
const MAX_NAK_PER_GAP: u32 = 1000;
/// A jump at least this far ahead of the highest number moves the window only once a
/// second datagram a little after it confirms it (a real sender numbers on from there). Until
/// then it is [`Arrival::Provisional`]: one forged datagram far ahead cannot push the real
/// peer's datagrams out of the window.
const JUMP: u32 = HISTORY;

/// What to do with an arriving data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// New: process it. `missing` are the numbers skipped before it, to NAK.
    New { missing: Option<AckRange> },
    /// A number seen recently, but with other content: the peer numbers datagrams anew
    /// (rak-rs restarts at 1 after the handshake). Process it, as official RakNet does.
    Reused,
    /// Further behind the highest number than the history reaches: official RakNet
    /// processes every older number. Only its reliable frames with fresh message indexes are
    /// taken (dropping it whole instead would let one forged far-ahead datagram make the real
    /// peer's data vanish, acknowledged and never delivered); its unreliable frames are not,
    /// so a forger guessing no counter cannot speak for the peer.
    FarBehind,
    /// At least [`JUMP`] ahead and not confirmed yet (see [`JUMP`]): taken as a
    /// [`Arrival::FarBehind`] one is, without moving the window.
    Provisional,
    /// Seen before, same content: acknowledge again, do not process.
    Duplicate,
    /// Implausibly far ahead: ignore entirely.
    Garbage,
}

/// A cheap fingerprint of a datagram's content, to tell a copy from a new datagram that
/// reuses a number. Not cryptographic: a forger can send any content under any number anyway.
pub(crate) fn fingerprint(bytes: &[u8]) -> u32 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    for &b in words.remainder() {
        h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
    }
    (h >> 32) as u32
}

/// Tracks which datagram numbers arrived, over a window behind the highest one.
#[derive(Debug)]
pub(crate) struct DatagramWindow {
    highest: DatagramSeq,
    bits: [u64; (HISTORY / 64) as usize],
    /// Fingerprints of the last [`FINGERPRINTED`] numbers, by number modulo its length.
    prints: [u32; FINGERPRINTED as usize],
    max_gap: u32,
    /// The last unconfirmed jump far ahead (see [`JUMP`]).
    provisional: Option<DatagramSeq>,
}

impl DatagramWindow {
    #[cfg(test)]
    pub(crate) fn new(max_gap: u32) -> Self {
        Self::starting_at(DatagramSeq::ZERO, max_gap)
    }

    /// A window expecting `first` as the first datagram number (0 on the wire; other
    /// values only in tests that cross the 2^24 wrap).
    pub(crate) fn starting_at(first: DatagramSeq, max_gap: u32) -> Self {
        // Start as if the datagram before `first` had arrived.
        let mut w = Self {
            highest: first.wrapping_sub(1),
            bits: [0; (HISTORY / 64) as usize],
            prints: [0; FINGERPRINTED as usize],
            max_gap,
            provisional: None,
        };
        w.set(w.highest);
        w
    }

    fn slot(seq: DatagramSeq) -> (usize, u64) {
        let i = seq.get() % HISTORY;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn set(&mut self, seq: DatagramSeq) {
        let (w, b) = Self::slot(seq);
        self.bits[w] |= b;
    }

    fn get(&self, seq: DatagramSeq) -> bool {
        let (w, b) = Self::slot(seq);
        self.bits[w] & b != 0
    }

    fn clear(&mut self, seq: DatagramSeq) {
        let (w, b) = Self::slot(seq);
        self.bits[w] &= !b;
    }

    fn print_slot(seq: DatagramSeq) -> usize {
        (seq.get() % FINGERPRINTED) as usize
    }

    /// Classify `seq`, whose content has fingerprint `print` ([`fingerprint`]), and record it
    /// if it is new.
    pub(crate) fn on_datagram(&mut self, seq: DatagramSeq, print: u32) -> Arrival {
        if seq.is_after(self.highest) {
            let d = seq.distance_from(self.highest);
            if d > self.max_gap {
                return Arrival::Garbage;
            }
            if d >= JUMP {
                let confirms = self
                    .provisional
                    .is_some_and(|p| seq.is_after(p) && seq.distance_from(p) < JUMP);
                if !confirms {
                    self.provisional = Some(seq);
                    return Arrival::Provisional;
                }
            }
            self.provisional = None;
            if d >= HISTORY {
                self.bits = [0; (HISTORY / 64) as usize];
            } else {
                let mut s = self.highest.next();
                while s != seq {
                    self.clear(s);
                    s = s.next();
                }
            }
            self.clear(seq);
            self.set(seq);
            self.prints[Self::print_slot(seq)] = print;
            let missing = (d > 1).then(|| {
                let end = seq.wrapping_sub(1);
                let start = end.wrapping_sub(d.min(MAX_NAK_PER_GAP + 1) - 2);
                AckRange { start, end }
            });
            self.highest = seq;
            Arrival::New { missing }
        } else {
            let behind = self.highest.distance_from(seq);
            // Only numbers this close have their fingerprint in the ring: later numbers that
            // share its slot are still ahead of the highest.
            let printed = behind < FINGERPRINTED;
            let slot = Self::print_slot(seq);
            if behind >= HISTORY {
                Arrival::FarBehind
            } else if !self.get(seq) {
                self.set(seq);
                if printed {
                    self.prints[slot] = print;
                }
                Arrival::New { missing: None }
            } else if printed && self.prints[slot] != print {
                self.prints[slot] = print;
                Arrival::Reused
            } else {
                Arrival::Duplicate
            }
        }
    }
}

impl DatagramWindow {
    /// Forgets that `seq` arrived: its content was refused (left unacknowledged for the
    /// sender to resend), so a copy of it that arrives later is processed afresh rather than
    /// acknowledged as a duplicate of something that was never taken.
    pub(crate) fn forget(&mut self, seq: DatagramSeq) {
        if !seq.is_after(self.highest) && self.highest.distance_from(seq) < HISTORY {
            self.clear(seq);
        }
    }
}

/// Sequence numbers waiting to be acknowledged (or negatively acknowledged), kept as
/// ranges. Ranges never cross the 2^24 wrap, since receivers compare plainly.
#[derive(Debug)]
pub(crate) struct PendingRanges {
    ranges: VecDeque<AckRange>,
    /// When the oldest pending number was added.
    pub(crate) since: Option<Instant>,
    count: usize,
    /// Numbers added since the last `take`.
    numbers: usize,
    /// Most ranges kept; numbers that would open another are not kept.
    max_ranges: usize,
}

impl Default for PendingRanges {
    fn default() -> Self {
        Self::with_max_ranges(usize::MAX)
    }
}

impl PendingRanges {
    /// Heap bytes held (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        memory::deque(&self.ranges)
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        memory::trim_deque(&mut self.ranges);
    }

    /// Ranges to NAK: at most [`MAX_NAK_RANGES`], since a late datagram looks its number up
    /// among them. A NAK only hastens a resend the sender's timeout makes anyway, so a number
    /// left out costs at most that wait.
    pub(crate) fn naks() -> Self {
        Self::with_max_ranges(MAX_NAK_RANGES)
    }

    fn with_max_ranges(max_ranges: usize) -> Self {
        Self {
            ranges: VecDeque::new(),
            since: None,
            count: 0,
            numbers: 0,
            max_ranges,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// How many sequence numbers were added since the ranges were last taken.
    pub(crate) fn numbers(&self) -> usize {
        self.numbers
    }

    pub(crate) fn push(&mut self, now: Instant, seq: DatagramSeq) {
        if let Some(last) = self.ranges.back_mut() {
            if seq.get() != 0 && last.end.next() == seq {
                last.end = seq;
                self.numbers += 1;
                return;
            }
        }
        if self.ranges.len() >= self.max_ranges {
            return;
        }
        self.since.get_or_insert(now);
        self.numbers += 1;
        self.ranges.push_back(AckRange::single(seq));
        self.count += 1;
    }

    pub(crate) fn push_range(&mut self, now: Instant, range: AckRange) {
        // Split at the wrap so that start <= end holds numerically.
        let wraps = range.start.get() > range.end.get();
        if self.ranges.len() + 1 + usize::from(wraps) > self.max_ranges {
            return;
        }
        self.since.get_or_insert(now);
        if wraps {
            self.ranges.push_back(AckRange {
                start: range.start,
                end: DatagramSeq::MAX,
            });
            self.ranges.push_back(AckRange {
                start: DatagramSeq::ZERO,
                end: range.end,
            });
            self.count += 2;
        } else {
            self.ranges.push_back(range);
            self.count += 1;
        }
    }

    /// Withdraw `seq` (a NAKed datagram that arrived after all).
    pub(crate) fn remove(&mut self, seq: DatagramSeq) {
        let s = seq.get();
        let Some(i) = self
            .ranges
            .iter()
            .position(|r| r.start.get() <= s && s <= r.end.get())
        else {
            return;
        };
        let r = self.ranges[i];
        match (r.start == seq, r.end == seq) {
            (true, true) => {
                self.ranges.remove(i);
            }
            (true, false) => self.ranges[i].start = seq.next(),
            (false, true) => self.ranges[i].end = seq.wrapping_sub(1),
            (false, false) => {
                self.ranges[i].end = seq.wrapping_sub(1);
                // Full: the numbers above `seq` are not kept (their resends come on the
                // sender's timeout), so late datagrams cannot grow the list either.
                if self.ranges.len() < self.max_ranges {
                    self.ranges.insert(
                        i + 1,
                        AckRange {
                            start: seq.next(),
                            end: r.end,
                        },
                    );
                }
            }
        }
        self.count = self.ranges.len();
        if self.ranges.is_empty() {
            self.since = None;
        }
    }

    /// Take ranges whose encoding fits in `budget` bytes.
    pub(crate) fn take(&mut self, budget: usize) -> Vec<AckRange> {
        let mut out = Vec::new();
        let mut used = 0;
        while let Some(r) = self.ranges.front() {
            if used + r.encoded_len() > budget || out.len() == usize::from(u16::MAX) {
                break;
            }
            used += r.encoded_len();
            out.extend(self.ranges.pop_front());
        }
        self.count = self.ranges.len();
        if self.ranges.is_empty() {
            self.since = None;
            self.numbers = 0;
        }
        out
    }
}

/// Most ranges a connection keeps to NAK (see [`PendingRanges::naks`]): more than 5 ms (the
/// NAK delay) of a lossy peer's gaps, and few enough that looking a late datagram up among
/// them costs little. Without a bound a peer sending every other number (each datagram
/// opens a gap) made every datagram scan all of the gaps opened before it.
const MAX_NAK_RANGES: usize = 256;

/// How many later ACK datagrams repeat a range after it was first sent.
const ACK_REPEATS: u8 = 2;
/// Ranges remembered for repeating; older ones are forgotten first.
const MAX_REPEATED_RANGES: usize = 32;

/// Recently sent ACK ranges, repeated in the next few ACK datagrams.
///
/// RakNet ACKs are not cumulative and are never acknowledged themselves: when an ACK datagram
/// is lost, the sender learns of those datagrams only through its retransmission timeout,
/// resends them needlessly and collapses its window. Repeating each range in the next
/// [`ACK_REPEATS`] ACKs (which go out anyway, so no datagram is added) makes that need the
/// loss of three ACKs in a row. Repeats cost a few bytes: consecutive ranges merge. Senders
/// ignore acknowledgements of datagrams they already resolved (official RakNet included).
#[derive(Debug, Default)]
pub(crate) struct AckRepeats {
    sent: VecDeque<(AckRange, u8)>,
}

impl AckRepeats {
    /// Heap bytes held (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        memory::deque(&self.sent)
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        memory::trim_deque(&mut self.sent);
    }

    /// Add the ranges sent recently to `ranges` (fresh ones about to be sent), as far as
    /// `budget` bytes allow, merge what touches, and remember the fresh ones for repeating.
    pub(crate) fn add_to(&mut self, ranges: &mut Vec<AckRange>, budget: usize) {
        let mut used: usize = ranges.iter().map(AckRange::encoded_len).sum();
        let fresh = ranges.len();
        for (range, left) in &mut self.sent {
            if used + range.encoded_len() > budget || ranges.len() == usize::from(u16::MAX) {
                break;
            }
            used += range.encoded_len();
            ranges.push(*range);
            *left -= 1;
        }
        self.sent.retain(|(_, left)| *left > 0);
        for range in &ranges[..fresh] {
            self.sent.push_back((*range, ACK_REPEATS));
        }
        while self.sent.len() > MAX_REPEATED_RANGES {
            self.sent.pop_front();
        }
        merge(ranges);
    }
}

/// Sort ranges and merge those that overlap or touch, in place. Ranges never cross the 2^24
/// wrap, so plain numeric order is right.
fn merge(ranges: &mut Vec<AckRange>) {
    ranges.sort_unstable_by_key(|r| r.start.get());
    ranges.dedup_by(|next, kept| {
        let touches = next.start.get() <= kept.end.get().saturating_add(1);
        if touches && next.end.get() > kept.end.get() {
            kept.end = next.end;
        }
        touches
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u32) -> DatagramSeq {
        DatagramSeq::new(n)
    }

    impl DatagramWindow {
        /// A datagram whose content is told by its number (copies are identical).
        fn on(&mut self, seq: DatagramSeq) -> Arrival {
            self.on_datagram(seq, seq.get())
        }
    }

    #[test]
    fn in_order_duplicates_and_gaps() {
        let mut w = DatagramWindow::new(50_000);
        assert_eq!(w.on(s(0)), Arrival::New { missing: None });
        assert_eq!(w.on(s(1)), Arrival::New { missing: None });
        assert_eq!(w.on(s(1)), Arrival::Duplicate);
        assert_eq!(
            w.on(s(4)),
            Arrival::New {
                missing: Some(AckRange {
                    start: s(2),
                    end: s(3)
                })
            }
        );
        assert_eq!(
            w.on(s(3)),
            Arrival::New { missing: None },
            "late arrival is new"
        );
        assert_eq!(w.on(s(3)), Arrival::Duplicate);
        assert_eq!(w.on(s(60_000)), Arrival::Garbage);
    }

    #[test]
    fn a_forgotten_number_is_new_again() {
        let mut w = DatagramWindow::new(50_000);
        for n in 0..5 {
            w.on(s(n));
        }
        w.forget(s(4));
        w.forget(s(2));
        assert_eq!(w.on(s(4)), Arrival::New { missing: None });
        assert_eq!(w.on(s(2)), Arrival::New { missing: None });
        assert_eq!(w.on(s(2)), Arrival::Duplicate);
        // Ahead of the highest, or beyond the history: nothing to forget.
        w.forget(s(9));
        assert_eq!(
            w.on(s(9)),
            Arrival::New {
                missing: Some(AckRange {
                    start: s(5),
                    end: s(8)
                })
            }
        );
    }

    #[test]
    fn a_reused_number_with_other_content_is_new_and_a_copy_is_not() {
        let mut w = DatagramWindow::new(50_000);
        // A peer that numbered its handshake 1, 2 and starts again at 1 (rak-rs).
        for n in [1, 2] {
            assert!(matches!(w.on_datagram(s(n), 100 + n), Arrival::New { .. }));
        }
        assert_eq!(w.on_datagram(s(1), 7), Arrival::Reused);
        assert_eq!(w.on_datagram(s(1), 7), Arrival::Duplicate, "a copy of it");
        assert_eq!(w.on_datagram(s(2), 102), Arrival::Duplicate, "a copy");
        assert_eq!(w.on_datagram(s(2), 8), Arrival::Reused);
        assert_eq!(w.on_datagram(s(3), 9), Arrival::New { missing: None });
        // Beyond the fingerprinted numbers a seen number is a duplicate, as before.
        assert!(matches!(w.on_datagram(s(100), 0), Arrival::New { .. }));
        assert_eq!(w.on_datagram(s(3), 10), Arrival::Duplicate);
    }

    #[test]
    fn a_jump_far_ahead_is_provisional_until_a_second_datagram_confirms_it() {
        let mut w = DatagramWindow::new(50_000);
        assert!(matches!(w.on(s(0)), Arrival::New { .. }));
        // One datagram far ahead (forged, say) does not move the window...
        assert_eq!(w.on(s(50_000)), Arrival::Provisional);
        for n in 1..10 {
            assert_eq!(w.on(s(n)), Arrival::New { missing: None });
        }
        assert_eq!(w.on(s(50_000)), Arrival::Provisional, "nor does a copy");
        assert_eq!(w.on(s(20_000)), Arrival::Provisional, "nor one before it");
        // ...until one a little after the last confirms it (a real sender numbers on).
        assert!(matches!(w.on(s(20_003)), Arrival::New { missing: Some(_) }));
        assert_eq!(w.on(s(20_001)), Arrival::New { missing: None });
        // What is then far behind is taken only as far-behind.
        assert_eq!(w.on(s(5)), Arrival::FarBehind);
    }

    #[test]
    fn fingerprints_tell_content_apart() {
        let a = fingerprint(b"\x40\x00\x28\x87\x00\x01\x02\x03");
        assert_eq!(a, fingerprint(b"\x40\x00\x28\x87\x00\x01\x02\x03"));
        assert_ne!(a, fingerprint(b"\x40\x00\x28\x87\x01\x01\x02\x03"));
        assert_ne!(a, fingerprint(b"\x40\x00\x28\x87\x00\x01\x02\x03\x00"));
        assert_ne!(fingerprint(b""), fingerprint(b"\x00"));
    }

    #[test]
    fn first_datagram_after_a_gap_naks_from_zero() {
        let mut w = DatagramWindow::new(50_000);
        assert_eq!(
            w.on(s(2)),
            Arrival::New {
                missing: Some(AckRange {
                    start: s(0),
                    end: s(1)
                })
            }
        );
    }

    #[test]
    fn window_wraps_at_2_pow_24() {
        let mut w = DatagramWindow::new(50_000);
        let mut seq = s(0);
        for _ in 0..5 {
            assert!(matches!(w.on(seq), Arrival::New { .. }));
            seq = seq.next();
        }
        let mut w = DatagramWindow::new(50_000);
        // Walk up to just below the wrap in gaps the window accepts, each jump confirmed.
        let mut n = 0;
        while n < 0x00ff_fff0 {
            assert!(matches!(
                w.on(s(n)),
                Arrival::New { .. } | Arrival::Provisional
            ));
            assert!(matches!(w.on(s(n + 1)), Arrival::New { .. }));
            n = (n + 40_000).min(0x00ff_fff0);
        }
        assert_eq!(w.on(s(0x00ff_fff0)), Arrival::Provisional);
        assert!(matches!(w.on(s(0x00ff_fff1)), Arrival::New { .. }));
        assert_eq!(w.on(s(0x00ff_fff0)), Arrival::New { missing: None });
        for n in 0x00ff_fff2..=0x00ff_ffff {
            assert_eq!(w.on(s(n)), Arrival::New { missing: None });
        }
        assert_eq!(w.on(s(0)), Arrival::New { missing: None });
        assert_eq!(w.on(s(0x00ff_fffe)), Arrival::Duplicate);
        assert_eq!(
            w.on(s(3)),
            Arrival::New {
                missing: Some(AckRange {
                    start: s(1),
                    end: s(2)
                })
            }
        );
    }

    #[test]
    fn naks_per_gap_are_capped() {
        let mut w = DatagramWindow::new(50_000);
        // (The window starts as if 2^24 - 1 had come: 1,001 ahead.)
        let Arrival::New { missing: Some(r) } = w.on(s(1_000)) else {
            panic!()
        };
        assert_eq!(r.len(), MAX_NAK_PER_GAP);
        let mut w = DatagramWindow::new(50_000);
        assert_eq!(w.on(s(20_000)), Arrival::Provisional);
        let Arrival::New { missing: Some(r) } = w.on(s(20_001)) else {
            panic!()
        };
        assert_eq!(r.len(), MAX_NAK_PER_GAP);
        assert_eq!(r.end, s(20_000));
    }

    #[test]
    fn naks_keep_a_bounded_number_of_ranges() {
        // A peer sending every other number: each datagram opens a gap of one.
        let t = Instant::now();
        let mut w = DatagramWindow::new(50_000);
        let mut naks = PendingRanges::naks();
        for n in 0..10_000u32 {
            let Arrival::New { missing } = w.on_datagram(s(2 * n + 1), 0) else {
                panic!("{n} not new");
            };
            naks.push_range(t, missing.expect("a gap before every datagram"));
        }
        assert_eq!(naks.len(), MAX_NAK_RANGES);
        // A late datagram inside a kept range splits it only while there is room.
        let mut wide = PendingRanges::naks();
        wide.push_range(
            t,
            AckRange {
                start: s(1),
                end: s(49_998),
            },
        );
        for n in 1..1000u32 {
            wide.remove(s(2 * n));
        }
        assert_eq!(wide.len(), MAX_NAK_RANGES);
        // A late datagram among the kept ones is still withdrawn; merging never stops.
        naks.remove(s(2));
        assert_eq!(naks.len(), MAX_NAK_RANGES - 1);
        naks.push(t, s(1_000_000));
        assert_eq!(naks.len(), MAX_NAK_RANGES);
        let taken = naks.take(usize::MAX);
        assert_eq!(taken.first(), Some(&AckRange::single(s(0))));
        assert_eq!(taken.len(), MAX_NAK_RANGES);
        // Taken, the room is there again.
        naks.push(t, s(1_000_002));
        assert_eq!(naks.len(), 1);
        // ACKs are not bounded (a number left out would be resent for nothing).
        let mut acks = PendingRanges::default();
        for n in 0..1000u32 {
            acks.push(t, s(2 * n));
        }
        assert_eq!(acks.len(), 1000);
    }

    #[test]
    fn pending_ranges_merge_and_split_at_the_wrap() {
        let t = Instant::now();
        let mut p = PendingRanges::default();
        for n in [5, 6, 7, 9] {
            p.push(t, s(n));
        }
        p.push(t, DatagramSeq::MAX);
        p.push(t, s(0));
        let taken = p.take(1000);
        assert_eq!(
            taken,
            vec![
                AckRange {
                    start: s(5),
                    end: s(7)
                },
                AckRange::single(s(9)),
                AckRange::single(DatagramSeq::MAX),
                AckRange::single(s(0)),
            ]
        );
        assert!(p.is_empty() && p.since.is_none());
        p.push_range(
            t,
            AckRange {
                start: s(10),
                end: s(14),
            },
        );
        p.remove(s(12));
        p.remove(s(10));
        p.remove(s(14));
        assert_eq!(
            p.take(1000),
            vec![AckRange::single(s(11)), AckRange::single(s(13))]
        );
        p.push(t, s(20));
        p.remove(s(20));
        assert!(p.is_empty() && p.since.is_none());
        p.push_range(
            t,
            AckRange {
                start: s(0x00ff_fffe),
                end: s(1),
            },
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p.take(7).len(), 1, "budget respected");
        assert_eq!(p.len(), 1);
    }

    fn r(start: u32, end: u32) -> AckRange {
        AckRange {
            start: s(start),
            end: s(end),
        }
    }

    #[test]
    fn ack_ranges_are_repeated_in_the_next_two_acks_and_merged() {
        let mut rep = AckRepeats::default();
        let mut first = vec![r(0, 15)];
        rep.add_to(&mut first, 1400);
        assert_eq!(first, [r(0, 15)]);
        let mut second = vec![r(16, 31)];
        rep.add_to(&mut second, 1400);
        assert_eq!(second, [r(0, 31)], "repeat merged with the fresh range");
        let mut third = vec![r(40, 40)];
        rep.add_to(&mut third, 1400);
        assert_eq!(third, [r(0, 31), r(40, 40)]);
        let mut fourth = vec![r(41, 50)];
        rep.add_to(&mut fourth, 1400);
        assert_eq!(
            fourth,
            [r(16, 31), r(40, 50)],
            "0-15 was repeated twice already"
        );
        let mut fifth = vec![];
        rep.add_to(&mut fifth, 1400);
        assert_eq!(fifth, [r(40, 50)]);
        let mut sixth = vec![];
        rep.add_to(&mut sixth, 1400);
        assert_eq!(sixth, [r(41, 50)]);
        let mut seventh = vec![];
        rep.add_to(&mut seventh, 1400);
        assert!(seventh.is_empty());
    }

    #[test]
    fn ack_repeats_stay_within_the_budget_and_the_wrap() {
        let mut rep = AckRepeats::default();
        let top = DatagramSeq::MAX.get();
        let mut first = vec![r(top - 3, top), r(0, 2)];
        rep.add_to(&mut first, 1400);
        assert_eq!(
            first,
            [r(0, 2), r(top - 3, top)],
            "no merge across the wrap"
        );
        // Only one 7-byte range fits beside the fresh single (4 bytes) in 11 bytes.
        let mut second = vec![r(10, 10)];
        rep.add_to(&mut second, 11);
        assert_eq!(second, [r(10, 10), r(top - 3, top)]);
        // At most MAX_REPEATED_RANGES are remembered.
        for i in 0..100 {
            rep.add_to(&mut vec![r(1000 + 2 * i, 1000 + 2 * i)], 0);
        }
        assert_eq!(rep.sent.len(), MAX_REPEATED_RANGES);
    }
}
