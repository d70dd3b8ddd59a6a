//! What a connection takes from its peer: offline replies during the client's handshake,
//! ACKs and NAKs, data datagrams and their frames (window, reliability, reassembly,
//! ordering, budgets) and the protocol's own connected messages.

use super::*;

impl Connection {
    /// An offline message from the peer, during the client's handshake (see
    /// [`ClientHandshake`]). `false` when it was not for this state, or a refusal that does
    /// not carry the server's GUID: dropped.
    pub(crate) fn handle_offline(&mut self, now: Instant, msg: OfflineMessage) -> bool {
        let step = match &mut self.state {
            State::Offline(hs) => hs.handle(
                now,
                msg,
                &self.config,
                &mut self.protocol,
                self.our_guid,
                self.addr,
            ),
            // The server took the slot it had at OCR2 by the time our 0x09 came (another of
            // its endpoint threads filled it): it refuses the 0x09 instead of answering 0x10.
            State::Requesting
                if matches!(msg, OfflineMessage::NoFreeIncomingConnections(_))
                    && server_guid(&msg) == Some(self.peer_guid) =>
            {
                ClientStep::Failed(ConnectError::NoFreeIncomingConnections)
            }
            _ => ClientStep::Ignored,
        };
        match step {
            ClientStep::Ignored => return false,
            ClientStep::Taken => {}
            ClientStep::Failed(error) => self.fail(error),
            ClientStep::Accepted {
                server_guid,
                mtu,
                rtt,
            } => {
                if let Some(rtt) = rtt {
                    self.rtt.update(rtt);
                }
                self.peer_guid = server_guid;
                self.set_mtu(mtu);
                self.state = State::Requesting;
                let request = ConnectionRequest {
                    client_guid: self.our_guid,
                    time: self.wire_ms(now),
                    use_security: false,
                    password: Bytes::new(),
                };
                self.send_internal(now, &request, Reliability::Reliable);
            }
        }
        true
    }

    pub(super) fn set_mtu(&mut self, mtu: u16) {
        self.mtu = mtu;
        let udp_payload = usize::from(mtu) - IP_UDP_HEADER_LEN;
        self.cc = controller(&self.config, udp_payload, self.addr);
        self.pacer = Pacer::new(udp_payload * 8);
        self.gate.set_max_message(self.max_message_len());
    }

    /// A connected datagram from the peer.
    pub(crate) fn handle_datagram(&mut self, now: Instant, datagram: Bytes) {
        if matches!(self.state, State::Closed | State::Offline(_)) {
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
                    let threshold = self.reorder_threshold();
                    self.flight.detect_lost(
                        now,
                        threshold,
                        self.cc.as_mut(),
                        &mut self.receipts_out,
                    );
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
        self.gate.account(self.send_backlog());
        self.gate.publish();
    }

    /// Whether a range of this ACK or NAK holds a datagram number we have not sent yet: the
    /// next one, or any in the half of the number space ahead of it. A peer acknowledges only
    /// what it received, so such an ACK is forged; a blind forger, who knows none of our
    /// counters, would have to cover the whole space to reach what is in flight, and so
    /// always reaches past it. The whole ACK is ignored, not only those numbers.
    pub(super) fn reaches_unsent(&self, ranges: &[AckRange]) -> bool {
        ranges.iter().any(|r| {
            self.next_seq.distance_from(r.start) < r.len()
                || r.start.distance_from(self.next_seq) < U24_MODULUS / 2
        })
    }

    /// Visit the numbers in `ranges` that we keep a record of (sent and not long resolved),
    /// at most `max_ack_numbers` in all; the others are counted as ignored. The cost is
    /// bounded by what is in flight, not by the width of the ranges.
    pub(super) fn walk_ranges(
        &mut self,
        ranges: &[AckRange],
        mut f: impl FnMut(&mut Self, DatagramSeq),
    ) {
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

    pub(super) fn flush_receipts(&mut self) {
        self.events
            .extend(self.receipts_out.drain(..).map(ConnEvent::Receipt));
    }

    /// Owe the peer an ACK for this datagram; its flags say how soon (see [`Self::ack_every`]).
    pub(super) fn ack_later(&mut self, now: Instant, header: &DataHeader) {
        self.peer_ramping = header.continuous_send && header.needs_b_and_as;
        self.peer_backlogged =
            header.continuous_send && (self.acks.is_empty() || self.peer_backlogged);
        self.acks.push(now, header.seq);
    }

    pub(super) fn handle_data(&mut self, now: Instant, header: DataHeader, body: Bytes) {
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
    pub(super) fn accept_frame(
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
        let bit = 1u32 << channel;
        if self.channels[channel].stalled_since().is_some() {
            self.stalled_channels |= bit;
        } else {
            self.stalled_channels &= !bit;
        }
        if outcome == Outcome::Stale {
            self.stats.stale_dropped += 1;
        }
        Ok(())
    }

    pub(super) fn on_message(&mut self, now: Instant, payload: Bytes) {
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

    pub(super) fn establish(&mut self, now: Instant) {
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
    pub(super) fn send_ping(&mut self, now: Instant) {
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
}
