//! Split-message reassembly, bounded in parts, concurrent messages and bytes, with
//! partial messages expiring when they stop making progress (protocol reference §5.4 and
//! §14 items 2-3).
//!
//! Fragments are copied into buffers of their own: a fragment is a slice of its received
//! datagram, so keeping the slice would keep the whole datagram alive, and a peer could pin
//! a 1,500-byte datagram with every 1-byte fragment while the accounting read 1 byte.

use std::collections::{BTreeMap, HashMap};

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::config::Limits;
use crate::error::Limit;
use crate::frame::{Frame, SplitHeader};
use crate::memory;

/// Why a fragment was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A soft limit (concurrent messages, held bytes): leave it unacknowledged so the
    /// sender retries later.
    Busy,
    /// The peer exceeded a hard limit: close the connection.
    Violation(Limit),
    /// Fragments of one message disagree on the count.
    Inconsistent,
}

#[derive(Debug)]
struct Partial {
    count: u32,
    parts: BTreeMap<u32, Bytes>,
    /// Payload bytes of the parts.
    bytes: usize,
    /// The first fragment's header, which carries the message's delivery metadata.
    first: Frame,
    /// The lowest fragment index not yet here, and since when it has been the lowest
    /// missing: a sender sends fragments in order and resends a lost one within its RTO, so
    /// a gap that stays open is a dead sender or one that never meant to finish.
    missing: u32,
    stalled: Instant,
}

impl Partial {
    /// What the budgets count for the parts held: payload plus [`Limits::PIECE_OVERHEAD`] each.
    fn counted(&self) -> usize {
        self.bytes + self.parts.len() * Limits::PIECE_OVERHEAD
    }
}

#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partials: HashMap<u16, Partial>,
    /// What the budgets count: payload plus [`Limits::PIECE_OVERHEAD`] per fragment.
    bytes: usize,
}

