//! Every byte a peer can make a connection buffer is counted and bounded, per connection and
//! per endpoint; nothing a peer sends pins more memory than it is counted as.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::datagram;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn config(limits: Limits) -> EndpointConfig {
    EndpointConfig {
        limits,
        ..EndpointConfig::default()
    }
}

fn pair_with(server: EndpointConfig) -> (Pair, ConnId) {
    let mut p = Pair::new(3, server, EndpointConfig::default(), LinkConfig::default());
    let (_, s) = p.connect();
    (p, s)
}

/// Connect a client at 127.0.0.`host`:4000 to the shared `server` (a pair drives it while
/// the client connects and `f` runs), and return what `f` returns. `f` gets the pair and the
/// server's id of the connection.
fn with_client<T>(
    server: &mut Endpoint,
    seed: u64,
    host: u16,
    f: impl FnOnce(&mut Pair, ConnId) -> T,
) -> T {
    let mut p = Pair::new(
        seed,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    std::mem::swap(&mut p.server, server);
    p.client_addr = format!("127.0.0.{host}:4000").parse().unwrap();
    let (_, s) = p.connect();
    let out = f(&mut p, s);
    std::mem::swap(&mut p.server, server);
    out
}

/// `n` one-KB reliable-ordered messages behind ordering index 0, which never comes.
fn pile_behind_a_gap(p: &mut Pair, n: u32) {
    for i in 0..n {
        let msg = Bytes::from(vec![0x86; 1000]);
        p.server.handle(
            p.now,
            p.client_addr,
            datagram(1000 + i, &[ordered(1000 + i, 1 + i, msg)]),
        );
    }
}

/// Hand `d` to the server as if the client sent it.
fn inject(p: &mut Pair, d: Bytes) {
    p.server.handle(p.now, p.client_addr, d);
    while let Some(e) = p.server.poll_event() {
        p.server_events.push(e);
    }
}

/// A reliable-ordered frame on channel 1 with the given indexes.
fn ordered(reliable: u32, order: u32, payload: Bytes) -> Frame {
    let mut f = Frame::new(Reliability::ReliableOrdered, payload);
    f.message_index = MessageIndex::new(reliable);
    f.order_index = OrderIndex::new(order);
    f.order_channel = 1;
    f
}

fn fragment(reliable: u32, id: u16, part: u32, count: u32, payload: Bytes) -> Frame {
    let mut f = Frame::new(Reliability::Reliable, payload);
    f.message_index = MessageIndex::new(reliable);
    f.split = Some(SplitHeader {
        count,
        id,
        index: part,
    });
    f
}

/// An unreliable frame of `len` bytes: padding that makes a datagram big.
fn padding(len: usize) -> Frame {
    Frame::new(Reliability::Unreliable, Bytes::from(vec![0x86; len]))
}

#[test]
fn tiny_fragments_and_held_messages_do_not_pin_their_datagrams() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    let mut sent = Vec::new();
    for i in 0..64u32 {
        // One byte of a split message, one message behind a gap, in a 1,300-byte datagram.
        let d = datagram(
            1000 + i,
            &[
                fragment(1000 + 2 * i, i as u16, 0, 2, Bytes::from_static(b"x")),
                ordered(1001 + 2 * i, 5 + i, Bytes::from_static(b"\x86y")),
                padding(1200),
            ],
        );
        sent.push(d.clone());
        inject(&mut p, d);
        // The padding was delivered: the application has it (and drops it).
        p.server_events.clear();
    }
    let stats = p.server.connection_stats(s).unwrap();
    // Counted with the bookkeeping of each piece held.
    const O: usize = Limits::PIECE_OVERHEAD;
    assert_eq!(stats.reassembly_bytes, 64 * (1 + O));
    assert_eq!(
        (stats.held_for_ordering, stats.held_bytes),
        (64, 64 * (2 + O))
    );
    // The engine kept copies of what it holds, not views of the 64 datagrams.
    assert!(
        sent.iter_mut().all(|d| d.is_unique()),
        "a received datagram is still referenced"
    );
    assert_eq!(p.server.stats().buffered_bytes, 64 * (3 + 2 * O));
}

