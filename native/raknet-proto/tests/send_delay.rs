//! `EndpointConfig::send_delay`: small messages sent a moment apart share a datagram, and none
//! waits longer than the delay.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

/// Data datagrams (valid, neither ACK nor NAK) among the first bytes of what a side sent.
fn data_datagrams(sent: &[u8]) -> usize {
    sent.iter().filter(|&&b| b & 0xE0 == 0x80).count()
}

fn received(events: &[Event]) -> Vec<u8> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Message { payload, .. } if payload.first() == Some(&0x86) => Some(payload[1]),
            _ => None,
        })
        .collect()
}

/// Five 2-byte messages from the server, 2 ms apart; returns the data datagrams they took and
/// how long after the first was sent the client had the first one.
fn five_messages(delay: Duration, priority: Priority) -> (usize, Duration) {
    let server = EndpointConfig {
        send_delay: delay,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(31, server, EndpointConfig::default(), LinkConfig::default());
    let (_c, s) = p.connect();
    // Quiet: the handshake's own datagrams and ACKs are done.
    p.advance_to(p.now + Duration::from_millis(200));
    let before = p.server_sent.len();
    p.client_events.clear();
    let first = p.now;
    let mut arrived = None;
    for i in 0..5u8 {
        let opts = SendOptions {
            priority,
            ..SendOptions::new(Reliability::Unreliable)
        };
        p.server
            .send(p.now, s, Bytes::from(vec![0x86, i]), opts)
            .expect("queued");
        p.flush();
        p.advance_to(p.now + Duration::from_millis(2));
        if arrived.is_none() && !received(&p.client_events).is_empty() {
            arrived = Some(p.now - first);
        }
    }
    assert!(
        p.drive_until(Duration::from_secs(1), |p| received(&p.client_events).len()
            == 5)
    );
    assert_eq!(received(&p.client_events), vec![0, 1, 2, 3, 4]);
    let arrived = arrived.unwrap_or(p.now - first);
    (data_datagrams(&p.server_sent[before..]), arrived)
}

#[test]
fn without_a_send_delay_each_message_leaves_at_once() {
    let (datagrams, arrived) = five_messages(Duration::ZERO, Priority::High);
    assert_eq!(datagrams, 5);
    assert!(arrived <= Duration::from_millis(2), "{arrived:?}");
}

#[test]
fn a_send_delay_gathers_messages_into_one_datagram_held_no_longer_than_the_delay() {
    let (datagrams, arrived) = five_messages(Duration::from_millis(20), Priority::High);
    assert_eq!(datagrams, 1);
    // The first waited the delay (the link adds no latency here), and no more.
    assert!(
        arrived >= Duration::from_millis(8) && arrived <= Duration::from_millis(22),
        "{arrived:?}"
    );
}

#[test]
fn immediate_messages_are_not_held() {
    let (datagrams, _) = five_messages(Duration::from_millis(20), Priority::Immediate);
    assert_eq!(datagrams, 5);
}
