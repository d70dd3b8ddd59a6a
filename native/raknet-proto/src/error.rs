//! Typed errors of the wire codec.

use std::fmt;

/// Why a datagram, frame or message could not be decoded.
///
/// Decoders never panic: every malformed input maps to one of these variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended before a field of `needed` bytes could be read.
    UnexpectedEnd {
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// An offline message did not carry the 16-byte offline magic where its ID puts it.
    BadMagic,
    /// The first byte is not the ID the decoder expected, or is not a known message ID.
    UnexpectedId(u8),
    /// A system address had a version byte other than 4 or 6.
    InvalidAddressVersion(u8),
    /// A connected datagram's first byte did not have the `valid` bit (0x80) set.
    NotConnected,
    /// A frame declared a payload of zero bits (official RakNet rejects these).
    EmptyFrame,
    /// A frame's ordering channel was 32 or more.
    InvalidOrderingChannel(u8),
    /// A split header declared zero fragments.
    ZeroSplitCount,
    /// A split header's fragment index was not below its fragment count.
    SplitIndexOutOfRange {
        /// The fragment index read.
        index: u32,
        /// The fragment count read.
        count: u32,
    },
    /// An ACK/NAK record had `min > max`.
    InvalidAckRange,
    /// A message had bytes left over where its layout allows none.
    TrailingBytes(usize),
    /// A message's length is not one its layout allows (e.g. a connected ping that is not 9 bytes).
    InvalidLength(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::UnexpectedEnd { needed, remaining } => {
                write!(
                    f,
                    "unexpected end of input: needed {needed} bytes, {remaining} left"
                )
            }
            Self::BadMagic => f.write_str("offline message magic missing"),
            Self::UnexpectedId(id) => write!(f, "unexpected message id 0x{id:02x}"),
            Self::InvalidAddressVersion(v) => write!(f, "invalid system address version {v}"),
            Self::NotConnected => f.write_str("datagram lacks the connected (0x80) flag"),
            Self::EmptyFrame => f.write_str("frame with an empty payload"),
            Self::InvalidOrderingChannel(c) => write!(f, "ordering channel {c} is not below 32"),
            Self::ZeroSplitCount => f.write_str("split count of zero"),
            Self::SplitIndexOutOfRange { index, count } => {
                write!(f, "split index {index} not below split count {count}")
            }
            Self::InvalidAckRange => f.write_str("ACK/NAK record with min > max"),
            Self::TrailingBytes(n) => write!(f, "{n} unexpected trailing bytes"),
            Self::InvalidLength(n) => write!(f, "invalid message length {n}"),
        }
    }
}

impl std::error::Error for DecodeError {}