#[test]
fn ordering_holds_are_bounded_in_bytes() {
    let limits = Limits {
        max_reassembly_bytes: 64 << 10,
        ..Limits::default()
    };
    let (mut p, s) = pair_with(config(limits));
    // 200 messages of 1,000 bytes, all behind a missing first one: 200 KB offered.
    for i in 0..200u32 {
        let msg = Bytes::from(vec![0x86; 1000]);
        inject(&mut p, datagram(1000 + i, &[ordered(1000 + i, 1 + i, msg)]));
    }
    let stats = p.server.connection_stats(s).unwrap();
    assert!(stats.held_bytes <= 64 << 10, "{}", stats.held_bytes);
    assert!(stats.held_bytes >= 60_000, "{}", stats.held_bytes);
    assert!(stats.refused_over_limit > 0);
    assert!(
        p.server.is_connected(s),
        "a soft limit: the connection stays"
    );
}

#[test]
fn a_finished_split_message_waiting_for_its_turn_is_counted() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    // A two-part message with ordering index 1 (index 0 is missing): once whole it waits.
    let mut a = fragment(1000, 9, 0, 2, Bytes::from(vec![0x86; 700]));
    let mut b = fragment(1001, 9, 1, 2, Bytes::from(vec![0x86; 700]));
    for f in [&mut a, &mut b] {
        f.reliability = Reliability::ReliableOrdered;
        f.order_index = OrderIndex::new(1);
        f.order_channel = 2;
    }
    const O: usize = Limits::PIECE_OVERHEAD;
    inject(&mut p, datagram(1000, &[a]));
    assert_eq!(
        p.server.connection_stats(s).unwrap().reassembly_bytes,
        700 + O
    );
    inject(&mut p, datagram(1001, &[b]));
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!((stats.reassembly_bytes, stats.held_bytes), (0, 1400 + O));
    assert_eq!(p.server.stats().buffered_bytes, 1400 + O);
}

#[test]
fn partial_unreliable_split_messages_expire_and_free_their_bytes() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    for id in 0..10u16 {
        let mut f = fragment(1000 + u32::from(id), id, 0, 3, Bytes::from(vec![0x86; 500]));
        f.reliability = Reliability::Unreliable;
        inject(&mut p, datagram(1000 + u32::from(id), &[f]));
    }
    assert_eq!(
        p.server.connection_stats(s).unwrap().reassembly_bytes,
        10 * (500 + Limits::PIECE_OVERHEAD)
    );
    // The rest never comes (unreliable fragments may be lost); keepalive pings hold the
    // connection open meanwhile.
    p.drive_until(Duration::from_secs(16), |_| false);
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!((stats.reassembly_bytes, stats.splits_expired), (0, 10));
    assert_eq!(p.server.stats().buffered_bytes, 0);
}

/// The receive budget is shared fairly: beyond its share (`Limits::buffered_share`) a
/// connection takes only from the open half of the endpoint's budget, so however many
/// connections pile data behind gaps, the total stays within the budget and each of the
/// others still has its share.
#[test]
fn the_endpoint_budget_bounds_all_connections_together() {
    let limits = Limits {
        max_endpoint_buffered_bytes: 100_000,
        max_connections: 20,
        ..Limits::default()
    };
    assert_eq!(limits.buffered_share(), 2_500);
    let start = std::time::Instant::now();
    let mut server = Endpoint::new(config(limits), "127.0.0.1:19132".parse().unwrap(), start);
    // Ten clients, each asking to hold 30 KB behind a gap: 300 KB asked.
    let mut clients = Vec::new();
    for c in 0..10u16 {
        clients.push(with_client(
            &mut server,
            u64::from(c) + 10,
            c + 2,
            |p, s| {
                pile_behind_a_gap(p, 30);
                (p.now, s)
            },
        ));
    }
    let total = server.stats().buffered_bytes;
    // The open half (50 KB) is taken, then each later client holds its share.
    assert!((50_000..=100_000).contains(&total), "{total}");
    let held: Vec<usize> = clients
        .iter()
        .map(|(_, s)| server.connection_stats(*s).unwrap().held_bytes)
        .collect();
    assert!(
        held[0] > 30_000,
        "the first takes from the open half: {held:?}"
    );
    assert!(
        held[3..].iter().all(|&h| (1..=2_500).contains(&h)),
        "later ones hold their share: {held:?}"
    );
    // The budget refuses; it does not disconnect.
    assert!(clients.iter().all(|(_, s)| server.is_connected(*s)));
    // A connection that goes away gives its share back.
    let (now, first) = clients[0];
    let mine = held[0];
    server.close(now, first);
    server.handle_timeout(now + Duration::from_secs(5));
    assert!(!server.is_connected(first));
    assert_eq!(server.stats().buffered_bytes, total - mine);
}

