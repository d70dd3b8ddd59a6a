//! One connection: a coordinator over the handshake, the send and receive paths, clock
//! sync and timers. The [`crate::Endpoint`] owns connections and drives them.
//!
//! Call order, for every input: a `handle_*` method or an application command, then drain
//! [`Connection::poll_transmit`] and [`Connection::poll_event`], then re-arm the timer with
//! [`Connection::poll_timeout`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::clock::ClockSync;
use crate::codec::Encode;
use crate::config::{CongestionControl, EndpointConfig, Limits};

use crate::congestion::{Bbr, Controller, Pacer, SlidingWindow};
use crate::datagram::{
    Ack, AckRange, DataHeader, Datagram, Nak, ACK_HEADER_LEN, IP_UDP_HEADER_LEN, TIMESTAMP_LEN,
};
use crate::error::{ConnectError, DisconnectReason, Limit, SendError};
use crate::frame::{Frame, Frames, ORDERING_CHANNELS};
use crate::memory::{self, HeapUsage};
use crate::message::{
    id, ConnectedMessage, ConnectedPing, ConnectedPong, ConnectionRequest, NewIncomingConnection,
    OfflineMessage, OpenConnectionRequest1, OpenConnectionRequest2, Timestamped,
};
use crate::recv::ordering::{Channel, Holdable, Outcome};
use crate::recv::rate::MessageRate;
use crate::recv::reassembly::{Reassembly, Refusal};
use crate::recv::reliable::{Check, ReliableWindow};
use crate::recv::window::{fingerprint, AckRepeats, Arrival, DatagramWindow, PendingRanges};
use crate::reliability::Reliability;
use crate::rtt::{RttEstimator, MAX_RTO};
use crate::send::flight::{Flight, ReceiptOutcome, Sent};
use crate::send::queue::{Priority, ReceiptId, SendOptions, SendQueue};
use crate::seq::{DatagramSeq, MessageIndex, OrderIndex, U24_MODULUS};
use crate::stats::ConnectionStats;

/// Connected pings answered per second at most (official pings every 5 s, go-raknet every
/// 0.5 s), with bursts of [`PONG_BURST`].
const PONGS_PER_SECOND: u32 = 10;
const PONG_BURST: u32 = 20;

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug)]
struct TokenBucket {
    rate: u32,
    burst: u32,
    tokens: u32,
    /// When the next token is due.
    next: Instant,
}

impl TokenBucket {
    fn new(rate: u32, burst: u32, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            next: now,
        }
    }

    /// Take a token if there is one.
    fn take(&mut self, now: Instant) -> bool {
        let period = Duration::from_secs(1) / self.rate.max(1);
        while self.tokens < self.burst && now >= self.next {
            self.tokens += 1;
            self.next += period;
        }
        let Some(left) = self.tokens.checked_sub(1) else {
            return false;
        };
        if self.tokens == self.burst {
            // A full bucket earned nothing meanwhile: the next token is one period away.
            self.next = now + period;
        }
        self.tokens = left;
        true
    }
}

/// Datagram numbers remembered for NAKing when back-pressure ends.
const MAX_REFUSED_WHILE_PAUSED: usize = 4096;

/// Whether `frame` carries one of the protocol's own messages (IDs below `ID_TIMESTAMP`):
/// back-pressure never refuses those. A split frame is always application data.
fn is_internal(frame: &Frame) -> bool {
    frame.split.is_none()
        && frame
            .payload
            .first()
            .is_some_and(|&id| id < crate::message::id::TIMESTAMP)
}

/// Which side opened the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We connected out.
    Client,
    /// The peer connected to us.
    Server,
}

/// Who a connection is with, and what the offline handshake settled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    pub(crate) role: Role,
    pub(crate) addr: SocketAddr,
    pub(crate) local_addr: SocketAddr,
    pub(crate) our_guid: u64,
    pub(crate) peer_guid: u64,
    pub(crate) protocol: u8,
    pub(crate) mtu: u16,
}

/// Something a connection reports to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnEvent {
    Connected,
    Message { payload: Bytes, transit: Duration },
    Receipt(ReceiptOutcome),
    Closed(DisconnectReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Client: probing MTUs with OCR1, then OCR2, until Reply2.
    Offline {
        attempt: u32,
        next_attempt: Instant,
        ocr2: Option<(OpenConnectionRequest2, Option<Instant>)>,
        /// The GUID of the first Reply1: every later reply or refusal must carry it.
        server_guid: Option<u64>,
    },
    /// Client: 0x09 sent, waiting for 0x10.
    Requesting,
    /// Server: created by a verified 0x13 (see [`crate::handshake`]), which is processed
    /// next; also holds messages that arrived with it.
    Accepting,
    Connected,
    /// Our 0x15 and everything before it wait for acknowledgement.
    Closing {
        deadline: Instant,
        reason: DisconnectReason,
    },
    /// Peer closed: acknowledge what it sent, then go.
    Draining {
        deadline: Instant,
    },
    Closed,
}

/// Acknowledge at once when this many datagrams are waiting for an ACK, instead of waiting
/// for the ACK delay: a busy sender's window is then released every few datagrams (as TCP
/// acknowledges every second segment), while sparse traffic still gets batched ACKs.
const ACK_EVERY: usize = 16;

/// [`ACK_EVERY`] while the peer flags its data as sent in slow start with more queued (the
/// datagram flags "needs B and AS" and "continuous send"): a window that grows by what each ACK
/// acknowledges grows no faster than the ACKs come back, and while fewer than [`ACK_EVERY`]
/// datagrams arrive per ACK delay each ACK waited for the delay, adding up to 10 ms to every
/// round trip of a ramp that takes ten of them (16 MiB over a 20 ms path: 249 ms with BBR,
/// 214 ms with this). A 10-datagram initial window is released by ACKs as it arrives (TCP's
/// receivers ACK every second segment at all times). Game traffic (a few datagrams per tick,
/// none sent behind a backlog) keeps its one ACK per delay.
const SLOW_START_ACK_EVERY: usize = 4;

/// [`ACK_EVERY`] while every datagram waiting for our ACK was flagged "continuous send": the
/// peer had more queued before each of them, the first after our last ACK included, which is
/// how a sender held back by its window looks. Such a window opens only as ACKs come back, and
/// a Reno window under [`ACK_EVERY`] datagrams (random loss keeps it there) waited for the ACK
/// delay each round trip: over loopback, where the path's round trip is a fraction of a
/// millisecond, the delay became the round trip (16 MiB through a relay dropping 5 % each way
/// took 17-19 s, about 1 MB/s). A window of fewer datagrams than this still waits for the delay.
/// (Every second datagram, as TCP, released those too, but slowed `:bbr` at 5 % loss from 62
/// to 52 MB/s and lengthened the queue it keeps at a bottleneck: its delay signal comes from
/// the ACKs.) A game tick's first datagram follows an idle moment and is not flagged, so a
/// tick of up to [`ACK_EVERY`] datagrams keeps its one ACK per delay; a longer burst (or one
/// paced over more than the delay) is acknowledged every fourth datagram after its first ACK.
const BACKLOGGED_ACK_EVERY: usize = 4;

/// Most doublings of the RTO while no datagram has ever been acknowledged: a peer that
/// never ACKs (a forged address) sees our resends thin out exponentially.
const MAX_BACKOFF: u32 = 5;
/// NAKed datagrams honoured per RTT at least (beyond the congestion window's worth): a
/// forged NAK of 0..8191 must not make us resend everything at once.
const MIN_NAKS_PER_RTT: u64 = 16;

/// Longest a peer may hold an ACK, for the tail-loss probe timeout: official RakNet flushes
/// ACKs 10 ms after the datagram arrived, on an update tick of up to 10 ms more (protocol
/// reference §5.2); this engine within its `ack_delay` (10 ms by default).
const MAX_PEER_ACK_DELAY: Duration = Duration::from_millis(20);

/// The congestion controller `config` asks for, for datagrams of `udp_payload` bytes.
fn controller(
    config: &EndpointConfig,
    udp_payload: usize,
    peer: SocketAddr,
) -> Box<dyn Controller> {
    let max_window = config.limits.max_send_queue_bytes.max(1 << 20);
    match config.congestion {
        CongestionControl::Reno => Box::new(SlidingWindow::new(udp_payload, max_window)),
        CongestionControl::Bbr => {
            // Vary the probing phase between connections, deterministically.
            let port = u64::from(peer.port());
            let seed = config.rng_seed ^ port.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            Box::new(Bbr::new(udp_payload, max_window, seed))
        }
    }
}

