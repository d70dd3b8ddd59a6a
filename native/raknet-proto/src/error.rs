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

/// Why [`crate::Endpoint::send`] refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The connection does not exist (any more), or is closing.
    Closed,
    /// The connection's handshake has not completed.
    NotConnected,
    /// The message is larger than [`crate::Limits::max_message_bytes`], or would need more
    /// fragments than [`crate::Limits::max_split_parts`] at the connection's MTU.
    TooLarge,
    /// Queued and unacknowledged bytes would exceed [`crate::Limits::max_send_queue_bytes`].
    QueueFull,
    /// The ordering channel is not below 32.
    InvalidChannel,
    /// The message is empty.
    Empty,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Closed => "connection closed",
            Self::NotConnected => "connection not yet established",
            Self::TooLarge => "message larger than the configured maximum (bytes or fragments)",
            Self::QueueFull => "send queue full",
            Self::InvalidChannel => "ordering channel must be below 32",
            Self::Empty => "empty message",
        })
    }
}

impl std::error::Error for SendError {}

/// Why an outgoing connection attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectError {
    /// The server speaks another protocol version (0x19); it named this one.
    IncompatibleProtocol {
        /// The server's protocol version.
        server_protocol: u8,
    },
    /// The server is full (0x14).
    NoFreeIncomingConnections,
    /// The server has banned this address (0x17).
    Banned,
    /// The server already has a connection from this address or GUID (0x12).
    AlreadyConnected,
    /// The server refused because this address connected too recently (0x1A).
    IpRecentlyConnected,
    /// The server requires official RakNet's libcat security, which is not supported.
    SecurityRequired,
    /// The server rejected the connection request's password (0x18).
    InvalidPassword,
    /// No answer within the handshake timeout.
    Timeout,
    /// There is already a connection or attempt to that address.
    AddressInUse,
    /// The endpoint has as many connections as its limit allows.
    TooManyConnections,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IncompatibleProtocol { server_protocol } => {
                write!(
                    f,
                    "incompatible protocol version (server speaks {server_protocol})"
                )
            }
            Self::NoFreeIncomingConnections => {
                f.write_str("server has no free incoming connections")
            }
            Self::Banned => f.write_str("banned by the server"),
            Self::AlreadyConnected => f.write_str("already connected"),
            Self::IpRecentlyConnected => f.write_str("address connected too recently"),
            Self::SecurityRequired => f.write_str("server requires unsupported libcat security"),
            Self::InvalidPassword => f.write_str("invalid password"),
            Self::Timeout => f.write_str("connection attempt timed out"),
            Self::AddressInUse => f.write_str("a connection to that address already exists"),
            Self::TooManyConnections => f.write_str("connection limit reached"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Which limit a peer exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// [`crate::Limits::max_split_parts`].
    SplitParts,
    /// [`crate::Limits::max_message_bytes`].
    MessageBytes,
    /// A gap the peer left in its reliable data (the ordering index a channel waits for,
    /// the first missing fragment of a split message) stayed unfilled for the connection's
    /// timeout while data piled up behind it. A real sender fills a gap within its
    /// retransmission timeout; one that does not holds buffer space it will never release.
    Stalled,
    /// The peer stopped reading: with more than its share of the send budget waiting
    /// ([`crate::Limits::send_share`]), it acknowledged less than an eighth of that backlog
    /// in a whole timeout (a slow reader that acknowledges a datagram now and then held its
    /// 64 MiB for ever).
    SendBacklog,
    /// [`crate::Limits::max_messages_per_sec`].
    MessageRate,
}

/// Why a connection ended. Every closed connection reports exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectReason {
    /// The peer sent a disconnection notification (0x15).
    PeerClosed,
    /// Nothing was received for the configured timeout.
    Timeout,
    /// This side closed the connection.
    LocalClose,
    /// The endpoint shut down.
    Shutdown,
    /// The peer exceeded a limit.
    LimitExceeded(Limit),
    /// The peer broke the protocol; the text says how.
    ProtocolViolation(&'static str),
    /// An outgoing connection attempt failed.
    ConnectFailed(ConnectError),
}

impl fmt::Display for DisconnectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PeerClosed => f.write_str("closed by peer"),
            Self::Timeout => f.write_str("timed out"),
            Self::LocalClose => f.write_str("closed locally"),
            Self::Shutdown => f.write_str("endpoint shut down"),
            Self::LimitExceeded(l) => write!(f, "peer exceeded limit {l:?}"),
            Self::ProtocolViolation(what) => write!(f, "protocol violation: {what}"),
            Self::ConnectFailed(e) => write!(f, "connect failed: {e}"),
        }
    }
}