/// Connections that fill the open half of the budget behind gaps they never fill (34
/// connections of one address held the whole 512 MiB before) cannot keep a player's split
/// messages out: the player's share is its own.
#[test]
fn a_players_split_messages_get_through_while_others_hold_the_open_half() {
    let limits = Limits {
        max_endpoint_buffered_bytes: 1 << 20,
        max_connections: 8,
        ..Limits::default()
    };
    let share = limits.buffered_share();
    assert_eq!(share, 64 << 10);
    let start = std::time::Instant::now();
    let mut server = Endpoint::new(config(limits), "127.0.0.1:19132".parse().unwrap(), start);
    let mut others = Vec::new();
    for c in 0..3u16 {
        // 1 MiB of messages behind ordering index 0, which never comes.
        others.push(with_client(
            &mut server,
            u64::from(c) + 40,
            c + 2,
            |p, s| {
                pile_behind_a_gap(p, 1000);
                s
            },
        ));
    }
    let held = server.stats().buffered_bytes;
    assert!(held >= (1 << 19), "the open half is taken: {held}");
    // A player sends 40 KB messages (split in about 30 fragments each) and gets them all.
    let mut p = Pair::new(
        50,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    std::mem::swap(&mut p.server, &mut server);
    p.client_addr = "127.0.0.9:4000".parse().unwrap();
    let (c, _) = p.connect();
    for n in 0..5 {
        assert!(
            p.deliver_one(c, 40_000, Duration::from_secs(5)),
            "message {n} of the player did not arrive"
        );
    }
    assert!(p.server.stats().buffered_bytes <= 1 << 20);
    // Their share, not the expiry of the others' gaps, let them through.
    assert!(others.iter().all(|s| p.server.is_connected(*s)));
}

fn closed_by(p: &Pair, s: ConnId) -> Option<DisconnectReason> {
    p.server_events.iter().find_map(|e| match e {
        Event::Disconnected { conn, reason } if *conn == s => Some(*reason),
        _ => None,
    })
}

/// A real sender fills a gap within its retransmission timeout. One that leaves a channel's
/// next ordering index missing for the connection's timeout while it piles messages behind
/// it is closed, and what it held goes back to the budget.
#[test]
fn a_gap_held_open_for_the_timeout_closes_the_connection() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    for i in 0..10u32 {
        let msg = Bytes::from(vec![0x86; 100]);
        inject(&mut p, datagram(1000 + i, &[ordered(1000 + i, 1 + i, msg)]));
    }
    assert_eq!(p.server.connection_stats(s).unwrap().held_for_ordering, 10);
    // The client's keep-alive pings do not keep the gap alive.
    let t0 = p.now;
    assert!(p.drive_until(Duration::from_secs(30), |p| !p.server.is_connected(s)));
    let after = p.now - t0;
    assert!(
        (Duration::from_secs(10)..Duration::from_millis(10_100)).contains(&after),
        "{after:?}"
    );
    assert_eq!(
        closed_by(&p, s),
        Some(DisconnectReason::LimitExceeded(Limit::Stalled))
    );
    assert_eq!(p.server.stats().buffered_bytes, 0);
}

