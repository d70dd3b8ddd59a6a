//! A hostile peer cannot push memory past any limit, hang the engine, or crash it.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn pair() -> (Pair, ConnId) {
    let mut p = Pair::new(
        1,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    let (_, s) = p.connect();
    (p, s)
}

/// A data datagram numbered `seq` holding `frames`, as the client would send it.
fn datagram(seq: u32, frames: &[Frame]) -> Bytes {
    let mut out = Vec::new();
    DataHeader::new(DatagramSeq::new(seq)).encode(&mut out);
    for f in frames {
        f.encode(&mut out);
    }
    out.into()
}

fn split_frame(index: u32, id: u16, part: u32, count: u32, len: usize) -> Frame {
    let mut f = Frame::new(Reliability::Reliable, Bytes::from(vec![0x86; len]));
    f.message_index = MessageIndex::new(index);
    f.split = Some(SplitHeader {
        count,
        id,
        index: part,
    });
    f
}

/// Hand `d` to the server as if the client sent it; replies go out on the next step.
fn inject(p: &mut Pair, d: Bytes) {
    p.server.handle(p.now, p.client_addr, d);
    while let Some(e) = p.server.poll_event() {
        p.server_events.push(e);
    }
}

fn server_reason(p: &Pair) -> Option<DisconnectReason> {
    p.server_events.iter().find_map(|e| match e {
        Event::Disconnected { reason, .. } => Some(*reason),
        _ => None,
    })
}

#[test]
fn split_count_over_the_limit_disconnects() {
    let (mut p, _) = pair();
    let parts = Limits::default().max_split_parts + 1;
    inject(&mut p, datagram(100, &[split_frame(100, 1, 0, parts, 10)]));
    assert_eq!(
        server_reason(&p),
        Some(DisconnectReason::LimitExceeded(Limit::SplitParts))
    );
    assert_eq!(p.server.stats().connections, 0);
}

#[test]
fn message_bytes_over_the_limit_disconnects() {
    let limits = Limits {
        max_message_bytes: 4000,
        ..Limits::default()
    };
    let cfg = EndpointConfig {
        limits,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(2, cfg, EndpointConfig::default(), LinkConfig::default());
    p.connect();
    for part in 0..3 {
        inject(
            &mut p,
            datagram(100 + part, &[split_frame(100 + part, 9, part, 10, 1400)]),
        );
    }
    assert_eq!(
        server_reason(&p),
        Some(DisconnectReason::LimitExceeded(Limit::MessageBytes))
    );
}

#[test]
fn concurrent_splits_beyond_the_limit_are_refused_and_memory_stays_bounded() {
    let (mut p, s) = pair();
    let limit = Limits::default().max_concurrent_splits;
    for i in 0..(limit as u32 + 50) {
        inject(
            &mut p,
            datagram(100 + i, &[split_frame(100 + i, i as u16, 0, 2, 1000)]),
        );
    }
    let stats = p.server.connection_stats(s).expect("still connected");
    assert_eq!(stats.refused_over_limit, 50);
    assert_eq!(
        stats.reassembly_bytes,
        limit * (1000 + Limits::PIECE_OVERHEAD)
    );
}

#[test]
fn reassembly_bytes_are_bounded() {
    let limits = Limits {
        max_reassembly_bytes: 10 * (1000 + Limits::PIECE_OVERHEAD),
        ..Limits::default()
    };
    let cfg = EndpointConfig {
        limits,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(3, cfg, EndpointConfig::default(), LinkConfig::default());
    let (_, s) = p.connect();
    for i in 0..20 {
        inject(
            &mut p,
            datagram(100 + i, &[split_frame(100 + i, i as u16, 0, 4, 1000)]),
        );
    }
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.reassembly_bytes, 10 * (1000 + Limits::PIECE_OVERHEAD));
    assert_eq!(stats.refused_over_limit, 10);
}

#[test]
fn reliable_index_far_ahead_is_refused() {
    let (mut p, s) = pair();
    let mut f = Frame::new(Reliability::Reliable, Bytes::from_static(b"\x86far"));
    f.message_index = MessageIndex::new(2_000_000);
    inject(&mut p, datagram(100, &[f]));
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.refused_over_limit, 1);
    assert!(!p
        .server_events
        .iter()
        .any(|e| matches!(e, Event::Message { .. })));
}

