//! Issue #32: datagrams that are not RakNet on the game port (GameSpy4 Query's `FE FD`) are
//! offered to the application before RakNet parsing, within a rate budget, and its replies
//! obey the amplification rule.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::proxy::{self, IpPrefix, ProxyConfig, ProxyMode};
use raknet_proto::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn server(tweak: impl FnOnce(&mut EndpointConfig)) -> (Endpoint, Instant) {
    let now = Instant::now();
    let mut config = EndpointConfig {
        raw: Some(RawConfig::new(vec![vec![0xFE, 0xFD]])),
        ..EndpointConfig::default()
    };
    tweak(&mut config);
    (Endpoint::new(config, sa("192.0.2.1:19132"), now), now)
}

fn raw_events(ep: &mut Endpoint) -> Vec<(SocketAddr, Bytes)> {
    let mut out = Vec::new();
    while let Some(e) = ep.poll_event() {
        if let Event::Raw { from, datagram } = e {
            out.push((from, datagram));
        }
    }
    out
}

fn sent(ep: &mut Endpoint, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        out.push((t.destination, buf[..t.size].to_vec()));
    }
    out
}

const HANDSHAKE: &[u8] = &[0xFE, 0xFD, 0x09, 0, 0, 0, 1];

#[test]
fn query_datagrams_are_offered_and_answered_within_the_amplification_rule() {
    let (mut ep, now) = server(|_| {});
    let asker = sa("198.51.100.7:40000");
    ep.handle(now, asker, Bytes::from_static(HANDSHAKE));
    assert_eq!(
        raw_events(&mut ep),
        vec![(asker, Bytes::from_static(HANDSHAKE))]
    );
    // Unproven: at most 3 x 7 bytes.
    assert_eq!(
        ep.send_raw(now, asker, &[0u8; 22], false),
        Err(RawReplyError::TooLarge)
    );
    // The refused reply used up the offer: one reply per offered datagram.
    assert_eq!(
        ep.send_raw(now, asker, &[9u8; 10], false),
        Err(RawReplyError::NotOffered)
    );
    ep.handle(now, asker, Bytes::from_static(HANDSHAKE));
    ep.send_raw(now, asker, &[9u8; 21], false).unwrap();
    assert_eq!(sent(&mut ep, now), vec![(asker, vec![9u8; 21])]);
    // A proven address may get a larger reply (a full stat), once.
    ep.handle(
        now,
        asker,
        Bytes::from_static(&[0xFE, 0xFD, 0, 0, 0, 0, 1, 0, 0, 0, 5]),
    );
    ep.send_raw(now, asker, &[1u8; 1_200], true).unwrap();
    assert_eq!(sent(&mut ep, now)[0].1.len(), 1_200);
    // Nobody asked from there; and an offer expires.
    assert_eq!(
        ep.send_raw(now, sa("203.0.113.9:1"), b"x", false),
        Err(RawReplyError::NotOffered)
    );
    ep.handle(now, asker, Bytes::from_static(HANDSHAKE));
    let later = now + Duration::from_secs(6);
    assert_eq!(
        ep.send_raw(later, asker, b"x", false),
        Err(RawReplyError::NotOffered)
    );
    let s = ep.stats();
    assert_eq!((s.raw_offered, s.raw_replies), (4, 2));
    assert_eq!(s.raw_replies_refused, 4);
    // RakNet never saw them.
    assert_eq!(s.malformed + s.unknown_peer, 0);
}

#[test]
fn offers_are_rate_limited_per_ip_and_in_all() {
    let (mut ep, now) = server(|_| {});
    for port in 0..100 {
        ep.handle(
            now,
            SocketAddr::new("198.51.100.7".parse().unwrap(), 1000 + port),
            Bytes::from_static(HANDSHAKE),
        );
    }
    assert_eq!(raw_events(&mut ep).len(), 10);
    assert_eq!(ep.stats().raw_rate_limited, 90);
    // Many IPs: the global budget (1,000 a second) holds.
    for i in 0..3_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0A00_0000 + i);
        ep.handle(
            now,
            SocketAddr::new(ip.into(), 5),
            Bytes::from_static(HANDSHAKE),
        );
    }
    assert_eq!(raw_events(&mut ep).len(), 990);
    // A second later there is budget again.
    let later = now + Duration::from_secs(1);
    ep.handle(later, sa("198.51.100.7:1"), Bytes::from_static(HANDSHAKE));
    assert_eq!(raw_events(&mut ep).len(), 1);
}

#[test]
fn without_the_option_and_from_banned_ips_nothing_is_offered() {
    let (mut ep, now) = server(|c| c.raw = None);
    ep.handle(now, sa("198.51.100.7:1"), Bytes::from_static(HANDSHAKE));
    assert!(raw_events(&mut ep).is_empty());
    let (mut ep, now) = server(|_| {});
    ep.ban(now, "198.51.100.7".parse().unwrap(), None);
    ep.handle(now, sa("198.51.100.7:1"), Bytes::from_static(HANDSHAKE));
    assert!(raw_events(&mut ep).is_empty());
    // Other datagrams are RakNet's as before: a ping is answered.
    let (mut ep, now) = server(|_| {});
    let mut ping = Vec::new();
    UnconnectedPing {
        only_if_open: false,
        time: 1,
        client_guid: Some(2),
    }
    .encode(&mut ping);
    ep.handle(now, sa("198.51.100.7:1"), Bytes::from(ping));
    assert!(raw_events(&mut ep).is_empty());
    assert_eq!(ep.stats().pongs_sent, 1);
}

#[test]
fn query_through_a_proxy_is_offered_as_the_client_and_answered_through_the_proxy() {
    let (mut ep, now) = server(|c| {
        c.proxy = Some(ProxyConfig::new(
            ProxyMode::V2Every,
            vec!["10.0.0.0/8".parse::<IpPrefix>().unwrap()],
        ));
    });
    let mut d = Vec::new();
    proxy::write_v2(sa("203.0.113.7:50000"), sa("192.0.2.1:19132"), &mut d);
    d.extend_from_slice(HANDSHAKE);
    ep.handle(now, sa("10.0.0.5:7000"), Bytes::from(d));
    assert_eq!(
        raw_events(&mut ep),
        vec![(sa("203.0.113.7:50000"), Bytes::from_static(HANDSHAKE))]
    );
    ep.send_raw(now, sa("203.0.113.7:50000"), b"reply", false)
        .unwrap();
    assert_eq!(
        sent(&mut ep, now),
        vec![(sa("10.0.0.5:7000"), b"reply".to_vec())]
    );
}
