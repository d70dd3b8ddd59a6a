//! Connected datagrams: the flag byte, data datagram headers, and ACK/NAK records
//! (protocol reference §5.1, §5.2 and §8).
//!
//! ```text
//! data  flags(0x80 | …) [time u32 BE]  seq u24 LE  frames…
//! ACK   flags(0xC0)     [time u32 BE] [AS f32 if 0x20]  count u16 BE  records…
//! NAK   flags(0xA0)                                     count u16 BE  records…
//! record: single u8 (1 = one number, 0 = range), min u24 LE, [max u24 LE]
//! ```
//! The bracketed time exists only in the "timestamp with datagrams" build (UDT congestion
//! control, used by X-Plane's client); both peers must agree on it.

use bytes::{BufMut, Bytes};

use crate::codec::{put_u24_le, Encode, Reader};
use crate::error::DecodeError;
use crate::frame::Frames;
use crate::seq::DatagramSeq;

/// IPv4 (20) plus UDP (8) header bytes, which official RakNet subtracts from the MTU
/// (it uses 28 even on IPv6).
pub const IP_UDP_HEADER_LEN: usize = 28;
/// Bytes official RakNet reserves for a data datagram's header when filling it:
/// flags and bit-stream padding (2) + sequence number (3) + a float (4).
pub const DATAGRAM_HEADER_RESERVED: usize = 2 + 3 + 4;
/// Size of the optional datagram timestamp.
pub const TIMESTAMP_LEN: usize = 4;

/// Bits of a connected datagram's first byte. Test [`flags::ACK`] before [`flags::NAK`]:
/// `0x20` means NAK only when `0x40` is clear.
pub mod flags {
    /// Set on every connected datagram.
    pub const VALID: u8 = 0x80;
    /// The datagram is an ACK.
    pub const ACK: u8 = 0x40;
    /// Without [`ACK`]: the datagram is a NAK.
    pub const NAK: u8 = 0x20;
    /// With [`ACK`]: the ACK carries the UDT arrival-rate float.
    pub const HAS_B_AND_AS: u8 = 0x20;
    /// Data only: UDT packet-pair probe (never sent by 4.081; accepted and ignored).
    pub const PACKET_PAIR: u8 = 0x10;
    /// Data only: the sender had more data queued (2nd and later datagrams of a burst).
    pub const CONTINUOUS_SEND: u8 = 0x08;
    /// Data only: the sender is in slow start.
    pub const NEEDS_B_AND_AS: u8 = 0x04;
}

/// The header of a data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// The sender had more data queued when it sent this datagram.
    pub continuous_send: bool,
    /// The sender is in congestion-control slow start.
    pub needs_b_and_as: bool,
    /// The UDT packet-pair flag, carried through but meaningless to us.
    pub packet_pair: bool,
    /// The sender's microsecond clock, low 32 bits (timestamp build only).
    pub timestamp: Option<u32>,
    /// The datagram's sequence number.
    pub seq: DatagramSeq,
}

impl DataHeader {
    /// A plain header (`0x84`-style flags are set by the fields) for sequence number `seq`.
    pub fn new(seq: DatagramSeq) -> Self {
        Self {
            continuous_send: false,
            needs_b_and_as: false,
            packet_pair: false,
            timestamp: None,
            seq,
        }
    }

    fn flag_byte(&self) -> u8 {
        let mut b = flags::VALID;
        if self.packet_pair {
            b |= flags::PACKET_PAIR;
        }
        if self.continuous_send {
            b |= flags::CONTINUOUS_SEND;
        }
        if self.needs_b_and_as {
            b |= flags::NEEDS_B_AND_AS;
        }
        b
    }
}

impl Encode for DataHeader {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(self.flag_byte());
        if let Some(t) = self.timestamp {
            buf.put_u32(t);
        }
        put_u24_le(buf, self.seq.get());
    }

    fn encoded_len(&self) -> usize {
        4 + if self.timestamp.is_some() {
            TIMESTAMP_LEN
        } else {
            0
        }
    }
}

/// An inclusive range of datagram sequence numbers in an ACK or NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRange {
    /// First number in the range.
    pub start: DatagramSeq,
    /// Last number in the range (equal to `start` for a single number).
    pub end: DatagramSeq,
}

impl AckRange {
    /// A range holding just `seq`.
    pub fn single(seq: DatagramSeq) -> Self {
        Self {
            start: seq,
            end: seq,
        }
    }

