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

#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    queues: [VecDeque<Pending>; 4],
    ordered_write: [OrderIndex; ORDERING_CHANNELS as usize],
    sequenced_write: [SequenceIndex; ORDERING_CHANNELS as usize],
    next_split_id: u16,
    /// Weighted-fair-queueing clock of High, Medium and Low: the queue with the smallest
    /// value goes next, and each frame taken advances its queue by 1, 2 or 4.
    credit: [u64; 3],
    /// When the oldest queued unreliable frame was queued (possibly one already sent): no
    /// expiry scan is needed before it can have expired, so a deep reliable backlog costs
    /// nothing per timer.
    oldest_unreliable: Option<Instant>,
    /// Payload bytes waiting.
    pub(crate) bytes: usize,
}

/// How far a frame advances its priority's credit: High 1, Medium 2, Low 4.
const WEIGHT: [u64; 3] = [1, 2, 4];

impl SendQueue {
    /// A queue whose ordering indices start at `first` on every channel (tests of the
    /// 2^24 wrap; 0 on the wire).
    pub(crate) fn starting_at(first: OrderIndex) -> Self {
        Self {
            ordered_write: [first; ORDERING_CHANNELS as usize],
            ..Self::default()
        }
    }

    /// Treat one ordered message on `channel` as already sent (the handshake's 0x10, sent
    /// before the connection existed).
    pub(crate) fn skip_ordered(&mut self, channel: u8) {
        if let Some(w) = self.ordered_write.get_mut(usize::from(channel)) {
            *w = w.next();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    pub(crate) fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Heap bytes held: the queues and the payloads waiting (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.queues.iter().map(memory::deque).sum::<usize>() + self.bytes
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        self.queues.iter_mut().for_each(memory::trim_deque);
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
            self.sequenced_write[c] = SequenceIndex::ZERO;
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
        if !reliability.is_reliable() && self.oldest_unreliable.is_none() {
            self.oldest_unreliable = Some(now);
        }
        let queue = &mut self.queues[priority as usize];
        if !split {
            template.payload = payload;
            queue.push_back(Pending {
                frame: template,
                receipt,
                queued_at: now,
            });
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
            queue.push_back(Pending {
                frame: f,
                receipt,
                queued_at: now,
            });
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
    /// `discard` (to report lost receipts).
    pub(crate) fn expire_unreliable(
        &mut self,
        now: Instant,
        timeout: Duration,
        mut discard: impl FnMut(Pending),
    ) {
        if self
            .oldest_unreliable
            .is_none_or(|t| now.saturating_duration_since(t) <= timeout)
        {
            return;
        }
        let expired = |p: &Pending| {
            !p.frame.reliability.is_reliable()
                && now.saturating_duration_since(p.queued_at) > timeout
        };
        let mut oldest: Option<Instant> = None;
        for q in &mut self.queues {
            if q.iter().any(expired) {
                let mut kept = VecDeque::with_capacity(q.len());
                for p in q.drain(..) {
                    if expired(&p) {
                        self.bytes -= p.cost();
                        discard(p);
                    } else {
                        kept.push_back(p);
                    }
                }
                *q = kept;
            }
            let first = q
                .iter()
                .filter(|p| !p.frame.reliability.is_reliable())
                .map(|p| p.queued_at)
                .min();
            oldest = match (oldest, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.oldest_unreliable = oldest;
    }

    /// Take every queued frame (on close).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Pending> + '_ {
        self.bytes = 0;
        self.queues.iter_mut().flat_map(|q| q.drain(..))
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
}
