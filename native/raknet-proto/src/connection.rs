//! One connection: a coordinator over the handshake, the send and receive paths, clock
//! sync and timers. The [`crate::Endpoint`] owns connections and drives them.
//!
//! Call order, for every input: a `handle_*` method or an application command, then drain
//! [`Connection::poll_transmit`] and [`Connection::poll_event`], then re-arm the timer with
//! [`Connection::poll_timeout`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::addr;
use crate::clock::ClockSync;
use crate::codec::Encode;
use crate::config::EndpointConfig;
use crate::congestion::{Controller, Pacer, SlidingWindow};
use crate::datagram::{
    Ack, AckRange, DataHeader, Datagram, Nak, ACK_HEADER_LEN, IP_UDP_HEADER_LEN, TIMESTAMP_LEN,
};
use crate::error::{ConnectError, DisconnectReason, SendError};
use crate::frame::{Frame, Frames, ORDERING_CHANNELS};
use crate::message::{
    id, ConnectedMessage, ConnectedPing, ConnectedPong, ConnectionRequest,
    ConnectionRequestAccepted, NewIncomingConnection, OfflineMessage, OpenConnectionRequest1,
    OpenConnectionRequest2, Timestamped,
};
use crate::recv::ordering::{Channel, Outcome};
use crate::recv::reassembly::{Reassembly, Refusal};
use crate::recv::reliable::{Check, ReliableWindow};
use crate::recv::window::{fingerprint, AckRepeats, Arrival, DatagramWindow, PendingRanges};
use crate::reliability::Reliability;
use crate::rtt::RttEstimator;
use crate::send::flight::{Flight, ReceiptOutcome, Sent};
use crate::send::queue::{Priority, ReceiptId, SendOptions, SendQueue};
use crate::seq::{DatagramSeq, MessageIndex, OrderIndex};
use crate::stats::ConnectionStats;

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
    },
    /// Client: 0x09 sent, waiting for 0x10.
    Requesting,
    /// Server: Reply2 sent, waiting for 0x09.
    Unverified,
    /// Server: 0x10 sent, waiting for 0x13.
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

