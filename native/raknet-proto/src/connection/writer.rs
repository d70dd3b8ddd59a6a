//! A connection's output: its events, and the datagram writer (offline handshake datagrams,
//! then NAKs, ACKs and data, within the congestion window and the pacer).

use super::*;

impl Connection {
    pub(crate) fn poll_event(&mut self) -> Option<ConnEvent> {
        self.events.pop_front()
    }

    /// The earliest time [`Self::handle_timeout`] must be called.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let mut t = match &self.state {
            State::Closed => return None,
            State::Closing { deadline, .. } | State::Draining { deadline } => Some(*deadline),
            State::Offline(hs) => Some(hs.next_attempt()),
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
            let stalled = self.oldest_ordering_stall();
            min(stalled.map(|t| t + self.config.timeout));
            min(self
                .reassembly
                .stalled_since()
                .map(|t| t + self.config.timeout));
        }
        if self.flight.has_resends() || !self.queue.is_empty() {
            // Queued data waiting on the window is released by ACKs, not timers; but
            // unreliable messages expire, and data held for company leaves after its delay.
            min(self
                .queue
                .oldest_unreliable()
                .map(|t| t + self.config.unreliable_timeout));
            if !self.config.send_delay.is_zero() {
                min(self.queue.oldest().map(|t| t + self.config.send_delay));
            }
        }
        t
    }

    /// Write the next datagram into `buf` (cleared first). Returns whether one was written.
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        let wrote = match &self.state {
            State::Closed => false,
            State::Offline(_) => self.offline_transmit(now, buf),
            _ => {
                self.write_nak(now, buf)
                    || self.write_ack(now, buf, false)
                    || self.write_data_before_ack(now, buf)
                    || (std::mem::take(&mut self.ack_follows) && self.write_ack(now, buf, true))
            }
        };
        if wrote && !matches!(self.state, State::Offline(_)) {
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += buf.len() as u64;
        }
        // A closed peer needs its ACKs, not our NAKs.
        if matches!(self.state, State::Draining { .. }) && self.acks.is_empty() && !wrote {
            self.state = State::Closed;
        }
        wrote
    }

    pub(super) fn offline_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        match &mut self.state {
            State::Offline(hs) => hs.transmit(now, &self.config, self.protocol, buf),
            _ => false,
        }
    }

    /// Most reliable frames in flight: [`crate::Limits::max_reliable_in_flight`], or for BBR twice
    /// the full-size datagrams its window holds, within
    /// [`crate::Limits::max_bbr_reliable_in_flight`].
    pub(super) fn max_reliable_in_flight(&self) -> usize {
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

    pub(super) fn udp_budget(&self) -> usize {
        usize::from(self.mtu) - IP_UDP_HEADER_LEN
    }

    pub(super) fn write_nak(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
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
    pub(super) fn ack_every(&self) -> usize {
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
    /// leaves with the echo. It follows the data (see [`Self::write_data_before_ack`]).
    pub(super) fn ack_with_data(&self, now: Instant) -> bool {
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

    /// Data, noting an owed ACK that goes with it ([`Self::ack_with_data`]) to follow it:
    /// after the data rather than ahead of it, so that the two (an echo and the ACK of the
    /// message it answers) form a run the socket sends as one UDP GSO send, the ACK its
    /// shorter last segment: one trip through the kernel's send path instead of two.
    fn write_data_before_ack(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let owed = self.acks.since.is_some() && self.ack_with_data(now);
        if self.write_data(now, buf) {
            self.ack_follows |= owed;
            return true;
        }
        // The data was held back after all (a send tick, the reliable frames' cap): the ACK
        // goes alone, as it went ahead of the data.
        owed && self.write_ack(now, buf, true)
    }

    /// An ACK if one is due (its delay passed, enough datagrams wait for it, or the
    /// connection drains), or any owed one when `early`.
    pub(super) fn write_ack(&mut self, now: Instant, buf: &mut Vec<u8>, early: bool) -> bool {
        let Some(since) = self.acks.since else {
            return false;
        };
        let draining = matches!(self.state, State::Draining { .. });
        if !early
            && now < since + self.config.ack_delay
            && !draining
            && self.acks.len() < 64
            && self.acks.numbers() < self.ack_every()
        {
            return false;
        }
        self.ack_follows = false;
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

    /// Whether new data waits for more to share its datagram ([`EndpointConfig::send_delay`]):
    /// less than a datagram's worth, nothing `Immediate`, nothing to resend, not closing, and
    /// its oldest message queued less than the delay ago.
    pub(super) fn coalescing(&self, now: Instant, probing: bool) -> bool {
        let delay = self.config.send_delay;
        !delay.is_zero()
            && !probing
            && !self.flight.has_resends()
            && matches!(self.state, State::Connected)
            && !self.queue.has_immediate()
            && self.queue.bytes < self.udp_budget()
            && self.queue.oldest().is_some_and(|t| now < t + delay)
    }

    pub(super) fn write_data(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
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
        if self.coalescing(now, probing) {
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