#[test]
fn held_out_of_order_messages_are_bounded_per_channel() {
    let limits = Limits {
        max_held_per_channel: 100,
        ..Limits::default()
    };
    let cfg = EndpointConfig {
        limits,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(4, cfg, EndpointConfig::default(), LinkConfig::default());
    let (_, s) = p.connect();
    // Ordering index 0 on channel 7 never comes; 1..=150 do.
    for i in 1..=150u32 {
        let mut f = Frame::new(
            Reliability::ReliableOrdered,
            Bytes::from_static(b"\x86held"),
        );
        f.message_index = MessageIndex::new(100 + i);
        f.order_index = OrderIndex::new(i);
        f.order_channel = 7;
        inject(&mut p, datagram(100 + i, &[f]));
    }
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.held_for_ordering, 100);
    assert_eq!(stats.refused_over_limit, 50);
}

/// Have the server send one reliable message now (it goes out on the link) and return the
/// number of the datagram that carried it: the newest it has sent.
fn newest_sent(p: &mut Pair, s: ConnId) -> u32 {
    p.server
        .send(
            p.now,
            s,
            Bytes::from_static(b"\x86"),
            SendOptions::new(Reliability::Reliable),
        )
        .unwrap();
    let mut buf = Vec::new();
    let mut newest = None;
    while let Some(t) = p.server.poll_transmit(p.now, &mut buf) {
        if let Ok(Datagram::Data { header, .. }) =
            Datagram::decode(Bytes::copy_from_slice(&buf[..t.size]), false)
        {
            newest = Some(header.seq.get());
        }
        p.s2c.send(p.now, buf[..t.size].to_vec());
    }
    newest.expect("a data datagram")
}

#[test]
fn huge_ack_ranges_are_walked_only_up_to_the_limit() {
    let (mut p, s) = pair();
    let newest = newest_sent(&mut p, s);
    // The handshake's own ACK of the stateless 0x10 (no record) may already count.
    let before = p.server.connection_stats(s).unwrap();
    // Ranges over the half of the number space behind the newest datagram sent (ranges do
    // not wrap on the wire; the server's numbers are still small): nothing there is unsent,
    // so the ACK is taken, and walked only where records are kept.
    assert!(newest < 1000);
    let behind = AckRange {
        start: DatagramSeq::new(newest + (1 << 23) + 1),
        end: DatagramSeq::MAX,
    };
    let ack = Ack {
        timestamp: None,
        arrival_rate: None,
        ranges: vec![behind; 100],
    };
    inject(&mut p, Bytes::from(ack.to_vec()));
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.forged_acks, before.forged_acks);
    let sent = stats.datagrams_out;
    let total = 100 * u64::from(behind.len());
    let ignored = stats.ack_numbers_ignored - before.ack_numbers_ignored;
    assert!(
        (total - 100 * sent..=total).contains(&ignored),
        "{ignored} ignored of {total}, {sent} sent"
    );
}

