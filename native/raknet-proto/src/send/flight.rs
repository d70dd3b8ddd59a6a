//! Datagrams in flight: what each one carried, ACK/NAK/timeout handling, the resend queue
//! and ACK receipts (protocol reference §5.2, §11, §12).
//!
//! A reliable frame keeps its indices for life and is re-sent under a new datagram number
//! when the datagram carrying it is NAKed or unacknowledged for the RTO. A late ACK of an
//! older datagram that carried it still frees it.

use crate::hash::OwnKeyMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::Limits;
use crate::congestion::{CongestionEvent, Controller, DeliverySample};
use crate::datagram::AckRange;
use crate::frame::Frame;
use crate::memory;
use crate::rtt::RttEstimator;
use crate::send::queue::ReceiptId;
use crate::seq::{DatagramSeq, MessageIndex, U24_MODULUS};

/// Most datagram records kept; older unresolved ones are declared lost early.
const MAX_RECORDS: usize = 1 << 16;
/// Lost datagrams remembered so that a late ACK still frees their frames (official 512).
const KEEP_LOST: usize = 512;

#[derive(Debug)]
struct Record {
    seq: DatagramSeq,
    sent_at: Instant,
    bytes: usize,
    reliable: Vec<MessageIndex>,
    unreliable_receipts: Vec<ReceiptId>,
    resolved: bool,
    /// Declared lost by order ([`Flight::detect_lost`]): an ACK of it after all means the
    /// path reorders more than the allowance.
    lost_by_order: bool,
    app_limited: bool,
    /// Delivery-rate state when this datagram was sent (see [`DeliverySample`]).
    prior_delivered: u64,
    delivered_at: Instant,
    first_sent_at: Instant,
}

#[derive(Debug)]
struct InFlight {
    frame: Frame,
    receipt: Option<ReceiptId>,
    carrier: DatagramSeq,
}

/// The widest reordering allowance of loss detection by order, in quarters of the smallest
/// round trip (see [`Flight::reorder_quarters`]): a whole round trip.
pub(crate) const MAX_REORDER_QUARTERS: u32 = 4;

/// Losses found by order, without a reordering seen, after which the allowance narrows back
/// (RFC 8985 §6.2: 16 recoveries).
pub(crate) const REORDER_PERSIST: u32 = 16;

/// A datagram that was just sent, for [`Flight::on_sent`].
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) seq: DatagramSeq,
    pub(crate) at: Instant,
    pub(crate) bytes: usize,
    /// Reliable frames carried for the first time, with their receipts.
    pub(crate) new_reliable: Vec<(Frame, Option<ReceiptId>)>,
    /// Reliable frames carried again.
    pub(crate) resent: Vec<MessageIndex>,
    pub(crate) unreliable_receipts: Vec<ReceiptId>,
    /// The sender had nothing more queued (the window should not grow on its ACK).
    pub(crate) app_limited: bool,
}

/// The fate of a message sent with a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReceiptOutcome {
    Acked(ReceiptId),
    Lost(ReceiptId),
}

/// Counters the flight keeps for stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FlightCounters {
    pub(crate) acked_datagrams: u64,
    pub(crate) lost_datagrams: u64,
    pub(crate) naks_received: u64,
    /// NAKs of datagrams sent too recently for a genuine NAK to have come back.
    pub(crate) naks_ignored: u64,
    pub(crate) resends: u64,
    /// Datagrams declared lost because later ones were acknowledged (no NAK came).
    pub(crate) lost_by_order: u64,
    /// Of those, acknowledged after all (reordered, not lost).
    pub(crate) reordered: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Flight {
    records: VecDeque<Record>,
    /// Every record before this index is resolved: timers start here instead of walking the
    /// lost records kept for late ACKs (which made each timer check O(KEEP_LOST)).
    unresolved_from: usize,
    frames: OwnKeyMap<u32, InFlight>,
    resend: VecDeque<MessageIndex>,
    /// Outstanding receipts and how many fragments each still waits for.
    receipts: OwnKeyMap<ReceiptId, u32>,
    pub(crate) bytes_in_flight: usize,
    /// Reliable frames not yet acknowledged, as the send budget counts them (payload plus
    /// [`Limits::SEND_OVERHEAD`] each).
    pub(crate) unacked_payload: usize,
    pub(crate) counters: FlightCounters,
    /// Bytes acknowledged so far, when the last was, and when the datagram that began the
    /// current sampling interval was sent (draft-cheng-iccrg-delivery-rate-estimation).
    delivered: u64,
    delivered_at: Option<Instant>,
    first_sent_at: Option<Instant>,
    /// When the last datagram went and the last acknowledgement of a new one came, for the
    /// tail-loss probe; whether one was sent since that acknowledgement.
    last_sent_at: Option<Instant>,
    last_ack_at: Option<Instant>,
    probed: bool,
    /// When the newest datagram acknowledged so far was sent, for [`Flight::detect_lost`].
    newest_acked_sent_at: Option<Instant>,
    /// How many quarters of the smallest round trip the reordering allowance is: one, and
    /// one more (up to [`MAX_REORDER_QUARTERS`]) each time a datagram declared lost by
    /// order is acknowledged after all (RACK's `reo_wnd_mult`, RFC 8985 §6.2).
    pub(crate) reorder_quarters: u32,
    /// Losses found by order since the allowance last widened: after
    /// [`REORDER_PERSIST`] of them it narrows back to one quarter (RACK's `reo_wnd_persist`).
    reorder_calm: u32,
}

