//! Every datagram either side sends fits in the path: at most MTU − 28 bytes of UDP payload
//! (official RakNet's rule, for IPv4 and IPv6 alike), at every MTU the handshake can settle
//! on, for every reliability, whole or split, and for the ACKs and NAKs a lossy link makes.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use proptest::prelude::*;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

const MTUS: [u16; 4] = [1492, 1400, 1200, 576];

fn run(mtu: u16, v6: bool, sends: &[(usize, usize, bool)], seed: u64) {
    let addrs: (SocketAddr, SocketAddr) = if v6 {
        (
            "[::1]:19132".parse().unwrap(),
            "[::1]:40000".parse().unwrap(),
        )
    } else {
        (
            "127.0.0.1:19132".parse().unwrap(),
            "127.0.0.1:40000".parse().unwrap(),
        )
    };
    let config = EndpointConfig {
        max_mtu: mtu,
        mtu_probes: vec![mtu],
        datagram_timestamps: seed % 2 == 0,
        limits: Limits {
            max_messages_per_sec: None,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    // The path drops anything longer than MTU − 28; once connected it also loses and
    // reorders some, so that ACKs and NAKs carry many ranges.
    let path = LinkConfig::default().with_mtu(usize::from(mtu) - 28);
    let mut p = Pair::new_at(seed, config.clone(), config, path.clone(), addrs);
    let (c, s) = p.connect();
    assert_eq!(p.client.mtu(c), Some(mtu));
    let lossy = path
        .with_loss(0.1)
        .with_reorder(0.05, Duration::from_millis(5));
    p.c2s.set_config(lossy.clone());
    p.s2c.set_config(lossy);
    let mut reliable = [0usize; 2];
    for (i, &(rel, len, to_client)) in sends.iter().enumerate() {
        let rel = Reliability::ALL[rel];
        let mut payload = vec![(i % 251) as u8; len];
        payload[0] = 0x86;
        let opts = SendOptions {
            reliability: rel,
            channel: (i % 32) as u8,
            priority: Priority::High,
        };
        let (from, conn) = if to_client {
            (&mut p.server, s)
        } else {
            (&mut p.client, c)
        };
        from.send(p.now, conn, Bytes::from(payload), opts).unwrap();
        if rel.is_reliable() {
            reliable[usize::from(to_client)] += 1;
        }
    }
    let delivered = |events: &[Event]| {
        events
            .iter()
            .filter(|e| matches!(e, Event::Message { .. }))
            .count()
    };
    let done = p.drive_until(Duration::from_secs(60), |p| {
        delivered(&p.server_events) >= reliable[0] && delivered(&p.client_events) >= reliable[1]
    });
    assert!(
        done,
        "MTU {mtu}, IPv6 {v6}: not everything reliable arrived"
    );
    for (side, link) in [("client", &p.c2s), ("server", &p.s2c)] {
        assert_eq!(
            link.stats().dropped_mtu,
            0,
            "MTU {mtu}, IPv6 {v6}: the {side} sent a datagram over {} bytes",
            mtu - 28
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_datagram_fits_the_mtu(
        mtu in 0..MTUS.len(),
        v6 in any::<bool>(),
        sends in prop::collection::vec((0..8usize, 1..5_000usize, any::<bool>()), 1..40),
        seed in any::<u64>(),
    ) {
        run(MTUS[mtu], v6, &sends, seed);
    }
}

/// The sweep above at every MTU and family, with one of each reliability at the sizes where
/// the frame headers matter most: one byte, exactly what one datagram holds around the
/// split threshold, and a few fragments.
#[test]
fn every_datagram_fits_every_mtu_around_the_split_threshold() {
    for (i, &mtu) in MTUS.iter().enumerate() {
        for v6 in [false, true] {
            let room = usize::from(mtu) - 28 - 4;
            let sends: Vec<(usize, usize, bool)> = (0..8)
                .flat_map(|rel| {
                    [1, room - 24, room - 20, room - 10, room, room + 1, 3 * room]
                        .into_iter()
                        .flat_map(move |len| [(rel, len, false), (rel, len, true)])
                })
                .collect();
            run(mtu, v6, &sends, 70 + i as u64);
        }
    }
}
