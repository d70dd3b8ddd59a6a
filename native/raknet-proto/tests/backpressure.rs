//! Back-pressure: an application that cannot keep up pauses receiving instead of being
//! disconnected; the peer's reliable messages wait (unacknowledged) and then all arrive.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn messages(events: &[Event]) -> Vec<Bytes> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Message { payload, .. } if payload[0] == 0x86 => Some(payload.clone()),
            _ => None,
        })
        .collect()
}

/// Send `n` reliable-ordered messages 0x86 + a big-endian number, padded to `size` bytes.
fn send_numbered(p: &mut Pair, c: ConnId, n: u32, size: usize) {
    for i in 0..n {
        let mut m = vec![0x86];
        m.extend_from_slice(&i.to_be_bytes());
        m.resize(size.max(m.len()), 0xAB);
        let opts = SendOptions::new(Reliability::ReliableOrdered);
        p.client.send(p.now, c, Bytes::from(m), opts).unwrap();
    }
}

/// The numbers of the messages `send_numbered` sent that the server delivered, in order.
fn numbers(p: &Pair) -> Vec<u32> {
    messages(&p.server_events)
        .iter()
        .map(|m| u32::from_be_bytes([m[1], m[2], m[3], m[4]]))
        .collect()
}

#[test]
fn paused_receiver_holds_the_sender_back_and_loses_nothing_reliable() {
    let link = LinkConfig::default().with_delay(Duration::from_millis(10));
    let mut p = Pair::new(
        7,
        EndpointConfig::default(),
        EndpointConfig::default(),
        link,
    );
    let (c, s) = p.connect();
    p.server.set_receive_paused(p.now, s, true);

    // Unreliable first: behind a clogged window they would expire unsent instead.
    for _ in 0..5 {
        p.client
            .send(
                p.now,
                c,
                Bytes::from_static(b"\x86unreliable"),
                SendOptions::new(Reliability::Unreliable),
            )
            .unwrap();
    }

    send_numbered(&mut p, c, 200, 200);
    // Paused for 3 s: nothing is delivered, the sender keeps its messages, nobody hangs up.
    p.drive_until(Duration::from_secs(3), |_| false);
    assert!(messages(&p.server_events).is_empty());
    let server = p.server.connection_stats(s).unwrap();
    assert!(server.refused_paused > 0, "{server:?}");
    assert_eq!(server.dropped_paused, 5);
    let client = p.client.connection_stats(c).unwrap();
    assert!(client.reliable_in_flight > 0, "{client:?}");
    assert!(p.client.is_connected(c) && p.server.is_connected(s));

    // Resumed: every reliable message arrives, in order, within a few round trips (the
    // refused datagrams are NAKed, so the sender need not wait for its timeout).
    let resumed = p.now;
    p.server.set_receive_paused(p.now, s, false);
    assert!(
        p.drive_until(Duration::from_secs(5), |p| messages(&p.server_events).len()
            == 200)
    );
    let took = p.now - resumed;
    assert!(took < Duration::from_millis(200), "took {took:?}");
    assert_eq!(numbers(&p), (0..200).collect::<Vec<_>>());
    assert!(p.server.connection_stats(s).unwrap().naks_sent > 0);
}

/// A refused datagram must stay unacknowledged in every copy: a duplicate of it (the soak's
/// relay duplicates 2 %) used to be taken for "seen before" and acknowledged, so the sender
/// forgot frames the receiver never accepted, and an ordered channel stalled for good.
#[test]
fn a_duplicate_of_a_refused_datagram_is_not_acknowledged() {
    let link = LinkConfig::default()
        .with_delay(Duration::from_millis(10))
        .with_duplicate(0.5);
    let mut p = Pair::new(
        11,
        EndpointConfig::default(),
        EndpointConfig::default(),
        link,
    );
    let (c, s) = p.connect();
    p.server.set_receive_paused(p.now, s, true);
    send_numbered(&mut p, c, 50, 0);
    p.drive_until(Duration::from_secs(2), |_| false);
    assert!(p.server.connection_stats(s).unwrap().refused_paused > 0);
    p.server.set_receive_paused(p.now, s, false);
    let all = p.drive_until(Duration::from_secs(10), |p| {
        messages(&p.server_events).len() == 50
    });
    let got = numbers(&p);
    assert!(all, "delivered {got:?}");
    assert_eq!(got, (0..50).collect::<Vec<_>>());
}

#[test]
fn pings_and_disconnection_notices_pass_while_paused() {
    let mut p = Pair::new(
        8,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default().with_delay(Duration::from_millis(5)),
    );
    let (c, s) = p.connect();
    p.server.set_receive_paused(p.now, s, true);
    // 30 s paused: keepalive pings still flow both ways, so neither side times out.
    p.drive_until(Duration::from_secs(30), |_| false);
    assert!(p.client.is_connected(c) && p.server.is_connected(s));
    // The client's 0x15 is internal: the paused server still hears it.
    p.client.close(p.now, c);
    assert!(
        p.drive_until(Duration::from_secs(3), |p| p.server_events.iter().any(
            |e| matches!(
                e,
                Event::Disconnected {
                    reason: DisconnectReason::PeerClosed,
                    ..
                }
            )
        ))
    );
}

#[test]
fn a_paused_connection_closes_cleanly() {
    let mut p = Pair::new(
        9,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default().with_delay(Duration::from_millis(5)),
    );
    let (c, s) = p.connect();
    for _ in 0..50 {
        p.client
            .send(
                p.now,
                c,
                Bytes::from_static(b"\x86data"),
                SendOptions::new(Reliability::ReliableOrdered),
            )
            .unwrap();
    }
    p.drive_until(Duration::from_millis(1), |_| false);
    p.server.set_receive_paused(p.now, s, true);
    p.drive_until(Duration::from_millis(500), |_| false);
    p.server.close(p.now, s);
    assert!(
        p.drive_until(Duration::from_secs(3), |p| p.client_events.iter().any(
            |e| matches!(
                e,
                Event::Disconnected {
                    reason: DisconnectReason::PeerClosed,
                    ..
                }
            )
        )),
        "{:?}",
        p.client_events
    );
}
