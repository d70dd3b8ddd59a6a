//! Offline (unconnected) messages: pings, the open-connection handshake and refusals
//! (protocol reference §4).
//!
//! Every offline message carries [`MAGIC`]. Decoders accept trailing bytes where official
//! RakNet does (it never checks for them) and reject everything shorter than the layout.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes};

use super::id;
use super::id::MAGIC;
use crate::addr;
use crate::codec::{Decode, Encode, Reader};
use crate::datagram::IP_UDP_HEADER_LEN;
use crate::error::DecodeError;

/// Size of a cookie carried by the cookie-only security variant (§4.10).
const COOKIE_LEN: usize = 4;
/// Size of official RakNet's libcat public key in Reply1.
pub const PUBLIC_KEY_LEN: usize = 64;
/// Size of the client challenge in OCR2 (libcat security only).
pub const CHALLENGE_LEN: usize = 64;
/// Size of the server's answer in Reply2 (libcat security only).
pub const ANSWER_LEN: usize = 128;
/// Shortest OCR1 a client may send: ID, magic and protocol byte.
pub const MIN_OCR1_LEN: usize = 1 + MAGIC.len() + 1;

fn expect_id(buf: &mut Bytes, expected: u8) -> Result<(), DecodeError> {
    match buf.read_u8()? {
        id if id == expected => Ok(()),
        other => Err(DecodeError::UnexpectedId(other)),
    }
}

fn read_magic(buf: &mut Bytes) -> Result<(), DecodeError> {
    let magic = buf.read_bytes(MAGIC.len())?;
    if magic[..] == MAGIC {
        Ok(())
    } else {
        Err(DecodeError::BadMagic)
    }
}

/// `0x01` / `0x02` Unconnected ping: asks a server for its pong without any state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnconnectedPing {
    /// `true` for `0x02`, which a server answers only while it has a free slot.
    pub only_if_open: bool,
    /// The sender's time in milliseconds, echoed in the pong.
    pub time: u64,
    /// The sender's GUID; official accepts a 25-byte ping that lacks it.
    pub client_guid: Option<u64>,
}

impl Encode for UnconnectedPing {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(if self.only_if_open {
            id::UNCONNECTED_PING_OPEN_CONNECTIONS
        } else {
            id::UNCONNECTED_PING
        });
        buf.put_u64(self.time);
        buf.put_slice(&MAGIC);
        if let Some(guid) = self.client_guid {
            buf.put_u64(guid);
        }
    }

    fn encoded_len(&self) -> usize {
        25 + if self.client_guid.is_some() { 8 } else { 0 }
    }
}

impl Decode for UnconnectedPing {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let only_if_open = match buf.read_u8()? {
            id::UNCONNECTED_PING => false,
            id::UNCONNECTED_PING_OPEN_CONNECTIONS => true,
            other => return Err(DecodeError::UnexpectedId(other)),
        };
        let time = buf.read_u64()?;
        read_magic(buf)?;
        let client_guid = if buf.len() >= 8 {
            Some(buf.read_u64()?)
        } else {
            None
        };
        Ok(Self {
            only_if_open,
            time,
            client_guid,
        })
    }
}

/// `0x1C` Unconnected pong: the server's answer to a ping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnconnectedPong {
    /// The ping's time, echoed.
    pub time: u64,
    /// The server's GUID.
    pub server_guid: u64,
    /// The application-defined "offline ping response", raw. Minecraft servers put a u16
    /// length and a MOTD string here; see [`crate::BedrockMotd`].
    pub data: Bytes,
}

impl Encode for UnconnectedPong {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::UNCONNECTED_PONG);
        buf.put_u64(self.time);
        buf.put_u64(self.server_guid);
        buf.put_slice(&MAGIC);
        buf.put_slice(&self.data);
    }

    fn encoded_len(&self) -> usize {
        33 + self.data.len()
    }
}

impl Decode for UnconnectedPong {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::UNCONNECTED_PONG)?;
        let time = buf.read_u64()?;
        let server_guid = buf.read_u64()?;
        read_magic(buf)?;
        let data = std::mem::take(buf);
        Ok(Self {
            time,
            server_guid,
            data,
        })
    }
}

