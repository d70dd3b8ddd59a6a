//! Connected control messages, carried inside frames (protocol reference §6).

use std::net::SocketAddr;

use bytes::{BufMut, Bytes};

use super::id;
use crate::addr;
use crate::codec::{Decode, Encode, Reader};
use crate::error::DecodeError;

/// Bytes at the end of 0x10 and 0x13 after the internal addresses: two u64 times.
const TRAILING_TIMES_LEN: usize = 16;

fn expect_id(buf: &mut Bytes, expected: u8) -> Result<(), DecodeError> {
    match buf.read_u8()? {
        id if id == expected => Ok(()),
        other => Err(DecodeError::UnexpectedId(other)),
    }
}

/// Read system addresses until exactly 16 bytes (the two times) remain.
///
/// Builds differ in how many internal addresses they send (official 10, Minecraft 20,
/// X-Plane 30) and official readers silently misread any other count; reading up to the
/// trailing times accepts all of them (go-raknet's approach, §6.3).
///
/// At most [`MAX_INTERNAL_ADDRESSES`] are kept (the rest are read and skipped): a peer could
/// otherwise make one message, split up to many megabytes, decode into a vector of a
/// million addresses.
fn decode_internal_addresses(buf: &mut Bytes) -> Result<Vec<SocketAddr>, DecodeError> {
    let mut addrs = Vec::new();
    while buf.len() > TRAILING_TIMES_LEN {
        let a = addr::decode(buf)?;
        if addrs.len() < MAX_INTERNAL_ADDRESSES {
            addrs.push(a);
        }
    }
    buf.need(TRAILING_TIMES_LEN)?;
    Ok(addrs)
}

/// Internal addresses kept when decoding 0x10 / 0x13 (X-Plane's build sends 30, the most
/// seen in the wild).
pub(crate) const MAX_INTERNAL_ADDRESSES: usize = 64;

fn addresses_len(addrs: &[SocketAddr]) -> usize {
    addrs.iter().map(addr::encoded_len).sum()
}

/// `0x09` Connection request: the client's first reliable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRequest {
    /// The client's GUID.
    pub client_guid: u64,
    /// The client's time in milliseconds, echoed in the reply.
    pub time: u64,
    /// Whether the client asks for libcat security (never supported here).
    pub use_security: bool,
    /// Everything after the security flag: the password when security is off; with
    /// security on, the unparsed proof, identity and password.
    pub password: Bytes,
}

impl Encode for ConnectionRequest {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::CONNECTION_REQUEST);
        buf.put_u64(self.client_guid);
        buf.put_u64(self.time);
        buf.put_u8(u8::from(self.use_security));
        buf.put_slice(&self.password);
    }

    fn encoded_len(&self) -> usize {
        18 + self.password.len()
    }
}

impl Decode for ConnectionRequest {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::CONNECTION_REQUEST)?;
        let client_guid = buf.read_u64()?;
        let time = buf.read_u64()?;
        let use_security = buf.read_u8()? != 0;
        let password = std::mem::take(buf);
        Ok(Self {
            client_guid,
            time,
            use_security,
            password,
        })
    }
}

/// `0x10` Connection request accepted: the server's answer to 0x09.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRequestAccepted {
    /// The client's address as the server sees it.
    pub client_address: SocketAddr,
    /// The server's slot number for the client (clients ignore it).
    pub system_index: u16,
    /// The server's interface addresses, padded with [`addr::UNASSIGNED`].
    pub internal_addresses: Vec<SocketAddr>,
    /// The 0x09 time, echoed.
    pub request_time: u64,
    /// The server's time when it accepted.
    pub accepted_time: u64,
}

impl Encode for ConnectionRequestAccepted {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::CONNECTION_REQUEST_ACCEPTED);
        addr::encode(&self.client_address, buf);
        buf.put_u16(self.system_index);
        for a in &self.internal_addresses {
            addr::encode(a, buf);
        }
        buf.put_u64(self.request_time);
        buf.put_u64(self.accepted_time);
    }

    fn encoded_len(&self) -> usize {
        1 + addr::encoded_len(&self.client_address)
            + 2
            + addresses_len(&self.internal_addresses)
            + TRAILING_TIMES_LEN
    }
}

impl Decode for ConnectionRequestAccepted {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::CONNECTION_REQUEST_ACCEPTED)?;
        let client_address = addr::decode(buf)?;
        let system_index = buf.read_u16()?;
        let internal_addresses = decode_internal_addresses(buf)?;
        let request_time = buf.read_u64()?;
        let accepted_time = buf.read_u64()?;
        Ok(Self {
            client_address,
            system_index,
            internal_addresses,
            request_time,
            accepted_time,
        })
    }
}

/// `0x13` New incoming connection: the client's last handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIncomingConnection {
    /// The server's address as the client sees it.
    pub server_address: SocketAddr,
    /// The client's interface addresses, padded with [`addr::UNASSIGNED`].
    pub internal_addresses: Vec<SocketAddr>,
    /// The 0x10 accepted time, echoed.
    pub ping_time: u64,
    /// The client's time now.
    pub pong_time: u64,
}

