//! The send queue: ordering/sequencing index assignment per channel (official semantics,
//! protocol reference §5.5), splitting at the MTU (§5.4), and RakNet's four priorities.

use std::collections::VecDeque;

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::Limits;
use crate::frame::{Frame, SplitHeader, ORDERING_CHANNELS};
use crate::memory;
use crate::reliability::Reliability;
use crate::seq::{OrderIndex, SequenceIndex};

/// RakNet's send priorities. `Immediate` (what the engine uses for its own control messages)
/// always goes first; the other three share what is left in the ratio 4 : 2 : 1, like
/// official RakNet's weighted interleaving, so a busy high-priority stream cannot starve
/// low-priority messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Priority {
    /// Sent before anything else.
    Immediate,
    /// Sent before medium and low.
    #[default]
    High,
    /// Sent before low.
    Medium,
    /// Sent last.
    Low,
}

/// How a message is sent: reliability, ordering channel and priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOptions {
    /// Delivery guarantee.
    pub reliability: Reliability,
    /// Ordering channel, 0-31 (used by ordered and sequenced reliabilities).
    pub channel: u8,
    /// Send priority.
    pub priority: Priority,
}

impl SendOptions {
    /// `reliability` on channel 0 at high priority.
    pub fn new(reliability: Reliability) -> Self {
        Self {
            reliability,
            channel: 0,
            priority: Priority::High,
        }
    }
}

/// Identifies a message sent with an ACK receipt. Counts from 1 per connection and skips 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiptId(pub u32);

/// A frame waiting for its first transmission.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) frame: Frame,
    pub(crate) receipt: Option<ReceiptId>,
    pub(crate) queued_at: Instant,
}

impl Pending {
    /// What the send budget counts for this frame: payload plus [`Limits::SEND_OVERHEAD`].
    pub(crate) fn cost(&self) -> usize {
        self.frame.payload.len() + Limits::SEND_OVERHEAD
    }
}

/// One priority's frames, the reliable and the unreliable apart, each in the order queued
/// and numbered by one counter: the next to send is the lower-numbered front, so the order
/// queued is the order sent. Unreliable frames expire from the front of their own queue:
/// O(expired), however deep the reliable backlog (a scan of the whole queue per expiry let
/// a slow reader make every timer cost its backlog).
#[derive(Debug, Default)]
struct Lane {
    reliable: VecDeque<(u64, Pending)>,
    unreliable: VecDeque<(u64, Pending)>,
}

impl Lane {
    fn is_empty(&self) -> bool {
        self.reliable.is_empty() && self.unreliable.is_empty()
    }

    fn len(&self) -> usize {
        self.reliable.len() + self.unreliable.len()
    }

    fn push_back(&mut self, seq: u64, p: Pending) {
        if p.frame.reliability.is_reliable() {
            self.reliable.push_back((seq, p));
        } else {
            self.unreliable.push_back((seq, p));
        }
    }

    /// Whether the next frame is the unreliable queue's (`None`: the lane is empty).
    fn next_is_unreliable(&self) -> Option<bool> {
        match (self.reliable.front(), self.unreliable.front()) {
            (None, None) => None,
            (Some(_), None) => Some(false),
            (None, Some(_)) => Some(true),
            (Some((r, _)), Some((u, _))) => Some(u < r),
        }
    }

    fn front(&self) -> Option<&Pending> {
        let q = if self.next_is_unreliable()? {
            &self.unreliable
        } else {
            &self.reliable
        };
        q.front().map(|(_, p)| p)
    }

    fn pop_front(&mut self) -> Option<Pending> {
        let q = if self.next_is_unreliable()? {
            &mut self.unreliable
        } else {
            &mut self.reliable
        };
        q.pop_front().map(|(_, p)| p)
    }

    fn heap_bytes(&self) -> usize {
        memory::deque(&self.reliable) + memory::deque(&self.unreliable)
    }

    fn trim(&mut self) {
        memory::trim_deque(&mut self.reliable);
        memory::trim_deque(&mut self.unreliable);
    }
}

