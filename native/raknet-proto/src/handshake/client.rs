//! The client half of the offline handshake (protocol reference §4): OCR1 at each MTU probe
//! (`attempts_per_probe` times each, `connect_attempt_interval` apart) until a Reply1, one
//! OCR2 per Reply1, until the server's Reply2. The connection drives it while it is offline
//! and takes over at Reply2 with the 0x09.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::codec::Encode;
use crate::config::EndpointConfig;
use crate::error::ConnectError;
use crate::message::{OfflineMessage, OpenConnectionRequest1, OpenConnectionRequest2};

/// Where a client's offline handshake stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientHandshake {
    /// OCR1s sent so far.
    attempt: u32,
    next_attempt: Instant,
    /// The OCR2 a Reply1 asked for, and when it was sent (`None`: not yet).
    ocr2: Option<(OpenConnectionRequest2, Option<Instant>)>,
    /// The GUID of the first Reply1: every later reply or refusal must carry it.
    server_guid: Option<u64>,
}

/// What an offline message did to the handshake.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClientStep {
    /// Not for this handshake (another server's GUID, an unexpected message): dropped.
    Ignored,
    /// Taken; nothing more to do now.
    Taken,
    /// The server refused, or asks for what this library does not do (libcat security).
    Failed(ConnectError),
    /// Reply2: the offline part is over. `rtt` is the OCR2 → Reply2 round trip when known.
    Accepted {
        server_guid: u64,
        mtu: u16,
        rtt: Option<Duration>,
    },
}

/// The server GUID a reply or refusal carries.
pub(crate) fn server_guid(msg: &OfflineMessage) -> Option<u64> {
    match msg {
        OfflineMessage::OpenConnectionReply1(m) => Some(m.server_guid),
        OfflineMessage::OpenConnectionReply2(m) => Some(m.server_guid),
        OfflineMessage::AlreadyConnected(m) => Some(m.server_guid),
        OfflineMessage::NoFreeIncomingConnections(m) => Some(m.server_guid),
        OfflineMessage::ConnectionBanned(m) => Some(m.server_guid),
        OfflineMessage::IpRecentlyConnected(m) => Some(m.server_guid),
        OfflineMessage::IncompatibleProtocolVersion(m) => Some(m.server_guid),
        _ => None,
    }
}

