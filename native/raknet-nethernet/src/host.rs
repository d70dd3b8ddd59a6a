//! Many NetherNet peers on one UDP socket: each a WebRTC session (`str0m`, ICE-lite: the
//! client runs the checks) with the two data channels a Minecraft client opens.
//!
//! Sans-IO like `raknet_proto::Endpoint`: [`Host::accept_offer`] answers a signaling request,
//! [`Host::handle`] takes a datagram [`classify`] said is WebRTC's, [`Host::handle_timeout`]
//! runs timers; [`Host::poll_transmit`] and [`Host::poll_event`] give what they produced.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use str0m::config::CryptoProvider;
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceCreds, Input, Output, Rtc, RtcConfig};

use crate::channels::Channels;
use crate::identity::{Assertion, Claims, Identity, IdentityError, OperatorKey, Trust};
use crate::sdp::{self, Offer, SdpError};

/// The channel labels a Minecraft client opens.
pub const RELIABLE_LABEL: &str = "ReliableDataChannel";
/// See [`RELIABLE_LABEL`].
pub const UNRELIABLE_LABEL: &str = "UnreliableDataChannel";

/// STUN's magic cookie (RFC 5389), bytes 4..8 of every STUN message.
const STUN_COOKIE: [u8; 4] = [0x21, 0x12, 0xA4, 0x42];
/// Addresses one session may be reached from (ICE may try a few candidate pairs).
const MAX_ADDRS_PER_SESSION: usize = 4;

/// What a datagram is, by its first bytes (RFC 7983), for a socket RakNet shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A STUN message (magic cookie present): ICE.
    Stun,
    /// A DTLS record (content type 20-63, version 254.x).
    Dtls,
    /// Anything else (RakNet's datagrams among them).
    Other,
}

/// Classify a datagram. RakNet's never look like STUN (its offline messages are 0x01..0x1C
/// followed by a time or the offline magic, and a ping's bytes 4..8 are its time) unless a
/// ping's time happens to hold the cookie: such a datagram is checked for STUN's length
/// field too. Connected RakNet datagrams start at 0x80; DTLS records carry version 0xFE.
pub fn classify(datagram: &[u8]) -> Kind {
    match datagram {
        [first, _, len_hi, len_lo, c0, c1, c2, c3, ..]
            if first & 0xC0 == 0
                && [*c0, *c1, *c2, *c3] == STUN_COOKIE
                && usize::from(u16::from_be_bytes([*len_hi, *len_lo])) + 20 == datagram.len() =>
        {
            Kind::Stun
        }
        [content, 0xFE, ..] if (20..=63).contains(content) && datagram.len() >= 13 => Kind::Dtls,
        _ => Kind::Other,
    }
}

/// Opaque id of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// How client assertions are treated.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// Anyone may connect; an assertion whose fingerprint signature matches its `cpk` has
    /// its claims passed on, marked unverified (the token's issuer is not checked).
    Open,
    /// An assertion is required and its token must match `Trust`.
    Required(Trust),
}

/// A host's settings.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The addresses answers name as candidates when [`Host::accept_offer`] is given none
    /// (the socket's; a public one behind NAT).
    pub candidates: Vec<SocketAddr>,
    /// Sessions at most, negotiating and open together.
    pub max_sessions: usize,
    /// Sessions negotiating (answer sent, channels not yet open) at most.
    pub max_negotiating: usize,
    /// Sessions negotiating for offers from one address (signaling's peer) at most.
    pub max_negotiating_per_ip: usize,
    /// A session whose reliable channel has not opened by then is dropped.
    pub negotiation_timeout: Duration,
    /// An open session that received nothing for this long ends (`Timeout`).
    pub idle_timeout: Duration,
    /// The largest message reassembled from the reliable channel.
    pub max_message: usize,
    /// Bytes a session may have queued for sending before sends are refused.
    pub max_buffered: usize,
    /// `idp.domain` of the server's assertion.
    pub domain: String,
    /// How long the server's token is valid; a new one is made halfway through.
    pub token_lifetime: Duration,
    /// Client assertions.
    pub client_auth: ClientAuth,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            candidates: Vec::new(),
            max_sessions: 1024,
            max_negotiating: 128,
            max_negotiating_per_ip: 4,
            negotiation_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(20),
            max_message: crate::framing::MAX_RECEIVED,
            max_buffered: 4 * 1024 * 1024,
            domain: "raknet".into(),
            token_lifetime: Duration::from_secs(24 * 3600),
            client_auth: ClientAuth::Open,
        }
    }
}

