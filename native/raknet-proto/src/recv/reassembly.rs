//! Split-message reassembly, bounded in parts, concurrent messages and bytes
//! (protocol reference §5.4 and §14 items 2-3).

use std::collections::{BTreeMap, HashMap};

use bytes::{Bytes, BytesMut};

use crate::config::Limits;
use crate::error::Limit;
use crate::frame::{Frame, SplitHeader};

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
    bytes: usize,
    /// The first fragment's header, which carries the message's delivery metadata.
    first: Frame,
}

#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partials: HashMap<u16, Partial>,
    bytes: usize,
}

impl Reassembly {
    /// Bytes currently held.
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
        if self.bytes + len > limits.max_reassembly_bytes {
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
        self.bytes += len;
        partial.parts.insert(split.index, frame.payload);
        if partial.parts.len() < partial.count as usize {
            return Ok(None);
        }
        let Some(done) = self.partials.remove(&split.id) else {
            return Ok(None);
        };
        self.bytes -= done.bytes;
        let mut out = BytesMut::with_capacity(done.bytes);
        for part in done.parts.values() {
            out.extend_from_slice(part);
        }
        Ok(Some(Frame {
            payload: out.freeze(),
            ..done.first
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::Reliability;

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
        assert_eq!(r.insert(f, s, &limits), Ok(None));
        let (f, s) = frag(7, 0, 3, b"ab");
        assert_eq!(r.insert(f.clone(), s, &limits), Ok(None));
        assert_eq!(r.insert(f, s, &limits), Ok(None));
        assert_eq!(r.bytes(), 4);
        let (f, s) = frag(7, 1, 3, b"cd");
        let whole = r.insert(f, s, &limits).unwrap().unwrap();
        assert_eq!(&whole.payload[..], b"abcdef");
        assert_eq!(whole.split, None);
        assert_eq!((r.len(), r.bytes()), (0, 0));
    }

    #[test]
    fn limits_refuse_or_violate() {
        let limits = Limits {
            max_split_parts: 4,
            max_concurrent_splits: 1,
            max_reassembly_bytes: 10,
            max_message_bytes: 6,
            ..Limits::default()
        };
        let mut r = Reassembly::default();
        let (f, s) = frag(1, 0, 5, b"x");
        assert_eq!(
            r.insert(f, s, &limits),
            Err(Refusal::Violation(Limit::SplitParts))
        );
        let (f, s) = frag(1, 0, 4, b"xxxx");
        assert_eq!(r.insert(f, s, &limits), Ok(None));
        let (f, s) = frag(2, 0, 2, b"y");
        assert_eq!(
            r.insert(f, s, &limits),
            Err(Refusal::Busy),
            "one concurrent split"
        );
        let (f, s) = frag(1, 1, 3, b"x");
        assert_eq!(r.insert(f, s, &limits), Err(Refusal::Inconsistent));
        let (f, s) = frag(1, 1, 4, b"xxx");
        assert_eq!(
            r.insert(f, s, &limits),
            Err(Refusal::Violation(Limit::MessageBytes))
        );
        assert_eq!(r.bytes(), 4, "refused fragments hold nothing");
    }
}
