//! A connection's send gate (`Endpoint::send_gate`): the engine's send rules, checked on
//! another thread before a send is queued, with the engine publishing what the connection
//! holds and releasing what was admitted once it takes the sends.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn pair(limits: Limits) -> (Pair, ConnId, ConnId) {
    let config = EndpointConfig {
        limits,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(7, config.clone(), config, LinkConfig::default());
    let (c, s) = p.connect();
    (p, c, s)
}

#[test]
fn the_gate_refuses_what_the_engine_would() {
    let (mut p, _, s) = pair(Limits::default());
    let gate = p.server.send_gate(s).unwrap();
    assert_eq!(gate.admit(0), Err(SendError::Empty));
    let max = p.server.max_message_len(s).unwrap();
    assert_eq!(gate.admit(max + 1), Err(SendError::TooLarge));
    let cost = gate.admit(100).unwrap();
    assert_eq!(cost, SendGate::cost(100));
    assert_eq!(gate.pending(), cost);
    // The send is taken; until the end of the batch the gate counts it as admitted, then
    // as held.
    let opts = SendOptions::new(Reliability::Reliable);
    let held = gate.held();
    p.server
        .send_admitted(p.now, s, Bytes::from(vec![0x86; 100]), opts, None, cost)
        .unwrap();
    assert_eq!((gate.held(), gate.pending()), (held, cost));
    p.server.release_admitted();
    assert_eq!(gate.pending(), 0);
    assert!(
        gate.held() >= held + 100 + Limits::SEND_OVERHEAD,
        "{}",
        gate.held()
    );
    // A closed connection's gate refuses, and stays usable after the engine forgot it.
    p.server.close(p.now, s);
    assert_eq!(gate.admit(10), Err(SendError::Closed));
    p.drive_until(Duration::from_secs(5), |p| {
        p.server.stats().connections == 0
    });
    assert!(gate.is_closed());
    assert_eq!(gate.held(), 0);
}

/// What a connection may hold, admitted sends included, is its budget: a burst admitted on
/// another thread before the engine has taken any of it counts in full, and once it is
/// refused nothing more is admitted until the peer acknowledges.
#[test]
fn admitted_sends_count_before_the_engine_takes_them() {
    let limits = Limits {
        max_send_queue_bytes: 64 << 10,
        ..Limits::default()
    };
    let (mut p, _, s) = pair(limits);
    let gate = p.server.send_gate(s).unwrap();
    let mut admitted = Vec::new();
    while let Ok(cost) = gate.admit(1_000) {
        admitted.push(cost);
    }
    assert_eq!(gate.admit(1_000), Err(SendError::QueueFull));
    let total: usize = admitted.iter().sum();
    assert!(total <= 64 << 10 && total + SendGate::cost(1_000) > 64 << 10);
    // The engine takes every one of them (its own count is never above the gate's).
    let opts = SendOptions::new(Reliability::ReliableOrdered);
    for cost in &admitted {
        p.server
            .send_admitted(p.now, s, Bytes::from(vec![0x86; 1_000]), opts, None, *cost)
            .unwrap();
    }
    p.server.release_admitted();
    assert_eq!(gate.pending(), 0);
    assert!(
        gate.held() <= total,
        "{} held, {total} admitted",
        gate.held()
    );
    // Once the peer has it all, the budget is free again.
    let n = admitted.len();
    let delivered = |p: &mut Pair| p.client_messages() == n;
    assert!(p.drive_until(Duration::from_secs(10), delivered));
    p.drive_until(Duration::from_millis(200), |_| false);
    assert_eq!(gate.held(), 0);
    assert!(gate.admit(1_000).is_ok());
}

/// The gate's longest message follows the connection's MTU: at 576 the peer's fragment
/// limit holds less than `max_message_bytes`.
#[test]
fn the_gate_knows_the_connections_longest_message() {
    let config = EndpointConfig {
        max_mtu: 576,
        mtu_probes: vec![576],
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(8, config.clone(), config, LinkConfig::default());
    let (c, s) = p.connect();
    for (ep, conn) in [(&p.client, c), (&p.server, s)] {
        let max = ep.max_message_len(conn).unwrap();
        assert!(max < Limits::default().max_message_bytes);
        let gate = ep.send_gate(conn).unwrap();
        assert_eq!(gate.admit(max + 1), Err(SendError::TooLarge));
        assert!(gate.admit(max).is_ok());
    }
}
