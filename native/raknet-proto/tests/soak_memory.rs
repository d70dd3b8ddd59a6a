//! Long lossy runs keep memory flat: nothing the engine keeps per message outlives the
//! message (issue #12).
//!
//! This binary counts its heap with a global allocator, so it holds this one test only: a
//! second test running on another thread would disturb the count.

mod common;

use bytes::Bytes;
use common::counting::{live, Counting};
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;
use std::time::Duration;

#[global_allocator]
static ALLOC: Counting = Counting;

const CHANNEL: u8 = 2;

fn opts(tag: u8) -> SendOptions {
    SendOptions {
        reliability: if tag == 0 {
            Reliability::ReliableOrdered
        } else {
            Reliability::UnreliableSequenced
        },
        channel: CHANNEL,
        priority: Priority::High,
    }
}

/// Echo every message the server received with the reliability its second byte names;
/// count the reliable echoes the client got back.
fn echo(p: &mut Pair, echoed: &mut u64) {
    for e in std::mem::take(&mut p.server_events) {
        if let Event::Message { conn, payload, .. } = e {
            let tag = payload[1];
            p.server.send(p.now, conn, payload, opts(tag)).unwrap();
        }
    }
    for e in p.client_events.drain(..) {
        if let Event::Message { payload, .. } = e {
            *echoed += u64::from(payload[1] == 0);
        }
    }
}

/// The soak of issue #12 on one connection: 5 ticks a second, each sending a
/// reliable-ordered and an unreliable-sequenced 64-byte message on one channel, echoed with
/// the same reliability, over links with 5 % loss, 2 % duplication and 5 % reordering.
///
/// Both endpoints together settle at about 34 KB above what they held once connected
/// (receive bitmaps, map capacities, the links' queues). Each side used to keep every
/// datagram record behind its oldest lost one until 512 piled up, though the lost frames
/// had long been acknowledged through their resends: about 200 KB more, reached after
/// 40 s, and 100 KB per connection on a server (the soak's 36 KB per connection per
/// minute).
#[test]
fn a_lossy_echo_keeps_memory_flat() {
    let link = LinkConfig::lossy(0.05)
        .with_duplicate(0.02)
        .with_reorder(0.05, Duration::from_millis(30))
        .with_delay(Duration::from_millis(2));
    let mut p = Pair::new(
        12,
        EndpointConfig::default(),
        EndpointConfig::default(),
        link,
    );
    let (c, s) = p.connect();
    p.server_events.clear();
    p.client_events.clear();
    let base = live();
    let tick = Duration::from_millis(200);
    let mut echoed = 0;
    let mut peak = 0;
    for n in 0..1500u64 {
        for tag in [0u8, 1] {
            let mut msg = vec![0x86, tag];
            msg.extend_from_slice(&n.to_be_bytes());
            msg.resize(64, 0);
            p.client
                .send(p.now, c, Bytes::from(msg), opts(tag))
                .unwrap();
        }
        let until = p.now + tick;
        p.drive_until(tick * 2, |p| {
            echo(p, &mut echoed);
            p.now >= until
        });
        peak = peak.max(live() - base);
    }
    p.drive_until(Duration::from_secs(5), |p| {
        echo(p, &mut echoed);
        false
    });
    assert_eq!(echoed, 1500, "every reliable message came back");
    let server = p.server.connection_stats(s).unwrap();
    let client = p.client.connection_stats(c).unwrap();
    assert!(
        server.datagrams_lost > 100 && client.datagrams_lost > 100,
        "the links lose datagrams: {} {}",
        server.datagrams_lost,
        client.datagrams_lost
    );
    assert!(peak < 64 << 10, "the endpoints grew by {peak} bytes");
}