#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    queues: [Lane; 4],
    /// Numbers the frames queued, across each lane's two queues.
    next_seq: u64,
    ordered_write: [OrderIndex; ORDERING_CHANNELS as usize],
    sequenced_write: [SequenceIndex; ORDERING_CHANNELS as usize],
    /// Where sequencing indices start again after each ordered message (0 on the wire).
    sequence_base: SequenceIndex,
    next_split_id: u16,
    /// Weighted-fair-queueing clock of High, Medium and Low: the queue with the smallest
    /// value goes next, and each frame taken advances its queue by 1, 2 or 4.
    credit: [u64; 3],
    /// Payload bytes waiting.
    pub(crate) bytes: usize,
}

/// How far a frame advances its priority's credit: High 1, Medium 2, Low 4.
const WEIGHT: [u64; 3] = [1, 2, 4];

impl SendQueue {
    /// A queue whose ordering and sequencing indices start at `first` on every channel
    /// (tests of the 2^24 wrap; 0 on the wire).
    pub(crate) fn starting_at(first: OrderIndex) -> Self {
        let base = SequenceIndex::new(first.get());
        Self {
            ordered_write: [first; ORDERING_CHANNELS as usize],
            sequenced_write: [base; ORDERING_CHANNELS as usize],
            sequence_base: base,
            ..Self::default()
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queues.iter().all(Lane::is_empty)
    }

    pub(crate) fn len(&self) -> usize {
        self.queues.iter().map(Lane::len).sum()
    }

    /// Heap bytes held: the queues and the payloads waiting (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.queues.iter().map(Lane::heap_bytes).sum::<usize>() + self.bytes
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        self.queues.iter_mut().for_each(Lane::trim);
    }

    /// When the oldest unreliable frame waiting was queued: the next expiry is `timeout`
    /// after it.
    pub(crate) fn oldest_unreliable(&self) -> Option<Instant> {
        self.queues
            .iter()
            .filter_map(|l| l.unreliable.front().map(|(_, p)| p.queued_at))
            .min()
    }

