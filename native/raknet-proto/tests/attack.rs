//! Issue #11, "survive the hostile internet": spoofed floods, reflection and amplification,
//! slowloris and never-acknowledging peers, all on the virtual clock. Spoofed sources are
//! addresses handed to the engine only; nothing here touches a network.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn spoofed(i: u32) -> SocketAddr {
    let [a, b, c, d] = (0x0a00_0000 + i).to_be_bytes();
    SocketAddr::from(([a, b, c, d], 30_000 + (i % 1000) as u16))
}

/// Bytes the endpoint sends, per destination, from what is queued now.
fn drain(ep: &mut Endpoint, now: Instant) -> Vec<(SocketAddr, Bytes)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        out.push((t.destination, Bytes::copy_from_slice(&buf[..t.size])));
    }
    out
}

fn bytes_to(out: &[(SocketAddr, Bytes)], to: SocketAddr) -> usize {
    out.iter()
        .filter(|(a, _)| *a == to)
        .map(|(_, d)| d.len())
        .sum()
}

fn ocr1(protocol: u8, mtu: u16) -> Bytes {
    OpenConnectionRequest1 { protocol, mtu }.to_vec().into()
}

fn ocr2(server: SocketAddr, guid: u64, cookie: Option<u32>) -> Bytes {
    OpenConnectionRequest2 {
        cookie,
        client_challenge: None,
        server_address: server,
        mtu: 1492,
        client_guid: guid,
    }
    .to_vec()
    .into()
}

/// A data datagram numbered `seq` with one frame of `reliability` (reliable index `ri`).
fn data(seq: u32, reliability: Reliability, ri: u32, payload: Vec<u8>) -> Bytes {
    let mut out = Vec::new();
    DataHeader::new(DatagramSeq::new(seq)).encode(&mut out);
    let mut f = Frame::new(reliability, payload.into());
    f.message_index = MessageIndex::new(ri);
    f.encode(&mut out);
    out.into()
}

fn connection_request(guid: u64) -> Vec<u8> {
    ConnectionRequest {
        client_guid: guid,
        time: 100,
        use_security: false,
        password: Bytes::new(),
    }
    .to_vec()
}

fn new_incoming(server: SocketAddr, echoed: u64) -> Vec<u8> {
    NewIncomingConnection {
        server_address: server,
        internal_addresses: vec![raknet_proto::addr::UNASSIGNED; 10],
        ping_time: echoed,
        pong_time: 200,
    }
    .to_vec()
}

fn server(config: EndpointConfig) -> (Endpoint, Instant, SocketAddr) {
    let now = Instant::now();
    let addr: SocketAddr = common::pair::SERVER.parse().unwrap();
    (Endpoint::new(config, addr, now), now, addr)
}

