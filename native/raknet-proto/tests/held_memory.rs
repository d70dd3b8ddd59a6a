//! What the receive budgets count covers what a peer's held data really takes: a hostile
//! peer's one-byte fragments and out-of-order messages cost mostly bookkeeping, and the
//! budgets count it ([`Limits::PIECE_OVERHEAD`]).
//!
//! This binary counts its heap with a global allocator, so it holds this one test only.

mod common;

use bytes::Bytes;
use common::counting::{live, Counting};
use common::datagram;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

#[global_allocator]
static ALLOC: Counting = Counting;

/// A one-byte fragment (`index` of a message of `count` parts) of split message `id`.
fn fragment(id: u16, index: u32) -> Frame {
    let mut f = Frame::new(Reliability::Unreliable, Bytes::from_static(b"x"));
    f.split = Some(SplitHeader {
        count: 16_384,
        id,
        index,
    });
    f
}

/// A one-byte message on `channel`, ordered (`sequence: None`) or sequenced.
fn held(reliable: u32, channel: u8, order: u32, sequence: Option<u32>) -> Frame {
    let reliability = match sequence {
        None => Reliability::ReliableOrdered,
        Some(_) => Reliability::ReliableSequenced,
    };
    let mut f = Frame::new(reliability, Bytes::from_static(b"\x86"));
    f.message_index = MessageIndex::new(reliable);
    f.order_index = OrderIndex::new(order);
    f.sequence_index = SequenceIndex::new(sequence.unwrap_or(0));
    f.order_channel = channel;
    f
}

#[test]
fn the_budgets_count_at_least_what_held_pieces_really_take() {
    let mut p = Pair::new(
        4,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    let (_, s) = p.connect();
    let mut seq = 1000;
    let mut inject = |p: &mut Pair, frames: Vec<Frame>| {
        p.server
            .handle(p.now, p.client_addr, datagram(seq, &frames));
        seq += 1;
        while p.server.poll_event().is_some() {}
    };
    // Warm up the paths (first allocations of maps and scratch buffers), then measure.
    inject(&mut p, vec![fragment(63, 1)]);
    let base = live();
    let counted_base = p.server.stats().buffered_bytes;

    // Split messages that never complete: index 0 is never sent.
    for id in 0..32u16 {
        for chunk in 0..20u32 {
            let frames = (0..60).map(|i| fragment(id, 1 + chunk * 60 + i)).collect();
            inject(&mut p, frames);
        }
    }
    // Messages behind a gap: ordered ones (each its own ordering index) on channels 1-4,
    // sequenced ones (all of one ordering index) on channels 5-8.
    let mut reliable = 1000;
    for channel in 1..=8u8 {
        for chunk in 0..30u32 {
            let frames = (0..60)
                .map(|i| {
                    let n = chunk * 60 + i;
                    reliable += 1;
                    match channel {
                        1..=4 => held(reliable, channel, 1 + n, None),
                        _ => held(reliable, channel, 1, Some(n)),
                    }
                })
                .collect();
            inject(&mut p, frames);
        }
    }

    let stats = p.server.connection_stats(s).expect("still connected");
    assert_eq!(stats.held_for_ordering, 8 * 30 * 60, "all held");
    assert!(stats.reassembly_bytes >= 32 * 20 * 60 * (1 + Limits::PIECE_OVERHEAD));
    let counted = p.server.stats().buffered_bytes - counted_base;
    let taken = usize::try_from(live() - base).unwrap_or(0);
    assert!(
        taken <= counted,
        "the pieces take {taken} bytes, the budgets count {counted}"
    );
    // And the count is not wildly above it either (the budgets would refuse honest data).
    assert!(
        counted < 3 * taken,
        "the pieces take {taken} bytes, the budgets count {counted}"
    );
}
