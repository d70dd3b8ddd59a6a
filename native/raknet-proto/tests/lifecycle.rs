//! Closing, timeouts, keepalive and clock sync.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn reason(events: &[Event]) -> Option<DisconnectReason> {
    events.iter().find_map(|e| match e {
        Event::Disconnected { reason, .. } => Some(*reason),
        _ => None,
    })
}

fn link() -> LinkConfig {
    LinkConfig::default().with_delay(Duration::from_millis(10))
}

/// Two default endpoints over a 10 ms link.
fn pair(seed: u64) -> Pair {
    Pair::new(
        seed,
        EndpointConfig::default(),
        EndpointConfig::default(),
        link(),
    )
}

/// A link that loses everything: the wire is cut.
fn dead_link(seed: u64) -> raknet_netsim::Link {
    raknet_netsim::Link::new(
        LinkConfig {
            loss: 1.0,
            ..LinkConfig::default()
        },
        seed,
    )
}

#[test]
fn client_close_notifies_the_server() {
    let mut p = pair(1);
    let (c, _) = p.connect();
    p.client
        .send(
            p.now,
            c,
            Bytes::from_static(b"\x86last words"),
            SendOptions::new(Reliability::ReliableOrdered),
        )
        .unwrap();
    p.client.close(p.now, c);
    assert_eq!(
        p.client.send(
            p.now,
            c,
            Bytes::from_static(b"\x86too late"),
            SendOptions::new(Reliability::Reliable)
        ),
        Err(SendError::Closed)
    );
    assert!(
        p.drive_until(Duration::from_secs(5), |p| reason(&p.client_events)
            .is_some()
            && reason(&p.server_events).is_some())
    );
    assert_eq!(reason(&p.client_events), Some(DisconnectReason::LocalClose));
    assert_eq!(reason(&p.server_events), Some(DisconnectReason::PeerClosed));
    // The message sent before the close arrived first.
    assert!(p
        .server_events
        .iter()
        .any(|e| matches!(e, Event::Message { payload, .. } if &payload[..] == b"\x86last words")));
    // Both sides freed the connection.
    p.drive_until(Duration::from_secs(2), |_| false);
    assert_eq!(
        (p.client.stats().connections, p.server.stats().connections),
        (0, 0)
    );
}

#[test]
fn server_shutdown_notifies_clients() {
    let mut p = pair(2);
    p.connect();
    p.server.shutdown(p.now);
    assert!(
        p.drive_until(Duration::from_secs(5), |p| reason(&p.client_events)
            .is_some()
            && reason(&p.server_events).is_some())
    );
    assert_eq!(reason(&p.server_events), Some(DisconnectReason::Shutdown));
    assert_eq!(reason(&p.client_events), Some(DisconnectReason::PeerClosed));
}

#[test]
fn a_client_the_server_closed_forgets_the_connection() {
    let mut p = pair(5);
    let (c, s) = p.connect();
    p.server.close(p.now, s);
    assert!(
        p.drive_until(Duration::from_secs(5), |p| reason(&p.client_events)
            .is_some()
            && reason(&p.server_events).is_some())
    );
    assert_eq!(reason(&p.client_events), Some(DisconnectReason::PeerClosed));
    // The client acknowledges the 0x15 for a while (draining), then lets go of the
    // connection: its address can be connected to again.
    p.drive_until(Duration::from_secs(2), |_| false);
    assert_eq!(p.client.conn_by_addr(p.server_addr), None);
    assert!(!p.client.is_connected(c));
    assert_eq!(
        (p.client.stats().connections, p.server.stats().connections),
        (0, 0)
    );
}

#[test]
fn silent_peer_times_out_on_both_sides() {
    let mut p = pair(3);
    p.connect();
    let cut = p.now;
    // Cut the wire both ways.
    p.c2s = dead_link(1);
    p.s2c = dead_link(2);
    assert!(
        p.drive_until(Duration::from_secs(30), |p| reason(&p.client_events)
            .is_some()
            && reason(&p.server_events).is_some())
    );
    assert_eq!(reason(&p.client_events), Some(DisconnectReason::Timeout));
    assert_eq!(reason(&p.server_events), Some(DisconnectReason::Timeout));
    let took = p.now - cut;
    assert!(
        took >= Duration::from_secs(9) && took <= Duration::from_secs(11),
        "{took:?}"
    );
}

#[test]
fn keepalive_pings_keep_an_idle_connection_up() {
    let mut p = pair(4);
    let (c, _) = p.connect();
    p.drive_until(Duration::from_secs(60), |_| false);
    assert!(reason(&p.client_events).is_none() && reason(&p.server_events).is_none());
    assert!(p.client.is_connected(c));
    let stats = p.client.connection_stats(c).unwrap();
    // One ping at connect and one every 5 s, each answered.
    assert!(stats.datagrams_out >= 12, "{stats:?}");
    assert!(
        stats.srtt >= Duration::from_millis(20) && stats.srtt < Duration::from_millis(40),
        "{stats:?}"
    );
}

