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
    /// Our datagrams declared lost (NAK, order or timeout).
    pub datagrams_lost: u64,
    /// Of those, declared lost because later datagrams were acknowledged while no NAK came
    /// for them (a lost NAK, or a peer that does not send NAKs).
    pub datagrams_lost_by_order: u64,
    /// Of those, acknowledged after all: the path reordered them (each widens the
    /// reordering allowance).
    pub datagrams_reordered: u64,
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

/// Endpoint-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Connections currently held (any state).
    pub connections: usize,
    /// Offline messages received.
    pub offline_in: u64,
    /// Unconnected pongs sent.
    pub pongs_sent: u64,
    /// OCR1 refused with 0x19.
    pub incompatible_protocol: u64,
    /// OCR2 refused with 0x14.
    pub refused_full: u64,
    /// OCR2 refused with 0x12.
    pub refused_already_connected: u64,
    /// Datagrams from banned addresses.
    pub banned: u64,
    /// Handshakes between OCR2 and 0x13 held now (records, not connections).
    pub half_open: usize,
    /// Of those, the ones holding a connection slot (told "accepted", their 0x13 awaited):
    /// slots taken that the application sees no connection for yet.
    pub half_open_reserved: usize,
    /// Slots reserved at 0x10 that went back to the group because no 0x13 came within 2 s
    /// (a late 0x13 takes one again if any is free). A reservation is capped: a quarter of
    /// `max_connections` in all, 8 per IP (IPv6: per /64); beyond them a client is accepted
    /// without one and takes its slot at 0x13.
    pub reservations_lapsed: u64,
    /// Half-open handshakes forgotten to make room for newer ones.
    pub half_open_evicted: u64,
    /// OCR2s from an IP (or a wider network) with its share of `max_half_open_per_ip`
    /// handshakes under way: unproven ones there give way, else the newcomer is dropped.
    pub half_open_per_ip_full: u64,
    /// Of those, newcomers dropped because every unproven record there was younger than a
    /// real client's 0x09 may take to come (a burst of players behind one address): their
    /// clients come back with their next OCR1.
    pub half_open_newcomers_waited: u64,
    /// OCR2 refused with 0x14 because its IP had `max_connections_per_ip` connections.
    pub refused_ip_connections: u64,
    /// OCR2 refused with 0x1A: more than `new_connections_per_ip_per_sec` from one IP.
    pub refused_recently_connected: u64,
    /// 0x13 whose echoed server time did not verify (a blind or forged handshake).
    pub bad_echo: u64,
    /// Datagrams from a half-open address that were neither 0x09 nor 0x13, dropped.
    pub handshake_dropped: u64,
    /// Handshakes refused after their OCR2 passed, because the server filled up (or was
    /// suspended) meanwhile: a validated 0x09 answered with 0x14, or a verified 0x13
    /// answered with 0x15.
    pub refused_full_late: u64,
    /// Replies withheld because they would exceed `max_amplification` times what the
    /// unvalidated address sent.
    pub amplification_limited: u64,
    /// OCR1 smaller than `min_mtu` (unpadded), not answered.
    pub ocr1_too_small: u64,
    /// Offline messages not answered for what they are: pings, OCR1 and OCR2 to an endpoint
    /// that accepts no one (a client), "only if open" pings to a full server, and replies
    /// (Reply1/2, refusals) that no handshake of ours asked for, or that carry another GUID
    /// than the server our handshake is talking to.
    pub offline_ignored: u64,
    /// Pings not answered: the source IP exceeded `pongs_per_ip_per_sec`.
    pub pongs_rate_limited: u64,
    /// Pings not answered: the global `pong_bytes_per_sec` budget was spent (the strangers'
    /// one, or the returning players' one for a ping from a player's IP).
    pub pongs_budget_exhausted: u64,
    /// Pongs sent to the IP of a player who completed a handshake here, from the returning
    /// players' own `pong_bytes_per_sec` budget (also counted in `pongs_sent`).
    pub pongs_to_known_ips: u64,
    /// Pings not answered: the pong would exceed `max_amplification` times the ping.
    pub pongs_too_large: u64,
    /// OCR2 with a missing or invalid cookie, dropped.
    pub bad_cookies: u64,
    /// The handshake is strict now: cookies (with [`crate::CookieMode::Auto`]) and echoed
    /// times required (see [`crate::CookieMode`]).
    pub strict: bool,
    /// Times the handshake turned strict.
    pub strict_entered: u64,
    /// Times it turned calm again.
    pub strict_left: u64,
    /// Connections held now whose address nothing proved (no cookie, no echoed time; taken
    /// while calm).
    pub unproven: usize,
    /// Verified 0x13s without proof of address refused (0x15): `max_unproven` or
    /// `max_unproven_per_ip` reached.
    pub refused_unproven: u64,
    /// Connected datagrams from addresses without a connection, dropped.
    pub unknown_peer: u64,
    /// Datagrams that were neither a valid offline message nor connected, dropped.
    pub malformed: u64,
    /// Offline replies dropped because the reply queue was full.
    pub offline_queue_full: u64,
    /// Bytes of peer data all connections buffer now (split reassembly, messages held for
    /// ordering); bounded by [`crate::Limits::max_endpoint_buffered_bytes`]. With an
    /// [`EndpointGroup`](crate::EndpointGroup), the whole group's bytes (every endpoint reports the same total).
    pub buffered_bytes: usize,
    /// Bytes all connections have queued or unacknowledged for sending (with
    /// [`crate::Limits::SEND_OVERHEAD`] per frame); bounded by
    /// [`crate::Limits::max_endpoint_send_bytes`]. With an [`EndpointGroup`](crate::EndpointGroup), the group's.
    pub send_backlog_bytes: usize,
    /// Datagrams offered to the application ([`crate::Event::Raw`]).
    pub raw_offered: u64,
    /// Datagrams for the application dropped over their per-IP or global rate.
    pub raw_rate_limited: u64,
    /// Replies the application sent to offered datagrams.
    pub raw_replies: u64,
    /// Replies refused: nothing offered from that address, or too large.
    pub raw_replies_refused: u64,
    /// What the proxy layer did (all zero without [`crate::EndpointConfig::proxy`]).
    pub proxy: crate::proxy::ProxyStats,
}
