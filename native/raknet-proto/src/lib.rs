//! A sans-IO implementation of the RakNet protocol, as spoken by official RakNet 4.081
//! (protocol 6) and Minecraft Bedrock (protocols 10 and 11).
//!
//! This crate contains no clock, no sockets and no threads: bytes and time go in, bytes
//! and events come out, so every behaviour can be tested deterministically.
//!
//! This release provides the complete wire codec:
//!
//! * offline messages ([`OfflineMessage`]): pings and pongs, the open-connection handshake,
//!   refusals;
//! * connected datagrams ([`Datagram`]): the flag byte, the optional datagram timestamp,
//!   ACK/NAK ranges, and the [`Frame`]s inside data datagrams;
//! * connected control messages ([`ConnectedMessage`]): connection request/accepted, new
//!   incoming connection, connected ping/pong, disconnection, the `ID_TIMESTAMP` prefix;
//! * system addresses ([`addr`]) and wrap-aware 24-bit counters ([`DatagramSeq`] and
//!   friends).
//!
//! Decoders read from [`bytes::Bytes`], return a typed [`DecodeError`] on malformed input
//! (they never panic, and allocate only in proportion to the input), and hand payloads out as
//! zero-copy slices. Encoders write into any caller-owned [`bytes::BufMut`].
//!
//! ```
//! use bytes::Bytes;
//! use raknet_proto::{Datagram, Decode, Encode, UnconnectedPing};
//!
//! let ping = UnconnectedPing { only_if_open: false, time: 0x1234, client_guid: Some(7) };
//! let mut wire = Vec::new();
//! ping.encode(&mut wire);
//! assert_eq!(wire.len(), 33);
//! assert_eq!(UnconnectedPing::decode(&mut Bytes::from(wire)).unwrap(), ping);
//!
//! // A data datagram holding one UNRELIABLE frame.
//! let datagram = Datagram::decode(Bytes::from_static(&[0x84, 0, 0, 0, 0x00, 0x00, 0x08, 0x86]), false)?;
//! let frame = datagram.frames().next().unwrap()?;
//! assert_eq!(&frame.payload[..], &[0x86]);
//! # Ok::<(), raknet_proto::DecodeError>(())
//! ```

pub mod addr;
mod admission;
mod clock;
mod codec;
mod config;
mod congestion;
mod connection;
mod datagram;
mod endpoint;
mod error;
mod frame;
mod group;
mod handshake;
pub mod hash;
pub mod memory;
pub mod message;
pub mod proxy;
pub mod rates;
mod recv;
mod reliability;
mod rng;
mod rtt;
mod send;
mod seq;
mod stats;

#[doc(hidden)]
pub mod fuzzing;

pub use admission::{ban_network, host_prefix_len, ip_key, prefix};
pub use codec::{Decode, Encode};
pub use config::{
    AdmissionLimits, CongestionControl, CookieMode, EndpointConfig, Limits, SendBudget,
};
pub use congestion::{Bbr, CongestionEvent, Controller, DeliverySample, Pacer, SlidingWindow};
pub use connection::Role;
pub use datagram::{
    flags, Ack, AckRange, DataHeader, Datagram, Nak, ACK_HEADER_LEN, DATAGRAM_HEADER_RESERVED,
    IP_UDP_HEADER_LEN, TIMESTAMP_LEN,
};
pub use endpoint::{
    ConnId, ConnectOptions, ConnectionInfo, Endpoint, Event, RawConfig, RawReplyError, Transmit,
    BANNED_REPLIES_PER_SEC, MAX_OFFLINE_PING_RESPONSE,
};
pub use error::{ConnectError, DecodeError, DisconnectReason, Limit, SendError};
pub use frame::{
    Frame, Frames, SplitHeader, MAX_FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, ORDERING_CHANNELS,
    SPLIT_HEADER_LEN,
};
pub use group::{EndpointGroup, GuidTable};
pub use memory::HeapUsage;
pub use message::{
    AlreadyConnected, BedrockMotd, ConnectedMessage, ConnectedPing, ConnectedPong,
    ConnectionBanned, ConnectionRequest, ConnectionRequestAccepted, IncompatibleProtocolVersion,
    IpRecentlyConnected, NewIncomingConnection, NoFreeIncomingConnections, OfflineMessage,
    OpenConnectionReply1, OpenConnectionReply2, OpenConnectionRequest1, OpenConnectionRequest2,
    Timestamped, UnconnectedPing, UnconnectedPong,
};
pub use reliability::Reliability;
pub use rtt::{RttEstimator, MAX_RTO};
pub use send::gate::SendGate;
pub use send::queue::{Priority, ReceiptId, SendOptions};
pub use seq::{DatagramSeq, MessageIndex, OrderIndex, SequenceIndex, U24_MODULUS};
pub use stats::{ConnectionStats, EndpointStats};

/// The largest message that fits in one frame without splitting, for a given MTU:
/// MTU − 28 (IP + UDP) − 9 (reserved datagram header) − 23 (largest frame header),
/// i.e. 1432 bytes at MTU 1492, as official RakNet computes it (protocol reference §5.4).
pub const fn max_unsplit_payload(mtu: u16) -> usize {
    (mtu as usize)
        .saturating_sub(IP_UDP_HEADER_LEN + DATAGRAM_HEADER_RESERVED + MAX_FRAME_HEADER_LEN)
}

#[cfg(test)]
pub(crate) mod test_util {
    use bytes::Bytes;

    /// Parse hex with optional whitespace; test vectors are written this way.
    pub(crate) fn hex(s: &str) -> Bytes {
        let s: String = s.split_whitespace().collect();
        Bytes::from(
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("valid hex"))
                .collect::<Vec<_>>(),
        )
    }
}