/// The client sends `0x1B <its clock> 0x87 "hi"` over a 25 ms link to a server configured
/// with `server`; returns the payload and transit time the server delivers.
fn deliver_timestamped(server: EndpointConfig) -> (Bytes, Duration, Bytes) {
    let link = LinkConfig::default().with_delay(Duration::from_millis(25));
    let mut p = Pair::new(5, server, EndpointConfig::default(), link);
    let (c, _) = p.connect();
    p.drive_until(Duration::from_secs(6), |_| false);
    // The client stamps its own clock (ms since its endpoint started).
    let client_ms = (p.now - p.start).as_millis() as u64;
    let sent = Bytes::from(
        Timestamped {
            time: client_ms,
            message: Bytes::from_static(b"\x87hi"),
        }
        .to_vec(),
    );
    p.client
        .send(
            p.now,
            c,
            sent.clone(),
            SendOptions::new(Reliability::ReliableOrdered),
        )
        .unwrap();
    assert!(p.drive_until(Duration::from_secs(1), |p| p
        .server_events
        .iter()
        .any(|e| matches!(e, Event::Message { .. }))));
    let (payload, transit) = p
        .server_events
        .iter()
        .find_map(|e| match e {
            Event::Message {
                payload, transit, ..
            } => Some((payload.clone(), *transit)),
            _ => None,
        })
        .unwrap();
    (payload, transit, sent)
}

#[test]
fn timestamped_messages_get_a_transit_time_in_local_clock() {
    let (payload, transit, _) = deliver_timestamped(EndpointConfig::default());
    assert_eq!(&payload[..], b"\x87hi", "the timestamp prefix is stripped");
    assert!(
        transit >= Duration::from_millis(20) && transit <= Duration::from_millis(30),
        "{transit:?}"
    );
}

/// X-Plane's library delivers ID_TIMESTAMP messages as they came: type 0x1B, the peer's
/// stamp, then the inner message; the transit time is then the RTT estimate.
#[test]
fn timestamped_messages_arrive_unchanged_when_not_stripped() {
    let (payload, transit, sent) = deliver_timestamped(EndpointConfig {
        strip_timestamps: false,
        ..EndpointConfig::default()
    });
    assert_eq!(payload, sent);
    assert!(
        transit >= Duration::from_millis(20) && transit <= Duration::from_millis(30),
        "{transit:?}"
    );
}

#[test]
fn datagram_timestamp_variant_interoperates_with_itself() {
    let cfg = EndpointConfig {
        datagram_timestamps: true,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(6, cfg.clone(), cfg, link());
    let (c, _) = p.connect();
    p.client
        .send(
            p.now,
            c,
            Bytes::from_static(b"\x86x"),
            SendOptions::new(Reliability::Reliable),
        )
        .unwrap();
    assert!(p.drive_until(Duration::from_secs(1), |p| p
        .server_events
        .iter()
        .any(|e| matches!(e, Event::Message { .. }))));
}

#[test]
fn unreliable_receipts_report_loss_when_the_link_drops_everything() {
    let mut p = pair(7);
    let (c, _) = p.connect();
    p.c2s = dead_link(9);
    let r = p
        .client
        .send(
            p.now,
            c,
            Bytes::from_static(b"\x86u"),
            SendOptions::new(Reliability::UnreliableWithAckReceipt),
        )
        .unwrap()
        .unwrap();
    assert!(p.drive_until(Duration::from_secs(5), |p| p
        .client_events
        .iter()
        .any(|e| matches!(e, Event::Receipt { .. }))));
    assert!(p
        .client_events
        .iter()
        .any(|e| matches!(e, Event::Receipt { receipt, acked: false, .. } if *receipt == r)));
}

#[test]
fn pending_receipts_are_lost_when_the_connection_closes() {
    let mut p = pair(8);
    let (c, _) = p.connect();
    p.c2s = dead_link(9);
    let r = p
        .client
        .send(
            p.now,
            c,
            Bytes::from_static(b"\x86r"),
            SendOptions::new(Reliability::ReliableWithAckReceipt),
        )
        .unwrap()
        .unwrap();
    assert!(
        p.drive_until(Duration::from_secs(30), |p| reason(&p.client_events)
            .is_some())
    );
    let outcomes: Vec<_> = p
        .client_events
        .iter()
        .filter(|e| matches!(e, Event::Receipt { .. }))
        .collect();
    assert_eq!(outcomes.len(), 1);
    assert!(matches!(outcomes[0], Event::Receipt { receipt, acked: false, .. } if *receipt == r));
}

#[test]
fn a_busy_sender_is_acknowledged_before_the_ack_delay() {
    let mut p = Pair::new(
        9,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    p.connect();
    let mut buf = Vec::new();
    while p.server.poll_transmit(p.now, &mut buf).is_some() {}
    // 16 data datagrams from the client in one instant (numbers past anything it sent).
    for seq in 1000..1016u32 {
        let mut d = Vec::new();
        DataHeader::new(DatagramSeq::new(seq)).encode(&mut d);
        Frame::new(Reliability::Unreliable, Bytes::from_static(b"\x86burst")).encode(&mut d);
        p.server.handle(p.now, p.client_addr, Bytes::from(d));
    }
    // The ACK goes out at once, not after the 10 ms ACK delay, so a busy sender's window is
    // released every few datagrams.
    let mut acks = 0;
    while p.server.poll_transmit(p.now, &mut buf).is_some() {
        if buf[0] & 0xc0 == 0xc0 {
            acks += 1;
        }
    }
    assert_eq!(acks, 1);
}
