//! Datagram numbers a peer reuses or a forger pushes far ahead: wherever official RakNet
//! still takes the peer's data, this engine does too (issue #10 item 4, issue #11 item 1).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn pair() -> (Pair, ConnId, ConnId) {
    let mut p = Pair::new(
        7,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    let (c, s) = p.connect();
    (p, c, s)
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

/// Hand `d` to the server as if the client sent it.
fn inject(p: &mut Pair, d: Bytes) {
    p.server.handle(p.now, p.client_addr, d);
    while let Some(e) = p.server.poll_event() {
        p.server_events.push(e);
    }
}

fn server_messages(p: &Pair) -> Vec<Bytes> {
    p.server_events
        .iter()
        .filter_map(|e| match e {
            Event::Message { payload, .. } => Some(payload.clone()),
            _ => None,
        })
        .collect()
}

/// rak-rs 0.3.3 numbers its handshake datagrams and reliable frames from 1, then starts both
/// again at 1 with the connection's own send queue. Official RakNet takes those datagrams:
/// it never drops a datagram for its number (only reliable frames, by message index). The
/// reliable indices here are fresh, as rak-rs's are when it queues messages before a tick.
#[test]
fn a_peer_that_restarts_its_datagram_numbers_after_the_handshake_is_heard() {
    let (mut p, _, s) = pair();
    // The client's handshake used datagram numbers from 0 and reliable indices from 0.
    // Numbers 0..=3 now come again, with other content: ordered messages first (their loss
    // stalled the channel for good, since the ACK told the sender they had arrived), then
    // unreliable ones.
    for n in 0..4u32 {
        let mut f = Frame::new(
            Reliability::ReliableOrdered,
            Bytes::from(vec![0x86, n as u8]),
        );
        f.message_index = MessageIndex::new(100 + n);
        f.order_index = OrderIndex::new(n);
        f.order_channel = 3;
        inject(&mut p, datagram(n, &[f]));
    }
    for n in 4..8u32 {
        let f = Frame::new(Reliability::Unreliable, Bytes::from(vec![0x87, n as u8]));
        inject(&mut p, datagram(n, &[f]));
    }
    let expected: Vec<Bytes> = (0..8u8)
        .map(|n| Bytes::from(vec![if n < 4 { 0x86 } else { 0x87 }, n]))
        .collect();
    assert_eq!(server_messages(&p), expected);
    let stats = p.server.connection_stats(s).unwrap();
    assert!(stats.reused_datagram_numbers >= 2, "{stats:?}");

    // An exact copy is still a duplicate: nothing is delivered twice.
    let dup = datagram(
        7,
        &[Frame::new(
            Reliability::Unreliable,
            Bytes::from(vec![0x87, 7]),
        )],
    );
    inject(&mut p, dup);
    assert_eq!(server_messages(&p), expected);
    let after = p.server.connection_stats(s).unwrap();
    assert_eq!(after.duplicates, stats.duplicates + 1);
    assert_eq!(after.reused_datagram_numbers, stats.reused_datagram_numbers);
}

/// One forged datagram numbered 50 000 ahead (the most that is not garbage) used to push
/// every later datagram of the real peer more than 1 024 behind the highest number: each was
/// acknowledged as a duplicate and dropped, so the peer never resent it and its ordered
/// channel stalled for good. Now a jump that far is provisional until a second datagram
/// after it confirms it: the window stays where the real peer is, and the forged datagram's
/// unreliable frame is not taken (a forger could otherwise speak for the peer, or close it
/// with an unreliable 0x15).
#[test]
fn one_far_ahead_datagram_does_not_make_the_real_peers_data_vanish() {
    let (mut p, c, s) = pair();
    let forged = Frame::new(Reliability::Unreliable, Bytes::from_static(b"\x86forged"));
    inject(&mut p, datagram(50_000, &[forged]));
    let close = Frame::new(Reliability::Unreliable, Bytes::from_static(b"\x15"));
    inject(&mut p, datagram((1 << 24) - 5_000, &[close]));
    for n in 0..20u8 {
        p.client
            .send(
                p.now,
                c,
                Bytes::from(vec![0x86, n]),
                SendOptions::new(Reliability::ReliableOrdered),
            )
            .unwrap();
    }
    let done = p.drive_until(Duration::from_secs(10), |p| server_messages(p).len() == 20);
    let got = server_messages(&p);
    assert!(done, "{} of 20 real messages arrived", got.len());
    let real: Vec<Bytes> = (0..20u8).map(|n| Bytes::from(vec![0x86, n])).collect();
    assert_eq!(got, real);
    let stats = p
        .server
        .connection_stats(s)
        .expect("the forged 0x15 closed the connection");
    assert_eq!(stats.provisional_datagrams, 1, "{stats:?}");
    assert_eq!(stats.far_behind_datagrams, 1, "{stats:?}");
    assert_eq!(stats.untrusted_dropped, 2, "{stats:?}");
}