/// Issue #11 item 2: an ACK walks only the numbers in flight, whatever its ranges' width
/// (it walked up to `max_ack_numbers`, 8 192 steps per 10-byte ACK).
#[test]
fn an_ack_walks_only_what_is_in_flight() {
    let (mut p, s) = pair();
    let newest = newest_sent(&mut p, s);
    let before = p.server.connection_stats(s).unwrap();
    let ack = Ack {
        timestamp: None,
        arrival_rate: None,
        ranges: vec![
            AckRange {
                start: DatagramSeq::ZERO,
                end: DatagramSeq::new(newest),
            },
            AckRange {
                start: DatagramSeq::new(newest + (1 << 23) + 1),
                end: DatagramSeq::new(newest + (1 << 23) + 8192),
            },
        ],
    };
    inject(&mut p, Bytes::from(ack.to_vec()));
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.forged_acks, before.forged_acks);
    let walked =
        u64::from(newest) + 8193 - (stats.ack_numbers_ignored - before.ack_numbers_ignored);
    assert!(
        walked <= stats.datagrams_out,
        "walked {walked} numbers, sent {} datagrams",
        stats.datagrams_out
    );
}

/// Issue #29: a forged ACK covering every number (a blind forger's only way to reach what is
/// in flight) made lost data never be resent. An ACK or NAK holding a number not sent yet is
/// ignored whole and counted; the lost message is resent and arrives.
#[test]
fn an_ack_reaching_numbers_never_sent_is_ignored_whole() {
    let (mut p, s) = pair();
    p.drive_until(Duration::from_millis(500), |_| false);
    let before = p.server.connection_stats(s).unwrap();
    p.server
        .send(
            p.now,
            s,
            Bytes::from_static(b"\x86lost"),
            SendOptions::new(Reliability::Reliable),
        )
        .unwrap();
    // The first transmission is lost.
    let mut buf = Vec::new();
    while p.server.poll_transmit(p.now, &mut buf).is_some() {}
    for ranges in [
        vec![AckRange {
            start: DatagramSeq::ZERO,
            end: DatagramSeq::MAX,
        }],
        // Every number but in two ranges, as a forger tiling the space would.
        vec![
            AckRange {
                start: DatagramSeq::ZERO,
                end: DatagramSeq::new(1 << 23),
            },
            AckRange {
                start: DatagramSeq::new((1 << 23) + 1),
                end: DatagramSeq::MAX,
            },
        ],
    ] {
        let ack = Ack {
            timestamp: None,
            arrival_rate: None,
            ranges: ranges.clone(),
        };
        inject(&mut p, Bytes::from(ack.to_vec()));
        inject(&mut p, Bytes::from(Nak { ranges }.to_vec()));
    }
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.forged_acks - before.forged_acks, 4, "{stats:?}");
    assert!(
        stats.bytes_in_flight > 0,
        "the lost datagram is still in flight: {stats:?}"
    );
    assert_eq!(stats.naks_received, before.naks_received, "{stats:?}");
    let arrived = |p: &mut Pair| {
        p.client_events
            .iter()
            .any(|e| matches!(e, Event::Message { payload, .. } if payload.as_ref() == b"\x86lost"))
    };
    assert!(p.drive_until(Duration::from_secs(5), arrived));
    assert!(p.server.connection_stats(s).unwrap().resends > before.resends);
}

