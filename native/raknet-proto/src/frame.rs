//! Encapsulated frames, the messages inside a connected data datagram
//! (protocol reference §5.3).
//!
//! ```text
//! header u8           bits 7-5 reliability, bit 4 split flag
//! length u16 BE       payload length in bits
//! message index u24   reliable kinds
//! sequence index u24  sequenced kinds
//! order index u24     ordered and sequenced kinds
//! order channel u8    with the order index, 0-31
//! split count u32, split id u16, split index u32   split frames
//! payload             ceil(bits / 8) bytes
//! ```

use bytes::{BufMut, Bytes};

use crate::codec::{put_u24_le, Decode, Encode, Reader};
use crate::error::DecodeError;
use crate::reliability::Reliability;
use crate::seq::{MessageIndex, OrderIndex, SequenceIndex};

/// Number of ordering channels per connection and direction.
pub const ORDERING_CHANNELS: u8 = 32;
/// The largest frame header: reliable sequenced (13 bytes) plus a split header (10 bytes).
pub const MAX_FRAME_HEADER_LEN: usize = 3 + 3 + 3 + 4 + SPLIT_HEADER_LEN;
/// Size of a split header: count u32, id u16, index u32.
pub const SPLIT_HEADER_LEN: usize = 4 + 2 + 4;
/// The largest payload a frame's u16 bit length can describe.
pub const MAX_FRAME_PAYLOAD: usize = u16::MAX as usize / 8;

const SPLIT_FLAG: u8 = 0x10;

/// Where a fragment of a split message belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SplitHeader {
    /// How many fragments the message has (never zero).
    pub count: u32,
    /// Identifies the message among the sender's split messages.
    pub id: u16,
    /// This fragment's position, below `count`.
    pub index: u32,
}

/// One frame: a message or a fragment of one, with its delivery metadata.
///
/// Index fields that the reliability does not carry are zero after decoding and ignored
/// when encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The reliability as read from the wire, or as the sender asked for it. Receipt kinds
    /// are encoded as their base type.
    pub reliability: Reliability,
    /// Reliable message index (reliable kinds only).
    pub message_index: MessageIndex,
    /// Sequencing index (sequenced kinds only).
    pub sequence_index: SequenceIndex,
    /// Ordering index (ordered and sequenced kinds only).
    pub order_index: OrderIndex,
    /// Ordering channel, 0-31 (ordered and sequenced kinds only).
    pub order_channel: u8,
    /// Split header, if this is a fragment.
    pub split: Option<SplitHeader>,
    /// The message bytes: a zero-copy slice of the datagram when decoded.
    pub payload: Bytes,
}

impl Frame {
    /// A frame with `reliability` and `payload` and every index zero.
    pub fn new(reliability: Reliability, payload: Bytes) -> Self {
        Self {
            reliability,
            message_index: MessageIndex::ZERO,
            sequence_index: SequenceIndex::ZERO,
            order_index: OrderIndex::ZERO,
            order_channel: 0,
            split: None,
            payload,
        }
    }

    /// The header size for a frame of `reliability`, with or without a split header.
    pub const fn header_len(reliability: Reliability, split: bool) -> usize {
        let mut len = 3;
        if reliability.is_reliable() {
            len += 3;
        }
        if reliability.is_sequenced() {
            len += 3;
        }
        if reliability.uses_channel() {
            len += 4;
        }
        if split {
            len += SPLIT_HEADER_LEN;
        }
        len
    }
}