/// The same for a reliable split message whose first fragment never comes, however many of
/// its other fragments keep coming.
#[test]
fn a_split_message_missing_a_fragment_for_the_timeout_closes_the_connection() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    let t0 = p.now;
    // Fragments 1..8 of 10, one a second: progress of a kind, never the missing one.
    let mut part = 1;
    let closed = p.drive_until(Duration::from_secs(30), |p| {
        if part < 9 && p.now >= t0 + Duration::from_secs(u64::from(part)) {
            let f = fragment(1000 + part, 7, part, 10, Bytes::from(vec![0x86; 500]));
            inject(p, datagram(1000 + part, &[f]));
            part += 1;
        }
        !p.server.is_connected(s)
    });
    assert!(closed);
    assert_eq!(
        closed_by(&p, s),
        Some(DisconnectReason::LimitExceeded(Limit::Stalled))
    );
}

/// A gap filled late, but within the timeout, is a slow network, not an attack.
#[test]
fn a_gap_filled_within_the_timeout_is_delivered_and_the_connection_stays() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    for i in 1..5u32 {
        let msg = Bytes::from(vec![0x86, i as u8]);
        inject(&mut p, datagram(1000 + i, &[ordered(1000 + i, i, msg)]));
    }
    p.advance_to(p.now + Duration::from_secs(8));
    inject(
        &mut p,
        datagram(1000, &[ordered(1000, 0, Bytes::from(vec![0x86, 0]))]),
    );
    let stats = p.server.connection_stats(s).unwrap();
    assert_eq!(stats.held_for_ordering, 0);
    p.advance_to(p.now + Duration::from_secs(20));
    assert!(p.server.is_connected(s));
    let got: Vec<u8> = p
        .server_events
        .iter()
        .filter_map(|e| match e {
            Event::Message { payload, .. } if payload[0] == 0x86 => Some(payload[1]),
            _ => None,
        })
        .collect();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_ping_flood_gets_a_bounded_number_of_pongs() {
    let (mut p, s) = pair_with(EndpointConfig::default());
    let before = p.server.connection_stats(s).unwrap();
    // 1,000 connected pings in 100 datagrams within a millisecond.
    for d in 0..100u32 {
        let frames: Vec<Frame> = (0..10u64)
            .map(|i| {
                let ping = ConnectedPing { time: i };
                Frame::new(Reliability::Unreliable, Bytes::from(ping.to_vec()))
            })
            .collect();
        inject(&mut p, datagram(1000 + d, &frames));
    }
    let stats = p.server.connection_stats(s).unwrap();
    assert!(stats.pongs_dropped >= 970, "{}", stats.pongs_dropped);
    assert!(stats.pongs_dropped - before.pongs_dropped <= 1000);
}

/// The send budget is shared as the receive budget is: players who stop reading fill at most
/// the open half of the endpoint's `max_endpoint_send_bytes` beyond their shares, and every
/// other connection can still queue its share (before, 1,024 slow readers of 64 MiB each
/// could make a server hold 64 GiB).
#[test]
fn the_send_budget_is_shared_fairly() {
    let limits = Limits {
        max_endpoint_send_bytes: 1 << 20,
        max_connections: 4,
        ..Limits::default()
    };
    let share = limits.send_share();
    assert_eq!(share, 128 << 10);
    let start = std::time::Instant::now();
    let mut server = Endpoint::new(config(limits), "127.0.0.1:19132".parse().unwrap(), start);
    let mut conns = Vec::new();
    for c in 0..3u16 {
        conns.push(with_client(
            &mut server,
            u64::from(c) + 60,
            c + 2,
            |p, s| (p.now, s),
        ));
    }
    // Nothing is transmitted (the peers read nothing): queue 1 KB messages until refused.
    let queued: Vec<usize> = conns
        .iter()
        .map(|&(now, s)| {
            let mut n = 0;
            let opts = SendOptions::new(Reliability::ReliableOrdered);
            while server
                .send(now, s, Bytes::from(vec![0x86; 1000]), opts)
                .is_ok()
            {
                n += 1;
            }
            n * (1000 + Limits::SEND_OVERHEAD)
        })
        .collect();
    // The first takes the open half, the others their shares, and the total stays within
    // the budget.
    assert!(queued[0] >= 400 << 10, "{queued:?}");
    assert!(
        queued[1..].iter().all(|&q| q > share - 2_000 && q <= share),
        "{queued:?}"
    );
    let total = server.stats().send_backlog_bytes;
    assert!(total <= 1 << 20, "{total}");
    assert_eq!(total, queued.iter().sum::<usize>());
}