    /// Encoded size of this record.
    pub fn encoded_len(&self) -> usize {
        if self.start == self.end {
            4
        } else {
            7
        }
    }

    /// How many sequence numbers the range holds.
    pub fn len(&self) -> u32 {
        self.end.distance_from(self.start) + 1
    }

    /// Never true: a range holds at least one number. Present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn encode<B: BufMut>(&self, buf: &mut B) {
        if self.start == self.end {
            buf.put_u8(1);
            put_u24_le(buf, self.start.get());
        } else {
            buf.put_u8(0);
            put_u24_le(buf, self.start.get());
            put_u24_le(buf, self.end.get());
        }
    }
}

/// Size of an ACK/NAK's fixed part: flags and record count.
pub const ACK_HEADER_LEN: usize = 1 + 2;

fn decode_ranges(buf: &mut Bytes) -> Result<Vec<AckRange>, DecodeError> {
    let count = usize::from(buf.read_u16()?);
    // Never trust the count for the allocation: a record is at least 4 bytes.
    let mut ranges = Vec::with_capacity(count.min(buf.len() / 4));
    for _ in 0..count {
        let single = buf.read_u8()? != 0;
        let start = buf.read_u24_le()?;
        let end = if single { start } else { buf.read_u24_le()? };
        // Official rejects the whole ACK/NAK on min > max (plain comparison, §5.2); a
        // sender splits ranges at the 2^24 wrap.
        if start > end {
            return Err(DecodeError::InvalidAckRange);
        }
        ranges.push(AckRange {
            start: DatagramSeq::new(start),
            end: DatagramSeq::new(end),
        });
    }
    Ok(ranges)
}

fn encode_ranges<B: BufMut>(ranges: &[AckRange], buf: &mut B) {
    debug_assert!(ranges.len() <= usize::from(u16::MAX));
    buf.put_u16(ranges.len() as u16);
    for r in ranges {
        r.encode(buf);
    }
}

/// An acknowledgement of received data datagrams.
#[derive(Debug, Clone, PartialEq)]
pub struct Ack {
    /// Timestamp build only: the send time of the newest datagram acknowledged, echoed.
    pub timestamp: Option<u32>,
    /// UDT builds only: the receiver's measured arrival rate (flag `0x20`).
    pub arrival_rate: Option<f32>,
    /// The acknowledged sequence numbers.
    pub ranges: Vec<AckRange>,
}

impl Encode for Ack {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        let mut b = flags::VALID | flags::ACK;
        if self.arrival_rate.is_some() {
            b |= flags::HAS_B_AND_AS;
        }
        buf.put_u8(b);
        if let Some(t) = self.timestamp {
            buf.put_u32(t);
        }
        if let Some(rate) = self.arrival_rate {
            buf.put_f32(rate);
        }
        encode_ranges(&self.ranges, buf);
    }

    fn encoded_len(&self) -> usize {
        ACK_HEADER_LEN
            + if self.timestamp.is_some() {
                TIMESTAMP_LEN
            } else {
                0
            }
            + if self.arrival_rate.is_some() { 4 } else { 0 }
            + self.ranges.iter().map(AckRange::encoded_len).sum::<usize>()
    }
}

/// A negative acknowledgement: datagrams the receiver saw a gap for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nak {
    /// The missing sequence numbers.
    pub ranges: Vec<AckRange>,
}

impl Encode for Nak {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(flags::VALID | flags::NAK);
        encode_ranges(&self.ranges, buf);
    }

    fn encoded_len(&self) -> usize {
        ACK_HEADER_LEN + self.ranges.iter().map(AckRange::encoded_len).sum::<usize>()
    }
}

/// A decoded connected datagram.
#[derive(Debug, Clone, PartialEq)]
pub enum Datagram {
    /// Data: a header and a body of frames (iterate with [`Datagram::frames`]).
    Data {
        /// The datagram's header.
        header: DataHeader,
        /// The frames, still encoded: a zero-copy slice of the datagram.
        body: Bytes,
    },
    /// An ACK.
    Ack(Ack),
    /// A NAK.
    Nak(Nak),
}