impl Encode for Frame {
    /// Write the frame. The payload must not exceed [`MAX_FRAME_PAYLOAD`] bytes, which the
    /// sender guarantees by splitting at the MTU.
    fn encode<B: BufMut>(&self, buf: &mut B) {
        debug_assert!(self.payload.len() <= MAX_FRAME_PAYLOAD);
        let wire = self.reliability.on_wire();
        let split_flag = if self.split.is_some() { SPLIT_FLAG } else { 0 };
        buf.put_u8((wire as u8) << 5 | split_flag);
        buf.put_u16((self.payload.len() * 8) as u16);
        if wire.is_reliable() {
            put_u24_le(buf, self.message_index.get());
        }
        if wire.is_sequenced() {
            put_u24_le(buf, self.sequence_index.get());
        }
        if wire.uses_channel() {
            put_u24_le(buf, self.order_index.get());
            buf.put_u8(self.order_channel);
        }
        if let Some(split) = self.split {
            buf.put_u32(split.count);
            buf.put_u16(split.id);
            buf.put_u32(split.index);
        }
        buf.put_slice(&self.payload);
    }

    fn encoded_len(&self) -> usize {
        Self::header_len(self.reliability, self.split.is_some()) + self.payload.len()
    }
}

impl Decode for Frame {
    /// Read one frame. Wire reliabilities 5-7 (which official never sends) are read with the
    /// layout of their base type, as RakLib and X-Plane do, and reported as read.
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let header = buf.read_u8()?;
        // Three bits can only hold 0-7, all of which are valid reliabilities.
        let reliability = Reliability::from_u8(header >> 5).unwrap_or(Reliability::Unreliable);
        let wire = reliability.on_wire();
        let bits = buf.read_u16()?;
        let len = usize::from(bits).div_ceil(8);
        if len == 0 {
            return Err(DecodeError::EmptyFrame);
        }
        let mut frame = Self::new(reliability, Bytes::new());
        if wire.is_reliable() {
            frame.message_index = MessageIndex::new(buf.read_u24_le()?);
        }
        if wire.is_sequenced() {
            frame.sequence_index = SequenceIndex::new(buf.read_u24_le()?);
        }
        if wire.uses_channel() {
            frame.order_index = OrderIndex::new(buf.read_u24_le()?);
            frame.order_channel = buf.read_u8()?;
            if frame.order_channel >= ORDERING_CHANNELS {
                return Err(DecodeError::InvalidOrderingChannel(frame.order_channel));
            }
        }
        if header & SPLIT_FLAG != 0 {
            let count = buf.read_u32()?;
            let id = buf.read_u16()?;
            let index = buf.read_u32()?;
            if count == 0 {
                return Err(DecodeError::ZeroSplitCount);
            }
            if index >= count {
                return Err(DecodeError::SplitIndexOutOfRange { index, count });
            }
            frame.split = Some(SplitHeader { count, id, index });
        }
        frame.payload = buf.read_bytes(len)?;
        Ok(frame)
    }
}

/// Iterates over the frames of a data datagram's body, zero-copy.
///
/// Like official RakNet it stops when fewer than 4 bytes remain (the smallest frame), and it
/// stops for good after the first malformed frame, since the rest of the datagram cannot be
/// located.
#[derive(Debug, Clone)]
pub struct Frames {
    body: Bytes,
    failed: bool,
}

/// Bytes below which trailing data cannot hold a frame and is ignored.
const MIN_FRAME_LEN: usize = 4;

impl Frames {
    /// Iterate over the frames in `body` (a data datagram without its header).
    pub fn new(body: Bytes) -> Self {
        Self {
            body,
            failed: false,
        }
    }
}

impl Iterator for Frames {
    type Item = Result<Frame, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.body.len() < MIN_FRAME_LEN {
            return None;
        }
        let result = Frame::decode(&mut self.body);
        self.failed = result.is_err();
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    fn decode_one(s: &str) -> Result<Frame, DecodeError> {
        Frame::decode(&mut hex(s))
    }

    #[test]
    fn header_lengths_match_the_reference() {
        use Reliability::*;
        let lens: Vec<_> = [
            Unreliable,
            UnreliableSequenced,
            Reliable,
            ReliableOrdered,
            ReliableSequenced,
        ]
        .iter()
        .map(|r| Frame::header_len(*r, false))
        .collect();
        assert_eq!(lens, [3, 10, 6, 10, 13]);
        assert_eq!(
            Frame::header_len(ReliableSequenced, true),
            MAX_FRAME_HEADER_LEN
        );
        assert_eq!(MAX_FRAME_HEADER_LEN, 23);
    }