/// Why an offer got no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum OfferError {
    /// The SDP was refused.
    Sdp(SdpError),
    /// The client's assertion was refused.
    Identity(IdentityError),
    /// The WebRTC stack refused the offer.
    Rejected(String),
    /// `max_sessions` sessions exist.
    Full,
    /// `max_negotiating` sessions are negotiating.
    Busy,
    /// `max_negotiating_per_ip` sessions are negotiating for the offer's address.
    AddressBusy,
}

impl fmt::Display for OfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sdp(e) => write!(f, "{e}"),
            Self::Identity(e) => write!(f, "{e}"),
            Self::Rejected(e) => write!(f, "offer rejected: {e}"),
            Self::Full => f.write_str("server full"),
            Self::Busy => f.write_str("too many negotiations under way"),
            Self::AddressBusy => f.write_str("too many negotiations under way for this address"),
        }
    }
}

impl std::error::Error for OfferError {}

/// Why a send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No such open session.
    Closed,
    /// Too large: over 256 fragments (reliable) or one fragment (unreliable).
    TooLarge,
    /// `max_buffered` bytes wait to be sent already.
    Full,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Nothing received for `idle_timeout`, or ICE lost the peer.
    Timeout,
    /// The peer closed the DTLS connection or SCTP association.
    PeerClosed,
    /// [`Host::close`].
    LocalClose,
    /// The WebRTC stack failed (a protocol error).
    Failed,
}

/// What a host tells its application.
#[derive(Debug)]
pub enum HostEvent {
    /// The reliable channel opened: the session can carry messages.
    Connected {
        /// The session.
        id: SessionId,
        /// The peer's address (the nominated ICE pair's).
        addr: SocketAddr,
        /// The client's checked assertion, if any.
        identity: Option<Identity>,
    },
    /// A whole message.
    Message {
        /// The session.
        id: SessionId,
        /// The message, framing removed.
        payload: Vec<u8>,
        /// Came on the reliable channel.
        reliable: bool,
    },
    /// A session that was `Connected` ended. Exactly one per `Connected`.
    Disconnected {
        /// The session.
        id: SessionId,
        /// Why.
        reason: CloseReason,
    },
}

/// Counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HostStats {
    /// Offers answered.
    pub offers_answered: u64,
    /// Offers refused (any reason).
    pub offers_refused: u64,
    /// Sessions that never opened their reliable channel in time.
    pub negotiations_expired: u64,
    /// Negotiating sessions that gave their place to an offer from a new address (every
    /// place taken).
    pub negotiations_evicted: u64,
    /// Datagrams classified as WebRTC's that matched no session.
    pub datagrams_unmatched: u64,
    /// Frames dropped (bad header, sequence or size).
    pub frames_dropped: u64,
    /// Sends refused.
    pub sends_refused: u64,
}

struct Session {
    rtc: Rtc,
    ufrag: String,
    identity: Option<Identity>,
    channels: Channels,
    /// Set once `Connected` was reported.
    open_addr: Option<SocketAddr>,
    addrs: Vec<SocketAddr>,
    /// The addresses the answer named: a datagram from the peer was sent to the one of its
    /// family (what ICE pairs it with, whatever the socket reports).
    candidates: Vec<SocketAddr>,
    created: Instant,
    last_rx: Instant,
    /// The deadline queued in the host's timer heap.
    timeout: Instant,
    /// [`Host::close`] was called: the end is reported as `LocalClose`.
    closing: bool,
    /// Who sent the offer, counted in `negotiating_by_ip` until the session opens or ends.
    offered_by: Option<IpAddr>,
}