impl Reassembly {
    /// Heap bytes held: the partial messages, their fragment maps and payloads (see
    /// [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        let parts: usize = self
            .partials
            .values()
            .map(|p| memory::btree(&p.parts) + p.bytes)
            .sum();
        memory::map(&self.partials) + parts
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        memory::trim_map(&mut self.partials);
    }

    /// Bytes currently held, as the budgets count them (payload plus [`Limits::PIECE_OVERHEAD`] per
    /// fragment).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Messages currently being reassembled.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.partials.len()
    }

    /// Add a fragment; returns the whole message (as a frame without split header) once
    /// every fragment has arrived.
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        frame: Frame,
        split: SplitHeader,
        limits: &Limits,
    ) -> Result<Option<Frame>, Refusal> {
        if split.count > limits.max_split_parts {
            return Err(Refusal::Violation(Limit::SplitParts));
        }
        let len = frame.payload.len();
        if !self.partials.contains_key(&split.id) {
            if split.count == 1 {
                return Ok(Some(Frame {
                    split: None,
                    ..frame
                }));
            }
            if self.partials.len() >= limits.max_concurrent_splits {
                return Err(Refusal::Busy);
            }
        }
        if self.bytes + len + Limits::PIECE_OVERHEAD > limits.max_reassembly_bytes {
            return Err(Refusal::Busy);
        }
        let partial = self.partials.entry(split.id).or_insert_with(|| Partial {
            count: split.count,
            parts: BTreeMap::new(),
            bytes: 0,
            first: Frame {
                payload: Bytes::new(),
                split: None,
                ..frame.clone()
            },
            missing: 0,
            stalled: now,
        });
        if partial.count != split.count {
            return Err(Refusal::Inconsistent);
        }
        if partial.bytes + len > limits.max_message_bytes {
            return Err(Refusal::Violation(Limit::MessageBytes));
        }
        if partial.parts.contains_key(&split.index) {
            return Ok(None);
        }
        partial.bytes += len;
        self.bytes += len + Limits::PIECE_OVERHEAD;
        partial
            .parts
            .insert(split.index, Bytes::copy_from_slice(&frame.payload));
        if split.index == partial.missing {
            while partial.parts.contains_key(&partial.missing) {
                partial.missing += 1;
            }
            partial.stalled = now;
        }
        if partial.parts.len() < partial.count as usize {
            return Ok(None);
        }
        let Some(done) = self.partials.remove(&split.id) else {
            return Ok(None);
        };
        self.bytes -= done.counted();
        let mut out = BytesMut::with_capacity(done.bytes);
        for part in done.parts.values() {
            out.extend_from_slice(part);
        }
        Ok(Some(Frame {
            payload: out.freeze(),
            ..done.first
        }))
    }

    /// Drop the partial messages whose lowest missing fragment has been missing for `idle`;
    /// returns how many, and whether one of them was reliable. A reliable message's fragments
    /// are resent until they arrive, so only a dead sender or one that never meant to finish
    /// leaves one: the connection should close. An unreliable one's fragments may be lost.
    pub(crate) fn expire(&mut self, now: Instant, idle: Duration) -> (usize, bool) {
        let before = self.partials.len();
        let mut freed = 0;
        let mut reliable = false;
        self.partials.retain(|_, p| {
            let keep = now.saturating_duration_since(p.stalled) < idle;
            if !keep {
                freed += p.counted();
                reliable |= p.first.reliability.on_wire().is_reliable();
            }
            keep
        });
        self.bytes -= freed;
        (before - self.partials.len(), reliable)
    }

    /// Start the clocks of the gaps again (they could not be filled meanwhile).
    pub(crate) fn restart_stalls(&mut self, now: Instant) {
        for p in self.partials.values_mut() {
            p.stalled = now;
        }
    }

    /// When the oldest gap among the partial messages opened, if any is being reassembled.
    pub(crate) fn stalled_since(&self) -> Option<Instant> {
        self.partials.values().map(|p| p.stalled).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::Reliability;

    fn t0() -> Instant {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *T0.get_or_init(Instant::now)
    }

    fn frag(id: u16, index: u32, count: u32, data: &[u8]) -> (Frame, SplitHeader) {
        let split = SplitHeader { count, id, index };
        let mut f = Frame::new(Reliability::ReliableOrdered, Bytes::copy_from_slice(data));
        f.split = Some(split);
        (f, split)
    }

    #[test]
    fn reassembles_out_of_order_and_ignores_duplicates() {
        let limits = Limits::default();
        let mut r = Reassembly::default();
        let (f, s) = frag(7, 2, 3, b"ef");
        assert_eq!(r.insert(t0(), f, s, &limits), Ok(None));
        let (f, s) = frag(7, 0, 3, b"ab");
        assert_eq!(r.insert(t0(), f.clone(), s, &limits), Ok(None));
        assert_eq!(r.insert(t0(), f, s, &limits), Ok(None));
        assert_eq!(r.bytes(), 4 + 2 * Limits::PIECE_OVERHEAD);
        let (f, s) = frag(7, 1, 3, b"cd");
        let whole = r.insert(t0(), f, s, &limits).unwrap().unwrap();
        assert_eq!(&whole.payload[..], b"abcdef");
        assert_eq!(whole.split, None);
        assert_eq!((r.len(), r.bytes()), (0, 0));
    }

    #[test]
    fn limits_refuse_or_violate() {
        let limits = Limits {
            max_split_parts: 4,
            max_concurrent_splits: 1,
            max_reassembly_bytes: 2 * Limits::PIECE_OVERHEAD + 10,
            max_message_bytes: 6,
            ..Limits::default()
        };
        let mut r = Reassembly::default();
        let (f, s) = frag(1, 0, 5, b"x");
        assert_eq!(
            r.insert(t0(), f, s, &limits),
            Err(Refusal::Violation(Limit::SplitParts))
        );
        let (f, s) = frag(1, 0, 4, b"xxxx");
        assert_eq!(r.insert(t0(), f, s, &limits), Ok(None));
        let (f, s) = frag(2, 0, 2, b"y");
        assert_eq!(
            r.insert(t0(), f, s, &limits),
            Err(Refusal::Busy),
            "one concurrent split"
        );
        let (f, s) = frag(1, 1, 3, b"x");
        assert_eq!(r.insert(t0(), f, s, &limits), Err(Refusal::Inconsistent));
        let (f, s) = frag(1, 1, 4, b"xxx");
        assert_eq!(
            r.insert(t0(), f, s, &limits),
            Err(Refusal::Violation(Limit::MessageBytes))
        );
        assert_eq!(
            r.bytes(),
            4 + Limits::PIECE_OVERHEAD,
            "refused fragments hold nothing"
        );
    }

    #[test]
    fn every_fragment_counts_its_bookkeeping() {
        // One-byte fragments: what they hold is mostly their map entry and allocation.
        let limits = Limits {
            max_reassembly_bytes: 3 * (1 + Limits::PIECE_OVERHEAD),
            ..Limits::default()
        };
        let mut r = Reassembly::default();
        for index in 1..4 {
            let (f, s) = frag(1, index, 16, b"x");
            assert_eq!(r.insert(t0(), f, s, &limits), Ok(None));
        }
        let (f, s) = frag(1, 4, 16, b"x");
        assert_eq!(r.insert(t0(), f, s, &limits), Err(Refusal::Busy));
        assert_eq!(r.bytes(), 3 * (1 + Limits::PIECE_OVERHEAD));
        assert_eq!(
            r.expire(t0() + Duration::from_secs(60), Duration::from_secs(10))
                .0,
            1
        );
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn fragments_do_not_pin_their_datagram() {
        let limits = Limits::default();
        let mut r = Reassembly::default();
        let datagram = Bytes::from(vec![7u8; 1400]);
        let split = SplitHeader {
            count: 2,
            id: 1,
            index: 0,
        };
        let mut f = Frame::new(Reliability::ReliableOrdered, datagram.slice(100..101));
        f.split = Some(split);
        assert_eq!(r.insert(t0(), f, split, &limits), Ok(None));
        // The reassembly keeps its own 1-byte copy, not a view of the 1,400-byte datagram.
        assert!(datagram.is_unique(), "the datagram buffer is still shared");
        assert_eq!(r.bytes(), 1 + Limits::PIECE_OVERHEAD);
    }

    #[test]
    fn partial_messages_expire_without_progress() {
        let limits = Limits::default();
        let mut r = Reassembly::default();
        let (f, s) = frag(1, 0, 3, b"ab");
        r.insert(t0(), f, s, &limits).unwrap();
        let (f, s) = frag(2, 0, 2, b"cd");
        r.insert(t0() + Duration::from_secs(5), f, s, &limits)
            .unwrap();
        let idle = Duration::from_secs(10);
        assert_eq!(r.stalled_since(), Some(t0()));
        assert_eq!(r.expire(t0() + Duration::from_secs(9), idle), (0, false));
        assert_eq!(r.expire(t0() + Duration::from_secs(10), idle), (1, true));
        assert_eq!((r.len(), r.bytes()), (1, 2 + Limits::PIECE_OVERHEAD));
        assert_eq!(r.expire(t0() + Duration::from_secs(15), idle), (1, true));
        assert_eq!((r.len(), r.bytes()), (0, 0));
    }

    #[test]
    fn a_gap_held_open_stalls_however_many_fragments_come_behind_it() {
        let limits = Limits::default();
        let mut r = Reassembly::default();
        let idle = Duration::from_secs(10);
        // Fragments 1, 2, 3... arrive one every 4 s; fragment 0 never does.
        for i in 1..5 {
            let (f, s) = frag(1, i, 8, b"x");
            r.insert(t0() + Duration::from_secs(4 * u64::from(i)), f, s, &limits)
                .unwrap();
        }
        assert_eq!(r.expire(t0() + Duration::from_secs(13), idle), (0, false));
        assert_eq!(r.expire(t0() + Duration::from_secs(14), idle), (1, true));
        // In order, each fragment fills the gap: no stall however slow the sender.
        for i in 0..5 {
            let (f, s) = frag(2, i, 8, b"x");
            r.insert(t0() + Duration::from_secs(9 * u64::from(i)), f, s, &limits)
                .unwrap();
        }
        assert_eq!(r.expire(t0() + Duration::from_secs(40), idle), (0, false));
        assert_eq!(r.stalled_since(), Some(t0() + Duration::from_secs(36)));
        // An unreliable message's lost fragment is dropped, not a violation.
        let mut r = Reassembly::default();
        let (mut f, s) = frag(3, 1, 2, b"y");
        f.reliability = Reliability::Unreliable;
        r.insert(t0(), f, s, &limits).unwrap();
        assert_eq!(r.expire(t0() + Duration::from_secs(10), idle), (1, false));
    }
}