/// `0x05` Open connection request 1: the client's protocol version and MTU probe.
///
/// The client pads the datagram with zeros so that its UDP payload plus 28 bytes of
/// IPv4 and UDP headers equals the MTU it probes (§4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenConnectionRequest1 {
    /// The client's RakNet protocol version (official 6, Bedrock 10 or 11).
    pub protocol: u8,
    /// The probed MTU: the datagram's length plus [`IP_UDP_HEADER_LEN`].
    pub mtu: u16,
}

impl Encode for OpenConnectionRequest1 {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::OPEN_CONNECTION_REQUEST_1);
        buf.put_slice(&MAGIC);
        buf.put_u8(self.protocol);
        buf.put_bytes(0, self.encoded_len() - MIN_OCR1_LEN);
    }

    fn encoded_len(&self) -> usize {
        usize::from(self.mtu)
            .saturating_sub(IP_UDP_HEADER_LEN)
            .max(MIN_OCR1_LEN)
    }
}

impl Decode for OpenConnectionRequest1 {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let total = buf.len();
        expect_id(buf, id::OPEN_CONNECTION_REQUEST_1)?;
        read_magic(buf)?;
        let protocol = buf.read_u8()?;
        // The padding's content is irrelevant; only its length carries the MTU.
        buf.clear();
        let mtu = u16::try_from(total + IP_UDP_HEADER_LEN).unwrap_or(u16::MAX);
        Ok(Self { protocol, mtu })
    }
}

/// `0x06` Open connection reply 1: the server's GUID, security and MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenConnectionReply1 {
    /// The server's GUID.
    pub server_guid: u64,
    /// The anti-spoofing cookie the client must echo in OCR2 (`hasSecurity` = 1).
    pub cookie: Option<u32>,
    /// The libcat public key of an official server built with security; only with a cookie.
    /// We never send one, but decode it so a client can report the server as unsupported.
    pub server_public_key: Option<Bytes>,
    /// The MTU the server accepts: min(probe, its maximum).
    pub mtu: u16,
}

impl Encode for OpenConnectionReply1 {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::OPEN_CONNECTION_REPLY_1);
        buf.put_slice(&MAGIC);
        buf.put_u64(self.server_guid);
        match self.cookie {
            Some(cookie) => {
                buf.put_u8(1);
                buf.put_u32(cookie);
                if let Some(key) = &self.server_public_key {
                    buf.put_slice(key);
                }
            }
            None => buf.put_u8(0),
        }
        buf.put_u16(self.mtu);
    }

    fn encoded_len(&self) -> usize {
        let security = match (self.cookie, &self.server_public_key) {
            (Some(_), Some(key)) => COOKIE_LEN + key.len(),
            (Some(_), None) => COOKIE_LEN,
            (None, _) => 0,
        };
        28 + security
    }
}

impl Decode for OpenConnectionReply1 {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::OPEN_CONNECTION_REPLY_1)?;
        read_magic(buf)?;
        let server_guid = buf.read_u64()?;
        let (cookie, server_public_key) = match buf.read_u8()? {
            0 => (None, None),
            _ => {
                let cookie = buf.read_u32()?;
                // Cookie-only servers (Minecraft ecosystem) send no key: tell the two apart by
                // what is left, a u16 MTU or a 64-byte key and then the MTU.
                let key = if buf.len() >= PUBLIC_KEY_LEN + 2 {
                    Some(buf.read_bytes(PUBLIC_KEY_LEN)?)
                } else {
                    None
                };
                (Some(cookie), key)
            }
        };
        let mtu = buf.read_u16()?;
        Ok(Self {
            server_guid,
            cookie,
            server_public_key,
            mtu,
        })
    }
}