/// Many sessions on one socket.
pub struct Host {
    config: HostConfig,
    rtc_config: RtcConfig,
    key: OperatorKey,
    token: Option<(u64, String)>,
    sessions: HashMap<SessionId, Session>,
    by_ufrag: HashMap<String, SessionId>,
    by_addr: HashMap<SocketAddr, SessionId>,
    timers: BinaryHeap<Reverse<(Instant, SessionId)>>,
    next_id: u64,
    negotiating: usize,
    negotiating_by_ip: HashMap<IpAddr, usize>,
    transmits: VecDeque<(SocketAddr, Vec<u8>)>,
    events: VecDeque<HostEvent>,
    stats: HostStats,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("sessions", &self.sessions.len())
            .field("negotiating", &self.negotiating)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host signing answers with `key`. Makes the DTLS certificate all its sessions share.
    pub fn new(config: HostConfig, key: OperatorKey) -> Result<Self, String> {
        let provider: CryptoProvider = str0m::crypto::from_feature_flags();
        let cert = provider
            .dtls_provider
            .generate_certificate()
            .ok_or("no DTLS certificate could be made")?;
        let rtc_config = Rtc::builder()
            .set_crypto_provider(Arc::new(provider))
            .set_dtls_cert(cert)
            .set_ice_lite(true)
            .set_sctp_max_buffered_amount(config.max_buffered)
            .set_stats_interval(None);
        Ok(Self {
            config,
            rtc_config,
            key,
            token: None,
            sessions: HashMap::new(),
            by_ufrag: HashMap::new(),
            by_addr: HashMap::new(),
            timers: BinaryHeap::new(),
            next_id: 1,
            negotiating: 0,
            negotiating_by_ip: HashMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: HostStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        self.stats
    }

    /// Sessions (negotiating and open).
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// No sessions.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Sessions negotiating.
    pub fn negotiating(&self) -> usize {
        self.negotiating
    }

    /// The operator key's public half (`cpk`).
    pub fn operator_jwk(&self) -> serde_json::Value {
        self.key.jwk()
    }

    /// Answer an offer (the body of `POST /v1/join/{id}`). `now_unix` dates the server's
    /// token and checks the client's. `candidates`: the addresses the answer names (e.g. the
    /// one the client reached signaling at, with the UDP port); none: the configured ones.
    /// `from`: who sent the offer (signaling's peer), for its share of negotiations.
    pub fn accept_offer(
        &mut self,
        now: Instant,
        now_unix: u64,
        offer: &str,
        candidates: &[SocketAddr],
        from: Option<IpAddr>,
    ) -> Result<(SessionId, String), OfferError> {
        let candidates = match candidates {
            [] => self.config.candidates.clone(),
            given => given.to_vec(),
        };
        let result = self.answer(now, now_unix, offer, candidates, from);
        match &result {
            Ok(_) => self.stats.offers_answered += 1,
            Err(_) => self.stats.offers_refused += 1,
        }
        result
    }

    fn answer(
        &mut self,
        now: Instant,
        now_unix: u64,
        text: &str,
        candidates: Vec<SocketAddr>,
        from: Option<IpAddr>,
    ) -> Result<(SessionId, String), OfferError> {
        if candidates.is_empty() {
            return Err(OfferError::Rejected("no candidate address to offer".into()));
        }
        if self.sessions.len() >= self.config.max_sessions {
            return Err(OfferError::Full);
        }
        let from_ip = from
            .and_then(|ip| self.negotiating_by_ip.get(&ip))
            .copied()
            .unwrap_or(0);
        if from_ip >= self.config.max_negotiating_per_ip {
            return Err(OfferError::AddressBusy);
        }
        if self.negotiating >= self.config.max_negotiating {
            // Under pressure, an address without a negotiation of its own takes the place of
            // the oldest: a few addresses cannot hold every slot for the negotiation timeout.
            let oldest = self
                .sessions
                .iter()
                .filter(|(_, s)| s.open_addr.is_none())
                .min_by_key(|(_, s)| s.created)
                .map(|(&id, _)| id);
            match oldest.filter(|_| from.is_some() && from_ip == 0) {
                Some(id) => {
                    self.stats.negotiations_evicted += 1;
                    self.end(id, CloseReason::Timeout);
                }
                None => return Err(OfferError::Busy),
            }
        }
        let offer = Offer::parse(text).map_err(OfferError::Sdp)?;
        let identity = self.check_identity(&offer, now_unix)?;
        let creds = IceCreds::new();
        let mut rtc = self
            .rtc_config
            .clone()
            .set_local_ice_credentials(creds.clone())
            .build(now);
        for &addr in &candidates {
            if let Ok(candidate) = Candidate::host(addr, "udp") {
                rtc.add_local_candidate(candidate);
            }
        }
        let sdp_offer = SdpOffer::from_sdp_string(&offer.sdp)
            .map_err(|e| OfferError::Rejected(e.to_string()))?;
        let answer = rtc
            .sdp_api()
            .accept_offer(sdp_offer)
            .map_err(|e| OfferError::Rejected(e.to_string()))?
            .to_sdp_string();
        let token = self.token(now_unix);
        let assertion =
            self.key
                .assertion(&self.config.domain, &token, &sdp::fingerprints(&answer));
        let id = SessionId(self.next_id);
        self.next_id += 1;
        self.by_ufrag.insert(creds.ufrag.clone(), id);
        self.sessions.insert(
            id,
            Session {
                rtc,
                ufrag: creds.ufrag,
                identity,
                channels: Channels::new(self.config.max_message),
                open_addr: None,
                addrs: Vec::new(),
                candidates,
                created: now,
                last_rx: now,
                timeout: now,
                closing: false,
                offered_by: from,
            },
        );
        self.negotiating += 1;
        if let Some(ip) = from {
            *self.negotiating_by_ip.entry(ip).or_default() += 1;
        }
        self.drive(id, now);
        Ok((id, sdp::with_identity(&answer, &assertion)))
    }

    fn check_identity(&self, offer: &Offer, now_unix: u64) -> Result<Option<Identity>, OfferError> {
        match &self.config.client_auth {
            ClientAuth::Open => Ok(offer
                .identity
                .as_deref()
                .and_then(|v| Assertion::parse(v).ok())
                .and_then(|a| {
                    a.verify(&offer.fingerprints, &Trust::Unchecked, now_unix)
                        .ok()
                })),
            ClientAuth::Required(trust) => {
                let value = offer
                    .identity
                    .as_deref()
                    .ok_or(OfferError::Identity(IdentityError::Missing))?;
                Assertion::parse(value)
                    .and_then(|a| a.verify(&offer.fingerprints, trust, now_unix))
                    .map(Some)
                    .map_err(OfferError::Identity)
            }
        }
    }

    /// The server's token, made again halfway through its lifetime.
    fn token(&mut self, now_unix: u64) -> String {
        let lifetime = self.config.token_lifetime.as_secs().max(60);
        match &self.token {
            Some((issued, token)) if now_unix < issued + lifetime / 2 => token.clone(),
            _ => {
                let mut claims = Claims::new();
                claims.insert("iss".into(), self.config.domain.clone().into());
                let token = self.key.token(now_unix, lifetime, &claims);
                self.token = Some((now_unix, token.clone()));
                token
            }
        }
    }

    /// Take a datagram [`classify`] called [`Kind::Stun`] or [`Kind::Dtls`]. Returns whether
    /// a session took it (others are counted).
    pub fn handle(&mut self, now: Instant, from: SocketAddr, data: &[u8]) -> bool {
        let id = match classify(data) {
            Kind::Stun => stun_local_ufrag(data).and_then(|u| self.by_ufrag.get(u).copied()),
            Kind::Dtls => self.by_addr.get(&from).copied(),
            Kind::Other => None,
        };
        let Some(id) = id else {
            self.stats.datagrams_unmatched += 1;
            return false;
        };
        let Some(session) = self.sessions.get_mut(&id) else {
            return false;
        };
        let local = session
            .candidates
            .iter()
            .find(|c| c.is_ipv4() == from.is_ipv4())
            .or(session.candidates.first())
            .copied();
        let Some(Ok(receive)) = local.map(|local| Receive::new(Protocol::Udp, from, local, data))
        else {
            self.stats.datagrams_unmatched += 1;
            return false;
        };
        session.last_rx = now;
        if !session.addrs.contains(&from) && session.addrs.len() < MAX_ADDRS_PER_SESSION {
            session.addrs.push(from);
            if let Entry::Vacant(v) = self.by_addr.entry(from) {
                v.insert(id);
            }
        }
        if session
            .rtc
            .handle_input(Input::Receive(now, receive))
            .is_err()
        {
            self.end(id, CloseReason::Failed);
            return true;
        }
        self.drive(id, now);
        true
    }

    /// When [`Host::handle_timeout`] is due next.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, id))) = self.timers.peek() {
            match self.sessions.get(&id) {
                Some(s) if s.timeout == at => return Some(at),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, id))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            if session.timeout != at {
                continue;
            }
            if session.open_addr.is_none()
                && now >= session.created + self.config.negotiation_timeout
            {
                self.stats.negotiations_expired += 1;
                self.end(id, CloseReason::Timeout);
                continue;
            }
            if session.open_addr.is_some() && now >= session.last_rx + self.config.idle_timeout {
                self.end(id, CloseReason::Timeout);
                continue;
            }
            if session.rtc.handle_input(Input::Timeout(now)).is_err() {
                self.end(id, CloseReason::Failed);
                continue;
            }
            self.drive(id, now);
        }
    }

    /// Send `data` to an open session: on the reliable channel (fragmented as needed) or the
    /// unreliable one (one fragment at most).
    pub fn send(
        &mut self,
        now: Instant,
        id: SessionId,
        reliable: bool,
        data: &[u8],
    ) -> Result<(), SendError> {
        let result = self.write(id, reliable, data);
        match result {
            Ok(()) => self.drive(id, now),
            Err(_) => self.stats.sends_refused += 1,
        }
        result
    }

    fn write(&mut self, id: SessionId, reliable: bool, data: &[u8]) -> Result<(), SendError> {
        let session = self.sessions.get_mut(&id).ok_or(SendError::Closed)?;
        if session.open_addr.is_none() {
            return Err(SendError::Closed);
        }
        session
            .channels
            .write(&mut session.rtc, reliable, data, self.config.max_buffered)
    }

    /// Close a session (a `Disconnected` with `LocalClose` follows if it was open).
    pub fn close(&mut self, now: Instant, id: SessionId) {
        if let Some(session) = self.sessions.get_mut(&id) {
            session.closing = true;
            let _ = session.rtc.close();
            // Collects the close's output (DTLS close_notify); ends the session.
            self.drive(id, now);
            self.end(id, CloseReason::LocalClose);
        }
    }

    /// The next datagram to send: destination and bytes.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }

    /// An open session's peer address and identity.
    pub fn session(&self, id: SessionId) -> Option<(SocketAddr, Option<&Identity>)> {
        let s = self.sessions.get(&id)?;
        Some((s.open_addr?, s.identity.as_ref()))
    }

    /// Collect a session's output after its state changed, and queue its next deadline.
    fn drive(&mut self, id: SessionId, now: Instant) {
        let mut ended = None;
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        // Queued frames go to SCTP as it makes room; SACKs show in its buffered amount only
        // once its output was polled, so the feeding goes on until a round feeds nothing.
        session.channels.feed(&mut session.rtc);
        let deadline = loop {
            match session.rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    self.transmits.push_back((t.destination, t.contents.into()));
                }
                Ok(Output::Timeout(at)) => {
                    if ended.is_none() && session.channels.feed(&mut session.rtc) {
                        continue;
                    }
                    break at;
                }
                Ok(Output::Event(event)) => {
                    match on_event(session, id, event, &mut self.stats, &mut self.events) {
                        Outcome::Opened => negotiation_done(
                            &mut self.negotiating,
                            &mut self.negotiating_by_ip,
                            session.offered_by,
                        ),
                        Outcome::Closed => {
                            ended.get_or_insert(CloseReason::PeerClosed);
                        }
                        Outcome::Nothing => {}
                    }
                }
                Err(_) => {
                    ended = Some(CloseReason::Failed);
                    break now;
                }
            }
        };
        let ended = ended.or_else(|| (!session.rtc.is_alive()).then_some(CloseReason::PeerClosed));
        if let Some(reason) = ended {
            let reason = if session.closing {
                CloseReason::LocalClose
            } else {
                reason
            };
            self.end(id, reason);
            return;
        }
        let own = match session.open_addr {
            None => session.created + self.config.negotiation_timeout,
            Some(_) => session.last_rx + self.config.idle_timeout,
        };
        let at = deadline.min(own);
        if at != session.timeout || self.timers.is_empty() {
            session.timeout = at;
            self.timers.push(Reverse((at, id)));
        }
        // Lazy deletion leaves stale entries behind: rebuild when they outnumber the live.
        if self.timers.len() > 4 * self.sessions.len() + 64 {
            self.timers = self
                .sessions
                .iter()
                .map(|(&id, s)| Reverse((s.timeout, id)))
                .collect();
        }
    }

    /// Forget a session, telling the application if it had been told it opened.
    fn end(&mut self, id: SessionId, reason: CloseReason) {
        let Some(session) = self.sessions.remove(&id) else {
            return;
        };
        self.by_ufrag.remove(&session.ufrag);
        for addr in &session.addrs {
            if self.by_addr.get(addr) == Some(&id) {
                self.by_addr.remove(addr);
            }
        }
        if session.open_addr.is_some() {
            self.events
                .push_back(HostEvent::Disconnected { id, reason });
        } else {
            negotiation_done(
                &mut self.negotiating,
                &mut self.negotiating_by_ip,
                session.offered_by,
            );
        }
    }
}