impl Datagram {
    /// Decode a connected datagram. `timestamps` selects the timestamp build's layout.
    pub fn decode(mut buf: Bytes, timestamps: bool) -> Result<Self, DecodeError> {
        let b = buf.read_u8()?;
        if b & flags::VALID == 0 {
            return Err(DecodeError::NotConnected);
        }
        if b & flags::ACK != 0 {
            let timestamp = if timestamps {
                Some(buf.read_u32()?)
            } else {
                None
            };
            let arrival_rate = if b & flags::HAS_B_AND_AS != 0 {
                Some(buf.read_f32()?)
            } else {
                None
            };
            let ranges = decode_ranges(&mut buf)?;
            Ok(Self::Ack(Ack {
                timestamp,
                arrival_rate,
                ranges,
            }))
        } else if b & flags::NAK != 0 {
            Ok(Self::Nak(Nak {
                ranges: decode_ranges(&mut buf)?,
            }))
        } else {
            let timestamp = if timestamps {
                Some(buf.read_u32()?)
            } else {
                None
            };
            let seq = DatagramSeq::new(buf.read_u24_le()?);
            let header = DataHeader {
                continuous_send: b & flags::CONTINUOUS_SEND != 0,
                needs_b_and_as: b & flags::NEEDS_B_AND_AS != 0,
                packet_pair: b & flags::PACKET_PAIR != 0,
                timestamp,
                seq,
            };
            Ok(Self::Data { header, body: buf })
        }
    }

    /// The frames of a data datagram; empty for ACKs and NAKs.
    pub fn frames(&self) -> Frames {
        match self {
            Self::Data { body, .. } => Frames::new(body.clone()),
            _ => Frames::new(Bytes::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    #[test]
    fn ack_single_and_range() {
        let Datagram::Ack(ack) = Datagram::decode(hex("c0 0001 01 000000"), false).unwrap() else {
            panic!("not an ack")
        };
        assert_eq!(ack.ranges, vec![AckRange::single(DatagramSeq::ZERO)]);
        assert_eq!(ack.to_vec(), hex("c0 0001 01 000000"));

        let d = Datagram::decode(hex("c0 0001 00 010000 020000"), false).unwrap();
        let Datagram::Ack(ack) = d else {
            panic!("not an ack")
        };
        assert_eq!(ack.ranges[0].len(), 2);
        assert_eq!(ack.to_vec(), hex("c0 0001 00 010000 020000"));
    }

    #[test]
    fn nak_is_told_apart_from_ack() {
        let d = Datagram::decode(hex("a0 0001 01 020000"), false).unwrap();
        assert_eq!(
            d,
            Datagram::Nak(Nak {
                ranges: vec![AckRange::single(DatagramSeq::new(2))]
            })
        );
    }

    #[test]
    fn timestamp_variant() {
        // §15 E4: X-Plane client data datagram and ACK with the 4-byte time.
        let d = Datagram::decode(hex("84 0001703f 000000 40 0090 000000"), true).unwrap();
        let Datagram::Data { header, .. } = d else {
            panic!("not data")
        };
        assert_eq!(header.timestamp, Some(0x0001_703f));
        assert!(header.needs_b_and_as);
        let ack = Datagram::decode(hex("c0 00000020 0001 01 000000"), true).unwrap();
        let Datagram::Ack(ack) = ack else {
            panic!("not an ack")
        };
        assert_eq!(ack.timestamp, Some(0x20));
        assert_eq!(ack.to_vec(), hex("c0 00000020 0001 01 000000"));
    }

    #[test]
    fn ack_with_arrival_rate() {
        let mut ack = Ack {
            timestamp: Some(7),
            arrival_rate: Some(1.5),
            ranges: vec![],
        };
        ack.ranges.push(AckRange::single(DatagramSeq::new(9)));
        let d = Datagram::decode(Bytes::from(ack.to_vec()), true).unwrap();
        assert_eq!(d, Datagram::Ack(ack));
    }

    #[test]
    fn hostile_ack_counts_do_not_allocate_or_panic() {
        assert!(Datagram::decode(hex("c0 ffff 01 000000"), false).is_err());
        assert_eq!(
            Datagram::decode(hex("a0 0001 00 ffffff 000000"), false),
            Err(DecodeError::InvalidAckRange)
        );
        assert_eq!(
            Datagram::decode(hex("04 000000"), false),
            Err(DecodeError::NotConnected)
        );
        assert!(Datagram::decode(Bytes::new(), false).is_err());
    }

    #[test]
    fn continuous_send_flag() {
        let mut h = DataHeader::new(DatagramSeq::new(0x0d));
        h.continuous_send = true;
        h.needs_b_and_as = true;
        assert_eq!(h.to_vec(), hex("8c 0d0000"));
    }
}