/// `0x07` Open connection request 2: the client confirms the MTU and sends its GUID.
///
/// Whether a cookie is present cannot be told from the packet alone (§4.6): decode with
/// [`OpenConnectionRequest2::decode_with_cookie`] and say whether Reply1 asked for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenConnectionRequest2 {
    /// The cookie from Reply1, echoed; present only if Reply1 had `hasSecurity`.
    pub cookie: Option<u32>,
    /// The libcat client challenge; only with a cookie, and never sent by cookie-only clients.
    pub client_challenge: Option<Bytes>,
    /// The server's address as the client sees it.
    pub server_address: SocketAddr,
    /// The MTU from Reply1.
    pub mtu: u16,
    /// The client's GUID.
    pub client_guid: u64,
}

impl OpenConnectionRequest2 {
    /// Decode, expecting a cookie (and challenge flag) exactly when `expect_cookie`.
    pub fn decode_with_cookie(buf: &mut Bytes, expect_cookie: bool) -> Result<Self, DecodeError> {
        expect_id(buf, id::OPEN_CONNECTION_REQUEST_2)?;
        read_magic(buf)?;
        let (cookie, client_challenge) = if expect_cookie {
            let cookie = buf.read_u32()?;
            let challenge = match buf.read_u8()? {
                0 => None,
                _ => Some(buf.read_bytes(CHALLENGE_LEN)?),
            };
            (Some(cookie), challenge)
        } else {
            (None, None)
        };
        let server_address = addr::decode(buf)?;
        let mtu = buf.read_u16()?;
        let client_guid = buf.read_u64()?;
        Ok(Self {
            cookie,
            client_challenge,
            server_address,
            mtu,
            client_guid,
        })
    }
}

impl Encode for OpenConnectionRequest2 {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::OPEN_CONNECTION_REQUEST_2);
        buf.put_slice(&MAGIC);
        if let Some(cookie) = self.cookie {
            buf.put_u32(cookie);
            match &self.client_challenge {
                Some(challenge) => {
                    buf.put_u8(1);
                    buf.put_slice(challenge);
                }
                None => buf.put_u8(0),
            }
        }
        addr::encode(&self.server_address, buf);
        buf.put_u16(self.mtu);
        buf.put_u64(self.client_guid);
    }

    fn encoded_len(&self) -> usize {
        let security = match (self.cookie, &self.client_challenge) {
            (Some(_), Some(c)) => COOKIE_LEN + 1 + c.len(),
            (Some(_), None) => COOKIE_LEN + 1,
            (None, _) => 0,
        };
        17 + security + addr::encoded_len(&self.server_address) + 10
    }
}

/// `0x08` Open connection reply 2: the server has allocated a slot for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenConnectionReply2 {
    /// The server's GUID.
    pub server_guid: u64,
    /// The client's address as the server sees it.
    pub client_address: SocketAddr,
    /// The MTU both sides use from now on.
    pub mtu: u16,
    /// The libcat security answer. Official writes `doSecurity` as a single bit (`0x80`);
    /// when set, this 128-byte answer follows. We never send it.
    pub security_answer: Option<Bytes>,
}

impl Encode for OpenConnectionReply2 {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::OPEN_CONNECTION_REPLY_2);
        buf.put_slice(&MAGIC);
        buf.put_u64(self.server_guid);
        addr::encode(&self.client_address, buf);
        buf.put_u16(self.mtu);
        match &self.security_answer {
            Some(answer) => {
                buf.put_u8(0x80);
                buf.put_slice(answer);
            }
            None => buf.put_u8(0),
        }
    }

    fn encoded_len(&self) -> usize {
        28 + addr::encoded_len(&self.client_address)
            + self.security_answer.as_ref().map_or(0, Bytes::len)
    }
}

impl Decode for OpenConnectionReply2 {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::OPEN_CONNECTION_REPLY_2)?;
        read_magic(buf)?;
        let server_guid = buf.read_u64()?;
        let client_address = addr::decode(buf)?;
        let mtu = buf.read_u16()?;
        // A single bit, MSB first: `0x01` (written by some third parties) reads as false,
        // exactly as in official RakNet. A missing byte reads as false too.
        let do_security = buf.first().is_some_and(|b| b & 0x80 != 0);
        let security_answer = if do_security {
            buf.skip(1)?;
            Some(buf.read_bytes(ANSWER_LEN)?)
        } else {
            None
        };
        Ok(Self {
            server_guid,
            client_address,
            mtu,
            security_answer,
        })
    }
}