    /// When the oldest frame waiting was queued (each of a lane's two queues is in the order
    /// queued: their fronts are the oldest).
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.queues
            .iter()
            .flat_map(|l| [l.reliable.front(), l.unreliable.front()])
            .flatten()
            .map(|(_, p)| p.queued_at)
            .min()
    }

    /// Whether an `Immediate` frame is waiting.
    pub(crate) fn has_immediate(&self) -> bool {
        !self.queues[0].is_empty()
    }

    /// Queue a message, split into fragments of at most `max_fragment` bytes. Returns the
    /// number of frames queued.
    pub(crate) fn push(
        &mut self,
        now: Instant,
        payload: Bytes,
        opts: SendOptions,
        receipt: Option<ReceiptId>,
        max_fragment: usize,
    ) -> u32 {
        let SendOptions {
            reliability,
            channel,
            priority,
        } = opts;
        let split = payload.len() > max_fragment;
        let reliability = if split {
            reliability.for_split()
        } else {
            reliability
        };
        let mut template = Frame::new(reliability, Bytes::new());
        let c = usize::from(channel % ORDERING_CHANNELS);
        if reliability.is_ordered() {
            template.order_index = self.ordered_write[c];
            template.order_channel = channel;
            self.ordered_write[c] = self.ordered_write[c].next();
            self.sequenced_write[c] = self.sequence_base;
        } else if reliability.is_sequenced() {
            template.order_index = self.ordered_write[c];
            template.order_channel = channel;
            template.sequence_index = self.sequenced_write[c];
            self.sequenced_write[c] = self.sequenced_write[c].next();
        }
        let frames = if split {
            payload.len().div_ceil(max_fragment)
        } else {
            1
        };
        self.bytes += payload.len() + frames * Limits::SEND_OVERHEAD;
        let queue = &mut self.queues[priority as usize];
        if !split {
            template.payload = payload;
            queue.push_back(
                self.next_seq,
                Pending {
                    frame: template,
                    receipt,
                    queued_at: now,
                },
            );
            self.next_seq += 1;
            return 1;
        }
        let count = payload.len().div_ceil(max_fragment) as u32;
        let id = self.next_split_id;
        self.next_split_id = self.next_split_id.wrapping_add(1);
        for index in 0..count {
            let start = index as usize * max_fragment;
            let end = (start + max_fragment).min(payload.len());
            let mut f = template.clone();
            f.payload = payload.slice(start..end);
            f.split = Some(SplitHeader { count, id, index });
            queue.push_back(
                self.next_seq,
                Pending {
                    frame: f,
                    receipt,
                    queued_at: now,
                },
            );
            self.next_seq += 1;
        }
        count
    }

    /// Which queue goes next: Immediate if it has anything, else the weighted choice.
    fn next_queue(&self) -> Option<usize> {
        if !self.queues[0].is_empty() {
            return Some(0);
        }
        (1..4)
            .filter(|&q| !self.queues[q].is_empty())
            .min_by_key(|&q| self.credit[q - 1])
    }

    /// The next frame to send, without taking it.
    pub(crate) fn peek(&self) -> Option<&Pending> {
        self.queues[self.next_queue()?].front()
    }

    /// Take the frame [`Self::peek`] returned.
    pub(crate) fn pop(&mut self) -> Option<Pending> {
        let q = self.next_queue()?;
        let p = self.queues[q].pop_front()?;
        if q > 0 {
            let now = self.credit[q - 1] + WEIGHT[q - 1];
            self.credit[q - 1] = now;
            // A queue that sat empty must not bank credit: bring the idle ones up to date.
            for other in 1..4 {
                if other != q && self.queues[other].is_empty() {
                    self.credit[other - 1] = self.credit[other - 1].max(now - WEIGHT[q - 1]);
                }
            }
        }
        self.bytes -= p.cost();
        Some(p)
    }

    /// Remove unreliable frames that waited longer than `timeout`; they are passed to
    /// `discard` (to report lost receipts). Each lane's unreliable frames are in the order
    /// queued, so the expired ones are at its front: O(expired).
    pub(crate) fn expire_unreliable(
        &mut self,
        now: Instant,
        timeout: Duration,
        mut discard: impl FnMut(Pending),
    ) {
        for lane in &mut self.queues {
            while lane
                .unreliable
                .front()
                .is_some_and(|(_, p)| now.saturating_duration_since(p.queued_at) > timeout)
            {
                if let Some((_, p)) = lane.unreliable.pop_front() {
                    self.bytes -= p.cost();
                    discard(p);
                }
            }
        }
    }

    /// Take every queued frame (on close).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Pending> + '_ {
        self.bytes = 0;
        self.queues.iter_mut().flat_map(|l| {
            l.reliable
                .drain(..)
                .chain(l.unreliable.drain(..))
                .map(|(_, p)| p)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_and_sequencing_indices_follow_official_semantics() {
        // §15 C6: after one ordered message on channel 5, a RELIABLE_SEQUENCED message goes
        // out with si 0 and oi 1.
        let t = Instant::now();
        let mut q = SendQueue::default();
        q.push(
            t,
            Bytes::from_static(b"a"),
            SendOptions {
                reliability: Reliability::ReliableOrdered,
                channel: 5,
                priority: Priority::High,
            },
            None,
            100,
        );
        q.push(
            t,
            Bytes::from_static(b"b"),
            SendOptions {
                reliability: Reliability::ReliableSequenced,
                channel: 5,
                priority: Priority::High,
            },
            None,
            100,
        );
        q.push(
            t,
            Bytes::from_static(b"c"),
            SendOptions {
                reliability: Reliability::UnreliableSequenced,
                channel: 5,
                priority: Priority::High,
            },
            None,
            100,
        );
        q.push(
            t,
            Bytes::from_static(b"d"),
            SendOptions {
                reliability: Reliability::ReliableOrdered,
                channel: 5,
                priority: Priority::High,
            },
            None,
            100,
        );
        let frames: Vec<_> = std::iter::from_fn(|| q.pop()).map(|p| p.frame).collect();
        let idx: Vec<_> = frames
            .iter()
            .map(|f| (f.order_index.get(), f.sequence_index.get()))
            .collect();
        assert_eq!(idx, [(0, 0), (1, 0), (1, 1), (1, 0)]);
        assert_eq!(q.bytes, 0);
    }

    #[test]
    fn large_messages_split_and_become_reliable() {
        let t = Instant::now();
        let mut q = SendQueue::default();
        let n = q.push(
            t,
            Bytes::from(vec![1u8; 3000]),
            SendOptions {
                reliability: Reliability::Unreliable,
                channel: 0,
                priority: Priority::Low,
            },
            None,
            1432,
        );
        assert_eq!(n, 3);
        let frames: Vec<_> = std::iter::from_fn(|| q.pop()).map(|p| p.frame).collect();
        let lens: Vec<_> = frames.iter().map(|f| f.payload.len()).collect();
        assert_eq!(lens, [1432, 1432, 136]);
        assert!(frames
            .iter()
            .all(|f| f.reliability == Reliability::Reliable));
        assert_eq!(
            frames[2].split,
            Some(SplitHeader {
                count: 3,
                id: 0,
                index: 2
            })
        );
    }

    #[test]
    fn lower_priorities_get_a_weighted_share() {
        let t = Instant::now();
        let mut q = SendQueue::default();
        for (priority, tag) in [
            (Priority::Low, b'l'),
            (Priority::Medium, b'm'),
            (Priority::High, b'h'),
        ] {
            for _ in 0..20 {
                let opts = SendOptions {
                    reliability: Reliability::Reliable,
                    channel: 0,
                    priority,
                };
                q.push(t, Bytes::copy_from_slice(&[tag]), opts, None, 100);
            }
        }
        let first: Vec<u8> = (0..14).map(|_| q.pop().unwrap().frame.payload[0]).collect();
        let count = |c| first.iter().filter(|&&x| x == c).count();
        assert_eq!(
            (count(b'h'), count(b'm'), count(b'l')),
            (8, 4, 2),
            "{:?}",
            String::from_utf8_lossy(&first)
        );
        let imm = SendOptions {
            reliability: Reliability::Reliable,
            channel: 0,
            priority: Priority::Immediate,
        };
        q.push(t, Bytes::from_static(b"i"), imm, None, 100);
        assert_eq!(
            &q.pop().unwrap().frame.payload[..],
            b"i",
            "immediate jumps the queue"
        );
    }

    #[test]
    fn priorities_and_unreliable_expiry() {
        let t = Instant::now();
        let mut q = SendQueue::default();
        q.push(
            t,
            Bytes::from_static(b"low"),
            SendOptions {
                reliability: Reliability::Unreliable,
                channel: 0,
                priority: Priority::Low,
            },
            None,
            100,
        );
        q.push(
            t,
            Bytes::from_static(b"imm"),
            SendOptions {
                reliability: Reliability::Reliable,
                channel: 0,
                priority: Priority::Immediate,
            },
            None,
            100,
        );
        assert_eq!(&q.peek().unwrap().frame.payload[..], b"imm");
        let mut lost = 0;
        q.expire_unreliable(t + Duration::from_secs(2), Duration::from_secs(1), |_| {
            lost += 1
        });
        assert_eq!((lost, q.len(), q.bytes), (1, 1, 3 + Limits::SEND_OVERHEAD));
    }

    #[test]
    fn reliable_and_unreliable_frames_leave_in_the_order_queued_and_expiry_takes_only_the_old() {
        let t0 = Instant::now();
        let mut q = SendQueue::default();
        let opts = |reliability| SendOptions {
            reliability,
            channel: 0,
            priority: Priority::High,
        };
        // r0 u1 r2 u3 at t0, r4 u5 a second later.
        for (i, at) in [(0u8, 0u64), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1)] {
            let reliability = if i % 2 == 0 {
                Reliability::Reliable
            } else {
                Reliability::Unreliable
            };
            let at = t0 + Duration::from_secs(at);
            q.push(
                at,
                Bytes::copy_from_slice(&[i]),
                opts(reliability),
                None,
                100,
            );
        }
        assert_eq!(q.oldest_unreliable(), Some(t0));
        let mut expired = Vec::new();
        q.expire_unreliable(
            t0 + Duration::from_millis(1_500),
            Duration::from_secs(1),
            |p| expired.push(p.frame.payload[0]),
        );
        assert_eq!(expired, [1, 3]);
        assert_eq!(q.oldest_unreliable(), Some(t0 + Duration::from_secs(1)));
        let order: Vec<u8> = std::iter::from_fn(|| q.pop())
            .map(|p| p.frame.payload[0])
            .collect();
        assert_eq!(order, [0, 2, 4, 5]);
        assert_eq!((q.bytes, q.oldest_unreliable()), (0, None));
    }
}
