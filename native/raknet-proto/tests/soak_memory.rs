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

/// The soak of issues #12 and #35 on one connection: 5 ticks a second for 20 virtual
/// minutes, each sending a reliable-ordered and an unreliable-sequenced 64-byte message on
/// one channel, echoed with the same reliability, over links with 5 % loss, 2 % duplication
/// and 5 % reordering.
///
/// Two bounds. Overall, both endpoints settle at about 34 KB above what they held once
/// connected; each side used to keep every datagram record behind its oldest lost one until
/// 512 piled up (about 200 KB more, issue #12). After a minute's warm-up, live bytes must stay
/// flat: containers keep the capacity of their largest moment, and the largest moment of a
/// lossy link keeps growing with time, so each connection trims them once per keep-alive
/// ping; the reliable-index bitmap (16 KB, allocated whole on the first out-of-order frame and
/// kept) is now as large as the gap it tracks (issue #35).
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
    let ticks: u64 = 5 * 60 * 20;
    let warm_up = 5 * 60;
    let mut echoed = 0;
    let (mut peak, mut at_warm_up, mut after_warm_up) = (0, 0, 0);
    for n in 0..ticks {
        for tag in [0u8, 1] {
            let mut msg = vec![0x86, tag];
            msg.extend_from_slice(&n.to_be_bytes());
            msg.resize(64, 0);
            p.client
                .send(p.now, c, Bytes::from(msg), opts(tag))
                .unwrap();
        }
        // The harness logs every datagram's first byte: not the engines' memory.
        p.client_sent.clear();
        p.server_sent.clear();
        let until = p.now + tick;
        p.drive_until(tick * 2, |p| {
            echo(p, &mut echoed);
            p.now >= until
        });
        let held = live() - base;
        peak = peak.max(held);
        if n == warm_up {
            at_warm_up = held;
        } else if n > warm_up {
            after_warm_up = after_warm_up.max(held);
        }
    }
    p.drive_until(Duration::from_secs(5), |p| {
        echo(p, &mut echoed);
        false
    });
    assert_eq!(echoed, ticks, "every reliable message came back");
    let server = p.server.connection_stats(s).unwrap();
    let client = p.client.connection_stats(c).unwrap();
    assert!(
        server.datagrams_lost > 1000 && client.datagrams_lost > 1000,
        "the links lose datagrams: {} {}",
        server.datagrams_lost,
        client.datagrams_lost
    );
    assert!(peak < 64 << 10, "the endpoints grew by {peak} bytes");
    assert!(
        after_warm_up - at_warm_up < 4 << 10,
        "after the warm-up the endpoints grew from {at_warm_up} to {after_warm_up} bytes"
    );
    // The accounting names what is held; with nothing in flight at the end, every
    // per-message structure is back to (almost) nothing.
    let usage = p.server.heap_usage();
    assert!(usage.reliable_window <= 64, "{usage:?}");
    assert!(
        usage.in_flight + usage.flight_records < 4 << 10,
        "{usage:?}"
    );
}