/// A spoofed OCR2 flood from 1,000 addresses, then a real client of `protocol`. With cookies
/// always on, whatever the protocol, a spoofed OCR2 leaves nothing behind.
fn flood_then_connect(protocol: u8) {
    let server_cfg = EndpointConfig {
        use_cookies: CookieMode::Always,
        admission: AdmissionLimits {
            max_half_open: 256,
            ..AdmissionLimits::default()
        },
        limits: Limits {
            max_connections: 64,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let client_cfg = EndpointConfig {
        protocol_versions: vec![protocol],
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(20, server_cfg, client_cfg, LinkConfig::default());
    for i in 0..1000 {
        // Without a cookie (the protocol-6 path) and with a forged one.
        p.server
            .handle(p.now, spoofed(i), ocr2(p.server_addr, u64::from(i), None));
        p.server.handle(
            p.now,
            spoofed(i + 5000),
            ocr2(p.server_addr, u64::from(i) + 5000, Some(0x1234_560b)),
        );
    }
    let stats = p.server.stats();
    assert_eq!(stats.connections, 0, "a spoofed OCR2 holds no connection");
    assert_eq!(
        (stats.half_open, stats.half_open_evicted),
        (0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.bad_cookies, 2000);
    let (c, _) = p.connect();
    assert!(p.client.is_connected(c));
    assert_eq!(p.server.stats().connections, 1);
    let proto = p.client_events.iter().find_map(|e| match e {
        Event::Connected { protocol, .. } => Some(*protocol),
        _ => None,
    });
    assert_eq!(proto, Some(protocol));
}

#[test]
fn spoofed_ocr2_flood_does_not_stop_a_protocol_6_client() {
    flood_then_connect(6);
}

#[test]
fn spoofed_ocr2_flood_does_not_stop_a_protocol_11_client() {
    flood_then_connect(11);
}

/// A spoofed flood of cookie-less OCR2s while a real client's handshake is under way. Each
/// spoofed OCR2 made a half-open record, and a full table evicts its oldest: the real
/// client's record went first, and the client, which had been told nothing wrong, timed out
/// (a flood of `max_half_open` OCR2s per round trip locked out every player). With cookies,
/// for every protocol, a spoofed OCR2 makes no record at all.
#[test]
fn a_spoofed_flood_during_a_handshake_does_not_evict_a_proven_client() {
    for protocol in [6, 11] {
        a_spoofed_flood_during_the_handshake_of(protocol);
    }
}

fn a_spoofed_flood_during_the_handshake_of(protocol: u8) {
    let server_cfg = EndpointConfig {
        use_cookies: CookieMode::Always,
        admission: AdmissionLimits {
            max_half_open: 256,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    };
    let client_cfg = EndpointConfig {
        protocol_versions: vec![protocol],
        ..EndpointConfig::default()
    };
    // A player 100 ms away: its record waits 100 ms for the 0x09 after Reply2.
    let link = LinkConfig {
        delay: Duration::from_millis(50),
        jitter: Duration::ZERO,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(20, server_cfg, client_cfg, link);
    let c = p.client.connect(p.now, p.server_addr).unwrap();
    assert!(p.drive_until(Duration::from_secs(1), |p| p.server.stats().half_open == 1));
    for i in 0..1000 {
        p.server
            .handle(p.now, spoofed(i), ocr2(p.server_addr, u64::from(i), None));
    }
    let stats = p.server.stats();
    assert_eq!(
        (stats.half_open, stats.half_open_evicted, stats.bad_cookies),
        (1, 0, 1000),
        "protocol {protocol}: {stats:?}"
    );
    assert!(p.drive_until(Duration::from_secs(5), |p| {
        p.client.is_connected(c) && p.server.stats().connections == 1
    }));
}

/// 100 cookie-less OCR2s spoofed from a player's IP (other ports: a NAT that many players
/// share), then the player, of `protocol`, connects to a server with or without cookies:
/// within 2 s?
fn spoofed_from_the_players_ip_then_connect(protocol: u8, cookies: bool) -> bool {
    let client = EndpointConfig {
        protocol_versions: vec![protocol],
        ..EndpointConfig::default()
    };
    let server = EndpointConfig {
        use_cookies: cookies.into(),
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(21, server, client, LinkConfig::default());
    let ip = common::pair::CLIENT.parse::<SocketAddr>().unwrap().ip();
    for port in 0..100u16 {
        let from = SocketAddr::new(ip, 20_000 + port);
        p.server
            .handle(p.now, from, ocr2(p.server_addr, u64::from(port), None));
    }
    let stats = p.server.stats();
    let records = if cookies { (0, 0) } else { (64, 36) };
    assert_eq!((stats.half_open, stats.half_open_per_ip_full), records);
    let c = p.client.connect(p.now, p.server_addr).unwrap();
    p.drive_until(Duration::from_secs(2), |p| {
        p.client.is_connected(c) && p.server.stats().connections == 1
    })
}

/// `max_half_open_per_ip` cookie-less OCR2s spoofed from a player's IP used up that IP's
/// half-open handshakes for the handshake timeout: 64 datagrams every 10 s kept every player
/// behind it out. With cookies, for every protocol, they make no record, and a player
/// proven by its cookie gets in whatever the flood.
#[test]
fn spoofed_ocr2s_from_a_players_ip_do_not_keep_a_proven_player_out() {
    for protocol in [6, 11] {
        assert!(spoofed_from_the_players_ip_then_connect(protocol, true));
    }
}

/// The same without cookies: the player's OCR2 cannot be told from the spoofed ones, and its
/// IP's oldest unproven handshake makes room for it once older than 250 ms (the player's
/// first OCR2 waits; its next OCR1, 500 ms later, gets in). Keeping it out takes 64 spoofed
/// OCR2s per 250 ms, a rate that turns cookies on, not 64 per 10 s.
#[test]
fn a_slow_spoofed_flood_from_a_players_ip_does_not_keep_a_cookieless_player_out() {
    for protocol in [6, 11] {
        assert!(spoofed_from_the_players_ip_then_connect(protocol, false));
    }
}

#[test]
fn half_open_state_is_bounded_globally_and_per_ip() {
    // Without cookies, where a bare OCR2 makes a record (with them it makes none).
    let cookieless = EndpointConfig {
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    };
    let (mut ep, now, addr) = server(EndpointConfig {
        admission: AdmissionLimits {
            max_half_open: 1000,
            ..AdmissionLimits::default()
        },
        ..cookieless.clone()
    });
    for i in 0..10_000 {
        ep.handle(now, spoofed(i), ocr2(addr, u64::from(i), None));
    }
    let s = ep.stats();
    assert_eq!((s.half_open, s.connections), (1000, 0));
    assert_eq!(s.half_open_evicted, 9000);
    // Many ports of one IP: at most `max_half_open_per_ip` (loopback skips the rate limit).
    let (mut ep, now, addr) = server(cookieless);
    for port in 0..100u16 {
        let from = SocketAddr::from(([127, 0, 0, 2], 20_000 + port));
        ep.handle(now, from, ocr2(addr, u64::from(port), None));
    }
    let s = ep.stats();
    assert_eq!(s.half_open, 64);
    assert_eq!(s.half_open_per_ip_full, 36);
    // Half-open records expire with the handshake timeout.
    ep.handle_timeout(now + Duration::from_secs(11));
    assert_eq!(ep.stats().half_open, 0);
}

/// A network's name, its `i`-th host and the cap it should reach.
type NetworkCase = (&'static str, fn(u16) -> SocketAddr, usize);

/// One provider's addresses cannot take every half-open record: 300 hosts (IPv6 /64s) of one
/// /56 hold at most twice `max_half_open_per_ip`, of one /48 four times, of one IPv4 /24
/// four times. A newcomer from a full network takes the place of its oldest unproven record.
#[test]
fn half_open_state_is_bounded_per_network() {
    let cookieless = EndpointConfig {
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    };
    let cases: [NetworkCase; 3] = [
        (
            "IPv6 /56",
            |i| SocketAddr::from(([0x2001, 0xdb8, 7, i % 256, 0, 0, 0, 1], 30_000 + i)),
            128,
        ),
        (
            "IPv6 /48",
            // 256 /56s, one or two hosts each.
            |i| {
                let host = ((i % 256) << 8) | (i / 256);
                SocketAddr::from(([0x2001, 0xdb8, 7, host, 0, 0, 0, 1], 30_000))
            },
            256,
        ),
        (
            "IPv4 /24",
            |i| SocketAddr::from(([10, 7, 7, (i % 256) as u8], 30_000 + i)),
            256,
        ),
    ];
    for (name, host, cap) in cases {
        let (mut ep, now, addr) = server(cookieless.clone());
        for i in 0..300u16 {
            ep.handle(now, host(i), ocr2(addr, u64::from(i), None));
        }
        let s = ep.stats();
        assert_eq!(s.half_open, cap, "{name}: {s:?}");
        assert_eq!(s.half_open_per_ip_full, 300 - cap as u64, "{name}: {s:?}");
        // Records of other networks are not touched.
        ep.handle(
            now,
            "192.0.2.1:40000".parse().unwrap(),
            ocr2(addr, 10_000, None),
        );
        assert_eq!(ep.stats().half_open, cap + 1, "{name}");
    }
}

fn addr_bits(a: SocketAddr) -> u32 {
    match a.ip() {
        std::net::IpAddr::V4(v4) => u32::from(v4),
        std::net::IpAddr::V6(v6) => v6
            .octets()
            .iter()
            .fold(0, |h, b| h.rotate_left(5) ^ u32::from(*b)),
    }
}

/// A real client of `protocol` at `from` against `server`, datagrams handed over directly
/// (what the server sends elsewhere is dropped), for at most `limit` of virtual time from
/// `now` (advanced). `Ok` once both sides have the connection; else the client's reason, or
/// `None` if it is still trying.
fn real_client(
    server: &mut Endpoint,
    server_addr: SocketAddr,
    from: SocketAddr,
    protocol: u8,
    now: &mut Instant,
    limit: Duration,
) -> Result<(), Option<DisconnectReason>> {
    let config = EndpointConfig {
        accept_incoming: false,
        // A GUID of its own: the seed depends on the whole address.
        rng_seed: u64::from(from.port()) ^ (u64::from(addr_bits(from)) << 16),
        protocol_versions: vec![protocol],
        ..EndpointConfig::default()
    };
    let before = server.stats().connections;
    let mut client = Endpoint::new(config, from, *now);
    let id = client.connect(*now, server_addr).unwrap();
    let end = *now + limit;
    let mut buf = Vec::new();
    while *now < end {
        let mut moved = true;
        while moved {
            moved = false;
            while let Some(t) = client.poll_transmit(*now, &mut buf) {
                server.handle(*now, from, Bytes::copy_from_slice(&buf[..t.size]));
                moved = true;
            }
            while let Some(t) = server.poll_transmit(*now, &mut buf) {
                if t.destination == from {
                    client.handle(*now, server_addr, Bytes::copy_from_slice(&buf[..t.size]));
                }
                moved = true;
            }
        }
        while let Some(e) = client.poll_event() {
            if let Event::Disconnected { reason, .. } = e {
                return Err(Some(reason));
            }
        }
        if client.is_connected(id) && server.stats().connections == before + 1 {
            return Ok(());
        }
        *now += Duration::from_millis(10);
        server.handle_timeout(*now);
        client.handle_timeout(*now);
    }
    Err(None)
}

/// 200 real players behind one address (a NAT, a LAN party, a load tester) connect in the
/// same instant to a calm server, more than `max_half_open_per_ip` (64) at once: the
/// handshakes past the cap wait for their OCR1 schedule to come back instead of taking the
/// place of the first ones, whose Reply2 already left (a player whose record was taken sent
/// its 0x09 to no record and waited out its timeout: 136 of the 200 did). Every one gets in
/// within the first few of its attempts.
#[test]
fn a_burst_of_players_behind_one_address_all_get_in() {
    let (mut server, mut now, server_addr) = server(EndpointConfig {
        admission: AdmissionLimits {
            // The connections per address (128) and their rate (20 a second) are limits of
            // their own, tested elsewhere.
            max_connections_per_ip: 1_000,
            new_connections_per_ip_per_sec: 1_000,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    });
    let mut players: Vec<(SocketAddr, Endpoint, ConnId)> = (0..200u16)
        .map(|i| {
            let from = SocketAddr::from(([203, 0, 113, 9], 20_000 + i));
            let config = EndpointConfig {
                accept_incoming: false,
                rng_seed: u64::from(i),
                ..EndpointConfig::default()
            };
            let mut ep = Endpoint::new(config, from, now);
            let id = ep.connect(now, server_addr).unwrap();
            (from, ep, id)
        })
        .collect();
    let end = now + Duration::from_secs(5);
    let mut buf = Vec::new();
    let all_in = |players: &[(SocketAddr, Endpoint, ConnId)], server: &Endpoint| {
        players.iter().all(|(_, ep, id)| ep.is_connected(*id)) && server.stats().connections == 200
    };
    while now < end && !all_in(&players, &server) {
        // Every player's datagrams reach the server together, then every answer its player:
        // the burst arrives as one.
        loop {
            let mut to_server = Vec::new();
            for (from, ep, _) in &mut players {
                while let Some(t) = ep.poll_transmit(now, &mut buf) {
                    to_server.push((*from, Bytes::copy_from_slice(&buf[..t.size])));
                }
            }
            for (from, data) in &to_server {
                server.handle(now, *from, data.clone());
            }
            let mut moved = !to_server.is_empty();
            while let Some(t) = server.poll_transmit(now, &mut buf) {
                moved = true;
                if let Some((_, ep, _)) = players.iter_mut().find(|(a, _, _)| *a == t.destination) {
                    ep.handle(now, server_addr, Bytes::copy_from_slice(&buf[..t.size]));
                }
            }
            if !moved {
                break;
            }
        }
        now += Duration::from_millis(10);
        server.handle_timeout(now);
        for (_, ep, _) in &mut players {
            ep.handle_timeout(now);
        }
    }
    let s = server.stats();
    assert!(
        s.half_open_newcomers_waited > 0,
        "the burst never met the cap: {s:?}"
    );
    let connected = players
        .iter()
        .filter(|(_, ep, id)| ep.is_connected(*id))
        .count();
    assert_eq!((connected, s.connections), (200, 200), "{s:?}");
}

/// `new_connections_per_ip_per_sec` (20) holds for real clients of every protocol, with
/// cookies or without: one proven by its cookie is refused at its OCR2 with 0x1A; without
/// cookies a client is counted once its 0x13 proves its address, and refused then with a
/// 0x15.
#[test]
fn new_connections_per_ip_are_rate_limited() {
    let limit = Duration::from_millis(500);
    let recently = DisconnectReason::ConnectFailed(ConnectError::IpRecentlyConnected);
    for (cookies, protocol, refusal) in [
        (true, 11, recently),
        (true, 6, recently),
        (false, 11, DisconnectReason::PeerClosed),
        (false, 6, DisconnectReason::PeerClosed),
    ] {
        let (mut ep, mut now, addr) = server(EndpointConfig {
            use_cookies: cookies.into(),
            ..EndpointConfig::default()
        });
        let ip = [10, 1, 1, 1];
        // Handshakes complete without the virtual clock moving: no token comes back.
        for port in 0..20u16 {
            let from = SocketAddr::from((ip, 20_000 + port));
            assert_eq!(
                real_client(&mut ep, addr, from, protocol, &mut now, limit),
                Ok(())
            );
        }
        let from = SocketAddr::from((ip, 21_000));
        let got = real_client(&mut ep, addr, from, protocol, &mut now, limit);
        let case = format!("protocol {protocol}, cookies {cookies}");
        assert_eq!(got, Err(Some(refusal)), "{case}");
        assert_eq!(ep.stats().refused_recently_connected, 1, "{case}");
        assert_eq!(ep.stats().connections, 20, "{case}");
        // A second later the bucket has refilled.
        now += Duration::from_secs(1);
        let from = SocketAddr::from((ip, 21_001));
        let got = real_client(&mut ep, addr, from, protocol, &mut now, limit);
        assert_eq!(got, Ok(()), "{case}");
    }
}

/// An IPv6 host has a /64 of its own, 2^64 addresses: counted by full address, every per-IP
/// limit (connections, new connections per second, half-open handshakes) was a fresh budget
/// per address. They count by /64: the 21st new connection of a second from one /64 is
/// refused whatever address it comes from, and the next network is not affected.
#[test]
fn an_ipv6_network_counts_as_one_ip() {
    let addr: SocketAddr = "[2001:db8::1]:19132".parse().unwrap();
    let mut now = Instant::now();
    let config = EndpointConfig {
        use_cookies: CookieMode::Always,
        ..EndpointConfig::default()
    };
    let mut ep = Endpoint::new(config, addr, now);
    let limit = Duration::from_millis(500);
    let host = |net: u16, n: u16| -> SocketAddr {
        let ip = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0xbad, net, n, n ^ 0x5a5a, n, 1);
        SocketAddr::new(ip.into(), 20_000 + n)
    };
    for n in 0..20 {
        let got = real_client(&mut ep, addr, host(64, n), 11, &mut now, limit);
        assert_eq!(got, Ok(()), "client {n}");
    }
    let got = real_client(&mut ep, addr, host(64, 20), 11, &mut now, limit);
    assert_eq!(
        got,
        Err(Some(DisconnectReason::ConnectFailed(
            ConnectError::IpRecentlyConnected
        )))
    );
    let other = real_client(&mut ep, addr, host(65, 1), 11, &mut now, limit);
    assert_eq!(other, Ok(()));
    assert_eq!(ep.stats().connections, 21);
}

/// `new_connections_per_ip_per_sec` (20) cookie-less OCR2s spoofed from a player's IP each
/// second spent that IP's budget: every player behind it was refused with 0x1A. The budget
/// is now spent only by proven addresses (a cookie, or a verified 0x13), which spoofed
/// OCR2s never become: players of either kind get in.
#[test]
fn spoofed_ocr2s_do_not_spend_a_players_new_connection_budget() {
    for cookies in [true, false] {
        let (mut ep, mut now, addr) = server(EndpointConfig {
            use_cookies: cookies.into(),
            ..EndpointConfig::default()
        });
        for port in 0..30u16 {
            let from = SocketAddr::from(([10, 1, 1, 1], 20_000 + port));
            ep.handle(now, from, ocr2(addr, u64::from(port), None));
        }
        assert_eq!(ep.stats().refused_recently_connected, 0);
        let limit = Duration::from_millis(500);
        for (port, protocol) in [(40_000, 11), (40_001, 6)] {
            let player = SocketAddr::from(([10, 1, 1, 1], port));
            let got = real_client(&mut ep, addr, player, protocol, &mut now, limit);
            assert_eq!(got, Ok(()), "protocol {protocol}, cookies {cookies}");
        }
    }
}

#[test]
fn every_unvalidated_reply_stays_within_its_amplification_limit() {
    let motd = |n| EndpointConfig {
        offline_ping_response: Bytes::from(vec![b'm'; n]),
        ..EndpointConfig::default()
    };
    let victim = spoofed(1);
    let ping: Bytes = UnconnectedPing {
        only_if_open: false,
        time: 1,
        client_guid: Some(7),
    }
    .to_vec()
    .into();
    // Ping -> pong, within `pong_amplification` (6, for Bedrock MOTDs): 165 bytes of MOTD
    // fit (33 + 165 = 198 = 6 x 33); 166 do not.
    for (n, answered) in [(165, true), (166, false)] {
        let (mut ep, now, _) = server(motd(n));
        ep.handle(now, victim, ping.clone());
        let out = bytes_to(&drain(&mut ep, now), victim);
        assert!(out <= 6 * ping.len());
        assert_eq!(out > 0, answered, "MOTD of {n}");
        assert_eq!(ep.stats().pongs_too_large, u64::from(!answered));
    }
    // Without cookies, so that bare OCR2s are answered (with them they get nothing).
    let (mut ep, now, addr) = server(EndpointConfig {
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    });
    // An unpadded OCR1 (18 bytes) is not answered at all.
    ep.handle(now, victim, ocr1(6, 18 + 28));
    assert_eq!(bytes_to(&drain(&mut ep, now), victim), 0);
    assert_eq!(ep.stats().ocr1_too_small, 1);
    // OCR1 -> Reply1 / 0x19; OCR2 -> Reply2 / refusals: each within 3x.
    for (req, name) in [
        (ocr1(6, 400), "OCR1"),
        (ocr1(99, 400), "OCR1 of an unknown protocol"),
        (ocr2(addr, 1, None), "OCR2"),
        (ocr2(addr, 1, None), "OCR2 repeated"),
        (ocr2(addr, 2, None), "OCR2 of another GUID"),
    ] {
        ep.handle(now, victim, req.clone());
        let out = bytes_to(&drain(&mut ep, now), victim);
        assert!(out > 0 && out <= 3 * req.len(), "{name}: {out}");
    }
    ep.ban(now, victim.ip(), None);
    let req = ocr2(addr, 3, None);
    ep.handle(now, victim, req.clone());
    let out = bytes_to(&drain(&mut ep, now), victim);
    assert!(out > 0 && out <= req.len(), "0x17: {out}");
    // A banned source's pings and connected datagrams get nothing (no reflection).
    ep.handle(now, victim, ping.clone());
    ep.handle(now, victim, Bytes::from_static(&[0x84, 0, 0, 0]));
    assert!(drain(&mut ep, now).is_empty());
    // Nor does a bare OCR1 (ID and magic, 17 bytes), shorter than the 25-byte 0x17.
    let stub = ocr1(6, 400).slice(..17);
    ep.handle(now, victim, stub);
    assert!(drain(&mut ep, now).is_empty());
    // Connection attempts are answered within a budget shared by all banned sources.
    let later = now + Duration::from_secs(5);
    let banned: Vec<SocketAddr> = (0..10).map(|i| spoofed(9000 + i)).collect();
    for b in &banned {
        ep.ban(later, b.ip(), None);
    }
    let req = ocr1(6, 400);
    for i in 0..1000 {
        ep.handle(later, banned[i % banned.len()], req.clone());
    }
    let replies = drain(&mut ep, later).len() as u64;
    assert_eq!(replies, BANNED_REPLIES_PER_SEC);
    ep.handle(later + Duration::from_secs(1), banned[0], req);
    assert_eq!(drain(&mut ep, later + Duration::from_secs(1)).len(), 1);
}

/// A blind attacker: speaks the whole handshake from a forged address without ever reading
/// a reply, repeating 0x09 and guessing the 0x13 echo. Returns (bytes in, bytes out).
fn blind_handshake(config: EndpointConfig, protocol: u8, with_ocr1: bool) -> (usize, usize) {
    let (mut ep, mut now, addr) = server(config);
    let victim = spoofed(77);
    let mut sent = 0;
    let mut feed = |ep: &mut Endpoint, now: Instant, d: Bytes| {
        sent += d.len();
        ep.handle(now, victim, d);
    };
    if with_ocr1 {
        feed(&mut ep, now, ocr1(protocol, 1492));
    }
    feed(&mut ep, now, ocr2(addr, 0xbad, None));
    let mut received = bytes_to(&drain(&mut ep, now), victim);
    for seq in 0..50u32 {
        feed(
            &mut ep,
            now,
            data(seq, Reliability::Reliable, 0, connection_request(0xbad)),
        );
        let guess = u64::from(seq) * 1000;
        feed(
            &mut ep,
            now,
            data(
                seq + 100,
                Reliability::ReliableOrdered,
                1,
                new_incoming(addr, guess),
            ),
        );
        now += Duration::from_millis(100);
        ep.handle_timeout(now);
        received += bytes_to(&drain(&mut ep, now), victim);
    }
    let stats = ep.stats();
    if ep.config().use_cookies == CookieMode::Always {
        // Its OCR2 has no cookie: nothing follows it, not even a record.
        assert_eq!(stats.connections, 0, "a blind handshake never connects");
        assert_eq!(
            (stats.bad_cookies, stats.half_open, stats.bad_echo),
            (1, 0, 0)
        );
    } else {
        // While calm, its first 0x13 is taken, as official RakNet takes it, but as
        // unproven: it counts against `max_unproven` (see `CookieMode`).
        assert_eq!((stats.connections, stats.unproven), (1, 1), "{stats:?}");
    }
    (sent, received)
}

#[test]
fn blind_handshake_gets_at_most_three_times_what_it_sends() {
    for protocol in [6, 11] {
        for cookies in [true, false] {
            for with_ocr1 in [false, true] {
                let config = EndpointConfig {
                    use_cookies: cookies.into(),
                    ..EndpointConfig::default()
                };
                let (sent, received) = blind_handshake(config, protocol, with_ocr1);
                let case = format!("protocol {protocol}, cookies {cookies}, OCR1 {with_ocr1}");
                assert!(
                    received <= 3 * sent,
                    "{case}: sent {sent}, received {received}"
                );
                // With cookies only the OCR1 is answered (Reply1), and nothing else.
                assert_eq!(received > 0, !cookies || with_ocr1, "{case}");
            }
        }
    }
}

#[test]
fn a_single_repeated_0x09_gets_its_0x10_only_within_the_budget() {
    // Without OCR1 credit: OCR2 (34) + 0x09s (28 each) pay for Reply2 (35) and 110-byte
    // 0x10s at most three times over (without cookies: with them a bare OCR2 gets nothing).
    let (mut ep, now, addr) = server(EndpointConfig {
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    });
    let victim = spoofed(5);
    ep.handle(now, victim, ocr2(addr, 9, None));
    let mut sent = 34;
    let mut got = bytes_to(&drain(&mut ep, now), victim);
    for seq in 0..20 {
        let d = data(seq, Reliability::Reliable, 0, connection_request(9));
        sent += d.len();
        ep.handle(now, victim, d);
        got += bytes_to(&drain(&mut ep, now), victim);
        assert!(got <= 3 * sent, "after {seq}: {got} > 3 x {sent}");
    }
    assert!(ep.stats().amplification_limited > 0);
}

/// Offline messages a server does not answer are counted, not silently dropped: a refusal or
/// a Reply2 that no handshake of ours asked for (a reflection aimed at us), and an "only if
/// open" ping to a full server.
#[test]
fn unanswered_offline_messages_are_counted() {
    let (mut ep, now, addr) = server(EndpointConfig {
        limits: Limits {
            max_connections: 1,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    });
    let stranger = spoofed(3);
    ep.handle(
        now,
        stranger,
        NoFreeIncomingConnections { server_guid: 1 }.to_vec().into(),
    );
    let reply2 = OpenConnectionReply2 {
        server_guid: 1,
        client_address: addr,
        mtu: 1400,
        security_answer: None,
    };
    ep.handle(now, stranger, reply2.to_vec().into());
    assert_eq!(ep.stats().offline_ignored, 2);
    // Full (one real client in), an "only if open" ping gets no pong and is counted.
    let player = SocketAddr::from(([10, 1, 1, 1], 20_000));
    let mut clock = now;
    let limit = Duration::from_millis(500);
    assert_eq!(
        real_client(&mut ep, addr, player, 11, &mut clock, limit),
        Ok(())
    );
    drain(&mut ep, clock);
    let ping = UnconnectedPing {
        only_if_open: true,
        time: 1,
        client_guid: Some(7),
    };
    ep.handle(clock, stranger, ping.to_vec().into());
    assert!(drain(&mut ep, clock).is_empty());
    assert_eq!(ep.stats().offline_ignored, 3);
}

#[test]
fn pongs_are_limited_per_source_and_globally() {
    let (mut ep, mut now, _) = server(EndpointConfig::default());
    let src = spoofed(3);
    let ping: Bytes = UnconnectedPing {
        only_if_open: false,
        time: 1,
        client_guid: Some(7),
    }
    .to_vec()
    .into();
    // 5,000 pings from one source in 0.4 s.
    let mut pongs = 0;
    for i in 0..5000 {
        if i % 50 == 0 {
            now += Duration::from_millis(4);
        }
        ep.handle(now, src, ping.clone());
        pongs += drain(&mut ep, now).len();
    }
    // A burst of 16, then 16 a second.
    assert!(pongs <= 16 + 7, "{pongs} pongs");
    assert_eq!(ep.stats().pongs_rate_limited, 5000 - pongs as u64);
    // 10,000 sources at once: the global byte budget holds.
    let (mut ep, now, _) = server(EndpointConfig {
        admission: AdmissionLimits {
            pong_bytes_per_sec: 10_000,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    });
    let mut bytes = 0;
    for i in 0..10_000 {
        ep.handle(now, spoofed(i), ping.clone());
        bytes += drain(&mut ep, now)
            .iter()
            .map(|(_, d)| d.len())
            .sum::<usize>();
    }
    assert!(bytes <= 10_000, "{bytes}");
    assert!(ep.stats().pongs_budget_exhausted > 9000);
}

/// A spoofed ping flood spends the strangers' pong budget, and the server no longer answers a
/// stranger's ping; a player who completed a handshake (and left) still gets its pong, from
/// any port of its IP: returning players keep seeing the server in their server list.
#[test]
fn a_spoofed_ping_flood_does_not_hide_the_server_from_its_players() {
    let server_cfg = EndpointConfig {
        admission: AdmissionLimits {
            pong_bytes_per_sec: 10_000,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(
        31,
        server_cfg,
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    let (c, _) = p.connect();
    p.client.close(p.now, c);
    assert!(
        p.drive_until(Duration::from_secs(5), |p| p.server.stats().connections
            == 0)
    );
    let now = p.now;
    let ping: Bytes = UnconnectedPing {
        only_if_open: false,
        time: 1,
        client_guid: None,
    }
    .to_vec()
    .into();
    for i in 0..10_000 {
        p.server.handle(now, spoofed(i), ping.clone());
        drain(&mut p.server, now);
    }
    assert!(p.server.stats().pongs_budget_exhausted > 9_000);
    let stranger = spoofed(20_000);
    p.server.handle(now, stranger, ping.clone());
    assert_eq!(bytes_to(&drain(&mut p.server, now), stranger), 0);
    // The player, from another port (its server-list screen's socket).
    let player = SocketAddr::new(p.client_addr.ip(), p.client_addr.port() + 1);
    p.server.handle(now, player, ping);
    let out = drain(&mut p.server, now);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, player);
    assert_eq!(out[0].1[0], 0x1c);
    assert_eq!(p.server.stats().pongs_to_known_ips, 1);
}

#[test]
fn client_endpoints_answer_no_stranger() {
    let (mut ep, now, addr) = server(EndpointConfig {
        accept_incoming: false,
        ..EndpointConfig::default()
    });
    let from = spoofed(9);
    let ping: Bytes = UnconnectedPing {
        only_if_open: false,
        time: 1,
        client_guid: None,
    }
    .to_vec()
    .into();
    ep.handle(now, from, ping);
    ep.handle(now, from, ocr1(11, 1492));
    ep.handle(now, from, ocr2(addr, 1, None));
    assert!(drain(&mut ep, now).is_empty());
    assert_eq!(ep.stats().offline_ignored, 3);
}

/// A connected pair, then the server alone on the clock: the test plays the client.
fn lonely_server() -> (Pair, ConnId) {
    let mut p = Pair::new(
        30,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig::default(),
    );
    let (_, s) = p.connect();
    (p, s)
}

fn server_closed(p: &mut Pair, s: ConnId) -> Option<DisconnectReason> {
    while let Some(e) = p.server.poll_event() {
        p.server_events.push(e);
    }
    p.server_events.iter().find_map(|e| match e {
        Event::Disconnected { conn, reason } if *conn == s => Some(*reason),
        _ => None,
    })
}

#[test]
fn slowloris_garbage_does_not_hold_a_connection() {
    let (mut p, s) = lonely_server();
    let start = p.now;
    // One undecodable byte with the 0x80 bit, every 9 s; the client itself is silent.
    for tick in 1..=400 {
        p.now += Duration::from_millis(100);
        if tick % 90 == 0 {
            p.server
                .handle(p.now, p.client_addr, Bytes::from_static(&[0x80]));
        }
        p.server.handle_timeout(p.now);
        drain(&mut p.server, p.now);
        if server_closed(&mut p, s).is_some() {
            break;
        }
    }
    assert_eq!(server_closed(&mut p, s), Some(DisconnectReason::Timeout));
    assert!(
        p.now - start <= Duration::from_millis(10_200),
        "{:?}",
        p.now - start
    );
}

#[test]
fn peer_that_never_acknowledges_is_closed() {
    let (mut p, s) = lonely_server();
    let start = p.now;
    p.server
        .send(
            p.now,
            s,
            Bytes::from_static(&[0x86, 1]),
            SendOptions::new(Reliability::Reliable),
        )
        .unwrap();
    // Forged keep-alives: valid, fresh datagrams with a ping, never an ACK.
    for tick in 1..=300u32 {
        p.now += Duration::from_millis(100);
        if tick % 10 == 0 {
            let ping = ConnectedPing { time: 1 }.to_vec();
            let d = data(1000 + tick, Reliability::Unreliable, 0, ping);
            p.server.handle(p.now, p.client_addr, d);
        }
        p.server.handle_timeout(p.now);
        drain(&mut p.server, p.now);
        if server_closed(&mut p, s).is_some() {
            break;
        }
    }
    assert_eq!(server_closed(&mut p, s), Some(DisconnectReason::Timeout));
    assert!(
        p.now - start <= Duration::from_millis(10_200),
        "{:?}",
        p.now - start
    );
}

/// Drive the server for up to 30 s in 100 ms steps, calling `feed` every `every` steps;
/// returns when the connection closed and how long it took.
fn hold_open(
    p: &mut Pair,
    s: ConnId,
    every: u32,
    mut feed: impl FnMut(&mut Pair, u32),
) -> (Option<DisconnectReason>, Duration) {
    let start = p.now;
    for tick in 1..=300u32 {
        p.now += Duration::from_millis(100);
        if tick % every == 0 {
            feed(p, tick);
        }
        p.server.handle_timeout(p.now);
        drain(&mut p.server, p.now);
        if server_closed(p, s).is_some() {
            break;
        }
    }
    (server_closed(p, s), p.now - start)
}

#[test]
fn slowloris_with_valid_headers_and_garbage_bodies_is_closed() {
    let (mut p, s) = lonely_server();
    // A well-formed datagram header with a fresh number every 2 s, over 32 bytes of garbage.
    let (reason, took) = hold_open(&mut p, s, 20, |p, tick| {
        let mut d = Vec::new();
        DataHeader::new(DatagramSeq::new(1000 + tick)).encode(&mut d);
        d.extend_from_slice(&[0xFF; 32]);
        p.server.handle(p.now, p.client_addr, Bytes::from(d));
    });
    assert_eq!(reason, Some(DisconnectReason::Timeout));
    assert!(took <= Duration::from_millis(10_200), "{took:?}");
}

#[test]
fn a_valid_pinger_that_never_acknowledges_is_closed_even_when_idle() {
    // Nothing reliable of ours is outstanding: the idle keepalive goes reliable, and a
    // peer that never acknowledges it is dead (official RakNet's rule).
    let (mut p, s) = lonely_server();
    let (reason, took) = hold_open(&mut p, s, 10, |p, tick| {
        let ping = ConnectedPing { time: 1 }.to_vec();
        let d = data(1000 + tick, Reliability::Unreliable, 0, ping);
        p.server.handle(p.now, p.client_addr, d);
    });
    assert_eq!(reason, Some(DisconnectReason::Timeout));
    // The first keepalive goes out after the 5 s ping interval, then waits the timeout.
    assert!(took <= Duration::from_millis(15_200), "{took:?}");
}

#[test]
fn forged_nak_resends_are_bounded_per_rtt() {
    for congestion in [CongestionControl::Reno, CongestionControl::Bbr] {
        forged_nak_resends_are_bounded_per_rtt_with(congestion);
    }
}

fn forged_nak_resends_are_bounded_per_rtt_with(congestion: CongestionControl) {
    let config = EndpointConfig {
        congestion,
        ..EndpointConfig::default()
    };
    let mut p = Pair::new(30, config.clone(), config, LinkConfig::default());
    let (_, s) = p.connect();
    // Let the handshake's last messages (the server's first ping) be acknowledged: this test
    // plays the client from here on.
    p.drive_until(Duration::from_millis(100), |_| false);
    for i in 0..2000u32 {
        let msg = Bytes::from(
            [0x86]
                .into_iter()
                .chain(i.to_be_bytes())
                .chain([0; 1000])
                .collect::<Vec<_>>(),
        );
        p.server
            .send(p.now, s, msg, SendOptions::new(Reliability::Reliable))
            .unwrap();
    }
    // Play a client that ACKs everything for a while, so the window grows past 16
    // datagrams, then stops.
    let mut in_flight = 0;
    let mut newest = 0;
    for round in 0..16 {
        // Send what the engine releases over 20 ms. BBR paces at the measured delivery rate,
        // so its deadlines are honoured, as a real driver does; Reno's pacer holds a whole
        // window at this short handshake RTT, and one call a round sends it.
        let end = p.now + Duration::from_millis(20);
        let mut out = Vec::new();
        let honour_deadlines = congestion == CongestionControl::Bbr;
        while let Some(t) = p
            .server
            .poll_timeout()
            .filter(|t| honour_deadlines && *t < end)
        {
            p.now = t.max(p.now + Duration::from_micros(1));
            p.server.handle_timeout(p.now);
            out.extend(drain(&mut p.server, p.now));
        }
        p.now = end;
        p.server.handle_timeout(p.now);
        out.extend(drain(&mut p.server, p.now));
        in_flight = out.len();
        newest = out
            .iter()
            .filter_map(|(_, d)| match Datagram::decode(d.clone(), false) {
                Ok(Datagram::Data { header, .. }) => Some(header.seq.get()),
                _ => None,
            })
            .fold(newest, u32::max);
        if round == 12 || (round >= 5 && in_flight > 16) {
            break;
        }
        let ranges = out
            .iter()
            .filter_map(|(_, d)| match Datagram::decode(d.clone(), false) {
                Ok(Datagram::Data { header, .. }) => Some(AckRange::single(header.seq)),
                _ => None,
            })
            .collect();
        let ack = Ack {
            timestamp: None,
            arrival_rate: None,
            ranges,
        };
        p.server.handle(p.now, p.client_addr, ack.to_vec().into());
    }
    assert!(in_flight > 16, "{congestion:?} {in_flight}");
    // A NAK of every number sent (one reaching beyond would be ignored whole).
    let nak = Nak {
        ranges: vec![AckRange {
            start: DatagramSeq::new(0),
            end: DatagramSeq::new(newest),
        }],
    };
    let before = p.server.connection_stats(s).unwrap();
    p.server.handle(p.now, p.client_addr, nak.to_vec().into());
    let stats = p.server.connection_stats(s).unwrap();
    // At most a congestion window's worth per RTT is declared lost and resent.
    assert!(
        stats.datagrams_lost - before.datagrams_lost <= (before.cwnd / 1464).max(16) as u64,
        "{congestion:?} {stats:?}"
    );
    match congestion {
        // The window is the flight: the rest of it stays in flight.
        CongestionControl::Reno => {
            assert!(stats.naks_ignored > 0);
            assert!(stats.bytes_in_flight > 0, "{stats:?}");
        }
        // BBR's window has room beyond the flight, but the resends are paced: what goes out
        // at once is a pacing burst, the pacer's 8 datagrams or what 2 ms earn at the pacing
        // rate if more. In startup that rate is 2.885x the delivery rate, here about the last
        // 20 ms round's `in_flight`: 2 ms earn 0.29 of it.
        CongestionControl::Bbr => {
            let burst = drain(&mut p.server, p.now).len();
            let pacing_burst = 8.max(3 * in_flight / 10);
            assert!(
                burst <= 16 && burst <= pacing_burst,
                "{burst} datagrams at once of {in_flight} in flight"
            );
        }
    }
}

/// A client of `config` that connected to a scripted server and got its Reply1 and Reply2:
/// it has just queued its 0x09 (not drained) and waits for the 0x10. Returns the client,
/// its connection and the server's address.
fn requesting(config: EndpointConfig, now: Instant) -> (Endpoint, ConnId, SocketAddr) {
    let server: SocketAddr = common::pair::SERVER.parse().unwrap();
    let mut c = Endpoint::new(config, common::pair::CLIENT.parse().unwrap(), now);
    let id = c.connect(now, server).unwrap();
    drain(&mut c, now);
    let reply1 = OpenConnectionReply1 {
        server_guid: 1,
        cookie: None,
        server_public_key: None,
        mtu: 1492,
    };
    c.handle(now, server, reply1.to_vec().into());
    drain(&mut c, now);
    let reply2 = OpenConnectionReply2 {
        server_guid: 1,
        client_address: common::pair::CLIENT.parse().unwrap(),
        mtu: 1492,
        security_answer: None,
    };
    c.handle(now, server, reply2.to_vec().into());
    (c, id, server)
}

#[test]
fn resends_back_off_until_the_first_ack() {
    // A client whose 0x09 is never acknowledged (a server that went silent after Reply2).
    let mut now = Instant::now();
    // Reply2 at once: the RTT sample is ~0, so the RTO sits at its 30 ms floor.
    let (mut c, _, _) = requesting(EndpointConfig::default(), now);
    let mut datagrams = drain(&mut c, now).len();
    for _ in 0..1000 {
        now += Duration::from_millis(10);
        c.handle_timeout(now);
        datagrams += drain(&mut c, now).len();
    }
    // Without backoff: one resend per 30 ms, ~330 in 10 s.
    assert!(datagrams <= 20, "{datagrams} datagrams");
}

/// Messages that come before the handshake ends are kept until it does (a client's 0x13 may
/// be lost while its first messages arrive; a server's 0x10 likewise). They count against
/// the same budgets as reassembly and ordering holds: they were not counted at all, and a
/// peer that delayed the end of its handshake (for up to the handshake timeout) could park
/// 64 messages of up to 32 MiB each outside every budget. Here a server that answers the
/// client's 0x09 with messages and no 0x10.
#[test]
fn messages_before_the_handshake_ends_count_against_the_buffer_budgets() {
    let budget = 10 * (1001 + Limits::PIECE_OVERHEAD);
    let now = Instant::now();
    let config = EndpointConfig {
        limits: Limits {
            max_reassembly_bytes: budget,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let (mut c, id, server) = requesting(config, now);
    drain(&mut c, now);
    for i in 0..20u32 {
        let mut message = vec![0u8; 1001];
        message[0] = 0x86;
        c.handle(now, server, data(i, Reliability::Reliable, i, message));
    }
    assert!(!c.is_connected(id), "still requesting");
    assert_eq!(c.stats().buffered_bytes, budget, "ten kept, ten refused");
    assert_eq!(c.connection_stats(id).unwrap().refused_over_limit, 10);
    // Refused, not taken and dropped: left unacknowledged, so the peer's resend is looked
    // at again (a taken one would be a duplicate, acknowledged and gone).
    let mut message = vec![0u8; 1001];
    message[0] = 0x86;
    c.handle(now, server, data(15, Reliability::Reliable, 15, message));
    let stats = c.connection_stats(id).unwrap();
    assert_eq!((stats.duplicates, stats.refused_over_limit), (0, 11));
}

/// A peer that stops reading but acknowledges the newest datagram every 8 s kept the idle
/// and acknowledgement timers happy and held its whole send backlog (64 MiB) for ever; 1,024
/// of them were 64 GiB. With more than its share waiting, a peer must acknowledge an eighth
/// of its backlog per timeout, or be closed.
#[test]
fn a_reader_that_acknowledges_a_datagram_now_and_then_is_closed() {
    let (mut p, s) = lonely_server();
    for _ in 0..4_000 {
        let msg = Bytes::from(vec![0x86; 1_000]);
        let opts = SendOptions::new(Reliability::ReliableOrdered);
        p.server.send(p.now, s, msg, opts).unwrap();
    }
    let start = p.now;
    let mut last_ack = p.now;
    let mut newest = None;
    let closed = loop {
        p.now += Duration::from_millis(100);
        p.server.handle_timeout(p.now);
        for (_, d) in drain(&mut p.server, p.now) {
            if let Ok(Datagram::Data { header, .. }) = Datagram::decode(d, false) {
                newest = Some(header.seq);
            }
        }
        if p.now >= last_ack + Duration::from_secs(8) {
            if let Some(seq) = newest {
                let ack = Ack {
                    timestamp: None,
                    arrival_rate: None,
                    ranges: vec![AckRange::single(seq)],
                };
                p.server.handle(p.now, p.client_addr, ack.to_vec().into());
            }
            last_ack = p.now;
        }
        if let Some(reason) = server_closed(&mut p, s) {
            break Some((reason, p.now - start));
        }
        if p.now > start + Duration::from_secs(60) {
            break None;
        }
    };
    let (reason, after) = closed.expect("still open after 60 s");
    assert_eq!(reason, DisconnectReason::LimitExceeded(Limit::SendBacklog));
    assert!(after <= Duration::from_secs(21), "{after:?}");
    assert_eq!(p.server.stats().send_backlog_bytes, 0);
}

/// A real reader on a slow link is not a stopped one: one that acknowledges what it gets
/// drains a backlog far over its share and stays.
#[test]
fn a_slow_but_real_reader_drains_its_backlog_and_stays() {
    let mut p = Pair::new(
        9,
        EndpointConfig::default(),
        EndpointConfig::default(),
        LinkConfig {
            bandwidth: Some(250_000),
            delay: Duration::from_millis(20),
            ..LinkConfig::default()
        },
    );
    let (c, s) = p.connect();
    // 4 MB at 250 KB/s: 16 s, eight times the 512 KiB share, past a timeout's check.
    for _ in 0..4_000 {
        let msg = Bytes::from(vec![0x86; 1_000]);
        let opts = SendOptions::new(Reliability::ReliableOrdered);
        p.server.send(p.now, s, msg, opts).unwrap();
    }
    let done = p.drive_until(Duration::from_secs(30), |p| p.client_messages() == 4_000);
    assert!(done, "{:?}", p.server.connection_stats(s));
    assert!(p.server.is_connected(s) && p.client.is_connected(c));
}