    #[test]
    fn reliable_sequenced_carries_sequence_then_order_index() {
        // §15 C6: RELIABLE_SEQUENCED, ri 4, si 0, oi 1, ch 5.
        let f = decode_one("80 0018 040000 000000 010000 05 865253").unwrap();
        assert_eq!(f.reliability, Reliability::ReliableSequenced);
        assert_eq!(f.message_index.get(), 4);
        assert_eq!(f.sequence_index.get(), 0);
        assert_eq!(f.order_index.get(), 1);
        assert_eq!(f.order_channel, 5);
        assert_eq!(&f.payload[..], &[0x86, 0x52, 0x53]);
        assert_eq!(f.to_vec(), hex("80 0018 040000 000000 010000 05 865253"));
    }

    #[test]
    fn split_fragment() {
        // §15 C7, third fragment: 136 bytes, ri 10, oi 0, ch 1, count 3, id 0, index 2.
        let mut s = String::from("70 0440 0a0000 000000 01 00000003 0000 00000002");
        s.push_str(&"ab".repeat(136));
        let f = decode_one(&s).unwrap();
        assert_eq!(
            f.split,
            Some(SplitHeader {
                count: 3,
                id: 0,
                index: 2
            })
        );
        assert_eq!(f.message_index.get(), 10);
        assert_eq!(f.payload.len(), 136);
        assert_eq!(f.to_vec(), hex(&s));
    }

    #[test]
    fn receipt_kinds_encode_as_base_type() {
        let mut f = Frame::new(Reliability::ReliableOrderedWithAckReceipt, hex("86524f41"));
        f.message_index = MessageIndex::new(6);
        f.order_index = OrderIndex::new(1);
        f.order_channel = 5;
        assert_eq!(f.to_vec(), hex("60 0020 060000 010000 05 86524f41"));
    }

    #[test]
    fn wire_receipt_kinds_decode_with_base_layout() {
        let f = decode_one("e0 0008 010000 020000 03 aa").unwrap();
        assert_eq!(f.reliability, Reliability::ReliableOrderedWithAckReceipt);
        assert_eq!(f.message_index.get(), 1);
        assert_eq!(f.order_index.get(), 2);
    }

    #[test]
    fn odd_bit_lengths_round_up() {
        let f = decode_one("00 0009 aabb").unwrap();
        assert_eq!(f.payload.len(), 2);
    }

    #[test]
    fn malformed_frames_are_rejected() {
        assert_eq!(decode_one("00 0000 aa"), Err(DecodeError::EmptyFrame));
        assert_eq!(
            decode_one("60 0008 000000 000000 20 aa"),
            Err(DecodeError::InvalidOrderingChannel(32))
        );
        assert_eq!(
            decode_one("50 0008 000000 00000000 0000 00000000 aa"),
            Err(DecodeError::ZeroSplitCount)
        );
        assert_eq!(
            decode_one("50 0008 000000 00000002 0000 00000002 aa"),
            Err(DecodeError::SplitIndexOutOfRange { index: 2, count: 2 })
        );
        assert!(matches!(
            decode_one("00 0010 aa"),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
    }

    #[test]
    fn frames_iterator_ignores_short_tail_and_stops_after_error() {
        let frames: Vec<_> = Frames::new(hex("00 0008 aa 00 0008 bb 0102")).collect();
        assert_eq!(frames.len(), 2);
        assert!(frames.iter().all(Result::is_ok));
        let frames: Vec<_> = Frames::new(hex("00 0000 aa 00 0008 bb")).collect();
        assert_eq!(frames, vec![Err(DecodeError::EmptyFrame)]);
    }
}