/// `0x19` Incompatible protocol version: the server refuses the client's OCR1.
///
/// The odd one out among refusals: the protocol byte comes before the magic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompatibleProtocolVersion {
    /// The protocol version the server speaks.
    pub protocol: u8,
    /// The server's GUID.
    pub server_guid: u64,
}

impl Encode for IncompatibleProtocolVersion {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::INCOMPATIBLE_PROTOCOL_VERSION);
        buf.put_u8(self.protocol);
        buf.put_slice(&MAGIC);
        buf.put_u64(self.server_guid);
    }

    fn encoded_len(&self) -> usize {
        26
    }
}

impl Decode for IncompatibleProtocolVersion {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::INCOMPATIBLE_PROTOCOL_VERSION)?;
        let protocol = buf.read_u8()?;
        read_magic(buf)?;
        let server_guid = buf.read_u64()?;
        Ok(Self {
            protocol,
            server_guid,
        })
    }
}

macro_rules! refusal {
    ($(#[$doc:meta])* $name:ident, $id:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            /// The server's GUID.
            pub server_guid: u64,
        }

        impl Encode for $name {
            fn encode<B: BufMut>(&self, buf: &mut B) {
                buf.put_u8($id);
                buf.put_slice(&MAGIC);
                buf.put_u64(self.server_guid);
            }

            fn encoded_len(&self) -> usize {
                25
            }
        }

        impl Decode for $name {
            fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
                expect_id(buf, $id)?;
                read_magic(buf)?;
                Ok(Self { server_guid: buf.read_u64()? })
            }
        }
    };
}

refusal!(
    /// `0x12` Already connected: the client's address or GUID already has a slot.
    AlreadyConnected,
    id::ALREADY_CONNECTED
);
refusal!(
    /// `0x14` No free incoming connections: the server is full.
    NoFreeIncomingConnections,
    id::NO_FREE_INCOMING_CONNECTIONS
);
refusal!(
    /// `0x17` Connection banned: the client's address is banned.
    ConnectionBanned,
    id::CONNECTION_BANNED
);
refusal!(
    /// `0x1A` IP recently connected: the address got a slot too recently.
    IpRecentlyConnected,
    id::IP_RECENTLY_CONNECTED
);

/// Any offline message, classified by its first byte and the position of the magic
/// (protocol reference §3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant is documented on its type
pub enum OfflineMessage {
    UnconnectedPing(UnconnectedPing),
    UnconnectedPong(UnconnectedPong),
    OpenConnectionRequest1(OpenConnectionRequest1),
    OpenConnectionReply1(OpenConnectionReply1),
    OpenConnectionRequest2(OpenConnectionRequest2),
    OpenConnectionReply2(OpenConnectionReply2),
    IncompatibleProtocolVersion(IncompatibleProtocolVersion),
    AlreadyConnected(AlreadyConnected),
    NoFreeIncomingConnections(NoFreeIncomingConnections),
    ConnectionBanned(ConnectionBanned),
    IpRecentlyConnected(IpRecentlyConnected),
}

impl OfflineMessage {
    /// Whether `datagram` is an offline message: an offline ID followed by the magic at the
    /// offset that ID implies. Connected datagrams (bit 0x80 set) never are.
    pub fn is_offline(datagram: &[u8]) -> bool {
        let Some(&first) = datagram.first() else {
            return false;
        };
        let at = match first {
            id::UNCONNECTED_PING
            | id::UNCONNECTED_PING_OPEN_CONNECTIONS
            | id::OUT_OF_BAND_INTERNAL => 9,
            id::UNCONNECTED_PONG => 17,
            id::INCOMPATIBLE_PROTOCOL_VERSION => 2,
            id::OPEN_CONNECTION_REQUEST_1
            | id::OPEN_CONNECTION_REPLY_1
            | id::OPEN_CONNECTION_REQUEST_2
            | id::OPEN_CONNECTION_REPLY_2
            | id::CONNECTION_ATTEMPT_FAILED
            | id::ALREADY_CONNECTED
            | id::NO_FREE_INCOMING_CONNECTIONS
            | id::CONNECTION_BANNED
            | id::IP_RECENTLY_CONNECTED => 1,
            _ => return false,
        };
        datagram.get(at..at + MAGIC.len()) == Some(&MAGIC[..])
    }

