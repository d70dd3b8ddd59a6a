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
use crate::handshake::{server_guid, ClientHandshake, ClientStep};
use crate::memory::{self, HeapUsage};
use crate::message::{
    id, ConnectedMessage, ConnectedPing, ConnectedPong, ConnectionRequest, NewIncomingConnection,
    OfflineMessage, Timestamped,
};
use crate::recv::ordering::{Channel, Holdable, Outcome};
use crate::recv::rate::MessageRate;
use crate::recv::reassembly::{Reassembly, Refusal};
use crate::recv::reliable::{Check, ReliableWindow};
use crate::recv::window::{fingerprint, AckRepeats, Arrival, DatagramWindow, PendingRanges};
use crate::reliability::Reliability;
use crate::rtt::{RttEstimator, MAX_RTO};
use crate::send::flight::{Flight, ReceiptOutcome, Sent};
use crate::send::gate::GateOwner;
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

/// The channels whose bits are set in `bits` (a connection's `stalled_channels`).
fn stalled(mut bits: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let c = bits.trailing_zeros();
        bits &= bits.wrapping_sub(1);
        (c < 32).then_some(c as usize)
    })
}

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
    Offline(ClientHandshake),
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
/// The smallest reordering allowance of loss detection by order (see
/// `Connection::reorder_threshold`): on a path of a millisecond or less, a quarter of it
/// would take the scheduling jitter of either side for a loss.
const MIN_REORDER_WINDOW: Duration = Duration::from_millis(2);

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
    /// Data left while an ACK was owed that goes with it: the ACK follows the data.
    ack_follows: bool,
    naks: PendingRanges,
    /// Back-pressure from the application: refuse reliable frames, drop unreliable ones.
    paused: bool,
    /// This connection's part of the endpoint's buffered bytes.
    pub(crate) memory: MemoryShare,
    /// This connection's part of its endpoint's send backlog
    /// ([`crate::Limits::max_endpoint_send_bytes`]).
    pub(crate) gate: GateOwner,
    /// Bytes of admitted sends taken and not yet released (see `Endpoint::release_admitted`).
    pub(crate) admitted: usize,
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
    /// The channels holding messages behind a gap, one bit each: the deadline and the
    /// timeout check visit only these (most connections hold none; scanning all 32 was half
    /// the cost of a connection's deadline).
    stalled_channels: u32,
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
            ack_follows: false,
            naks: PendingRanges::naks(),
            paused: false,
            memory: MemoryShare::default(),
            gate: GateOwner::new(&config.limits, Arc::default()),
            admitted: 0,
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
            stalled_channels: 0,
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
        let state = State::Offline(ClientHandshake::new(now));
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
    /// exchange so far left behind: our 0x10 went out as datagram #0 with reliable index 0
    /// (not ordered) and has been received (0x13 echoes it), so our counters continue at 1
    /// and nothing is in flight; the client's 0x09 used its reliable index 0 (and, sent
    /// ordered, its ordering index), and its receive window starts at the datagram carrying
    /// the 0x13 (earlier ones were acknowledged by the handshake).
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
        c.window = DatagramWindow::starting_at(acc.client_seq, limits.max_datagram_gap);
        let reliable_first = if acc.request_reliable { second } else { first };
        c.reliable = ReliableWindow::starting_at(
            MessageIndex::new(reliable_first),
            limits.max_reliable_window,
        );
        if let Some((channel, order)) = acc.request_order {
            if let Some(channel) = c.channels.get_mut(usize::from(channel)) {
                channel.delivered_before(order);
            }
        }
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

    /// This connection's configuration (its endpoint's, or a copy with its own options).
    pub(crate) fn config(&self) -> &EndpointConfig {
        &self.config
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
            State::Offline(_) | State::Requesting | State::Accepting
        )
    }

    /// Whether offline messages from the peer are for this connection: during the offline
    /// handshake, and while the 0x09 waits (a server that filled up answers it with 0x14).
    pub(crate) fn takes_offline(&self) -> bool {
        matches!(self.state, State::Offline(_) | State::Requesting)
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
        s.datagrams_lost_by_order = self.flight.counters.lost_by_order;
        s.datagrams_reordered = self.flight.counters.reordered;
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
        if !limits.send_budget().fits(mine, self.gate.total_with(mine)) {
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
        self.gate.account(self.send_backlog());
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
        self.gate.close();
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
        self.gate.close();
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
    ///
    /// Called for every data datagram: only the channels holding messages are read (a
    /// channel holds messages exactly while its `stalled_channels` bit is set), not all 32,
    /// whose 3 KiB of state a datagram would otherwise pull into the cache.
    fn buffered_bytes(&self) -> usize {
        let held: usize = stalled(self.stalled_channels)
            .map(|c| self.channels[c].held_bytes())
            .sum();
        debug_assert_eq!(
            held,
            self.channels.iter().map(Channel::held_bytes).sum::<usize>(),
            "a channel holds messages without its stalled_channels bit"
        );
        self.reassembly.bytes() + held + self.early_bytes
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
            for c in stalled(self.stalled_channels) {
                self.channels[c].restart_stall(now);
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
}

mod input;
mod timers;
mod writer;