/// The server GUID a reply or refusal carries; `None` for any other message.
fn server_guid(msg: &OfflineMessage) -> Option<u64> {
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

/// Delivered message, before classification.
struct Delivered(Bytes);

impl Holdable for Delivered {
    fn weight(&self) -> usize {
        self.0.len() + Limits::PIECE_OVERHEAD
    }

    fn detach(self) -> Self {
        Delivered(Bytes::copy_from_slice(&self.0))
    }
}

/// A connection's part of its endpoint's buffered-bytes total
/// ([`crate::Limits::max_endpoint_buffered_bytes`]), given back when the connection goes.
#[derive(Debug, Default)]
pub(crate) struct MemoryShare {
    total: Arc<AtomicUsize>,
    mine: usize,
}

impl MemoryShare {
    pub(crate) fn new(total: Arc<AtomicUsize>) -> Self {
        Self { total, mine: 0 }
    }

    /// The endpoint's total if this connection buffered `mine` bytes.
    fn total_with(&self, mine: usize) -> usize {
        (self.total.load(AtomicOrdering::Relaxed) + mine).saturating_sub(self.mine)
    }

    /// This connection now buffers `bytes`.
    fn set(&mut self, bytes: usize) {
        if bytes > self.mine {
            self.total
                .fetch_add(bytes - self.mine, AtomicOrdering::Relaxed);
        } else {
            self.total
                .fetch_sub(self.mine - bytes, AtomicOrdering::Relaxed);
        }
        self.mine = bytes;
    }
}

impl Drop for MemoryShare {
    fn drop(&mut self) {
        self.set(0);
    }
}

pub(crate) struct Connection {
    config: Arc<EndpointConfig>,
    role: Role,
    state: State,
    addr: SocketAddr,
    local_addr: SocketAddr,
    our_guid: u64,
    peer_guid: u64,
    protocol: u8,
    mtu: u16,
    epoch: Instant,
    /// Added to every timestamp we send the peer and taken off every one it echoes: the
    /// keyed per-peer offset that proves the 0x13 echo (server role; 0 for clients).
    clock_offset: u64,
    created: Instant,
    /// When the peer last sent something valid (a datagram that decodes and carries a new
    /// datagram number, or an ACK/NAK of something we sent): only that refreshes the idle
    /// timer, so garbage with the 0x80 bit cannot hold a slot.
    last_receive: Instant,
    /// When reliable data was last acknowledged, or first left unacknowledged: a peer that
    /// leaves reliable data unacknowledged for `timeout` is gone, whatever else it sends.
    ack_progress: Instant,
    /// RTO doublings so far, while nothing was ever acknowledged.
    backoff: u32,
    /// NAK-triggered losses left in the current RTT window, and when the window ends.
    nak_budget: (u64, Instant),
    next_ping: Option<Instant>,
    ever_connected: bool,
    /// Accepted without proof of address (see [`crate::CookieMode`]).
    unproven: bool,

    // Send path.
    queue: SendQueue,
    flight: Flight,
    cc: Box<dyn Controller>,
    pacer: Pacer,
    rtt: RttEstimator,
    next_seq: DatagramSeq,
    next_message_index: MessageIndex,
    next_receipt: u32,
    burst: bool,
    pace_until: Option<Instant>,
    /// A tail-loss probe is queued: the next datagram goes regardless of window and pacing.
    probe_pending: bool,

    // Receive path.
    window: DatagramWindow,
    acks: PendingRanges,
    /// The last datagram the peer sent in slow start with more queued: ACK every
    /// [`SLOW_START_ACK_EVERY`] datagrams.
    peer_ramping: bool,
    /// Every datagram waiting for our ACK was flagged "continuous send" (duplicates
    /// included): ACK every [`BACKLOGGED_ACK_EVERY`] datagrams.
    peer_backlogged: bool,
    /// Recently sent ACK ranges, repeated in the next ACKs (lost ACKs cost no resends).
    ack_repeats: AckRepeats,
    /// When the last ACK left (see [`Self::ack_with_data`]).
    last_ack: Option<Instant>,
    naks: PendingRanges,
    /// Back-pressure from the application: refuse reliable frames, drop unreliable ones.
    paused: bool,
    /// This connection's part of the endpoint's buffered bytes.
    pub(crate) memory: MemoryShare,
    /// This connection's part of its endpoint's send backlog
    /// ([`crate::Limits::max_endpoint_send_bytes`]).
    pub(crate) sending: MemoryShare,
    /// While the send backlog is over the connection's share: since when, the backlog then,
    /// and the bytes the peer had acknowledged then (see [`Limit::SendBacklog`]).
    backlog_mark: Option<(Instant, usize, u64)>,
    /// Connected pongs we may still send: a peer flooding pings must not fill our queue.
    pong_bucket: TokenBucket,
    /// The peer's message rate ([`Limits::max_messages_per_sec`]); once it went over, the
    /// connection closes and its messages are dropped.
    rate: MessageRate,
    over_rate: bool,
    /// Datagrams left unacknowledged while paused, NAKed on resuming so that the peer sends
    /// them again at once instead of after its retransmission timeout. Bounded.
    refused_while_paused: Vec<DatagramSeq>,
    ack_timestamp: Option<u32>,
    reliable: ReliableWindow,
    reassembly: Reassembly,
    channels: Vec<Channel<Delivered>>,
    /// The peer's messages that came before the handshake ended, delivered when it does,
    /// and what the budgets count for them.
    early: Vec<(Bytes, Duration)>,
    early_bytes: usize,
    /// Scratch buffer for the messages one datagram delivers (kept to avoid an allocation
    /// per datagram; always empty between calls).
    delivered: Vec<Delivered>,
    clock: ClockSync,

    events: VecDeque<ConnEvent>,
    receipts_out: Vec<ReceiptOutcome>,
    stats: ConnectionStats,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("role", &self.role)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(
        config: Arc<EndpointConfig>,
        peer: Peer,
        state: State,
        epoch: Instant,
        now: Instant,
    ) -> Self {
        let Peer {
            role,
            addr,
            local_addr,
            our_guid,
            peer_guid,
            protocol,
            mtu,
        } = peer;
        let udp_payload = usize::from(mtu) - IP_UDP_HEADER_LEN;
        let limits = &config.limits;
        let first = config.initial_index_for_tests;
        Self {
            cc: controller(&config, udp_payload, addr),
            pacer: Pacer::new(udp_payload * 8),
            window: DatagramWindow::starting_at(DatagramSeq::new(first), limits.max_datagram_gap),
            reliable: ReliableWindow::starting_at(
                MessageIndex::new(first),
                limits.max_reliable_window,
            ),
            role,
            state,
            addr,
            local_addr,
            our_guid,
            peer_guid,
            protocol,
            mtu,
            epoch,
            clock_offset: 0,
            created: now,
            last_receive: now,
            ack_progress: now,
            backoff: 0,
            nak_budget: (0, now),
            next_ping: None,
            ever_connected: false,
            unproven: false,
            queue: SendQueue::starting_at(OrderIndex::new(first)),
            flight: Flight::default(),
            rtt: RttEstimator::new(),
            next_seq: DatagramSeq::new(first),
            next_message_index: MessageIndex::new(first),
            next_receipt: 1,
            burst: false,
            pace_until: None,
            probe_pending: false,
            acks: PendingRanges::default(),
            peer_ramping: false,
            peer_backlogged: false,
            ack_repeats: AckRepeats::default(),
            last_ack: None,
            naks: PendingRanges::naks(),
            paused: false,
            memory: MemoryShare::default(),
            sending: MemoryShare::default(),
            backlog_mark: None,
            pong_bucket: TokenBucket::new(PONGS_PER_SECOND, PONG_BURST, now),
            rate: MessageRate::new(
                config.limits.max_messages_per_sec,
                now.saturating_duration_since(epoch).as_millis() as u64,
            ),
            over_rate: false,
            refused_while_paused: Vec::new(),
            ack_timestamp: None,
            reassembly: Reassembly::default(),
            channels: (0..ORDERING_CHANNELS)
                .map(|_| Channel::starting_at(OrderIndex::new(first)))
                .collect(),
            early: Vec::new(),
            early_bytes: 0,
            delivered: Vec::new(),
            clock: ClockSync::default(),
            events: VecDeque::new(),
            receipts_out: Vec::new(),
            stats: ConnectionStats::default(),
            config,
        }
    }

    /// A client connection that starts probing at once.
    pub(crate) fn client(
        config: Arc<EndpointConfig>,
        addr: SocketAddr,
        local_addr: SocketAddr,
        guid: u64,
        epoch: Instant,
        now: Instant,
    ) -> Self {
        let protocol = config.protocol_versions.first().copied().unwrap_or(6);
        let mtu = config.max_mtu;
        let state = State::Offline {
            attempt: 0,
            next_attempt: now,
            ocr2: None,
            server_guid: None,
        };
        let peer = Peer {
            role: Role::Client,
            addr,
            local_addr,
            our_guid: guid,
            peer_guid: 0,
            protocol,
            mtu,
        };
        Self::new(config, peer, state, epoch, now)
    }

    /// A server connection created when a verified 0x13 arrived (the handshake before it
    /// was answered without a connection, see [`crate::handshake`]). Its state is what the
    /// exchange so far left behind: our 0x10 went out as datagram #0 with reliable and
    /// ordering index 0 on channel 0 and has been received (0x13 echoes it), so our
    /// counters continue at 1 and nothing is in flight; the client's 0x09 used its reliable
    /// index 0, and its receive window starts at the datagram carrying the 0x13 (earlier
    /// ones were acknowledged by the handshake).
    pub(crate) fn accepted(
        config: Arc<EndpointConfig>,
        peer: Peer,
        epoch: Instant,
        now: Instant,
        acc: crate::handshake::Accepted,
    ) -> Self {
        let peer = Peer {
            role: Role::Server,
            ..peer
        };
        let mut c = Self::new(config, peer, State::Accepting, epoch, now);
        let first = c.config.initial_index_for_tests;
        let second = first.wrapping_add(1);
        let limits = &c.config.limits;
        c.created = epoch + Duration::from_millis(acc.created_ms);
        c.clock_offset = acc.clock_offset;
        c.next_seq = DatagramSeq::new(second);
        c.next_message_index = MessageIndex::new(second);
        c.queue.skip_ordered(0);
        c.window = DatagramWindow::starting_at(acc.client_seq, limits.max_datagram_gap);
        let reliable_first = if acc.request_reliable { second } else { first };
        c.reliable = ReliableWindow::starting_at(
            MessageIndex::new(reliable_first),
            limits.max_reliable_window,
        );
        if let Some(sample) = acc.rtt_sample {
            c.rtt.update(sample);
        }
        if let Some(seq) = acc.request_seq {
            c.acks.push(now, seq);
        }
        c.unproven = !(acc.proven || acc.echoed);
        c
    }

    // ---- getters -------------------------------------------------------------------

    /// Nothing proved the peer's address (see [`crate::CookieMode`]).
    pub(crate) fn unproven(&self) -> bool {
        self.unproven
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn role(&self) -> Role {
        self.role
    }

    pub(crate) fn peer_guid(&self) -> u64 {
        self.peer_guid
    }

    pub(crate) fn protocol(&self) -> u8 {
        self.protocol
    }

    pub(crate) fn mtu(&self) -> u16 {
        self.mtu
    }

    pub(crate) fn congestion(&self) -> crate::config::CongestionControl {
        self.config.congestion
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.state == State::Connected
    }

    /// Whether the connection was ever established (so the application knows about it).
    pub(crate) fn ever_connected(&self) -> bool {
        self.ever_connected
    }

    /// Whether the handshake (offline or connected part) is still under way.
    fn handshaking(&self) -> bool {
        matches!(
            self.state,
            State::Offline { .. } | State::Requesting | State::Accepting
        )
    }

    /// Whether offline messages from the peer are for this connection: during the offline
    /// handshake, and while the 0x09 waits (a server that filled up answers it with 0x14).
    pub(crate) fn takes_offline(&self) -> bool {
        matches!(self.state, State::Offline { .. } | State::Requesting)
    }

    pub(crate) fn send_backlog(&self) -> usize {
        self.queue.bytes + self.flight.unacked_payload
    }

    pub(crate) fn stats(&self) -> ConnectionStats {
        let mut s = self.stats.clone();
        s.srtt = self.rtt.srtt();
        s.rttvar = self.rtt.rttvar();
        s.rto = self.rtt.rto();
        s.cwnd = self.cc.window();
        s.tail_probes = self.stats.tail_probes;
        s.resends = self.flight.counters.resends;
        s.naks_received = self.flight.counters.naks_received;
        s.backoff = self.backoff;
        s.naks_ignored += self.flight.counters.naks_ignored;
        s.datagrams_lost = self.flight.counters.lost_datagrams;
        s.send_queue_frames = self.queue.len();
        s.send_queue_bytes = self.queue.bytes;
        s.reliable_in_flight = self.flight.reliable_in_flight();
        s.bytes_in_flight = self.flight.bytes_in_flight;
        s.datagram_records = self.flight.record_count();
        s.reassembly_bytes = self.reassembly.bytes();
        s.held_for_ordering = self.channels.iter().map(Channel::held).sum();
        s.held_bytes = self.channels.iter().map(Channel::held_bytes).sum();
        s
    }

    /// Milliseconds on this endpoint's RakNet clock.
    fn time_ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Our clock as this peer sees it (with its offset): for every timestamp we send.
    fn wire_ms(&self, now: Instant) -> u64 {
        crate::handshake::wire_time(self.time_ms(now), self.clock_offset)
    }

    /// One of our own timestamps, echoed by the peer, back on our clock.
    fn echoed_ms(&self, wire: u64) -> u64 {
        crate::handshake::local_time(wire, self.clock_offset)
    }

    fn max_fragment(&self) -> usize {
        crate::max_unsplit_payload(self.mtu)
    }

    /// The longest message `send` takes: `max_message_bytes`, or what the peer's fragment
    /// limit holds at this connection's MTU if less (it treats more fragments as a violation
    /// and closes): at MTU 1492 the default 16,384 fragments hold about 22 MiB.
    pub(crate) fn max_message_len(&self) -> usize {
        let limits = &self.config.limits;
        let by_fragments = (limits.max_split_parts as usize).saturating_mul(self.max_fragment());
        limits.max_message_bytes.min(by_fragments)
    }

    // ---- application commands ------------------------------------------------------

    /// Queue `payload`. A reliability with a receipt gets `tag` as its [`ReceiptId`], or
    /// the next one of the connection's own if `None`.
    pub(crate) fn send(
        &mut self,
        now: Instant,
        payload: Bytes,
        opts: SendOptions,
        tag: Option<ReceiptId>,
    ) -> Result<Option<ReceiptId>, SendError> {
        match self.state {
            State::Connected => {}
            State::Closing { .. } | State::Draining { .. } | State::Closed => {
                return Err(SendError::Closed)
            }
            _ => return Err(SendError::NotConnected),
        }
        if payload.is_empty() {
            return Err(SendError::Empty);
        }
        if opts.channel >= ORDERING_CHANNELS {
            return Err(SendError::InvalidChannel);
        }
        if payload.len() > self.max_message_len() {
            return Err(SendError::TooLarge);
        }
        let limits = &self.config.limits;
        let frames = payload.len().div_ceil(self.max_fragment());
        let mine = self.send_backlog() + payload.len() + frames * Limits::SEND_OVERHEAD;
        if !limits
            .send_budget()
            .fits(mine, self.sending.total_with(mine))
        {
            return Err(SendError::QueueFull);
        }
        let receipt = opts.reliability.has_receipt().then(|| {
            tag.unwrap_or_else(|| {
                let id = ReceiptId(self.next_receipt);
                self.next_receipt = self.next_receipt.checked_add(1).unwrap_or(1);
                id
            })
        });
        let parts = self
            .queue
            .push(now, payload, opts, receipt, self.max_fragment());
        if let Some(id) = receipt {
            // Unreliable receipts resolve with their datagram, reliable ones per fragment.
            let split_reliable = parts > 1 || opts.reliability.is_reliable();
            self.flight
                .expect_receipt(id, if split_reliable { parts } else { 1 });
        }
        self.stats.messages_out += 1;
        self.sending.set(self.send_backlog());
        Ok(receipt)
    }

    fn send_internal(&mut self, now: Instant, msg: &impl Encode, reliability: Reliability) {
        let payload = Bytes::from(msg.to_vec());
        let opts = SendOptions {
            reliability,
            channel: 0,
            priority: Priority::Immediate,
        };
        self.queue
            .push(now, payload, opts, None, self.max_fragment());
    }

    /// Close gracefully: send 0x15 after everything queued, wait for acknowledgement.
    pub(crate) fn close(&mut self, now: Instant, reason: DisconnectReason) {
        match self.state {
            State::Connected => {
                let payload = Bytes::from_static(&[id::DISCONNECTION_NOTIFICATION]);
                let opts = SendOptions {
                    reliability: Reliability::ReliableOrdered,
                    channel: 0,
                    priority: Priority::Low,
                };
                self.queue
                    .push(now, payload, opts, None, self.max_fragment());
                self.state = State::Closing {
                    deadline: now + self.config.close_linger,
                    reason,
                };
            }
            State::Closing { .. } | State::Draining { .. } | State::Closed => {}
            _ => self.finish(reason),
        }
    }

    /// End the connection now, reporting every outstanding receipt as lost first.
    fn finish(&mut self, reason: DisconnectReason) {
        if self.state == State::Closed {
            return;
        }
        self.state = State::Closed;
        self.report_closed(reason);
    }

    /// Report every outstanding receipt as lost, then the close itself.
    fn report_closed(&mut self, reason: DisconnectReason) {
        let mut out = std::mem::take(&mut self.receipts_out);
        for p in self.queue.drain() {
            if let Some(id) = p.receipt {
                self.flight.lose_receipt(id, &mut out);
            }
        }
        self.flight.close(&mut out);
        self.events.extend(out.drain(..).map(ConnEvent::Receipt));
        self.receipts_out = out;
        self.events.push_back(ConnEvent::Closed(reason));
    }

    fn fail(&mut self, error: ConnectError) {
        self.finish(DisconnectReason::ConnectFailed(error));
    }

    // ---- input ---------------------------------------------------------------------

    /// An offline message from the peer, during the client's handshake. `false` when it was
    /// not for this state, or a refusal that does not carry the server's GUID: dropped.
    pub(crate) fn handle_offline(&mut self, now: Instant, msg: OfflineMessage) -> bool {
        // Once a Reply1 told us the server's GUID, every reply and refusal must carry it: a
        // late reply of another server at that address (restarted with a new GUID), or a
        // spoofed one from someone who never asked the server, is dropped instead of ending
        // (a refusal) or steering (a Reply1 or Reply2) our handshake. It is no defence
        // against a spoofer who pinged the server first: every pong carries the GUID, and
        // RakNet's handshake has no client nonce. Before a Reply1, a refusal (a ban, an
        // incompatible protocol: answers to OCR1) is taken as official clients take it.
        let known = match &self.state {
            State::Offline { server_guid, .. } => *server_guid,
            State::Requesting => Some(self.peer_guid),
            _ => None,
        };
        if let (Some(known), Some(guid)) = (known, server_guid(&msg)) {
            if guid != known {
                return false;
            }
        }
        if matches!(self.state, State::Requesting) {
            // The server took the slot it had at OCR2 by the time our 0x09 came (another of
            // its endpoint threads filled it): it refuses the 0x09 instead of answering 0x10.
            if matches!(msg, OfflineMessage::NoFreeIncomingConnections(_)) {
                self.fail(ConnectError::NoFreeIncomingConnections);
                return true;
            }
            return false;
        }
        let State::Offline {
            ocr2, server_guid, ..
        } = &mut self.state
        else {
            return false;
        };
        match msg {
            OfflineMessage::OpenConnectionReply1(reply) => {
                *server_guid = Some(reply.server_guid);
                if reply.server_public_key.is_some() {
                    self.fail(ConnectError::SecurityRequired);
                    return true;
                }
                self.peer_guid = reply.server_guid;
                let mtu = reply.mtu.clamp(self.config.min_mtu, self.config.max_mtu);
                *ocr2 = Some((
                    OpenConnectionRequest2 {
                        cookie: reply.cookie,
                        client_challenge: None,
                        server_address: self.addr,
                        mtu,
                        client_guid: self.our_guid,
                    },
                    None,
                ));
            }
            OfflineMessage::OpenConnectionReply2(reply) => {
                // Only after a Reply1 (whose GUID it carries: checked above). Not only while
                // `ocr2` holds our OCR2: on a path slower than the OCR1 schedule, the answer
                // to an OCR2 comes after the next OCR1 has cleared it.
                if server_guid.is_none() {
                    return false;
                }
                if reply.security_answer.is_some() {
                    self.fail(ConnectError::SecurityRequired);
                    return true;
                }
                // The client's first RTT sample: OCR2 → Reply2 is a round trip to the
                // address we chose (the server's side takes none from its offline part).
                if let Some((_, Some(sent))) = ocr2 {
                    self.rtt.update(now.saturating_duration_since(*sent));
                }
                self.peer_guid = reply.server_guid;
                self.set_mtu(
                    reply
                        .mtu
                        .clamp(self.config.min_mtu.max(400), self.config.max_mtu),
                );
                self.state = State::Requesting;
                let request = ConnectionRequest {
                    client_guid: self.our_guid,
                    time: self.wire_ms(now),
                    use_security: false,
                    password: Bytes::new(),
                };
                self.send_internal(now, &request, Reliability::Reliable);
            }
            OfflineMessage::IncompatibleProtocolVersion(m) => {
                // Official clients give up; we retry once with the server's version when we
                // speak it too (a Bedrock-style client reaching an official protocol-6 server).
                if m.protocol != self.protocol
                    && self.config.protocol_versions.contains(&m.protocol)
                {
                    self.protocol = m.protocol;
                    *ocr2 = None;
                    if let State::Offline { next_attempt, .. } = &mut self.state {
                        *next_attempt = now;
                    }
                } else {
                    self.fail(ConnectError::IncompatibleProtocol {
                        server_protocol: m.protocol,
                    })
                }
            }
            OfflineMessage::AlreadyConnected(_) => self.fail(ConnectError::AlreadyConnected),
            OfflineMessage::NoFreeIncomingConnections(_) => {
                self.fail(ConnectError::NoFreeIncomingConnections)
            }
            OfflineMessage::ConnectionBanned(_) => self.fail(ConnectError::Banned),
            OfflineMessage::IpRecentlyConnected(_) => self.fail(ConnectError::IpRecentlyConnected),
            _ => return false,
        }
        true
    }

    fn set_mtu(&mut self, mtu: u16) {
        self.mtu = mtu;
        let udp_payload = usize::from(mtu) - IP_UDP_HEADER_LEN;
        self.cc = controller(&self.config, udp_payload, self.addr);
        self.pacer = Pacer::new(udp_payload * 8);
    }

    /// A connected datagram from the peer.
    pub(crate) fn handle_datagram(&mut self, now: Instant, datagram: Bytes) {
        if matches!(self.state, State::Closed | State::Offline { .. }) {
            return;
        }
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += datagram.len() as u64;
        match Datagram::decode(datagram, self.config.datagram_timestamps) {
            Err(_) => self.stats.malformed += 1,
            Ok(Datagram::Ack(ack)) if self.reaches_unsent(&ack.ranges) => {
                self.stats.forged_acks += 1;
            }
            Ok(Datagram::Nak(nak)) if self.reaches_unsent(&nak.ranges) => {
                self.stats.forged_acks += 1;
            }
            Ok(Datagram::Ack(ack)) => {
                let before = self.flight.counters.acked_datagrams;
                let unacked = self.flight.reliable_in_flight();
                self.walk_ranges(&ack.ranges, |c, seq| {
                    c.flight
                        .on_ack(seq, now, &mut c.rtt, c.cc.as_mut(), &mut c.receipts_out);
                });
                if self.flight.counters.acked_datagrams > before {
                    self.last_receive = now;
                    self.backoff = 0;
                }
                if self.flight.reliable_in_flight() < unacked {
                    self.ack_progress = now;
                }
                self.flush_receipts();
                self.check_closing_done();
            }
            Ok(Datagram::Nak(nak)) => {
                let before = self.flight.counters.naks_received;
                let (mut left, mut until) = self.nak_budget;
                if now >= until {
                    // A new RTT window: honour a congestion window's worth of NAKs.
                    let per_rtt = (self.cc.window() / self.udp_budget()) as u64;
                    left = per_rtt.max(MIN_NAKS_PER_RTT);
                    until = now + self.rtt.srtt().max(Duration::from_millis(10));
                }
                // A genuine NAK takes about a round trip; half the smallest one seen leaves
                // room for a NAK sent sooner than the ACKs that made the samples.
                let min_age = self.rtt.min() / 2;
                let mut ignored = 0;
                self.walk_ranges(&nak.ranges, |c, seq| {
                    if left == 0 {
                        ignored += 1;
                        return;
                    }
                    let n = c.flight.counters.naks_received;
                    c.flight
                        .on_nak(seq, now, min_age, c.cc.as_mut(), &mut c.receipts_out);
                    if c.flight.counters.naks_received > n {
                        left -= 1;
                    }
                });
                self.nak_budget = (left, until);
                self.stats.naks_ignored += ignored;
                if self.flight.counters.naks_received > before {
                    self.last_receive = now;
                }
                self.flush_receipts();
            }
            Ok(Datagram::Data { header, body }) => {
                self.handle_data(now, header, body);
                self.memory.set(self.buffered_bytes());
            }
        }
        self.sending.set(self.send_backlog());
    }

    /// Whether a range of this ACK or NAK holds a datagram number we have not sent yet: the
    /// next one, or any in the half of the number space ahead of it. A peer acknowledges only
    /// what it received, so such an ACK is forged; a blind forger, who knows none of our
    /// counters, would have to cover the whole space to reach what is in flight, and so
    /// always reaches past it. The whole ACK is ignored, not only those numbers.
    fn reaches_unsent(&self, ranges: &[AckRange]) -> bool {
        ranges.iter().any(|r| {
            self.next_seq.distance_from(r.start) < r.len()
                || r.start.distance_from(self.next_seq) < U24_MODULUS / 2
        })
    }

    /// Visit the numbers in `ranges` that we keep a record of (sent and not long resolved),
    /// at most `max_ack_numbers` in all; the others are counted as ignored. The cost is
    /// bounded by what is in flight, not by the width of the ranges.
    fn walk_ranges(&mut self, ranges: &[AckRange], mut f: impl FnMut(&mut Self, DatagramSeq)) {
        let mut budget = self.config.limits.max_ack_numbers;
        for r in ranges {
            let mut walked = 0;
            for (first, count) in self.flight.known_runs(*r).into_iter().flatten() {
                let n = count.min(budget);
                let mut seq = first;
                for _ in 0..n {
                    f(self, seq);
                    seq = seq.next();
                }
                budget -= n;
                walked += n;
            }
            self.stats.ack_numbers_ignored += u64::from(r.len() - walked);
        }
    }

    fn flush_receipts(&mut self) {
        self.events
            .extend(self.receipts_out.drain(..).map(ConnEvent::Receipt));
    }

    /// Owe the peer an ACK for this datagram; its flags say how soon (see [`Self::ack_every`]).
    fn ack_later(&mut self, now: Instant, header: &DataHeader) {
        self.peer_ramping = header.continuous_send && header.needs_b_and_as;
        self.peer_backlogged =
            header.continuous_send && (self.acks.is_empty() || self.peer_backlogged);
        self.acks.push(now, header.seq);
    }

    fn handle_data(&mut self, now: Instant, header: DataHeader, body: Bytes) {
        let arrival = self.window.on_datagram(header.seq, fingerprint(&body));
        match arrival {
            Arrival::Garbage => {
                self.stats.garbage_datagrams += 1;
                return;
            }
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
                self.ack_later(now, &header);
                return;
            }
            Arrival::New { missing } => {
                if let Some(range) = missing {
                    self.naks.push_range(now, range);
                }
                // A datagram that was only reordered withdraws its pending NAK.
                self.naks.remove(header.seq);
            }
            Arrival::Reused => self.stats.reused_datagram_numbers += 1,
            Arrival::FarBehind => self.stats.far_behind_datagrams += 1,
            Arrival::Provisional => self.stats.provisional_datagrams += 1,
        }
        // Outside the window (reused, far behind, far ahead): fresh reliable frames only.
        let trusted = matches!(arrival, Arrival::New { .. });
        if header.timestamp.is_some() {
            self.ack_timestamp = header.timestamp;
        }
        let mut refused = false;
        // Reuse one buffer for the messages a datagram delivers: no allocation per datagram.
        let mut delivered = std::mem::take(&mut self.delivered);
        for frame in Frames::new(body) {
            let Ok(frame) = frame else {
                self.stats.malformed += 1;
                refused = true;
                break;
            };
            if !trusted && !frame.reliability.on_wire().is_reliable() {
                self.stats.untrusted_dropped += 1;
                continue;
            }
            // Only a datagram in the window that carries a frame that decodes keeps the
            // connection alive: a valid header over a garbage body (slowloris) does not, nor
            // does a forged number outside the window.
            if trusted {
                self.last_receive = now;
            }
            match self.accept_frame(now, frame, &mut delivered) {
                Ok(()) => {}
                Err(None) => {
                    if !self.paused {
                        self.stats.refused_over_limit += 1;
                    }
                    refused = true;
                }
                Err(Some(reason)) => {
                    self.finish(reason);
                    return;
                }
            }
        }
        if !refused {
            self.ack_later(now, &header);
        } else {
            // Unacknowledged, and not "seen" either: a duplicate copy must not be acknowledged.
            self.window.forget(header.seq);
            if self.paused && self.refused_while_paused.len() < MAX_REFUSED_WHILE_PAUSED {
                self.refused_while_paused.push(header.seq);
            }
        }
        for Delivered(payload) in delivered.drain(..) {
            self.on_message(now, payload);
            if self.state == State::Closed {
                return;
            }
        }
        self.delivered = delivered;
    }

    /// Take a frame through duplicate filtering, reassembly and ordering. `Err(None)`
    /// refuses it for now (leave the datagram unacknowledged); `Err(Some(_))` closes.
    fn accept_frame(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Vec<Delivered>,
    ) -> Result<(), Option<DisconnectReason>> {
        let wire = frame.reliability.on_wire();
        let reliable = wire.is_reliable();
        // Back-pressure spares the protocol's own messages (pings, disconnection notices).
        if self.paused && !is_internal(&frame) {
            if reliable {
                self.stats.refused_paused += 1;
                return Err(None);
            }
            self.stats.dropped_paused += 1;
            return Ok(());
        }
        if reliable {
            match self.reliable.check(frame.message_index) {
                Check::Fresh => {}
                Check::Duplicate => {
                    self.stats.duplicates += 1;
                    return Ok(());
                }
                Check::TooFarAhead => return Err(None),
            }
        }
        let max_held = self.config.limits.max_held_per_channel;
        let channel = usize::from(frame.order_channel);
        if wire.uses_channel() && !self.channels[channel].can_take(frame.order_index, max_held) {
            return Err(None);
        }
        // A message before the handshake ends waits for it: refused here when there is no
        // room for it (unacknowledged, so the peer sends it again), not dropped later.
        let early = matches!(self.state, State::Accepting | State::Requesting)
            && frame.split.is_none()
            && !is_internal(&frame);
        if early && self.early.len() >= self.config.limits.max_early_messages {
            return Err(None);
        }
        // A frame that will wait (a fragment, a message behind a gap or before the end of
        // the handshake) must fit in the connection's and the endpoint's receive budgets.
        let waits = frame.split.is_some()
            || early
            || (wire.uses_channel() && self.channels[channel].would_hold(frame.order_index));
        if waits && !self.can_buffer(frame.payload.len() + Limits::PIECE_OVERHEAD) {
            return Err(None);
        }
        let index = frame.message_index;
        let whole = match frame.split {
            None => Some(frame),
            Some(split) => match self
                .reassembly
                .insert(now, frame, split, &self.config.limits)
            {
                Ok(whole) => whole,
                Err(Refusal::Busy) => return Err(None),
                Err(Refusal::Violation(limit)) => {
                    return Err(Some(DisconnectReason::LimitExceeded(limit)))
                }
                Err(Refusal::Inconsistent) => {
                    return Err(Some(DisconnectReason::ProtocolViolation(
                        "split fragments disagree on their count",
                    )))
                }
            },
        };
        if reliable {
            self.reliable.mark(index);
        }
        let Some(msg) = whole else { return Ok(()) };
        if !wire.uses_channel() {
            out.push(Delivered(msg.payload));
            return Ok(());
        }
        let sequence = wire.is_sequenced().then_some(msg.sequence_index);
        let outcome = self.channels[channel].offer(
            msg.order_index,
            sequence,
            Delivered(msg.payload),
            usize::MAX,
            out,
        );
        self.channels[channel].note_stall(now);
        if outcome == Outcome::Stale {
            self.stats.stale_dropped += 1;
        }
        Ok(())
    }

    fn on_message(&mut self, now: Instant, payload: Bytes) {
        let msg = match ConnectedMessage::decode(payload) {
            Ok(m) => m,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let now_ms = self.time_ms(now);
        match (msg, &self.state) {
            (ConnectedMessage::ConnectionRequest(_), _) => {
                // Answer one 0x09 per connection: repeating it must not make us emit 0x10s
                // (reflection, protocol reference §14 item 10).
            }
            (ConnectedMessage::ConnectionRequestAccepted(acc), State::Requesting) => {
                self.clock
                    .add(self.echoed_ms(acc.request_time), now_ms, acc.accepted_time);
                let nic = NewIncomingConnection {
                    server_address: self.addr,
                    internal_addresses: self
                        .config
                        .internal_address_list(self.protocol, self.local_addr),
                    ping_time: acc.accepted_time,
                    pong_time: self.wire_ms(now),
                };
                self.send_internal(now, &nic, Reliability::ReliableOrdered);
                self.establish(now);
            }
            (ConnectedMessage::NewIncomingConnection(nic), State::Accepting) => {
                self.clock
                    .add(self.echoed_ms(nic.ping_time), now_ms, nic.pong_time);
                self.establish(now);
            }
            (ConnectedMessage::ConnectedPing(ping), _) => {
                if !self.pong_bucket.take(now) {
                    self.stats.pongs_dropped += 1;
                    return;
                }
                let pong = ConnectedPong {
                    ping_time: ping.time,
                    pong_time: self.wire_ms(now),
                };
                self.send_internal(now, &pong, Reliability::Unreliable);
            }
            (ConnectedMessage::ConnectedPong(pong), _) => {
                self.clock
                    .add(self.echoed_ms(pong.ping_time), now_ms, pong.pong_time);
            }
            (ConnectedMessage::DisconnectionNotification, State::Closing { .. }) => {
                self.finish(DisconnectReason::PeerClosed)
            }
            (ConnectedMessage::DisconnectionNotification, _) => {
                // Acknowledge what the peer sent (its 0x15 included), then go.
                self.report_closed(DisconnectReason::PeerClosed);
                self.state = State::Draining {
                    deadline: now + self.config.ack_delay * 2,
                };
            }
            (ConnectedMessage::InvalidPassword, State::Requesting) => {
                self.fail(ConnectError::InvalidPassword)
            }
            (ConnectedMessage::User(payload), state) => {
                if payload[0] < id::TIMESTAMP {
                    self.stats.unknown_internal += 1;
                    return;
                }
                if self.over_rate || !self.rate.take(now_ms) {
                    self.stats.refused_over_limit += 1;
                    if !self.over_rate {
                        self.over_rate = true;
                        self.close(now, DisconnectReason::LimitExceeded(Limit::MessageRate));
                    }
                    return;
                }
                let (payload, transit) = self.transit(now_ms, payload);
                match state {
                    State::Connected | State::Closing { .. } => {
                        self.stats.messages_in += 1;
                        self.events
                            .push_back(ConnEvent::Message { payload, transit });
                    }
                    // Checked before the frame was taken (`accept_frame`), but for a split
                    // message completing now: its fragments were counted in reassembly.
                    State::Accepting | State::Requesting
                        if self.early.len() < self.config.limits.max_early_messages =>
                    {
                        self.stats.messages_in += 1;
                        self.early_bytes += payload.len() + Limits::PIECE_OVERHEAD;
                        self.early.push((payload, transit));
                    }
                    _ => self.stats.refused_over_limit += 1,
                }
            }
            (_, _) => self.stats.unknown_internal += 1,
        }
    }

    fn establish(&mut self, now: Instant) {
        self.state = State::Connected;
        self.ever_connected = true;
        self.events.push_back(ConnEvent::Connected);
        self.send_ping(now);
        self.next_ping = Some(now + self.config.ping_interval);
        self.early_bytes = 0;
        for (payload, transit) in std::mem::take(&mut self.early) {
            self.events
                .push_back(ConnEvent::Message { payload, transit });
        }
    }

    /// A connected ping. When nothing reliable awaits acknowledgement it goes reliable, as
    /// official RakNet's idle keepalive does: a peer that never acknowledges anything (a
    /// slowloris that only sends) is then caught by the unacknowledged-data timeout.
    fn send_ping(&mut self, now: Instant) {
        let ping = ConnectedPing {
            time: self.wire_ms(now),
        };
        let reliability = if self.flight.reliable_in_flight() == 0 {
            Reliability::Reliable
        } else {
            Reliability::Unreliable
        };
        self.send_internal(now, &ping, reliability);
    }

    /// Heap bytes this connection holds, by structure (see [`crate::memory`]); its fixed-size
    /// state is counted by the endpoint's connection table.
    pub(crate) fn heap_usage(&self) -> HeapUsage {
        let early: usize = self.early.iter().map(|(m, _)| m.len()).sum();
        HeapUsage {
            send_queue: self.queue.heap_bytes(),
            in_flight: self.flight.heap_bytes() + memory::vec(&self.receipts_out),
            flight_records: self.flight.records_heap_bytes(),
            acks: self.acks.heap_bytes()
                + self.naks.heap_bytes()
                + self.ack_repeats.heap_bytes()
                + memory::vec(&self.refused_while_paused),
            reliable_window: self.reliable.heap_bytes(),
            ordering: memory::vec(&self.channels)
                + self.channels.iter().map(Channel::heap_bytes).sum::<usize>(),
            reassembly: self.reassembly.heap_bytes(),
            congestion: self.cc.heap_bytes(),
            events: memory::deque(&self.events)
                + memory::vec(&self.delivered)
                + memory::vec(&self.early)
                + early,
            ..HeapUsage::default()
        }
    }

    /// Give back the capacity that bursts left in this connection's containers (see
    /// [`crate::memory`]): run once per keep-alive ping.
    fn trim(&mut self) {
        self.queue.trim();
        self.flight.trim();
        self.acks.trim();
        self.naks.trim();
        self.ack_repeats.trim();
        memory::trim_vec(&mut self.refused_while_paused);
        self.channels.iter_mut().for_each(Channel::trim);
        self.reassembly.trim();
        self.reliable.trim();
        memory::trim_deque(&mut self.events);
        memory::trim_vec(&mut self.delivered);
        memory::trim_vec(&mut self.receipts_out);
    }

    /// Bytes of the peer's data this connection buffers, as the budgets count them:
    /// reassembly, ordering holds and the messages that came before the handshake ended.
    fn buffered_bytes(&self) -> usize {
        self.reassembly.bytes()
            + self.channels.iter().map(Channel::held_bytes).sum::<usize>()
            + self.early_bytes
    }

    /// Whether `len` more buffered bytes fit in this connection's and its endpoint's budgets:
    /// always within the connection's fair share ([`Limits::buffered_share`]), beyond it only
    /// while the endpoint's total stays in the open half of its budget. So the bytes beyond
    /// shares never pass half the budget, the shares add up to the other half, and the
    /// endpoint's total never passes the budget: a connection within its share is never
    /// refused for what others hold.
    fn can_buffer(&self, len: usize) -> bool {
        let limits = &self.config.limits;
        let mine = self.buffered_bytes() + len;
        let total = self.memory.total_with(mine);
        mine <= limits.max_reassembly_bytes
            && total <= limits.max_endpoint_buffered_bytes
            && (mine <= limits.buffered_share() || total <= limits.max_endpoint_buffered_bytes / 2)
    }

    /// Pause or resume taking the peer's messages (back-pressure from the application).
    /// While paused, datagrams with reliable frames are left unacknowledged, so a sender's
    /// congestion control backs off and resends them later, and unreliable messages are
    /// dropped (counted). Resuming NAKs the datagrams refused meanwhile, so they come again
    /// at once.
    pub(crate) fn set_receive_paused(&mut self, now: Instant, paused: bool) {
        if self.paused == paused {
            return;
        }
        self.paused = paused;
        let now_ms = self.time_ms(now);
        if paused {
            self.rate.pause(now_ms);
        } else {
            self.rate.resume(now_ms);
            for seq in std::mem::take(&mut self.refused_while_paused) {
                self.naks.push(now, seq);
            }
            // What filled the held gaps was refused meanwhile: their clocks start again.
            for channel in &mut self.channels {
                channel.restart_stall(now);
            }
            self.reassembly.restart_stalls(now);
        }
    }

    /// Strip an ID_TIMESTAMP prefix (unless configured not to) and compute the message's
    /// transit time.
    fn transit(&self, now_ms: u64, payload: Bytes) -> (Bytes, Duration) {
        let estimate = || {
            self.clock
                .lowest_ping()
                .map_or(self.rtt.srtt() / 2, |p| Duration::from_millis(p / 2))
        };
        if !self.config.strip_timestamps {
            return (payload, estimate());
        }
        match Timestamped::split(&payload) {
            Some(ts) => {
                let transit = match self.clock.to_local(ts.time) {
                    Some(local) => Duration::from_millis(now_ms.saturating_sub(local)),
                    None => estimate(),
                };
                (ts.message, transit)
            }
            None => (payload, estimate()),
        }
    }

    /// Timers: resends, keepalive, timeouts, handshake attempts, closing.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        // While paused we refuse what would fill a gap: the clocks of held gaps stop.
        let (expired, reliable) = if self.paused {
            (0, false)
        } else {
            self.reassembly.expire(now, self.config.timeout)
        };
        if expired > 0 {
            self.stats.splits_expired += expired as u64;
            self.memory.set(self.buffered_bytes());
        }
        let ordering_stalled = !self.paused
            && self
                .channels
                .iter()
                .filter_map(Channel::stalled_since)
                .any(|since| now >= since + self.config.timeout);
        if (reliable || ordering_stalled) && !matches!(self.state, State::Closed) {
            // A gap in reliable data left open for the timeout, data piled behind it.
            self.stats.stalled_gaps += 1;
            return self.finish(DisconnectReason::LimitExceeded(Limit::Stalled));
        }
        match &self.state {
            State::Closed => return,
            State::Closing { deadline, reason } if now >= *deadline => return self.finish(*reason),
            State::Draining { deadline } if now >= *deadline => {
                self.state = State::Closed;
                return;
            }
            State::Offline { attempt, .. } => {
                let total = self.config.attempts_per_probe * self.config.mtu_probes.len() as u32;
                if *attempt >= total
                    && now >= self.created + self.config.connect_attempt_interval * total
                {
                    return self.fail(ConnectError::Timeout);
                }
            }
            _ => {}
        }
        let handshaking = self.handshaking();
        if handshaking && now >= self.created + self.config.handshake_timeout {
            return if self.role == Role::Client {
                self.fail(ConnectError::Timeout)
            } else {
                self.finish(DisconnectReason::Timeout)
            };
        }
        if now >= self.last_receive + self.config.timeout {
            return self.finish(DisconnectReason::Timeout);
        }
        if !self.flight.all_acked() && now >= self.ack_progress + self.config.timeout {
            // Official's dead-connection rule (§6.8), with "nothing arrived" made "nothing
            // acknowledged": forged keep-alives cannot keep us resending forever.
            return self.finish(DisconnectReason::Timeout);
        }
        if self.send_stalled(now) {
            self.stats.send_stalled += 1;
            return self.finish(DisconnectReason::LimitExceeded(Limit::SendBacklog));
        }
        let rto = self.current_rto();
        let lost = self.flight.counters.lost_datagrams;
        self.flight
            .on_timeout(now, rto, self.cc.as_mut(), &mut self.receipts_out);
        if self.flight.counters.lost_datagrams > lost && self.flight.counters.acked_datagrams == 0 {
            self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        }
        let mut lost = std::mem::take(&mut self.receipts_out);
        let flight = &mut self.flight;
        let stats = &mut self.stats;
        self.queue
            .expire_unreliable(now, self.config.unreliable_timeout, |p| {
                stats.expired_unsent += 1;
                if let Some(id) = p.receipt {
                    flight.lose_receipt(id, &mut lost);
                }
            });
        self.receipts_out = lost;
        if self.queue.is_empty() {
            // Expiry emptied the queue: the next datagram follows an idle moment, and must
            // not be flagged "continuous send".
            self.burst = false;
        }
        self.flush_receipts();
        if let Some(pto) = self.pto() {
            if self.flight.probe_deadline(pto).is_some_and(|t| now >= t)
                && self.flight.queue_probe()
            {
                self.probe_pending = true;
                self.stats.tail_probes += 1;
            }
        }
        if self.state == State::Connected && self.next_ping.is_some_and(|t| now >= t) {
            self.send_ping(now);
            self.next_ping = Some(now + self.config.ping_interval);
            self.trim();
        }
        if self.pace_until.is_some_and(|t| now >= t) {
            self.pace_until = None;
        }
        self.sending.set(self.send_backlog());
    }

    /// Whether the peer stopped reading (see [`Limit::SendBacklog`]): each `timeout` that the
    /// backlog stays over the connection's share, the peer must have acknowledged an
    /// eighth of what was waiting when it began. A real reader that slow would take more
    /// than eight timeouts to catch up: gone for a game, and holding its share of the
    /// endpoint's send budget meanwhile.
    fn send_stalled(&mut self, now: Instant) -> bool {
        let backlog = self.send_backlog();
        if backlog <= self.config.limits.send_share() {
            self.backlog_mark = None;
            return false;
        }
        let delivered = self.flight.delivered_bytes();
        match self.backlog_mark {
            None => {
                self.backlog_mark = Some((now, backlog, delivered));
                false
            }
            Some((since, _, _)) if now < since + self.config.timeout => false,
            Some((_, then, acked)) => {
                if delivered.saturating_sub(acked) < (then / 8) as u64 {
                    return true;
                }
                self.backlog_mark = Some((now, backlog, delivered));
                false
            }
        }
    }

    /// The tail-loss probe timeout, as QUIC's: the smoothed RTT, four deviations, and the
    /// longest a peer holds its ACK ([`MAX_PEER_ACK_DELAY`], or our own `ack_delay` if
    /// longer); about two RTTs on a 20 ms path, where the RTO (2 SRTT + 4 RTTVAR + 30 ms) is
    /// nearer four. `None` before an RTT sample, or when the RTO would come first anyway (while
    /// it backs off).
    fn pto(&self) -> Option<Duration> {
        if !self.rtt.has_sample() {
            return None;
        }
        let ack_delay = MAX_PEER_ACK_DELAY.max(self.config.ack_delay);
        let pto = self.rtt.srtt() + 4 * self.rtt.rttvar() + ack_delay;
        (pto < self.current_rto()).then_some(pto)
    }

    /// The RTO, doubled per timeout while the peer has never acknowledged anything. A
    /// client's stops doubling at [`MAX_RTO`]: before its 0x13 arrives the server
    /// acknowledges nothing, and 4 s and 8 s gaps would let two lost 0x13s outlast both
    /// sides' 10 s timeouts (one connection in 400 at 5 % loss). A server keeps backing off
    /// from a peer that may not be listening at all.
    fn current_rto(&self) -> Duration {
        let rto = self.rtt.rto();
        let backed_off = rto * (1 << self.backoff);
        match self.role {
            Role::Client => backed_off.min(MAX_RTO.max(rto)),
            Role::Server => backed_off,
        }
    }

    fn check_closing_done(&mut self) {
        if let State::Closing { reason, .. } = self.state {
            if self.queue.is_empty() && self.flight.all_acked() {
                self.finish(reason);
            }
        }
    }

    // ---- output --------------------------------------------------------------------

    pub(crate) fn poll_event(&mut self) -> Option<ConnEvent> {
        self.events.pop_front()
    }

    /// The earliest time [`Self::handle_timeout`] must be called.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let mut t = match &self.state {
            State::Closed => return None,
            State::Closing { deadline, .. } | State::Draining { deadline } => Some(*deadline),
            State::Offline { next_attempt, .. } => Some(*next_attempt),
            _ => None,
        };
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        let handshaking = self.handshaking();
        min(handshaking.then(|| self.created + self.config.handshake_timeout));
        min(Some(self.last_receive + self.config.timeout));
        min((!self.flight.all_acked()).then(|| self.ack_progress + self.config.timeout));
        min(self.flight.next_expiry(self.current_rto()));
        min(self.pto().and_then(|pto| self.flight.probe_deadline(pto)));
        min(self.acks.since.map(|s| s + self.config.ack_delay));
        min(self.naks.since.map(|s| s + self.config.nak_delay));
        min(self.next_ping);
        min(self.pace_until);
        min(self
            .backlog_mark
            .map(|(since, _, _)| since + self.config.timeout));
        // Held gaps: unfilled for the timeout, they close the connection.
        if !self.paused {
            let stalled = self
                .channels
                .iter()
                .filter_map(Channel::stalled_since)
                .min();
            min(stalled.map(|t| t + self.config.timeout));
            min(self
                .reassembly
                .stalled_since()
                .map(|t| t + self.config.timeout));
        }
        if self.flight.has_resends() || !self.queue.is_empty() {
            // Queued data waiting on the window is released by ACKs, not timers; but
            // unreliable messages expire.
            min(self
                .queue
                .oldest_unreliable()
                .map(|t| t + self.config.unreliable_timeout));
        }
        t
    }

    /// Write the next datagram into `buf` (cleared first). Returns whether one was written.
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        let wrote = match &self.state {
            State::Closed => false,
            State::Offline { .. } => self.offline_transmit(now, buf),
            _ => self.write_nak(now, buf) || self.write_ack(now, buf) || self.write_data(now, buf),
        };
        if wrote && !matches!(self.state, State::Offline { .. }) {
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += buf.len() as u64;
        }
        // A closed peer needs its ACKs, not our NAKs.
        if matches!(self.state, State::Draining { .. }) && self.acks.is_empty() && !wrote {
            self.state = State::Closed;
        }
        wrote
    }

    fn offline_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let State::Offline {
            attempt,
            next_attempt,
            ocr2,
            ..
        } = &mut self.state
        else {
            return false;
        };
        if let Some((req, sent @ None)) = ocr2 {
            req.encode(buf);
            *sent = Some(now);
            return true;
        }
        let per_probe = self.config.attempts_per_probe.max(1);
        let probe = (*attempt / per_probe) as usize;
        if now < *next_attempt || probe >= self.config.mtu_probes.len() {
            return false;
        }
        let mtu = self.config.mtu_probes[probe].min(self.config.max_mtu);
        OpenConnectionRequest1 {
            protocol: self.protocol,
            mtu,
        }
        .encode(buf);
        *attempt += 1;
        *next_attempt = now + self.config.connect_attempt_interval;
        // A fresh Reply1 triggers a fresh OCR2 (the OCR1 schedule keeps running).
        *ocr2 = None;
        true
    }

    /// Most reliable frames in flight: [`crate::Limits::max_reliable_in_flight`], or for BBR twice
    /// the full-size datagrams its window holds, within
    /// [`crate::Limits::max_bbr_reliable_in_flight`].
    fn max_reliable_in_flight(&self) -> usize {
        let limits = &self.config.limits;
        match self.config.congestion {
            CongestionControl::Reno => limits.max_reliable_in_flight,
            CongestionControl::Bbr => {
                let window = 2 * self.cc.window() / self.udp_budget().max(1);
                window
                    .min(limits.max_bbr_reliable_in_flight)
                    .max(limits.max_reliable_in_flight)
            }
        }
    }

    fn udp_budget(&self) -> usize {
        usize::from(self.mtu) - IP_UDP_HEADER_LEN
    }

    fn write_nak(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        if self
            .naks
            .since
            .is_none_or(|since| now < since + self.config.nak_delay)
        {
            return false;
        }
        let ranges = self.naks.take(self.udp_budget() - ACK_HEADER_LEN);
        self.stats.naks_sent += ranges.iter().map(|r| u64::from(r.len())).sum::<u64>();
        Nak { ranges }.encode(buf);
        true
    }

    /// Datagrams that make an ACK go at once rather than after the ACK delay.
    fn ack_every(&self) -> usize {
        if self.peer_backlogged {
            BACKLOGGED_ACK_EVERY
        } else if self.peer_ramping {
            SLOW_START_ACK_EVERY
        } else {
            ACK_EVERY
        }
    }

    /// Whether an owed ACK goes now, ahead of its delay, because data is about to leave for the
    /// same peer: the two datagrams go out in one batch (one system call; no turn of the
    /// endpoint's thread for the ACK's timer) instead of the ACK waiting for the delay. At most
    /// one such ACK per `ack_delay`, so a connection sends no more ACKs than the delay alone
    /// allows (one per 10 ms window with arrivals, as official RakNet); at 20 Hz an echo's ACK
    /// leaves with the echo.
    fn ack_with_data(&self, now: Instant) -> bool {
        // The gates of `write_data`, but for the reliable frames' cap: an ACK that goes early
        // and finds the data held back still counts as the delay's one ACK.
        let probing = self.probe_pending && self.flight.has_resends();
        let window_open = self.flight.bytes_in_flight < self.cc.window()
            && self.pace_until.is_none_or(|until| now >= until);
        let data_ready =
            (self.flight.has_resends() || !self.queue.is_empty()) && (window_open || probing);
        data_ready
            && self
                .last_ack
                .is_none_or(|last| now >= last + self.config.ack_delay)
    }

    fn write_ack(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let Some(since) = self.acks.since else {
            return false;
        };
        let draining = matches!(self.state, State::Draining { .. });
        if now < since + self.config.ack_delay
            && !draining
            && self.acks.len() < 64
            && self.acks.numbers() < self.ack_every()
            && !self.ack_with_data(now)
        {
            return false;
        }
        self.last_ack = Some(now);
        let timestamp = self
            .config
            .datagram_timestamps
            .then(|| self.ack_timestamp.unwrap_or(0));
        let overhead = ACK_HEADER_LEN
            + if timestamp.is_some() {
                TIMESTAMP_LEN
            } else {
                0
            };
        let budget = self.udp_budget() - overhead;
        let mut ranges = self.acks.take(budget);
        self.ack_repeats.add_to(&mut ranges, budget);
        Ack {
            timestamp,
            arrival_rate: None,
            ranges,
        }
        .encode(buf);
        true
    }

    fn write_data(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        if matches!(self.state, State::Draining { .. }) {
            return false;
        }
        // Resends too wait for the congestion window (issue #11: a forged NAK or a peer that
        // stopped ACKing must not make us blast the whole flight at once). Lost datagrams
        // leave `bytes_in_flight`, so the window reopens for them.
        // A tail-loss probe goes regardless of window and pacing (one datagram).
        let probing = self.probe_pending && self.flight.has_resends();
        self.probe_pending = probing;
        let window_open = self.flight.bytes_in_flight < self.cc.window() || probing;
        if !window_open || (!self.flight.has_resends() && self.queue.is_empty()) {
            return false;
        }
        if self.flight.all_acked() {
            self.ack_progress = now;
        }
        // The pacer is asked every time (not only once `pace_until` passed): the rate may
        // have risen since it was set.
        self.pace_until = None;
        let budget = self.udp_budget();
        let rate = self.cc.pacing_rate(self.rtt.srtt());
        if let Some(until) = self
            .pacer
            .delay_at(now, budget, rate, self.cc.window())
            .filter(|_| !probing)
        {
            self.pace_until = Some(until);
            return false;
        }
        let seq = self.next_seq;
        let mut header = DataHeader::new(seq);
        header.continuous_send = self.burst;
        header.needs_b_and_as = self.cc.in_slow_start();
        header.timestamp = self
            .config
            .datagram_timestamps
            .then(|| now.saturating_duration_since(self.epoch).as_micros() as u32);
        header.encode(buf);

        let mut resent = Vec::new();
        while let Some(f) = self.flight.peek_resend().filter(|_| window_open) {
            if buf.len() + f.encoded_len() > budget {
                break;
            }
            let Some(frame) = self.flight.take_resend(seq) else {
                break;
            };
            frame.encode(buf);
            resent.push(frame.message_index);
        }
        let mut new_reliable = Vec::new();
        let mut unreliable_receipts = Vec::new();
        let max_in_flight = self.max_reliable_in_flight();
        while let Some(p) = self.queue.peek().filter(|_| window_open) {
            let reliable = p.frame.reliability.is_reliable();
            if reliable && self.flight.reliable_in_flight() + new_reliable.len() >= max_in_flight {
                break;
            }
            if buf.len() + p.frame.encoded_len() > budget {
                break;
            }
            let Some(mut p) = self.queue.pop() else { break };
            if reliable {
                p.frame.message_index = self.next_message_index;
                self.next_message_index = self.next_message_index.next();
            }
            p.frame.encode(buf);
            if reliable {
                new_reliable.push((p.frame, p.receipt));
            } else if let Some(id) = p.receipt {
                unreliable_receipts.push(id);
            }
        }
        if resent.is_empty()
            && new_reliable.is_empty()
            && unreliable_receipts.is_empty()
            && buf.len() == header.encoded_len()
        {
            buf.clear();
            return false;
        }
        self.next_seq = seq.next();
        self.probe_pending = false;
        let app_limited = self.queue.is_empty();
        self.burst = !app_limited;
        self.flight.on_sent(Sent {
            seq,
            at: now,
            bytes: buf.len(),
            new_reliable,
            resent,
            unreliable_receipts,
            app_limited,
        });
        self.cc.on_sent(seq);
        self.pacer.on_sent(buf.len());
        if let State::Closing { .. } = self.state {
            self.check_closing_done();
        }
        true
    }
}