    /// Decode an offline message. `ocr2_cookie` says whether an OCR2 is expected to carry
    /// a cookie (that is, whether this side sent cookies in Reply1).
    pub fn decode(buf: &mut Bytes, ocr2_cookie: bool) -> Result<Self, DecodeError> {
        let first = *buf.first().ok_or(DecodeError::UnexpectedEnd {
            needed: 1,
            remaining: 0,
        })?;
        Ok(match first {
            id::UNCONNECTED_PING | id::UNCONNECTED_PING_OPEN_CONNECTIONS => {
                Self::UnconnectedPing(UnconnectedPing::decode(buf)?)
            }
            id::UNCONNECTED_PONG => Self::UnconnectedPong(UnconnectedPong::decode(buf)?),
            id::OPEN_CONNECTION_REQUEST_1 => {
                Self::OpenConnectionRequest1(OpenConnectionRequest1::decode(buf)?)
            }
            id::OPEN_CONNECTION_REPLY_1 => {
                Self::OpenConnectionReply1(OpenConnectionReply1::decode(buf)?)
            }
            id::OPEN_CONNECTION_REQUEST_2 => Self::OpenConnectionRequest2(
                OpenConnectionRequest2::decode_with_cookie(buf, ocr2_cookie)?,
            ),
            id::OPEN_CONNECTION_REPLY_2 => {
                Self::OpenConnectionReply2(OpenConnectionReply2::decode(buf)?)
            }
            id::INCOMPATIBLE_PROTOCOL_VERSION => {
                Self::IncompatibleProtocolVersion(IncompatibleProtocolVersion::decode(buf)?)
            }
            id::ALREADY_CONNECTED => Self::AlreadyConnected(AlreadyConnected::decode(buf)?),
            id::NO_FREE_INCOMING_CONNECTIONS => {
                Self::NoFreeIncomingConnections(NoFreeIncomingConnections::decode(buf)?)
            }
            id::CONNECTION_BANNED => Self::ConnectionBanned(ConnectionBanned::decode(buf)?),
            id::IP_RECENTLY_CONNECTED => {
                Self::IpRecentlyConnected(IpRecentlyConnected::decode(buf)?)
            }
            other => return Err(DecodeError::UnexpectedId(other)),
        })
    }
}

impl Encode for OfflineMessage {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        match self {
            Self::UnconnectedPing(m) => m.encode(buf),
            Self::UnconnectedPong(m) => m.encode(buf),
            Self::OpenConnectionRequest1(m) => m.encode(buf),
            Self::OpenConnectionReply1(m) => m.encode(buf),
            Self::OpenConnectionRequest2(m) => m.encode(buf),
            Self::OpenConnectionReply2(m) => m.encode(buf),
            Self::IncompatibleProtocolVersion(m) => m.encode(buf),
            Self::AlreadyConnected(m) => m.encode(buf),
            Self::NoFreeIncomingConnections(m) => m.encode(buf),
            Self::ConnectionBanned(m) => m.encode(buf),
            Self::IpRecentlyConnected(m) => m.encode(buf),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Self::UnconnectedPing(m) => m.encoded_len(),
            Self::UnconnectedPong(m) => m.encoded_len(),
            Self::OpenConnectionRequest1(m) => m.encoded_len(),
            Self::OpenConnectionReply1(m) => m.encoded_len(),
            Self::OpenConnectionRequest2(m) => m.encoded_len(),
            Self::OpenConnectionReply2(m) => m.encoded_len(),
            Self::IncompatibleProtocolVersion(m) => m.encoded_len(),
            Self::AlreadyConnected(m) => m.encoded_len(),
            Self::NoFreeIncomingConnections(m) => m.encoded_len(),
            Self::ConnectionBanned(m) => m.encoded_len(),
            Self::IpRecentlyConnected(m) => m.encoded_len(),
        }
    }
}