/// Delivered message, before classification.
struct Delivered(Bytes);

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
    created: Instant,
    last_receive: Instant,
    next_ping: Option<Instant>,
    ever_connected: bool,

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

    // Receive path.
    window: DatagramWindow,
    acks: PendingRanges,
    /// Recently sent ACK ranges, repeated in the next ACKs (lost ACKs cost no resends).
    ack_repeats: AckRepeats,
    naks: PendingRanges,
    ack_timestamp: Option<u32>,
    reliable: ReliableWindow,
    reassembly: Reassembly,
    channels: Vec<Channel<Delivered>>,
    early: Vec<(Bytes, Duration)>,
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
            cc: Box::new(SlidingWindow::new(
                udp_payload,
                limits.max_send_queue_bytes.max(1 << 20),
            )),
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
            created: now,
            last_receive: now,
            next_ping: None,
            ever_connected: false,
            queue: SendQueue::starting_at(OrderIndex::new(first)),
            flight: Flight::default(),
            rtt: RttEstimator::new(),
            next_seq: DatagramSeq::new(first),
            next_message_index: MessageIndex::new(first),
            next_receipt: 1,
            burst: false,
            pace_until: None,
            acks: PendingRanges::default(),
            ack_repeats: AckRepeats::default(),
            naks: PendingRanges::default(),
            ack_timestamp: None,
            reassembly: Reassembly::default(),
            channels: (0..ORDERING_CHANNELS)
                .map(|_| Channel::starting_at(OrderIndex::new(first)))
                .collect(),
            early: Vec::new(),
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

    /// A server connection created on a valid OCR2, after Reply2 was sent.
    pub(crate) fn server(
        config: Arc<EndpointConfig>,
        peer: Peer,
        epoch: Instant,
        now: Instant,
    ) -> Self {
        Self::new(
            config,
            Peer {
                role: Role::Server,
                ..peer
            },
            State::Unverified,
            epoch,
            now,
        )
    }

    // ---- getters -------------------------------------------------------------------

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

    /// Whether this server connection is still waiting for 0x09 (Reply2 may be resent).
    pub(crate) fn is_unverified(&self) -> bool {
        self.state == State::Unverified
    }

    /// Whether the handshake (offline or connected part) is still under way.
    fn handshaking(&self) -> bool {
        matches!(
            self.state,
            State::Offline { .. } | State::Requesting | State::Unverified | State::Accepting
        )
    }

    pub(crate) fn in_offline_handshake(&self) -> bool {
        matches!(self.state, State::Offline { .. })
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
        s.resends = self.flight.counters.resends;
        s.naks_received = self.flight.counters.naks_received;
        s.naks_ignored = self.flight.counters.naks_ignored;
        s.datagrams_lost = self.flight.counters.lost_datagrams;
        s.send_queue_frames = self.queue.len();
        s.send_queue_bytes = self.queue.bytes;
        s.reliable_in_flight = self.flight.reliable_in_flight();
        s.bytes_in_flight = self.flight.bytes_in_flight;
        s.reassembly_bytes = self.reassembly.bytes();
        s.held_for_ordering = self.channels.iter().map(Channel::held).sum();
        s
    }

    /// Milliseconds on this endpoint's RakNet clock.
    fn time_ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn max_fragment(&self) -> usize {
        crate::max_unsplit_payload(self.mtu)
    }

    // ---- application commands ------------------------------------------------------

    pub(crate) fn send(
        &mut self,
        now: Instant,
        payload: Bytes,
        opts: SendOptions,
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
        let limits = &self.config.limits;
        if payload.len() > limits.max_message_bytes {
            return Err(SendError::TooLarge);
        }
        if self.queue.bytes + self.flight.unacked_payload + payload.len()
            > limits.max_send_queue_bytes
        {
            return Err(SendError::QueueFull);
        }
        let receipt = opts.reliability.has_receipt().then(|| {
            let id = ReceiptId(self.next_receipt);
            self.next_receipt = self.next_receipt.checked_add(1).unwrap_or(1);
            id
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

    /// An offline message from the peer, during the client's handshake.
    pub(crate) fn handle_offline(&mut self, now: Instant, msg: OfflineMessage) {
        let State::Offline { ocr2, .. } = &mut self.state else {
            return;
        };
        match msg {
            OfflineMessage::OpenConnectionReply1(reply) => {
                if reply.server_public_key.is_some() {
                    return self.fail(ConnectError::SecurityRequired);
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
                if reply.security_answer.is_some() {
                    return self.fail(ConnectError::SecurityRequired);
                }
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
                    time: self.time_ms(now),
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
            _ => {}
        }
    }

    fn set_mtu(&mut self, mtu: u16) {
        self.mtu = mtu;
        let udp_payload = usize::from(mtu) - IP_UDP_HEADER_LEN;
        self.cc = Box::new(SlidingWindow::new(
            udp_payload,
            self.config.limits.max_send_queue_bytes.max(1 << 20),
        ));
        self.pacer = Pacer::new(udp_payload * 8);
    }

    /// A connected datagram from the peer.
    pub(crate) fn handle_datagram(&mut self, now: Instant, datagram: Bytes) {
        if matches!(self.state, State::Closed | State::Offline { .. }) {
            return;
        }
        self.last_receive = now;
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += datagram.len() as u64;
        match Datagram::decode(datagram, self.config.datagram_timestamps) {
            Err(_) => self.stats.malformed += 1,
            Ok(Datagram::Ack(ack)) => {
                self.walk_ranges(&ack.ranges, |c, seq| {
                    c.flight
                        .on_ack(seq, now, &mut c.rtt, c.cc.as_mut(), &mut c.receipts_out);
                });
                self.flush_receipts();
                self.check_closing_done();
            }
            Ok(Datagram::Nak(nak)) => {
                // A genuine NAK takes about a round trip; half the smallest one seen leaves
                // room for a NAK sent sooner than the ACKs that made the samples.
                let min_age = self.rtt.min() / 2;
                self.walk_ranges(&nak.ranges, |c, seq| {
                    c.flight
                        .on_nak(seq, now, min_age, c.cc.as_mut(), &mut c.receipts_out)
                });
                self.flush_receipts();
            }
            Ok(Datagram::Data { header, body }) => self.handle_data(now, header, body),
        }
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

    fn handle_data(&mut self, now: Instant, header: DataHeader, body: Bytes) {
        match self.window.on_datagram(header.seq, fingerprint(&body)) {
            Arrival::Garbage => {
                self.stats.garbage_datagrams += 1;
                return;
            }
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
                self.acks.push(now, header.seq);
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
        }
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
            match self.accept_frame(frame, &mut delivered) {
                Ok(()) => {}
                Err(None) => {
                    self.stats.refused_over_limit += 1;
                    refused = true;
                }
                Err(Some(reason)) => {
                    self.finish(reason);
                    return;
                }
            }
        }
        if !refused {
            self.acks.push(now, header.seq);
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
        frame: Frame,
        out: &mut Vec<Delivered>,
    ) -> Result<(), Option<DisconnectReason>> {
        let wire = frame.reliability.on_wire();
        let reliable = wire.is_reliable();
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
        let index = frame.message_index;
        let whole = match frame.split {
            None => Some(frame),
            Some(split) => match self.reassembly.insert(frame, split, &self.config.limits) {
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
        match self.channels[channel].offer(
            msg.order_index,
            sequence,
            Delivered(msg.payload),
            usize::MAX,
            out,
        ) {
            Outcome::Stale => self.stats.stale_dropped += 1,
            Outcome::Delivered | Outcome::Held | Outcome::Full => {}
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
            (ConnectedMessage::ConnectionRequest(req), State::Unverified) => {
                self.rtt.update(now.saturating_duration_since(self.created));
                if req.client_guid != self.peer_guid {
                    return self.finish(DisconnectReason::ProtocolViolation(
                        "connection request GUID differs from OCR2",
                    ));
                }
                let n = self.config.internal_addresses_for(self.protocol);
                let accepted = ConnectionRequestAccepted {
                    client_address: self.addr,
                    system_index: 0,
                    internal_addresses: self.internal_addresses(n),
                    request_time: req.time,
                    accepted_time: now_ms,
                };
                self.send_internal(now, &accepted, Reliability::ReliableOrdered);
                self.state = State::Accepting;
            }
            (ConnectedMessage::ConnectionRequest(_), _) => {
                // Answer one 0x09 per connection: repeating it must not make us emit 0x10s
                // (reflection, protocol reference §14 item 10).
            }
            (ConnectedMessage::ConnectionRequestAccepted(acc), State::Requesting) => {
                self.clock.add(acc.request_time, now_ms, acc.accepted_time);
                let n = self.config.internal_addresses_for(self.protocol);
                let nic = NewIncomingConnection {
                    server_address: self.addr,
                    internal_addresses: self.internal_addresses(n),
                    ping_time: acc.accepted_time,
                    pong_time: now_ms,
                };
                self.send_internal(now, &nic, Reliability::ReliableOrdered);
                self.establish(now);
            }
            (ConnectedMessage::NewIncomingConnection(nic), State::Accepting) => {
                self.clock.add(nic.ping_time, now_ms, nic.pong_time);
                self.establish(now);
            }
            (ConnectedMessage::ConnectedPing(ping), _) => {
                let pong = ConnectedPong {
                    ping_time: ping.time,
                    pong_time: now_ms,
                };
                self.send_internal(now, &pong, Reliability::Unreliable);
            }
            (ConnectedMessage::ConnectedPong(pong), _) => {
                self.clock.add(pong.ping_time, now_ms, pong.pong_time);
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
                let (payload, transit) = self.transit(now_ms, payload);
                match state {
                    State::Connected | State::Closing { .. } => {
                        self.stats.messages_in += 1;
                        self.events
                            .push_back(ConnEvent::Message { payload, transit });
                    }
                    State::Accepting | State::Requesting
                        if self.early.len() < self.config.limits.max_early_messages =>
                    {
                        self.stats.messages_in += 1;
                        self.early.push((payload, transit));
                    }
                    State::Unverified => {
                        self.finish(DisconnectReason::ProtocolViolation(
                            "message before connection request",
                        ));
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
        for (payload, transit) in std::mem::take(&mut self.early) {
            self.events
                .push_back(ConnEvent::Message { payload, transit });
        }
    }

    fn send_ping(&mut self, now: Instant) {
        let ping = ConnectedPing {
            time: self.time_ms(now),
        };
        self.send_internal(now, &ping, Reliability::Unreliable);
    }

    fn internal_addresses(&self, n: usize) -> Vec<std::net::SocketAddr> {
        let mut v = Vec::with_capacity(n);
        if n > 0 {
            v.push(self.local_addr);
        }
        v.resize(n, addr::UNASSIGNED);
        v
    }

    /// Strip an ID_TIMESTAMP prefix and compute the message's transit time.
    fn transit(&self, now_ms: u64, payload: Bytes) -> (Bytes, Duration) {
        let estimate = || {
            self.clock
                .lowest_ping()
                .map_or(self.rtt.srtt() / 2, |p| Duration::from_millis(p / 2))
        };
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
        let rto = self.rtt.rto();
        self.flight
            .on_timeout(now, rto, self.cc.as_mut(), &mut self.receipts_out);
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
        self.flush_receipts();
        if self.state == State::Connected && self.next_ping.is_some_and(|t| now >= t) {
            self.send_ping(now);
            self.next_ping = Some(now + self.config.ping_interval);
        }
        if self.pace_until.is_some_and(|t| now >= t) {
            self.pace_until = None;
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
        min(self.flight.next_expiry(self.rtt.rto()));
        min(self.acks.since.map(|s| s + self.config.ack_delay));
        min(self.naks.since.map(|s| s + self.config.nak_delay));
        min(self.next_ping);
        min(self.pace_until);
        if self.flight.has_resends() || !self.queue.is_empty() {
            // Queued data waiting on the window is released by ACKs, not timers; but
            // unreliable messages expire.
            min(self
                .queue
                .peek()
                .filter(|p| !p.frame.reliability.is_reliable())
                .map(|p| p.queued_at + self.config.unreliable_timeout));
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
        if wrote && !self.in_offline_handshake() {
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

    fn write_ack(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let Some(since) = self.acks.since else {
            return false;
        };
        let draining = matches!(self.state, State::Draining { .. });
        if now < since + self.config.ack_delay
            && !draining
            && self.acks.len() < 64
            && self.acks.numbers() < ACK_EVERY
        {
            return false;
        }
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
        let window_open = self.flight.bytes_in_flight < self.cc.window();
        let has_new = !self.queue.is_empty() && window_open;
        if !self.flight.has_resends() && !has_new {
            return false;
        }
        if self.pace_until.is_some_and(|t| now < t) {
            return false;
        }
        let budget = self.udp_budget();
        if let Some(until) = self
            .pacer
            .delay(now, budget, self.cc.window(), self.rtt.srtt())
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
        while let Some(f) = self.flight.peek_resend() {
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
        let max_in_flight = self.config.limits.max_reliable_in_flight;
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
