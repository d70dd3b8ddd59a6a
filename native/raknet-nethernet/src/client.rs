//! The client side of a NetherNet session, sans-IO: the offer a Minecraft client makes (the
//! two data channels, full ICE with host candidates, an optional player identity), the
//! checks it makes on the answer's server assertion, then messages both ways.
//!
//! The offer goes to the server by HTTP (`POST /v1/join/{id}`, the caller's part); the answer
//! comes back to [`Client::accept_answer`]; datagrams and timers are driven as for
//! [`crate::host::Host`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::channel::{ChannelConfig, Reliability};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc};

use crate::channels::Channels;
use crate::framing::MAX_RECEIVED;
use crate::host::{CloseReason, SendError, RELIABLE_LABEL, UNRELIABLE_LABEL};
use crate::identity::{envelope, Assertion, Identity, IdentityError, OperatorKey, Trust};
use crate::sdp::{self, Offer};

/// What the player's offer asserts: a token naming the player's key (`cpk`), and that key,
/// which signs the offer's fingerprints.
#[derive(Debug, Clone)]
pub struct PlayerIdentity {
    /// The token (a GameServerToken from the auth service, or any JWT carrying `cpk`).
    pub token: String,
    /// The key `cpk` names.
    pub key: OperatorKey,
    /// `idp.domain`.
    pub domain: String,
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerError {
    /// Not an SDP answer with a data channel and fingerprints.
    Sdp(sdp::SdpError),
    /// The server's assertion is missing or does not verify (as a Minecraft client refuses).
    Identity(IdentityError),
    /// The WebRTC stack refused the answer (or one was taken already).
    Rejected(String),
}

/// What a client tells its application.
#[derive(Debug)]
pub enum ClientEvent {
    /// Both channels opened.
    Connected,
    /// A whole message.
    Message {
        /// The message, framing removed.
        payload: Vec<u8>,
        /// Came on the reliable channel.
        reliable: bool,
    },
    /// The session ended (after `Connected`, or instead of it).
    Disconnected {
        /// Why.
        reason: CloseReason,
    },
}

/// One client session.
pub struct Client {
    rtc: Rtc,
    pending: Option<SdpPendingOffer>,
    channels: Channels,
    connected: bool,
    ended: bool,
    server: Option<Identity>,
    local: SocketAddr,
    max_buffered: usize,
    transmits: VecDeque<(SocketAddr, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    timeout: Option<Instant>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("local", &self.local)
            .field("connected", &self.connected)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client whose socket is `local` (the offer's one host candidate), and its offer.
    pub fn new(
        now: Instant,
        local: SocketAddr,
        identity: Option<&PlayerIdentity>,
    ) -> Result<(Self, String), String> {
        let provider = Arc::new(str0m::crypto::from_feature_flags());
        let mut rtc = Rtc::builder()
            .set_crypto_provider(provider)
            .set_stats_interval(None)
            .build(now);
        let candidate = Candidate::host(local, "udp").map_err(|e| e.to_string())?;
        rtc.add_local_candidate(candidate);
        let mut api = rtc.sdp_api();
        api.add_channel(RELIABLE_LABEL.into());
        api.add_channel_with_config(ChannelConfig {
            label: UNRELIABLE_LABEL.into(),
            ordered: false,
            reliability: Reliability::MaxRetransmits { retransmits: 0 },
            ..Default::default()
        });
        let (offer, pending) = api.apply().ok_or("no offer")?;
        let mut offer = offer.to_sdp_string();
        if let Some(id) = identity {
            let fingerprints = sdp::fingerprints(&offer);
            let jws = id.key.sign_fingerprints(&fingerprints);
            offer = sdp::with_identity(&offer, &envelope(&id.domain, &id.token, &jws));
        }
        let client = Self {
            rtc,
            pending: Some(pending),
            channels: Channels::new(MAX_RECEIVED),
            connected: false,
            ended: false,
            server: None,
            local,
            max_buffered: 4 * 1024 * 1024,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            timeout: Some(now),
        };
        Ok((client, offer))
    }

    /// Take the server's answer: its assertion must verify as a Minecraft client checks it
    /// (the token self-signed by its `cpk`, not expired; the answer's fingerprints signed by
    /// the same key). Returns the server's claims (`cpk` among them: the key to pin).
    pub fn accept_answer(
        &mut self,
        now: Instant,
        now_unix: u64,
        answer: &str,
    ) -> Result<Identity, AnswerError> {
        let parsed = Offer::parse(answer).map_err(AnswerError::Sdp)?;
        let value = parsed
            .identity
            .as_deref()
            .ok_or(AnswerError::Identity(IdentityError::Missing))?;
        let server = Assertion::parse(value)
            .and_then(|a| a.verify(&parsed.fingerprints, &Trust::SelfSigned, now_unix))
            .map_err(AnswerError::Identity)?;
        let pending = self
            .pending
            .take()
            .ok_or_else(|| AnswerError::Rejected("answer already taken".into()))?;
        let answer = SdpAnswer::from_sdp_string(&parsed.sdp)
            .map_err(|e| AnswerError::Rejected(e.to_string()))?;
        self.rtc
            .sdp_api()
            .accept_answer(pending, answer)
            .map_err(|e| AnswerError::Rejected(e.to_string()))?;
        self.server = Some(server.clone());
        self.drive(now);
        Ok(server)
    }

    /// Bytes that may wait to be sent before [`Client::send`] says `Full` (default 4 MiB).
    pub fn set_max_buffered(&mut self, bytes: usize) {
        self.max_buffered = bytes;
    }

    /// The server's checked assertion, once an answer was taken.
    pub fn server_identity(&self) -> Option<&Identity> {
        self.server.as_ref()
    }

    /// Take a datagram from `from`; `false` if it was not this session's.
    pub fn handle(&mut self, now: Instant, from: SocketAddr, data: &[u8]) -> bool {
        let Ok(receive) = Receive::new(Protocol::Udp, from, self.local, data) else {
            return false;
        };
        let input = Input::Receive(now, receive);
        if self.ended || !self.rtc.accepts(&input) {
            return false;
        }
        if self.rtc.handle_input(input).is_err() {
            self.end(CloseReason::Failed);
            return true;
        }
        self.drive(now);
        true
    }

    /// When [`Client::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timeout.filter(|_| !self.ended)
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.ended {
            return;
        }
        if self.rtc.handle_input(Input::Timeout(now)).is_err() {
            self.end(CloseReason::Failed);
            return;
        }
        self.drive(now);
    }

    /// Send a message (see [`crate::host::Host::send`]).
    pub fn send(&mut self, now: Instant, reliable: bool, data: &[u8]) -> Result<(), SendError> {
        if !self.connected || self.ended {
            return Err(SendError::Closed);
        }
        self.channels
            .write(&mut self.rtc, reliable, data, self.max_buffered)?;
        self.drive(now);
        Ok(())
    }

    /// Close the session (`Disconnected` with `LocalClose` follows).
    pub fn close(&mut self, now: Instant) {
        if self.ended {
            return;
        }
        let _ = self.rtc.close();
        self.drive(now);
        self.end(CloseReason::LocalClose);
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn drive(&mut self, now: Instant) {
        // Queued frames go to SCTP as it makes room; SACKs show in its buffered amount only
        // once its output was polled, so the feeding goes on until a round feeds nothing.
        self.channels.feed(&mut self.rtc);
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    self.transmits.push_back((t.destination, t.contents.into()));
                }
                Ok(Output::Timeout(at)) => {
                    if self.channels.feed(&mut self.rtc) {
                        continue;
                    }
                    self.timeout = Some(at);
                    break;
                }
                Ok(Output::Event(Event::ChannelOpen(id, label))) => {
                    self.channels.opened(id, &label);
                    // Both channels: the client opened them, so both are wanted.
                    let both =
                        self.channels.reliable.is_some() && self.channels.unreliable.is_some();
                    if !self.connected && both {
                        self.connected = true;
                        self.events.push_back(ClientEvent::Connected);
                    }
                }
                Ok(Output::Event(Event::ChannelData(data))) => {
                    if let Ok(Some((payload, reliable))) = self.channels.receive(&data) {
                        self.events
                            .push_back(ClientEvent::Message { payload, reliable });
                    }
                }
                Ok(Output::Event(Event::Closed)) => {
                    self.end(CloseReason::PeerClosed);
                    return;
                }
                Ok(Output::Event(_)) => {}
                Err(_) => {
                    self.timeout = Some(now);
                    self.end(CloseReason::Failed);
                    return;
                }
            }
        }
        if !self.rtc.is_alive() {
            self.end(CloseReason::PeerClosed);
        }
    }

    fn end(&mut self, reason: CloseReason) {
        if !self.ended {
            self.ended = true;
            self.events.push_back(ClientEvent::Disconnected { reason });
        }
    }
}