impl Flight {
    /// Heap bytes held: records, frames (with their payloads), the resend queue and
    /// receipts (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        let payload = self.unacked_payload - self.frames.len() * Limits::SEND_OVERHEAD;
        memory::map(&self.frames)
            + payload
            + memory::deque(&self.resend)
            + memory::map(&self.receipts)
    }

    /// Heap bytes of the datagram records (see [`crate::memory`]).
    pub(crate) fn records_heap_bytes(&self) -> usize {
        let records: usize = self
            .records
            .iter()
            .map(|r| memory::vec(&r.reliable) + memory::vec(&r.unreliable_receipts))
            .sum();
        memory::deque(&self.records) + records
    }

    /// Give back capacity a burst left behind (see [`crate::memory`]).
    pub(crate) fn trim(&mut self) {
        memory::trim_deque(&mut self.records);
        memory::trim_map(&mut self.frames);
        memory::trim_deque(&mut self.resend);
        memory::trim_map(&mut self.receipts);
    }

    /// Records of datagrams kept (in flight, or lost and kept for a late ACK).
    pub(crate) fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Datagram bytes the peer has acknowledged so far.
    pub(crate) fn delivered_bytes(&self) -> u64 {
        self.delivered
    }

    /// Reliable frames sent and not yet acknowledged.
    pub(crate) fn reliable_in_flight(&self) -> usize {
        self.frames.len()
    }

    /// Datagram records kept.
    #[cfg(test)]
    pub(crate) fn records(&self) -> usize {
        self.records.len()
    }

    pub(crate) fn has_resends(&self) -> bool {
        !self.resend.is_empty()
    }

    /// Start tracking a receipt that resolves after `parts` fragments are acknowledged.
    pub(crate) fn expect_receipt(&mut self, id: ReceiptId, parts: u32) {
        self.receipts.insert(id, parts);
    }

    /// Report a receipt as lost, if it is still outstanding.
    pub(crate) fn lose_receipt(&mut self, id: ReceiptId, out: &mut Vec<ReceiptOutcome>) {
        if self.receipts.remove(&id).is_some() {
            out.push(ReceiptOutcome::Lost(id));
        }
    }

    fn ack_part(&mut self, id: ReceiptId, out: &mut Vec<ReceiptOutcome>) {
        if let Some(left) = self.receipts.get_mut(&id) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.receipts.remove(&id);
                out.push(ReceiptOutcome::Acked(id));
            }
        }
    }

    /// The next frame due for resending, with its receipt, skipping frames that were
    /// acknowledged meanwhile.
    pub(crate) fn peek_resend(&mut self) -> Option<&Frame> {
        while let Some(idx) = self.resend.front() {
            if self.frames.contains_key(&idx.get()) {
                return self.frames.get(&idx.get()).map(|f| &f.frame);
            }
            self.resend.pop_front();
        }
        None
    }

    /// Take the frame [`Self::peek_resend`] returned; it is now carried by `carrier`.
    pub(crate) fn take_resend(&mut self, carrier: DatagramSeq) -> Option<Frame> {
        let idx = self.resend.pop_front()?;
        let f = self.frames.get_mut(&idx.get())?;
        f.carrier = carrier;
        self.counters.resends += 1;
        Some(f.frame.clone())
    }

    /// Record a sent datagram.
    pub(crate) fn on_sent(&mut self, sent: Sent) {
        let Sent {
            seq,
            at: now,
            bytes,
            new_reliable,
            resent,
            unreliable_receipts,
            app_limited,
        } = sent;
        if self.bytes_in_flight == 0 {
            // A new sampling interval starts with the first datagram after an idle period.
            self.first_sent_at = Some(now);
            self.delivered_at = Some(now);
        }
        self.last_sent_at = Some(now);
        let mut reliable = resent;
        for (frame, receipt) in new_reliable {
            let idx = frame.message_index;
            self.unacked_payload += frame.payload.len() + Limits::SEND_OVERHEAD;
            self.frames.insert(
                idx.get(),
                InFlight {
                    frame,
                    receipt,
                    carrier: seq,
                },
            );
            reliable.push(idx);
        }
        self.bytes_in_flight += bytes;
        self.records.push_back(Record {
            seq,
            sent_at: now,
            bytes,
            reliable,
            unreliable_receipts,
            resolved: false,
            lost_by_order: false,
            app_limited,
            prior_delivered: self.delivered,
            delivered_at: self.delivered_at.unwrap_or(now),
            first_sent_at: self.first_sent_at.unwrap_or(now),
        });
    }

    /// The numbers of `range` this flight keeps a record of, as at most two runs
    /// `(first, count)` (two when the range wraps past 2^24 back into the records). An ACK or
    /// NAK walks only these: its cost is bounded by what is in flight, not by its width.
    pub(crate) fn known_runs(&self, range: AckRange) -> [Option<(DatagramSeq, u32)>; 2] {
        let Some(first) = self.records.front().map(|r| r.seq) else {
            return [None, None];
        };
        let kept = self.records.len() as u64;
        let n = u64::from(range.len());
        let offset = u64::from(range.start.distance_from(first));
        // The run [a, b) of offsets from `first`, clipped to the records.
        let clip = |a: u64, b: u64| {
            let (a, b) = (a.min(kept), b.min(kept));
            (a < b).then(|| (first.wrapping_add(a as u32), (b - a) as u32))
        };
        let modulus = u64::from(U24_MODULUS);
        [
            clip(offset, offset + n),
            (offset + n > modulus)
                .then(|| clip(0, offset + n - modulus))
                .flatten(),
        ]
    }

    fn record_index(&self, seq: DatagramSeq) -> Option<usize> {
        let first = self.records.front()?.seq;
        let i = seq.distance_from(first) as usize;
        (i < self.records.len()).then_some(i)
    }

    /// Handle an acknowledgement of datagram `seq`.
    pub(crate) fn on_ack(
        &mut self,
        seq: DatagramSeq,
        now: Instant,
        rtt: &mut RttEstimator,
        cc: &mut dyn Controller,
        out: &mut Vec<ReceiptOutcome>,
    ) {
        let Some(i) = self.record_index(seq) else {
            return;
        };
        let r = &mut self.records[i];
        if r.resolved {
            // A late ACK after the datagram was declared lost still frees its frames.
            if std::mem::take(&mut r.lost_by_order) {
                self.counters.reordered += 1;
                self.reorder_quarters =
                    (self.reorder_quarters.max(1) + 1).min(MAX_REORDER_QUARTERS);
                self.reorder_calm = 0;
            }
            let reliable = std::mem::take(&mut r.reliable);
            self.free_frames(&reliable, out);
            self.pop_resolved();
            return;
        }
        r.resolved = true;
        let (bytes, app_limited, sent_at) = (r.bytes, r.app_limited, r.sent_at);
        let reliable = std::mem::take(&mut r.reliable);
        let receipts = std::mem::take(&mut r.unreliable_receipts);
        self.bytes_in_flight -= bytes;
        self.counters.acked_datagrams += 1;
        self.delivered += bytes as u64;
        self.delivered_at = Some(now);
        self.last_ack_at = Some(now);
        self.probed = false;
        let send_elapsed = sent_at.saturating_duration_since(r.first_sent_at);
        let ack_elapsed = now.saturating_duration_since(r.delivered_at);
        let sample = DeliverySample {
            now,
            rtt: now.saturating_duration_since(sent_at),
            bytes,
            delivered: self.delivered,
            prior_delivered: r.prior_delivered,
            interval: send_elapsed.max(ack_elapsed),
            app_limited,
            bytes_in_flight: self.bytes_in_flight,
        };
        self.first_sent_at = Some(sent_at);
        if self.newest_acked_sent_at.is_none_or(|t| t < sent_at) {
            self.newest_acked_sent_at = Some(sent_at);
        }
        rtt.update(sample.rtt);
        cc.on_ack(seq, bytes, app_limited);
        cc.on_delivery(&sample);
        self.free_frames(&reliable, out);
        for id in receipts {
            self.ack_part(id, out);
        }
        self.pop_resolved();
    }

    fn free_frames(&mut self, reliable: &[MessageIndex], out: &mut Vec<ReceiptOutcome>) {
        for idx in reliable {
            if let Some(f) = self.frames.remove(&idx.get()) {
                self.unacked_payload -= f.frame.payload.len() + Limits::SEND_OVERHEAD;
                if let Some(id) = f.receipt {
                    self.ack_part(id, out);
                }
            }
        }
    }

    /// Declare lost every unresolved datagram sent before the newest one acknowledged and at
    /// least `threshold` ago (RACK's rule, RFC 8985: a later datagram got through, and this
    /// one had the time it needed plus a reordering allowance). The peer's NAK normally says
    /// so first; this covers a NAK that was itself lost, and peers that never send NAKs,
    /// which would otherwise wait for the retransmission timeout (and its collapse of the
    /// window). Counted as a NAK-reported loss for congestion control.
    pub(crate) fn detect_lost(
        &mut self,
        now: Instant,
        threshold: Duration,
        cc: &mut dyn Controller,
        out: &mut Vec<ReceiptOutcome>,
    ) {
        let Some(newest) = self.newest_acked_sent_at else {
            return;
        };
        let mut lost = false;
        for i in self.unresolved_from..self.records.len() {
            let r = &self.records[i];
            // Records are in sending order: the rest were sent later still, or too recently.
            if r.sent_at >= newest || r.sent_at + threshold > now {
                break;
            }
            if !r.resolved {
                self.counters.lost_by_order += 1;
                self.records[i].lost_by_order = true;
                self.lose(i, cc, CongestionEvent::Nak, out);
                lost = true;
            }
        }
        if lost {
            self.pop_resolved();
            self.reorder_calm += 1;
            if self.reorder_calm >= REORDER_PERSIST {
                self.reorder_calm = 0;
                self.reorder_quarters = 1;
            }
        }
    }

    /// Handle a NAK of datagram `seq`: its reliable frames are resent at once, unless it was
    /// sent less than `min_age` ago. A genuine NAK cannot come back sooner than about a
    /// round trip, so a younger one is forged or confused; it is ignored (and counted), and
    /// the datagram stays in flight for its ACK or RTO. Since every resend travels in a
    /// new, young datagram, a NAK storm resends each frame at most once per `min_age`.
    pub(crate) fn on_nak(
        &mut self,
        seq: DatagramSeq,
        now: Instant,
        min_age: Duration,
        cc: &mut dyn Controller,
        out: &mut Vec<ReceiptOutcome>,
    ) {
        let Some(i) = self.record_index(seq) else {
            return;
        };
        self.counters.naks_received += 1;
        let r = &self.records[i];
        if !r.resolved && now.saturating_duration_since(r.sent_at) < min_age {
            self.counters.naks_ignored += 1;
            return;
        }
        self.lose(i, cc, CongestionEvent::Nak, out);
        self.pop_resolved();
    }

    fn lose(
        &mut self,
        i: usize,
        cc: &mut dyn Controller,
        event: CongestionEvent,
        out: &mut Vec<ReceiptOutcome>,
    ) {
        let r = &mut self.records[i];
        if r.resolved {
            return;
        }
        r.resolved = true;
        let seq = r.seq;
        self.bytes_in_flight -= r.bytes;
        self.counters.lost_datagrams += 1;
        let receipts = std::mem::take(&mut r.unreliable_receipts);
        // Keep `reliable` so that a late ACK can still free the frames.
        for idx in &r.reliable {
            if self
                .frames
                .get(&idx.get())
                .is_some_and(|f| f.carrier == seq)
            {
                self.resend.push_back(*idx);
            }
        }
        let bytes = r.bytes;
        cc.on_congestion_event(seq, event);
        cc.on_lost(seq, bytes);
        for id in receipts {
            self.lose_receipt(id, out);
        }
    }

    /// Drop resolved records from the front: acknowledged ones at once, lost ones once none
    /// of their reliable frames is still unacknowledged (a late ACK of them would free
    /// nothing), or once more than [`KEEP_LOST`] records are kept.
    ///
    /// A lost record whose frames were all acknowledged through their resends must go too:
    /// kept, it held every record behind it until [`KEEP_LOST`] piled up, about 100 KB per
    /// connection under steady loss (issue #12).
    fn pop_resolved(&mut self) {
        while let Some(r) = self.records.front() {
            let awaits_late_ack = || {
                r.reliable
                    .iter()
                    .any(|i| self.frames.contains_key(&i.get()))
            };
            if !r.resolved || (self.records.len() <= KEEP_LOST && awaits_late_ack()) {
                break;
            }
            self.records.pop_front();
            self.unresolved_from = self.unresolved_from.saturating_sub(1);
        }
        while self
            .records
            .get(self.unresolved_from)
            .is_some_and(|r| r.resolved)
        {
            self.unresolved_from += 1;
        }
    }

    /// Declare lost every datagram unacknowledged for `rto`.
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        rto: Duration,
        cc: &mut dyn Controller,
        out: &mut Vec<ReceiptOutcome>,
    ) {
        let overflow = self.records.len().saturating_sub(MAX_RECORDS);
        // Records before `unresolved_from` are resolved already: `lose` would skip them.
        for i in self.unresolved_from..self.records.len() {
            if i >= overflow && self.records[i].sent_at + rto > now {
                break;
            }
            // A datagram whose reliable frames all got through in another one (a tail-loss
            // probe, a resend) was a loss already repaired, as if NAKed: not a dead path.
            let r = &self.records[i];
            let repaired = !r.reliable.is_empty()
                && r.unreliable_receipts.is_empty()
                && r.reliable
                    .iter()
                    .all(|i| !self.frames.contains_key(&i.get()));
            let event = if repaired {
                CongestionEvent::Nak
            } else {
                CongestionEvent::Timeout
            };
            self.lose(i, cc, event, out);
        }
        self.pop_resolved();
    }

    /// When a tail-loss probe is due, `pto` after the later of the last datagram sent and the
    /// last acknowledgement: while a datagram is unresolved and no probe was sent since the
    /// last acknowledgement. `None` otherwise.
    pub(crate) fn probe_deadline(&self, pto: Duration) -> Option<Instant> {
        if self.probed || self.frames.is_empty() {
            return None;
        }
        self.records.get(self.unresolved_from)?;
        let last = match (self.last_sent_at, self.last_ack_at) {
            (Some(s), Some(a)) => s.max(a),
            (s, a) => s.or(a)?,
        };
        Some(last + pto)
    }

    /// Tail-loss probe: queue the reliable frames of the newest unresolved datagram that
    /// still carries any, first in line for resending. When the last datagrams of a burst are
    /// lost, nothing later arrives to make the receiver NAK them; the probe does (its number
    /// reveals the gap), and carries the newest frames itself. At most one probe per
    /// acknowledgement. Returns whether frames were queued.
    pub(crate) fn queue_probe(&mut self) -> bool {
        self.probed = true;
        let frames = &self.frames;
        let newest = self
            .records
            .range(self.unresolved_from..)
            .rev()
            .find_map(|r| {
                let live: Vec<MessageIndex> = r
                    .reliable
                    .iter()
                    .copied()
                    .filter(|i| frames.get(&i.get()).is_some_and(|f| f.carrier == r.seq))
                    .collect();
                (!r.resolved && !live.is_empty()).then_some(live)
            });
        let Some(live) = newest else { return false };
        for idx in live.into_iter().rev() {
            self.resend.push_front(idx);
        }
        true
    }

    /// When the oldest unresolved datagram expires.
    pub(crate) fn next_expiry(&self, rto: Duration) -> Option<Instant> {
        // `pop_resolved` (run after every change) leaves the cursor on an unresolved record.
        let first = self.records.get(self.unresolved_from)?;
        debug_assert!(!first.resolved);
        Some(first.sent_at + rto)
    }

    /// Report every outstanding receipt as lost and forget everything (on close).
    pub(crate) fn close(&mut self, out: &mut Vec<ReceiptOutcome>) {
        let mut ids: Vec<_> = self.receipts.drain().map(|(id, _)| id).collect();
        ids.sort();
        out.extend(ids.into_iter().map(ReceiptOutcome::Lost));
        self.records.clear();
        self.unresolved_from = 0;
        self.frames.clear();
        self.resend.clear();
        self.bytes_in_flight = 0;
        self.unacked_payload = 0;
    }

    /// Whether every reliable frame has been acknowledged.
    pub(crate) fn all_acked(&self) -> bool {
        self.frames.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::congestion::SlidingWindow;
    use crate::reliability::Reliability;
    use bytes::Bytes;

    fn sent(
        seq: u32,
        at: Instant,
        new_reliable: Vec<(Frame, Option<ReceiptId>)>,
        resent: Vec<MessageIndex>,
        unreliable_receipts: Vec<ReceiptId>,
    ) -> Sent {
        Sent {
            seq: DatagramSeq::new(seq),
            at,
            bytes: 100,
            new_reliable,
            resent,
            unreliable_receipts,
            app_limited: false,
        }
    }

    fn reliable(i: u32) -> Frame {
        let mut f = Frame::new(Reliability::Reliable, Bytes::from_static(b"x"));
        f.message_index = MessageIndex::new(i);
        f
    }

    /// A fresh RTT estimator, a window of 1 MiB and an empty receipt list.
    fn estimators() -> (RttEstimator, SlidingWindow, Vec<ReceiptOutcome>) {
        (
            RttEstimator::new(),
            SlidingWindow::new(1400, 1 << 20),
            Vec::new(),
        )
    }

    #[test]
    fn a_datagram_overtaken_by_an_acknowledged_one_is_lost_after_the_threshold() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let (mut rtt, mut cc, mut out) = estimators();
        let mut f = Flight::default();
        f.on_sent(sent(0, t, vec![(reliable(0), None)], vec![], vec![]));
        f.on_sent(sent(
            1,
            t + ms(5),
            vec![(reliable(1), None)],
            vec![],
            vec![],
        ));
        f.on_sent(sent(
            2,
            t + ms(30),
            vec![(reliable(2), None)],
            vec![],
            vec![],
        ));
        // Datagram 1 is acknowledged; 0, sent before it, is not (and no NAK comes).
        f.on_ack(DatagramSeq::new(1), t + ms(25), &mut rtt, &mut cc, &mut out);
        f.detect_lost(t + ms(25), ms(30), &mut cc, &mut out);
        assert!(!f.has_resends(), "lost before its threshold");
        f.detect_lost(t + ms(31), ms(30), &mut cc, &mut out);
        assert_eq!(f.counters.lost_by_order, 1);
        assert_eq!(f.counters.lost_datagrams, 1);
        assert_eq!(
            f.peek_resend().map(|p| p.message_index),
            Some(MessageIndex::new(0))
        );
        // Datagram 2 was sent after the newest acknowledged one: never judged by order,
        // however long it waits (the probe and the timeout are for it).
        f.detect_lost(t + ms(900), ms(30), &mut cc, &mut out);
        assert_eq!(f.counters.lost_by_order, 1);
        // A late ACK of the lost datagram still frees its frame, and says the path
        // reorders: the allowance widens.
        assert_eq!(f.reorder_quarters, 0);
        f.on_ack(
            DatagramSeq::new(0),
            t + ms(901),
            &mut rtt,
            &mut cc,
            &mut out,
        );
        assert_eq!(f.reliable_in_flight(), 1);
        assert_eq!((f.counters.reordered, f.reorder_quarters), (1, 2));
        // Sixteen losses found by order with no reordering seen: back to one quarter.
        for k in 0..REORDER_PERSIST {
            let (lost, acked) = (3 + 2 * k, 4 + 2 * k);
            let at = t + ms(1_000 + 100 * u64::from(k));
            f.on_sent(sent(lost, at, vec![(reliable(lost), None)], vec![], vec![]));
            f.on_sent(sent(
                acked,
                at + ms(1),
                vec![(reliable(acked), None)],
                vec![],
                vec![],
            ));
            f.on_ack(
                DatagramSeq::new(acked),
                at + ms(20),
                &mut rtt,
                &mut cc,
                &mut out,
            );
            f.detect_lost(at + ms(40), ms(30), &mut cc, &mut out);
        }
        // (Datagram 2, overtaken now, is found lost in the first of them too.)
        assert_eq!(f.counters.lost_by_order, 2 + u64::from(REORDER_PERSIST));
        assert_eq!(f.reorder_quarters, 1);
    }

    #[test]
    fn ack_frees_frames_and_fires_receipts_once() {
        let t = Instant::now();
        let (mut rtt, mut cc, mut out) = estimators();
        let mut f = Flight::default();
        f.expect_receipt(ReceiptId(1), 2);
        f.on_sent(sent(
            0,
            t,
            vec![(reliable(0), Some(ReceiptId(1)))],
            vec![],
            vec![],
        ));
        f.on_sent(sent(
            1,
            t,
            vec![(reliable(1), Some(ReceiptId(1)))],
            vec![],
            vec![],
        ));
        assert_eq!(f.bytes_in_flight, 200);
        f.on_ack(
            DatagramSeq::new(0),
            t + Duration::from_millis(50),
            &mut rtt,
            &mut cc,
            &mut out,
        );
        assert!(out.is_empty());
        f.on_ack(
            DatagramSeq::new(1),
            t + Duration::from_millis(50),
            &mut rtt,
            &mut cc,
            &mut out,
        );
        f.on_ack(
            DatagramSeq::new(1),
            t + Duration::from_millis(60),
            &mut rtt,
            &mut cc,
            &mut out,
        );
        assert_eq!(out, [ReceiptOutcome::Acked(ReceiptId(1))]);
        assert_eq!(
            (f.bytes_in_flight, f.reliable_in_flight(), f.records()),
            (0, 0, 0)
        );
        assert_eq!(rtt.latest(), Duration::from_millis(50));
    }

    #[test]
    fn nak_and_timeout_queue_resends_and_lose_unreliable_receipts() {
        let t = Instant::now();
        let (mut rtt, mut cc, mut out) = estimators();
        let mut f = Flight::default();
        f.expect_receipt(ReceiptId(9), 1);
        f.on_sent(sent(
            0,
            t,
            vec![(reliable(0), None)],
            vec![],
            vec![ReceiptId(9)],
        ));
        f.on_sent(sent(1, t, vec![(reliable(1), None)], vec![], vec![]));
        f.on_nak(DatagramSeq::new(0), t, Duration::ZERO, &mut cc, &mut out);
        assert_eq!(out, [ReceiptOutcome::Lost(ReceiptId(9))]);
        assert_eq!(
            f.peek_resend().map(|fr| fr.message_index),
            Some(MessageIndex::new(0))
        );
        let resent = f.take_resend(DatagramSeq::new(2)).unwrap();
        f.on_sent(sent(2, t, vec![], vec![resent.message_index], vec![]));
        // Datagrams 1 and 2 time out; frame 1 is queued for resend (frame 0 already is
        // carried by datagram 2, whose loss queues it again).
        f.on_timeout(
            t + Duration::from_secs(3),
            Duration::from_secs(2),
            &mut cc,
            &mut out,
        );
        assert_eq!(f.counters.lost_datagrams, 3);
        assert_eq!(
            f.peek_resend().map(|fr| fr.message_index),
            Some(MessageIndex::new(1))
        );
        // A late ACK of datagram 1 still frees its frame, so its resend is skipped.
        f.on_ack(
            DatagramSeq::new(1),
            t + Duration::from_secs(3),
            &mut rtt,
            &mut cc,
            &mut out,
        );
        assert_eq!(f.reliable_in_flight(), 1);
        assert_eq!(
            f.peek_resend().map(|fr| fr.message_index),
            Some(MessageIndex::new(0))
        );
        f.close(&mut out);
        assert_eq!(out.len(), 1, "no receipt reported twice");
    }

    #[test]
    fn ack_ranges_are_clipped_to_the_records() {
        let t = Instant::now();
        let mut f = Flight::default();
        let r = |a: u32, b: u32| AckRange {
            start: DatagramSeq::new(a),
            end: DatagramSeq::new(b),
        };
        assert_eq!(f.known_runs(r(0, 8191)), [None, None], "nothing sent");
        let top = DatagramSeq::MAX.get();
        for i in 0..10 {
            let seq = (top - 4 + i) % U24_MODULUS;
            f.on_sent(sent(seq, t, vec![], vec![], vec![]));
        }
        let d = DatagramSeq::new;
        // Records: top-4 ..= top, 0 ..= 4.
        assert_eq!(f.known_runs(r(0, 8191)), [Some((d(0), 5)), None]);
        assert_eq!(f.known_runs(r(top - 1, 1)), [Some((d(top - 1), 4)), None]);
        assert_eq!(f.known_runs(r(100, 200)), [None, None]);
        assert_eq!(f.known_runs(r(top - 100, top - 50)), [None, None]);
        assert_eq!(
            f.known_runs(r(top - 2, top - 2)),
            [Some((d(top - 2), 1)), None]
        );
        // All 2^24 numbers, starting inside the records: the tail, then the head.
        assert_eq!(
            f.known_runs(r(2, 1)),
            [Some((d(2), 3)), Some((d(top - 4), 7))]
        );
        // All 2^24 numbers, starting after them: the wrap brings the range back.
        assert_eq!(f.known_runs(r(10, 9)), [None, Some((d(top - 4), 10))]);
    }

    #[test]
    fn timers_start_after_the_lost_records_kept_for_late_acks() {
        let t = Instant::now();
        let rto = Duration::from_millis(100);
        let (mut rtt, mut cc, mut out) = estimators();
        let mut f = Flight::default();
        for i in 0..10 {
            f.on_sent(sent(i, t, vec![(reliable(i), None)], vec![], vec![]));
        }
        // 0-3 are lost and kept (their frames may still be ACKed late); 5 is ACKed out of order.
        for i in 0..4 {
            f.on_nak(DatagramSeq::new(i), t, Duration::ZERO, &mut cc, &mut out);
        }
        f.on_ack(DatagramSeq::new(5), t, &mut rtt, &mut cc, &mut out);
        assert_eq!(f.records(), 10);
        assert_eq!(f.unresolved_from, 4);
        assert_eq!(f.next_expiry(rto), Some(t + rto));
        // A later datagram: only 4 and 6-9 expire at t + rto, not the new one.
        let later = t + Duration::from_millis(50);
        f.on_sent(sent(10, later, vec![(reliable(10), None)], vec![], vec![]));
        f.on_timeout(t + rto, rto, &mut cc, &mut out);
        assert_eq!(f.counters.lost_datagrams, 4 + 5);
        assert_eq!(f.unresolved_from, 10);
        assert_eq!(f.next_expiry(rto), Some(later + rto));
        // ACKing the last one leaves nothing to time.
        f.on_ack(DatagramSeq::new(10), later, &mut rtt, &mut cc, &mut out);
        assert_eq!(f.next_expiry(rto), None);
    }

    #[test]
    fn a_lost_record_goes_once_its_frames_are_acked_through_resends() {
        let t = Instant::now();
        let (mut rtt, mut cc, mut out) = estimators();
        let mut f = Flight::default();
        // Steady loss: every fourth datagram is NAKed, its frame resent and acknowledged.
        let mut seq = 0;
        for i in 0..2000 {
            f.on_sent(sent(seq, t, vec![(reliable(i), None)], vec![], vec![]));
            if i % 4 == 0 {
                f.on_nak(DatagramSeq::new(seq), t, Duration::ZERO, &mut cc, &mut out);
                seq += 1;
                let resent = f.take_resend(DatagramSeq::new(seq)).unwrap();
                f.on_sent(sent(seq, t, vec![], vec![resent.message_index], vec![]));
            }
            f.on_ack(DatagramSeq::new(seq), t, &mut rtt, &mut cc, &mut out);
            seq += 1;
            assert_eq!(f.records(), 0, "after datagram {seq}");
        }
        // A lost record whose frame is still unacknowledged stays for a late ACK.
        f.on_sent(sent(seq, t, vec![(reliable(5000), None)], vec![], vec![]));
        f.on_sent(sent(
            seq + 1,
            t,
            vec![(reliable(5001), None)],
            vec![],
            vec![],
        ));
        f.on_nak(DatagramSeq::new(seq), t, Duration::ZERO, &mut cc, &mut out);
        f.on_ack(DatagramSeq::new(seq + 1), t, &mut rtt, &mut cc, &mut out);
        assert_eq!(f.records(), 2);
        f.on_ack(DatagramSeq::new(seq), t, &mut rtt, &mut cc, &mut out);
        assert_eq!((f.records(), f.reliable_in_flight()), (0, 0));
    }
}