/// Issue #11 item 3: a forged NAK over 0..8191 made the sender resend everything in flight.
/// Datagrams sent less than half the smallest round trip ago cannot be NAKed genuinely:
/// such NAKs are ignored and counted, and NAKs for numbers never sent are ignored.
#[test]
fn a_forged_nak_resends_nothing_sent_just_now() {
    let link = LinkConfig {
        delay: Duration::from_millis(20),
        ..LinkConfig::default()
    };
    let mut p = Pair::new(
        3,
        EndpointConfig::default(),
        EndpointConfig::default(),
        link,
    );
    let (c, s) = p.connect();
    // Let the handshake's datagrams be acknowledged: only what is sent below is in flight.
    p.drive_until(Duration::from_millis(500), |_| false);
    for n in 0..20u8 {
        let body = Bytes::from(vec![0x86 + (n % 2); 1000]);
        p.server
            .send(p.now, s, body, SendOptions::new(Reliability::Reliable))
            .unwrap();
    }
    let mut buf = Vec::new();
    let mut sent = 0u64;
    let mut seqs = Vec::new();
    while let Some(t) = p.server.poll_transmit(p.now, &mut buf) {
        if let Ok(Datagram::Data { header, .. }) =
            Datagram::decode(Bytes::copy_from_slice(&buf[..t.size]), false)
        {
            seqs.push(header.seq.get());
        }
        p.s2c.send(p.now, buf[..t.size].to_vec());
        sent += 1;
    }
    assert!(sent > 1);
    let before = p.server.connection_stats(s).unwrap();
    // Everything the server has sent, and nothing beyond (that would be ignored whole).
    let newest = *seqs.iter().max().unwrap();
    let nak = Nak {
        ranges: vec![AckRange {
            start: DatagramSeq::ZERO,
            end: DatagramSeq::new(newest),
        }],
    };
    inject(&mut p, Bytes::from(nak.to_vec()));
    while p.server.poll_transmit(p.now, &mut buf).is_some() {}
    let stats = p.server.connection_stats(s).unwrap();
    // Every datagram just sent stays in flight: none declared lost, no frame resent.
    assert_eq!(stats.naks_ignored, sent, "{stats:?}");
    assert_eq!(stats.datagrams_lost, before.datagrams_lost, "{stats:?}");
    assert_eq!(stats.resends, before.resends, "{stats:?}");
    assert!(
        stats.ack_numbers_ignored - before.ack_numbers_ignored
            >= (u64::from(newest) + 1).saturating_sub(stats.datagrams_out),
        "numbers without a record are ignored: {stats:?}"
    );
    // The messages still arrive, once each.
    assert!(p.drive_until(Duration::from_secs(5), |p| p.client_messages() == 20));
    let _ = c;
}

#[test]
fn garbage_is_counted_and_never_crashes() {
    let (mut p, s) = pair();
    for d in [
        &b"\x84"[..],
        b"\x84\x00\x00",
        b"\x84\x05\x00\x00\x60\xff\xff",
        b"\xc0\xff",
        b"\xa0\x00\x01\x00\xff\xff\xff\x00\x00\x00",
    ] {
        inject(&mut p, Bytes::copy_from_slice(d));
    }
    assert!(p.server.connection_stats(s).unwrap().malformed >= 3);
    // From an unknown address: dropped without a reply.
    let mut buf = Vec::new();
    while p.server.poll_transmit(p.now, &mut buf).is_some() {}
    p.server.handle(
        p.now,
        "127.0.0.1:1".parse().unwrap(),
        Bytes::from_static(b"\x84\x00\x00\x00"),
    );
    assert_eq!(p.server.stats().unknown_peer, 1);
    assert!(p.server.poll_transmit(p.now, &mut buf).is_none());
}

#[test]
fn connection_limit_answers_no_free_incoming_connections() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    // Without cookies, so that a bare OCR2 gets as far as the capacity check (with them it
    // is dropped, and a full server refuses at 0x09: see tests/group.rs).
    let cfg = EndpointConfig {
        limits,
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(5, cfg, EndpointConfig::default(), LinkConfig::default());
    p.connect();
    let ocr2 = OpenConnectionRequest2 {
        cookie: None,
        client_challenge: None,
        server_address: p.server_addr,
        mtu: 1492,
        client_guid: 77,
    };
    let other = "127.0.0.1:40009".parse().unwrap();
    p.server.handle(p.now, other, Bytes::from(ocr2.to_vec()));
    let mut buf = Vec::new();
    p.server.poll_transmit(p.now, &mut buf).unwrap();
    assert_eq!(buf[0], message::id::NO_FREE_INCOMING_CONNECTIONS);
    assert_eq!(p.server.stats().refused_full, 1);
}

