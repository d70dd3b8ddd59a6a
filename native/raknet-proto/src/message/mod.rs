//! One type per RakNet wire message, named as RakNet names it.

pub mod id;
mod motd;
mod offline;
mod online;

pub use motd::BedrockMotd;
pub use offline::{
    AlreadyConnected, ConnectionBanned, IncompatibleProtocolVersion, IpRecentlyConnected,
    NoFreeIncomingConnections, OfflineMessage, OpenConnectionReply1, OpenConnectionReply2,
    OpenConnectionRequest1, OpenConnectionRequest2, UnconnectedPing, UnconnectedPong, ANSWER_LEN,
    CHALLENGE_LEN, MIN_OCR1_LEN, PUBLIC_KEY_LEN,
};
pub use online::{
    ConnectedMessage, ConnectedPing, ConnectedPong, ConnectionRequest, ConnectionRequestAccepted,
    NewIncomingConnection, Timestamped,
};
