//! ACK datagrams at game rates: a 20 Hz connection costs no more ACKs than official RakNet's.
//!
//! RakNet cannot piggyback an ACK on data (a datagram is data, an ACK or a NAK), so official
//! RakNet sends one ACK datagram per 10 ms window in which data datagrams arrived (protocol
//! reference §5.2: flushed 10 ms after the oldest unacknowledged datagram arrived, coalesced
//! into ranges). At 20 messages per second in one datagram each that is one ACK per message,
//! and several datagrams of one game tick share one ACK.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

const VALID: u8 = 0x80;
const ACK: u8 = 0x40;
const NAK: u8 = 0x20;

/// Connected-datagram counts of one side: (data, ACK, NAK).
fn kinds(sent: &[u8]) -> (usize, usize, usize) {
    let count = |f: fn(u8) -> bool| sent.iter().filter(|&&b| f(b)).count();
    (
        count(|b| b & VALID != 0 && b & (ACK | NAK) == 0),
        count(|b| b & VALID != 0 && b & ACK != 0),
        count(|b| b & VALID != 0 && b & ACK == 0 && b & NAK != 0),
    )
}

struct Run {
    ticks: usize,
    client: (usize, usize, usize),
    server: (usize, usize, usize),
    echoed: usize,
}

/// `seconds` of a client sending `per_tick` 40 B unreliable_sequenced messages every 50 ms,
/// each in its own datagram (1 ms apart), over a 5 ms link; the server echoes each one
/// reliable_ordered, as the scale benchmark's handler does. Counts what each side sent once
/// the connection was up.
fn run(seconds: u64, per_tick: usize) -> Run {
    let config = EndpointConfig::default();
    let link = LinkConfig::default().with_delay(Duration::from_millis(5));
    let mut p = Pair::new(7, config.clone(), config, link);
    let (c, s) = p.connect();
    // Let the handshake's last datagrams and their ACKs go by.
    let settle = p.now + Duration::from_millis(200);
    p.drive_until(Duration::from_secs(1), |p| p.now >= settle);
    p.client_sent.clear();
    p.server_sent.clear();
    p.server_events.clear();
    p.client_events.clear();

    let tick = Duration::from_millis(50);
    let ticks = (seconds * 1000 / 50) as usize;
    let start = p.now;
    let mut seen = 0;
    let mut echo = |p: &mut Pair| {
        let new: Vec<Bytes> = p.server_events[seen..]
            .iter()
            .filter_map(|e| match e {
                Event::Message { payload, .. } => Some(payload.clone()),
                _ => None,
            })
            .collect();
        seen = p.server_events.len();
        for payload in new {
            let opts = SendOptions::new(Reliability::ReliableOrdered);
            p.server.send(p.now, s, payload, opts).expect("echo");
        }
    };
    for t in 0..ticks {
        let at = start + tick * t as u32;
        p.drive_until(Duration::from_secs(1), |p| {
            echo(p);
            p.now >= at
        });
        for m in 0..per_tick {
            let payload = Bytes::from(vec![0x86; 40]);
            let opts = SendOptions::new(Reliability::UnreliableSequenced);
            p.client.send(p.now, c, payload, opts).expect("send");
            let next = p.now + Duration::from_millis(1);
            if m + 1 < per_tick {
                p.drive_until(Duration::from_secs(1), |p| {
                    echo(p);
                    p.now >= next
                });
            }
        }
    }
    // The last echoes and ACKs.
    let end = p.now + Duration::from_millis(200);
    p.drive_until(Duration::from_secs(1), |p| {
        echo(p);
        p.now >= end
    });
    let echoed = p.client_messages();
    Run {
        ticks,
        client: kinds(&p.client_sent),
        server: kinds(&p.server_sent),
        echoed,
    }
}

#[test]
fn twenty_hz_costs_one_ack_per_message_like_official() {
    let r = run(10, 1);
    let messages = r.ticks;
    assert_eq!(r.echoed, messages, "every message echoed: {}", r.echoed);
    let (c_data, c_acks, c_naks) = r.client;
    let (s_data, s_acks, s_naks) = r.server;
    // One data datagram per message each way, plus a connected ping or two (every 5 s).
    assert!(c_data <= messages + 4, "client data datagrams {c_data}");
    assert!(s_data <= messages + 4, "server data datagrams {s_data}");
    // Official: one ACK per 10 ms window with arrivals. Never more ACKs than data datagrams
    // received, and at 20 Hz no more than one per message (plus the pings').
    assert!(
        s_acks <= c_data,
        "server ACKs {s_acks} > client datagrams {c_data}"
    );
    assert!(
        c_acks <= s_data,
        "client ACKs {c_acks} > server datagrams {s_data}"
    );
    assert!(
        s_acks <= messages + 4,
        "server ACKs {s_acks} for {messages} messages"
    );
    assert!(
        c_acks <= messages + 4,
        "client ACKs {c_acks} for {messages} messages"
    );
    assert_eq!((c_naks, s_naks), (0, 0), "no NAKs on a lossless link");
    // Four datagrams per echoed message in all (data and ACK each way), as official.
    let total = c_data + c_acks + s_data + s_acks;
    assert!(
        total <= 4 * messages + 16,
        "{total} datagrams for {messages} echoed messages"
    );
}