impl Encode for NewIncomingConnection {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::NEW_INCOMING_CONNECTION);
        addr::encode(&self.server_address, buf);
        for a in &self.internal_addresses {
            addr::encode(a, buf);
        }
        buf.put_u64(self.ping_time);
        buf.put_u64(self.pong_time);
    }

    fn encoded_len(&self) -> usize {
        1 + addr::encoded_len(&self.server_address)
            + addresses_len(&self.internal_addresses)
            + TRAILING_TIMES_LEN
    }
}

impl Decode for NewIncomingConnection {
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        expect_id(buf, id::NEW_INCOMING_CONNECTION)?;
        let server_address = addr::decode(buf)?;
        let internal_addresses = decode_internal_addresses(buf)?;
        let ping_time = buf.read_u64()?;
        let pong_time = buf.read_u64()?;
        Ok(Self {
            server_address,
            internal_addresses,
            ping_time,
            pong_time,
        })
    }
}

/// `0x00` Connected ping: exactly 9 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectedPing {
    /// The sender's time in milliseconds.
    pub time: u64,
}

impl Encode for ConnectedPing {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::CONNECTED_PING);
        buf.put_u64(self.time);
    }

    fn encoded_len(&self) -> usize {
        9
    }
}

impl Decode for ConnectedPing {
    /// Official accepts only the exact size; so do we.
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        if buf.len() != 9 {
            return Err(DecodeError::InvalidLength(buf.len()));
        }
        expect_id(buf, id::CONNECTED_PING)?;
        Ok(Self {
            time: buf.read_u64()?,
        })
    }
}

/// `0x03` Connected pong: exactly 17 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectedPong {
    /// The ping's time, echoed.
    pub ping_time: u64,
    /// The responder's time when it answered.
    pub pong_time: u64,
}

impl Encode for ConnectedPong {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::CONNECTED_PONG);
        buf.put_u64(self.ping_time);
        buf.put_u64(self.pong_time);
    }

    fn encoded_len(&self) -> usize {
        17
    }
}

impl Decode for ConnectedPong {
    /// Official accepts only the exact size; so do we.
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        if buf.len() != 17 {
            return Err(DecodeError::InvalidLength(buf.len()));
        }
        expect_id(buf, id::CONNECTED_PONG)?;
        Ok(Self {
            ping_time: buf.read_u64()?,
            pong_time: buf.read_u64()?,
        })
    }
}

/// A user message that starts with `ID_TIMESTAMP` (0x1B): the sender's time, then the
/// real message (§6.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timestamped {
    /// The sender's time in its own clock, milliseconds.
    pub time: u64,
    /// The message behind the timestamp, starting with its real ID.
    pub message: Bytes,
}

impl Timestamped {
    /// Split a timestamped payload; `None` when it does not start with 0x1B followed by
    /// 8 time bytes and at least one byte of message.
    pub fn split(payload: &Bytes) -> Option<Self> {
        if payload.len() < 10 || payload[0] != id::TIMESTAMP {
            return None;
        }
        let mut rest = payload.slice(1..);
        let time = rest.read_u64().ok()?;
        Some(Self {
            time,
            message: rest,
        })
    }
}

impl Encode for Timestamped {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(id::TIMESTAMP);
        buf.put_u64(self.time);
        buf.put_slice(&self.message);
    }

    fn encoded_len(&self) -> usize {
        9 + self.message.len()
    }
}

/// A frame payload classified by its first byte: a control message the engine handles
/// itself, or a message for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectedMessage {
    /// `0x00`.
    ConnectedPing(ConnectedPing),
    /// `0x03`.
    ConnectedPong(ConnectedPong),
    /// `0x04`, accepted and ignored.
    DetectLostConnections,
    /// `0x09`.
    ConnectionRequest(ConnectionRequest),
    /// `0x10`.
    ConnectionRequestAccepted(ConnectionRequestAccepted),
    /// `0x13`.
    NewIncomingConnection(NewIncomingConnection),
    /// `0x15`: the peer is closing the connection.
    DisconnectionNotification,
    /// `0x18`: the server rejected the connection request's password.
    InvalidPassword,
    /// Any other first byte: an application message, whole (ID included).
    User(Bytes),
}

impl ConnectedMessage {
    /// Classify and decode a frame payload (a whole, reassembled message).
    pub fn decode(payload: Bytes) -> Result<Self, DecodeError> {
        let mut buf = payload;
        let first = *buf.first().ok_or(DecodeError::UnexpectedEnd {
            needed: 1,
            remaining: 0,
        })?;
        Ok(match first {
            id::CONNECTED_PING => Self::ConnectedPing(ConnectedPing::decode(&mut buf)?),
            id::CONNECTED_PONG => Self::ConnectedPong(ConnectedPong::decode(&mut buf)?),
            id::DETECT_LOST_CONNECTIONS => Self::DetectLostConnections,
            id::CONNECTION_REQUEST => Self::ConnectionRequest(ConnectionRequest::decode(&mut buf)?),
            id::CONNECTION_REQUEST_ACCEPTED => {
                Self::ConnectionRequestAccepted(ConnectionRequestAccepted::decode(&mut buf)?)
            }
            id::NEW_INCOMING_CONNECTION => {
                Self::NewIncomingConnection(NewIncomingConnection::decode(&mut buf)?)
            }
            id::DISCONNECTION_NOTIFICATION => Self::DisconnectionNotification,
            id::INVALID_PASSWORD => Self::InvalidPassword,
            _ => Self::User(buf),
        })
    }
}
