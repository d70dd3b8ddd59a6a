//! Per-connection counters, including every drop reason.

use std::time::Duration;

/// A snapshot of a connection's counters and state.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ConnectionStats {
    /// Smoothed round-trip time.
    pub srtt: Duration,
    /// Round-trip time variation.
    pub rttvar: Duration,
    /// Current retransmission timeout.
    pub rto: Duration,
    /// Congestion window in bytes.
    pub cwnd: usize,
    /// Bytes sent (UDP payload, all datagrams).
    pub bytes_out: u64,
    /// Bytes received (UDP payload, all datagrams).
    pub bytes_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Messages the application sent.
    pub messages_out: u64,
    /// Messages delivered to the application.
    pub messages_in: u64,
    /// Frames sent again after a NAK or timeout.
    pub resends: u64,
    /// NAKed datagrams reported by the peer.
    pub naks_received: u64,
    /// NAKed numbers ignored: more than an RTT's worth arrived in one RTT, or the datagram
    /// was sent less than half the smallest round trip ago (no genuine NAK comes back that
    /// soon; it stays in flight).
    pub naks_ignored: u64,
    /// Current RTO doublings (non-zero only while the peer never acknowledged anything).
    pub backoff: u32,
    /// Datagram numbers we NAKed.
    pub naks_sent: u64,
    /// Tail-loss probes sent: the newest unacknowledged frames resent after about two
    /// round trips without any acknowledgement, before the retransmission timeout.
    pub tail_probes: u64,
    /// Our datagrams declared lost (NAK or timeout).
    pub datagrams_lost: u64,
    /// Duplicate datagrams or reliable frames received.
    pub duplicates: u64,
    /// Messages older than what was delivered on their channel, dropped.
    pub stale_dropped: u64,
    /// Unreliable messages that waited too long to be sent.
    pub expired_unsent: u64,
    /// Datagrams or frames that failed to decode.
    pub malformed: u64,
    /// Frames refused because a receive limit was reached (left unacknowledged).
    pub refused_over_limit: u64,
    /// Reliable frames refused while the application had receiving paused (back-pressure:
    /// left unacknowledged, so the peer slows down and sends them again).
    pub refused_paused: u64,
    /// Unreliable messages dropped while the application had receiving paused.
    pub dropped_paused: u64,
    /// Datagrams ignored as implausibly far ahead.
    pub garbage_datagrams: u64,
    /// Datagrams whose number had been seen recently with other content: the peer numbers
    /// anew (rak-rs restarts at 1 after the handshake). Their fresh reliable frames are taken
    /// (see `untrusted_dropped`). Copies are duplicates.
    pub reused_datagram_numbers: u64,
    /// Datagrams further behind the highest number than duplicate detection reaches: their
    /// reliable frames with fresh message indexes are taken (see `untrusted_dropped`).
    pub far_behind_datagrams: u64,
    /// Data datagrams far ahead of the highest number and not (yet) confirmed by a second
    /// one after them: taken as far-behind ones are, without moving the window.
    pub provisional_datagrams: u64,
    /// Unreliable frames dropped because their datagram was reused, far behind or
    /// provisional: only fresh reliable frames are taken from those (a forger who knows no
    /// counter cannot speak for the peer, or close it, with an unreliable frame).
    pub untrusted_dropped: u64,
    /// ACK/NAK numbers not walked: numbers we never sent (or resolved long ago), and any
    /// beyond `max_ack_numbers` per ACK/NAK.
    pub ack_numbers_ignored: u64,
    /// ACKs and NAKs ignored whole because a range holds a number we never sent (no peer
    /// acknowledges those; a forger acknowledging everything to stop our resends does).
    pub forged_acks: u64,
    /// Messages with an internal ID we do not handle, dropped.
    pub unknown_internal: u64,
    /// Frames queued for sending.
    pub send_queue_frames: usize,
    /// Bytes queued for sending, as the send budget counts them: payload plus 128 per frame
    /// ([`Limits::SEND_OVERHEAD`](crate::Limits::SEND_OVERHEAD)).
    pub send_queue_bytes: usize,
    /// Reliable frames sent and not yet acknowledged.
    pub reliable_in_flight: usize,
    /// Bytes in datagrams not yet acknowledged.
    pub bytes_in_flight: usize,
    /// Records of datagrams sent kept now: in flight, and lost ones kept for a late ACK (at
    /// most 512 of those).
    pub datagram_records: usize,
    /// Bytes held in split reassembly, as the receive budgets count them: payload plus a
    /// fixed 128 bytes per fragment (its bookkeeping).
    pub reassembly_bytes: usize,
    /// Messages held for ordering, over all channels.
    pub held_for_ordering: usize,
    /// Bytes of the messages held for ordering, over all channels, counted as
    /// [`reassembly_bytes`](Self::reassembly_bytes) are (payload plus 128 per message).
    pub held_bytes: usize,
    /// Partial split messages dropped after their first missing fragment stayed missing for
    /// the timeout.
    pub splits_expired: u64,
    /// Closed because a gap in the peer's reliable data (a channel's next ordering index, a
    /// split message's first missing fragment) stayed open for the timeout
    /// ([`crate::Limit::Stalled`]).
    pub stalled_gaps: u64,
    /// Closed because the peer stopped reading ([`crate::Limit::SendBacklog`]).
    pub send_stalled: u64,
    /// Connected pings not answered: the peer pinged faster than the pong budget.
    pub pongs_dropped: u64,
}