impl ClientHandshake {
    /// A handshake whose first OCR1 goes out at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            attempt: 0,
            next_attempt: now,
            ocr2: None,
            server_guid: None,
        }
    }

    /// When the next OCR1 is due.
    pub(crate) fn next_attempt(&self) -> Instant {
        self.next_attempt
    }

    /// Every OCR1 of every probe was sent, and the last one's wait is over (counted from
    /// `created`, when the first went).
    pub(crate) fn gave_up(&self, config: &EndpointConfig, created: Instant, now: Instant) -> bool {
        let total = config.attempts_per_probe * config.mtu_probes.len() as u32;
        self.attempt >= total && now >= created + config.connect_attempt_interval * total
    }

    /// An offline message from the server. `protocol` is the version being offered; an
    /// incompatible-protocol answer may change it (a retry with the server's version, when
    /// `config` speaks it too).
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        msg: OfflineMessage,
        config: &EndpointConfig,
        protocol: &mut u8,
        our_guid: u64,
        server: SocketAddr,
    ) -> ClientStep {
        // Once a Reply1 told us the server's GUID, every reply and refusal must carry it: a
        // late reply of another server at that address (restarted with a new GUID), or a
        // spoofed one from someone who never asked the server, is dropped instead of ending
        // (a refusal) or steering (a Reply1 or Reply2) our handshake. It is no defence
        // against a spoofer who pinged the server first: every pong carries the GUID, and
        // RakNet's handshake has no client nonce. Before a Reply1, a refusal (a ban, an
        // incompatible protocol: answers to OCR1) is taken as official clients take it.
        if let (Some(known), Some(guid)) = (self.server_guid, server_guid(&msg)) {
            if guid != known {
                return ClientStep::Ignored;
            }
        }
        match msg {
            OfflineMessage::OpenConnectionReply1(reply) => {
                self.server_guid = Some(reply.server_guid);
                if reply.server_public_key.is_some() {
                    return ClientStep::Failed(ConnectError::SecurityRequired);
                }
                self.ocr2 = Some((
                    OpenConnectionRequest2 {
                        cookie: reply.cookie,
                        client_challenge: None,
                        server_address: server,
                        mtu: reply.mtu.clamp(config.min_mtu, config.max_mtu),
                        client_guid: our_guid,
                    },
                    None,
                ));
                ClientStep::Taken
            }
            OfflineMessage::OpenConnectionReply2(reply) => {
                // Only after a Reply1 (whose GUID it carries: checked above). Not only while
                // `ocr2` holds our OCR2: on a path slower than the OCR1 schedule, the answer
                // to an OCR2 comes after the next OCR1 has cleared it.
                if self.server_guid.is_none() {
                    return ClientStep::Ignored;
                }
                if reply.security_answer.is_some() {
                    return ClientStep::Failed(ConnectError::SecurityRequired);
                }
                // The client's first RTT sample: OCR2 → Reply2 is a round trip to the
                // address we chose (the server's side takes none from its offline part).
                let rtt = match &self.ocr2 {
                    Some((_, Some(sent))) => Some(now.saturating_duration_since(*sent)),
                    _ => None,
                };
                ClientStep::Accepted {
                    server_guid: reply.server_guid,
                    mtu: reply.mtu.clamp(config.min_mtu.max(400), config.max_mtu),
                    rtt,
                }
            }
            OfflineMessage::IncompatibleProtocolVersion(m) => {
                // Official clients give up; we retry once with the server's version when we
                // speak it too (a Bedrock-style client reaching an official protocol-6 server).
                if m.protocol != *protocol && config.protocol_versions.contains(&m.protocol) {
                    *protocol = m.protocol;
                    self.ocr2 = None;
                    self.next_attempt = now;
                    ClientStep::Taken
                } else {
                    ClientStep::Failed(ConnectError::IncompatibleProtocol {
                        server_protocol: m.protocol,
                    })
                }
            }
            OfflineMessage::AlreadyConnected(_) => {
                ClientStep::Failed(ConnectError::AlreadyConnected)
            }
            OfflineMessage::NoFreeIncomingConnections(_) => {
                ClientStep::Failed(ConnectError::NoFreeIncomingConnections)
            }
            OfflineMessage::ConnectionBanned(_) => ClientStep::Failed(ConnectError::Banned),
            OfflineMessage::IpRecentlyConnected(_) => {
                ClientStep::Failed(ConnectError::IpRecentlyConnected)
            }
            _ => ClientStep::Ignored,
        }
    }

    /// Write the next offline datagram into `buf`: the OCR2 a Reply1 asked for, else the
    /// next OCR1 when it is due. Returns whether one was written.
    pub(crate) fn transmit(
        &mut self,
        now: Instant,
        config: &EndpointConfig,
        protocol: u8,
        buf: &mut Vec<u8>,
    ) -> bool {
        if let Some((req, sent @ None)) = &mut self.ocr2 {
            req.encode(buf);
            *sent = Some(now);
            return true;
        }
        let per_probe = config.attempts_per_probe.max(1);
        let probe = (self.attempt / per_probe) as usize;
        if now < self.next_attempt || probe >= config.mtu_probes.len() {
            return false;
        }
        let mtu = config.mtu_probes[probe].min(config.max_mtu);
        OpenConnectionRequest1 { protocol, mtu }.encode(buf);
        self.attempt += 1;
        self.next_attempt = now + config.connect_attempt_interval;
        // A fresh Reply1 triggers a fresh OCR2 (the OCR1 schedule keeps running).
        self.ocr2 = None;
        true
    }
}
