//! A connection's clocks: resends and tail-loss probes, keepalive pings, the idle, handshake
//! and closing timeouts, held gaps and stalled send backlogs, and the deadline of the next.

use super::*;

impl Connection {
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
                .oldest_ordering_stall()
                .is_some_and(|since| now >= since + self.config.timeout);
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
            State::Offline(hs) if hs.gave_up(&self.config, self.created, now) => {
                return self.fail(ConnectError::Timeout);
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
        self.gate.account(self.send_backlog());
        self.gate.publish();
    }

    /// Since when the longest-waiting channel has waited for its gap, if any holds messages.
    pub(super) fn oldest_ordering_stall(&self) -> Option<Instant> {
        stalled(self.stalled_channels)
            .filter_map(|c| self.channels[c].stalled_since())
            .min()
    }

    /// Whether the peer stopped reading (see [`Limit::SendBacklog`]): each `timeout` that the
    /// backlog stays over the connection's share, the peer must have acknowledged an
    /// eighth of what was waiting when it began. A real reader that slow would take more
    /// than eight timeouts to catch up: gone for a game, and holding its share of the
    /// endpoint's send budget meanwhile.
    pub(super) fn send_stalled(&mut self, now: Instant) -> bool {
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

    /// How long after its sending a datagram that a later one overtook counts as lost
    /// ([`Flight::detect_lost`]): the round trip (the smoothed one or the latest sample,
    /// whichever is longer) and a reordering allowance of a quarter of the smallest round
    /// trip, at least [`MIN_REORDER_WINDOW`], widened by a quarter each time the path showed
    /// it reorders more (RACK, RFC 8985 §6.2).
    pub(super) fn reorder_threshold(&self) -> Duration {
        let rtt = self.rtt.srtt().max(self.rtt.latest());
        let allowance = self.rtt.min() / 4 * self.flight.reorder_quarters.max(1);
        rtt + allowance.max(MIN_REORDER_WINDOW)
    }

    /// The tail-loss probe timeout, as QUIC's: the smoothed RTT, four deviations, and the
    /// longest a peer holds its ACK ([`MAX_PEER_ACK_DELAY`], or our own `ack_delay` if
    /// longer); about two RTTs on a 20 ms path, where the RTO (2 SRTT + 4 RTTVAR + 30 ms) is
    /// nearer four. `None` before an RTT sample, or when the RTO would come first anyway (while
    /// it backs off).
    pub(super) fn pto(&self) -> Option<Duration> {
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
    pub(super) fn current_rto(&self) -> Duration {
        let rto = self.rtt.rto();
        let backed_off = rto * (1 << self.backoff);
        match self.role {
            Role::Client => backed_off.min(MAX_RTO.max(rto)),
            Role::Server => backed_off,
        }
    }

    pub(super) fn check_closing_done(&mut self) {
        if let State::Closing { reason, .. } = self.state {
            if self.queue.is_empty() && self.flight.all_acked() {
                self.finish(reason);
            }
        }
    }
}