/// A session stopped negotiating (it opened, or ended first).
fn negotiation_done(
    negotiating: &mut usize,
    by_ip: &mut HashMap<IpAddr, usize>,
    ip: Option<IpAddr>,
) {
    *negotiating -= 1;
    if let Some(ip) = ip {
        if let Entry::Occupied(mut n) = by_ip.entry(ip) {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
    }
}

/// What one event did to a session's state.
enum Outcome {
    Nothing,
    /// The reliable channel opened: `Connected` was queued.
    Opened,
    /// The peer closed the DTLS connection or the SCTP association.
    Closed,
}

/// Handle one `str0m` event of a session.
fn on_event(
    session: &mut Session,
    id: SessionId,
    event: Event,
    stats: &mut HostStats,
    events: &mut VecDeque<HostEvent>,
) -> Outcome {
    match event {
        Event::ChannelOpen(channel, label) => {
            session.channels.opened(channel, &label);
            if session.open_addr.is_none() && session.channels.reliable.is_some() {
                let Some(&addr) = session.addrs.last() else {
                    return Outcome::Nothing;
                };
                session.open_addr = Some(addr);
                events.push_back(HostEvent::Connected {
                    id,
                    addr,
                    identity: session.identity.clone(),
                });
                return Outcome::Opened;
            }
        }
        Event::ChannelData(data) if session.open_addr.is_some() => {
            match session.channels.receive(&data) {
                Ok(Some((payload, reliable))) => events.push_back(HostEvent::Message {
                    id,
                    payload,
                    reliable,
                }),
                Ok(None) => {}
                Err(_) => stats.frames_dropped += 1,
            }
        }
        Event::ChannelData(_) => stats.frames_dropped += 1,
        Event::Closed => return Outcome::Closed,
        _ => {}
    }
    Outcome::Nothing
}

/// The local (our) ufrag of a STUN binding request: USERNAME is `ours:theirs`.
fn stun_local_ufrag(datagram: &[u8]) -> Option<&str> {
    let mut attrs = datagram.get(20..)?;
    while let [t0, t1, l0, l1, rest @ ..] = attrs {
        let len = usize::from(u16::from_be_bytes([*l0, *l1]));
        let value = rest.get(..len)?;
        if [*t0, *t1] == [0x00, 0x06] {
            let username = std::str::from_utf8(value).ok()?;
            return username.split(':').next();
        }
        attrs = rest.get(len.next_multiple_of(4)..)?;
    }
    None
}

#[cfg(test)]
mod tests;