#[test]
fn datagrams_of_one_tick_share_one_ack() {
    // Three messages 1 ms apart per tick (the pacer puts two of them in one datagram): official's
    // 10 ms ACK window covers all of a tick's datagrams.
    let r = run(5, 3);
    assert_eq!(r.echoed, 3 * r.ticks, "every message echoed");
    let (c_data, _, _) = r.client;
    let (_, s_acks, _) = r.server;
    assert!(
        c_data >= 2 * r.ticks,
        "several datagrams per tick: {c_data} for {} ticks",
        r.ticks
    );
    assert!(
        s_acks <= r.ticks + 4,
        "server sent {s_acks} ACKs for {} ticks of 3 datagrams",
        r.ticks
    );
}

/// A bulk sender in slow start (BBR's startup or Reno's slow start) flags its datagrams
/// "needs B and AS" and, behind the first, "continuous send": its window grows by what each ACK
/// acknowledges, so the receiver acknowledges every four such datagrams at once instead of
/// holding the ACK for the 10 ms delay (which lengthened each round trip of the ramp by up to
/// that much: a 16 MiB transfer at 20 ms RTT took 249 ms instead of 214). The first window
/// arrives after one way (10 ms) and its first ACK leaves with it.
#[test]
fn a_sender_in_slow_start_is_acknowledged_without_the_delay() {
    for congestion in [CongestionControl::Bbr, CongestionControl::Reno] {
        let config = EndpointConfig {
            congestion,
            ..EndpointConfig::default()
        };
        let link = LinkConfig::default().with_delay(Duration::from_millis(10));
        let mut p = Pair::new(7, config.clone(), config, link);
        let (c, _) = p.connect();
        let settle = p.now + Duration::from_millis(200);
        p.drive_until(Duration::from_secs(1), |p| p.now >= settle);
        p.server_sent.clear();
        let sent = p.now;
        p.client
            .send(
                p.now,
                c,
                Bytes::from(vec![0x86; 64 << 10]),
                SendOptions::new(Reliability::ReliableOrdered),
            )
            .unwrap();
        let acked = p.drive_until(Duration::from_secs(1), |p| {
            p.server_sent.iter().any(|&b| b & ACK != 0)
        });
        assert!(acked, "{congestion:?}");
        let took = p.now - sent;
        eprintln!("{congestion:?}: first ACK sent {took:?} after the first window");
        assert!(
            took < Duration::from_millis(12),
            "{congestion:?}: first ACK after {took:?}"
        );
    }
}

/// An ACK owed to a peer leaves with the data we send it next, if no ACK left in the last
/// `ack_delay`: a handler's echo and the ACK of the message it answers go out together (one
/// batch, one system call, the ACK behind the echo) instead of the ACK waiting 10 ms for its
/// own turn. The rate of ACKs
/// stays what the delay allows: a second echo within the delay leaves alone, and its message's
/// ACK waits for the delay.
#[test]
fn an_echo_takes_the_ack_of_its_message_along() {
    let config = EndpointConfig::default();
    let link = LinkConfig::default().with_delay(Duration::from_millis(5));
    let mut p = Pair::new(7, config.clone(), config, link);
    let (c, s) = p.connect();
    // The handshake's last datagrams and their ACKs go by (and no ping is due for seconds).
    let settle = p.now + Duration::from_millis(200);
    p.advance_to(settle);
    p.server_events.clear();
    let mut buf = Vec::new();
    let mut arrive_and_echo = |p: &mut Pair| {
        let opts = SendOptions::new(Reliability::UnreliableSequenced);
        p.client
            .send(p.now, c, Bytes::from(vec![0x86; 40]), opts)
            .unwrap();
        let arrived = p.drive_until(Duration::from_secs(1), |p| {
            p.server_events
                .iter()
                .any(|e| matches!(e, Event::Message { .. }))
        });
        assert!(arrived);
        p.server_events.clear();
        // Nothing leaves on the message's arrival: its ACK is owed for up to the delay.
        assert!(p.server.poll_transmit(p.now, &mut buf).is_none());
        let opts = SendOptions::new(Reliability::ReliableOrdered);
        p.server
            .send(p.now, s, Bytes::from(vec![0x86; 40]), opts)
            .unwrap();
        let mut kinds = Vec::new();
        while let Some(t) = p.server.poll_transmit(p.now, &mut buf) {
            kinds.push(buf[0]);
            p.s2c.send(p.now, buf[..t.size].to_vec());
        }
        kinds
    };
    let first = arrive_and_echo(&mut p);
    assert_eq!(first.len(), 2, "{first:x?}");
    // The echo first, then the ACK: a run the socket can send as one GSO segment chain.
    assert_eq!(first[0] & (ACK | NAK), 0, "the echo first: {first:x?}");
    assert_ne!(first[1] & ACK, 0, "then the ACK: {first:x?}");
    // 2 ms later (within the delay of that ACK): the echo goes alone.
    let next = p.now + Duration::from_millis(2);
    p.advance_to(next);
    let second = arrive_and_echo(&mut p);
    assert_eq!(second.len(), 1, "{second:x?}");
    assert_eq!(second[0] & (ACK | NAK), 0, "{second:x?}");
    // Its message's ACK follows after the delay.
    p.server_sent.clear();
    let acked = p.drive_until(Duration::from_millis(11), |p| {
        p.server_sent.iter().any(|&b| b & ACK != 0)
    });
    assert!(acked, "{:x?}", p.server_sent);
}
