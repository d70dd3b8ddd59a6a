//! Message identifiers (protocol reference §2) and the offline magic.
//!
//! The first byte of an offline message, and of every frame payload, is one of these IDs.

/// The 16 bytes every offline message carries, at an offset that depends on its ID.
pub const MAGIC: [u8; 16] = [
    0x00, 0xff, 0xff, 0x00, 0xfe, 0xfe, 0xfe, 0xfe, 0xfd, 0xfd, 0xfd, 0xfd, 0x12, 0x34, 0x56, 0x78,
];

/// Connected ping (frame).
pub const CONNECTED_PING: u8 = 0x00;
/// Unconnected ping (offline).
pub const UNCONNECTED_PING: u8 = 0x01;
/// Unconnected ping answered only while the server accepts connections (offline).
pub const UNCONNECTED_PING_OPEN_CONNECTIONS: u8 = 0x02;
/// Connected pong (frame).
pub const CONNECTED_PONG: u8 = 0x03;
/// Keep-alive probe that official RakNet accepts and ignores (frame).
pub const DETECT_LOST_CONNECTIONS: u8 = 0x04;
/// Open connection request 1: protocol version and MTU probe (offline).
pub const OPEN_CONNECTION_REQUEST_1: u8 = 0x05;
/// Open connection reply 1 (offline).
pub const OPEN_CONNECTION_REPLY_1: u8 = 0x06;
/// Open connection request 2 (offline).
pub const OPEN_CONNECTION_REQUEST_2: u8 = 0x07;
/// Open connection reply 2 (offline).
pub const OPEN_CONNECTION_REPLY_2: u8 = 0x08;
/// Connection request, the first message inside the reliability layer (frame).
pub const CONNECTION_REQUEST: u8 = 0x09;
/// Out-of-band message used by plugins; ignored (offline).
pub const OUT_OF_BAND_INTERNAL: u8 = 0x0d;
/// Local notification: a message sent with an ACK receipt was acknowledged.
pub const SND_RECEIPT_ACKED: u8 = 0x0e;
/// Local notification: a message sent with an ACK receipt was lost.
pub const SND_RECEIPT_LOSS: u8 = 0x0f;
/// Connection request accepted (frame).
pub const CONNECTION_REQUEST_ACCEPTED: u8 = 0x10;
/// Connection attempt failed (local; some servers send it).
pub const CONNECTION_ATTEMPT_FAILED: u8 = 0x11;
/// Refusal: the address or GUID is already connected (offline).
pub const ALREADY_CONNECTED: u8 = 0x12;
/// New incoming connection, the client's last handshake message (frame).
pub const NEW_INCOMING_CONNECTION: u8 = 0x13;
/// Refusal: the server is full (offline).
pub const NO_FREE_INCOMING_CONNECTIONS: u8 = 0x14;
/// Disconnection notification (frame).
pub const DISCONNECTION_NOTIFICATION: u8 = 0x15;
/// Connection lost (local; X-Plane's server also sends it to unknown peers).
pub const CONNECTION_LOST: u8 = 0x16;
/// Refusal: the client's address is banned (offline).
pub const CONNECTION_BANNED: u8 = 0x17;
/// The connection request's password did not match (frame).
pub const INVALID_PASSWORD: u8 = 0x18;
/// Refusal: the client's protocol version is not accepted (offline).
pub const INCOMPATIBLE_PROTOCOL_VERSION: u8 = 0x19;
/// Refusal: the address connected too recently (offline).
pub const IP_RECENTLY_CONNECTED: u8 = 0x1a;
/// Prefix of a user message that carries the sender's time (frame).
pub const TIMESTAMP: u8 = 0x1b;
/// Unconnected pong (offline).
pub const UNCONNECTED_PONG: u8 = 0x1c;
/// LAN advertisement (offline).
pub const ADVERTISE_SYSTEM: u8 = 0x1d;
/// The first message ID free for applications.
pub const USER_PACKET_ENUM: u8 = 0x86;
/// Minecraft Bedrock's game-packet batch ID.
pub const MINECRAFT_GAME_PACKET: u8 = 0xfe;