#[test]
fn repeated_connection_requests_are_not_answered_again() {
    let (mut p, _) = pair();
    let req = ConnectionRequest {
        client_guid: p.client.guid(),
        time: 1,
        use_security: false,
        password: Bytes::new(),
    };
    for i in 0..20u32 {
        let mut f = Frame::new(Reliability::Reliable, Bytes::from(req.to_vec()));
        f.message_index = MessageIndex::new(100 + i);
        inject(&mut p, datagram(100 + i, &[f]));
    }
    // Everything the server sends in the next second: ACKs and NAKs, but no 0x10
    // (repeating 0x09 must not turn the server into a 0x10 reflector).
    let mut buf = Vec::new();
    let end = p.now + Duration::from_secs(1);
    while p.now < end {
        p.server.handle_timeout(p.now);
        while p.server.poll_transmit(p.now, &mut buf).is_some() {
            if let Ok(d) = Datagram::decode(Bytes::copy_from_slice(&buf), false) {
                for f in d.frames().flatten() {
                    assert_ne!(f.payload[0], message::id::CONNECTION_REQUEST_ACCEPTED);
                }
            }
        }
        p.now += Duration::from_millis(5);
    }
}

/// A message needing more fragments than a peer reassembles (`max_split_parts`, the same on
/// both sides by default) used to be queued, and the peer closed on its first fragment as a
/// violation: at MTU 1492 anything over about 22 MiB killed the connection, although the
/// byte limit is 32 MiB. The send is refused instead.
#[test]
fn a_message_of_more_fragments_than_the_peer_takes_is_refused() {
    let cfg = EndpointConfig {
        limits: Limits {
            max_split_parts: 10,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(6, cfg.clone(), cfg, LinkConfig::default());
    let (c, _) = p.connect();
    let fragment = raknet_proto::max_unsplit_payload(p.client.mtu(c).unwrap());
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    let fits = Bytes::from(vec![0x86; 10 * fragment]);
    assert_eq!(p.client.send(p.now, c, fits, opts), Ok(None));
    let over = Bytes::from(vec![0x86; 10 * fragment + 1]);
    assert_eq!(
        p.client.send(p.now, c, over, opts),
        Err(SendError::TooLarge)
    );
    // The one that fits arrives whole, and the connection stays up.
    assert!(p.drive_until(Duration::from_secs(2), |p| {
        p.server_events
            .iter()
            .any(|e| matches!(e, Event::Message { payload, .. } if payload.len() == 10 * fragment))
    }));
    assert!(p.client.is_connected(c));
}

#[test]
fn send_queue_budget_refuses_with_queue_full() {
    // Three messages of 3000 bytes, three frames each, fit; a fourth does not.
    let limits = Limits {
        max_send_queue_bytes: 3 * (3000 + 3 * Limits::SEND_OVERHEAD) + 1000,
        ..Limits::default()
    };
    let cfg = EndpointConfig {
        limits,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(6, EndpointConfig::default(), cfg, LinkConfig::default());
    let (c, _) = p.connect();
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    let msg = Bytes::from(vec![0x86; 3000]);
    for _ in 0..3 {
        p.client.send(p.now, c, msg.clone(), opts).unwrap();
    }
    assert_eq!(
        p.client.send(p.now, c, msg.clone(), opts),
        Err(SendError::QueueFull)
    );
    // Once the peer acknowledges, there is room again.
    p.drive_until(Duration::from_secs(1), |p| {
        p.client.connection_stats(c).unwrap().send_queue_bytes == 0
    });
    p.drive_until(Duration::from_millis(100), |_| false);
    assert_eq!(p.client.send(p.now, c, msg, opts), Ok(None));
    assert_eq!(
        p.client.send(p.now, c, Bytes::new(), opts),
        Err(SendError::Empty)
    );
    let bad_channel = SendOptions {
        channel: 32,
        ..opts
    };
    assert_eq!(
        p.client
            .send(p.now, c, Bytes::from_static(b"\x86"), bad_channel),
        Err(SendError::InvalidChannel)
    );
}

/// Each queued frame counts its record, not only its payload: one-byte messages to a peer
/// that does not keep up held some hundred times the budget.
#[test]
fn the_send_budget_counts_each_frame_s_record() {
    let budget = 100 * (1 + Limits::SEND_OVERHEAD);
    let cfg = EndpointConfig {
        limits: Limits {
            max_send_queue_bytes: budget,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(6, EndpointConfig::default(), cfg, LinkConfig::default());
    let (c, _) = p.connect();
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    let taken = (0..1000)
        .take_while(|_| {
            p.client
                .send(p.now, c, Bytes::from_static(b"\x86"), opts)
                .is_ok()
        })
        .count();
    assert_eq!(taken, 100);
    let stats = p.client.connection_stats(c).unwrap();
    assert_eq!(stats.send_queue_bytes, budget);
}

/// Issue #29/#30: a peer over `max_messages_per_sec` (bursts of twice that) is closed by the
/// engine, before its messages become events: the burst is delivered, then the connection
/// ends with `Limit::MessageRate` and the peer is told (0x15); a peer at the rate stays.
#[test]
fn a_peer_over_the_message_rate_is_closed() {
    let server = EndpointConfig {
        limits: Limits {
            max_messages_per_sec: Some(100),
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(40, server, EndpointConfig::default(), LinkConfig::default());
    let (c, _) = p.connect();
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    // 5 s at 100 a second: every message arrives, the connection stays.
    for _ in 0..500 {
        p.client
            .send(p.now, c, Bytes::from_static(b"\x86at"), opts)
            .unwrap();
        let until = p.now + Duration::from_millis(10);
        p.drive_until(Duration::from_millis(10), |p| p.now >= until);
    }
    assert!(p.drive_until(Duration::from_secs(1), |p| p.server_messages() == 500));
    assert_eq!(server_reason(&p), None);
    // 300 at once: the burst (200) arrives, then the connection ends.
    for _ in 0..300 {
        p.client
            .send(p.now, c, Bytes::from_static(b"\x86fast"), opts)
            .unwrap();
    }
    assert!(
        p.drive_until(Duration::from_secs(5), |p| server_reason(p).is_some()
            && !p.client.is_connected(c))
    );
    assert_eq!(
        server_reason(&p),
        Some(DisconnectReason::LimitExceeded(Limit::MessageRate))
    );
    let fast = p
        .server_events
        .iter()
        .filter(|e| matches!(e, Event::Message { payload, .. } if payload.as_ref() == b"\x86fast"))
        .count();
    assert!((200..=201).contains(&fast), "{fast} delivered");
    // Every message event comes before the disconnect.
    let last_message = p
        .server_events
        .iter()
        .rposition(|e| matches!(e, Event::Message { .. }));
    let closed = p
        .server_events
        .iter()
        .position(|e| matches!(e, Event::Disconnected { .. }));
    assert!(last_message < closed);
    assert!(p.client_events.iter().any(|e| matches!(
        e,
        Event::Disconnected {
            reason: DisconnectReason::PeerClosed,
            ..
        }
    )));
}

/// While the application pauses receiving, the peer is kept from sending; what it sends when
/// receiving resumes is not counted against its rate (up to the time paused).
#[test]
fn a_pause_is_not_the_peer_going_too_fast() {
    let server = EndpointConfig {
        limits: Limits {
            max_messages_per_sec: Some(100),
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(41, server, EndpointConfig::default(), LinkConfig::default());
    let (c, s) = p.connect();
    p.server.set_receive_paused(p.now, s, true);
    // 600 messages queued over 6 s while paused (the rate, but nothing is taken).
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    for _ in 0..600 {
        p.client
            .send(p.now, c, Bytes::from_static(b"\x86"), opts)
            .unwrap();
        let until = p.now + Duration::from_millis(10);
        p.drive_until(Duration::from_millis(10), |p| p.now >= until);
    }
    assert_eq!(p.server_messages(), 0);
    p.server.set_receive_paused(p.now, s, false);
    assert!(p.drive_until(Duration::from_secs(10), |p| p.server_messages() == 600));
    assert_eq!(server_reason(&p), None);
}
