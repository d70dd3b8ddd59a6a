//! Issue #29: accept what official RakNet accepts. Third-party client libraries follow the
//! handshake loosely, and a calm default server must take each of them:
//!
//! * jsp-raknet sends its 0x09 ConnectionRequest in an *unreliable* frame and cannot read a
//!   Reply1 carrying a cookie;
//! * rust-raknet and rak-rs cannot read the cookie either, and put their own 0x09 time in
//!   the "ping time" of 0x13, where our 0x10 time belongs;
//! * rust-raknet sends its 0x09 reliable-ordered (official sends it reliable), so its 0x13
//!   has ordering index 1;
//! * rak-rs numbers its datagrams anew after the handshake, and reads 0x10 outside its
//!   ordering: a 0x10 sent ordered (as official sends it) leaves it waiting for ever for
//!   the ordering index 0 that 0x10 took.
//!
//! Each client here is scripted datagram by datagram on the virtual clock. Under a spoofed
//! flood the server turns strict (cookies, echoes required) within a second, a client that
//! can take a cookie still connects, and the server turns calm again once the flood ends.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::*;

const SERVER: &str = "127.0.0.1:19132";

fn server(config: EndpointConfig) -> (Endpoint, Instant, SocketAddr) {
    let now = Instant::now();
    let addr: SocketAddr = SERVER.parse().unwrap();
    (Endpoint::new(config, addr, now), now, addr)
}

fn drain(ep: &mut Endpoint, now: Instant, to: SocketAddr) -> Vec<Bytes> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        if t.destination == to {
            out.push(Bytes::copy_from_slice(&buf[..t.size]));
        }
    }
    out
}

/// The frames of the data datagrams in `datagrams`.
fn frames(datagrams: &[Bytes]) -> Vec<Frame> {
    let mut out = Vec::new();
    for d in datagrams {
        if let Ok(Datagram::Data { body, .. }) = Datagram::decode(d.clone(), false) {
            out.extend(Frames::new(body).flatten());
        }
    }
    out
}

/// How a scripted client departs from the handshake official clients follow.
#[derive(Debug, Clone, Copy, Default)]
struct Quirks {
    /// 0x09 in an unreliable frame (jsp-raknet).
    unreliable_request: bool,
    /// 0x13 carries the client's own 0x09 time, not our 0x10 time (rust-raknet, rak-rs).
    echo_own_time: bool,
    /// Cannot read a Reply1 carrying a cookie (all three): fails if one comes.
    no_cookies: bool,
    /// Data datagrams after the handshake are numbered from 1 again (rak-rs).
    restart_numbers: bool,
    /// 0x09 in a reliable-ordered frame, ordering index 0 (rust-raknet).
    ordered_request: bool,
    /// Reads 0x10 outside its ordering (rak-rs): fails if 0x10 came ordered.
    unordered_accepted: bool,
    /// Stops once 0x10 came: never sends its 0x13 (an attacker holding a reserved slot).
    stop_at_accepted: bool,
}

const REQUEST_TIME: u64 = 4242;

/// One scripted client at `from`: the handshake with its quirks, then one reliable
/// message. `Ok(payloads the server delivered)`, or `Err(what stopped it)`.
fn scripted(
    ep: &mut Endpoint,
    now: Instant,
    server: SocketAddr,
    from: SocketAddr,
    quirks: Quirks,
) -> Result<Vec<Bytes>, String> {
    let ip = match from.ip() {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => u128::from(v6) as u64,
    };
    let guid = ip << 16 | u64::from(from.port());
    ep.handle(
        now,
        from,
        OpenConnectionRequest1 {
            protocol: 10,
            mtu: 1400,
        }
        .to_vec()
        .into(),
    );
    let reply = drain(ep, now, from);
    let reply1 = reply
        .iter()
        .find_map(|d| match OfflineMessage::decode(&mut d.clone(), false) {
            Ok(OfflineMessage::OpenConnectionReply1(r)) => Some(r),
            _ => None,
        })
        .ok_or("no Reply1")?;
    if reply1.cookie.is_some() && quirks.no_cookies {
        return Err("a Reply1 with a cookie".into());
    }
    ep.handle(
        now,
        from,
        OpenConnectionRequest2 {
            cookie: reply1.cookie,
            client_challenge: None,
            server_address: server,
            mtu: 1400,
            client_guid: guid,
        }
        .to_vec()
        .into(),
    );
    let reply = drain(ep, now, from);
    if !reply.iter().any(|d| {
        matches!(
            OfflineMessage::decode(&mut d.clone(), false),
            Ok(OfflineMessage::OpenConnectionReply2(_))
        )
    }) {
        return Err(format!("no Reply2: {:?}", ep.stats()));
    }
    // Reliable and ordering indices as a client counts them: only reliable frames take a
    // reliable index, only ordered ones an ordering index.
    let frame = |seq: u32, reliability: Reliability, index: u32, order: u32, payload: Vec<u8>| {
        let mut out = Vec::new();
        let mut header = DataHeader::new(DatagramSeq::new(seq));
        header.needs_b_and_as = true;
        header.encode(&mut out);
        let mut f = Frame::new(reliability, payload.into());
        f.message_index = MessageIndex::new(index);
        f.order_index = OrderIndex::new(order);
        f.encode(&mut out);
        Bytes::from(out)
    };
    let request = ConnectionRequest {
        client_guid: guid,
        time: REQUEST_TIME,
        use_security: false,
        password: Bytes::new(),
    }
    .to_vec();
    let reliability = match (quirks.unreliable_request, quirks.ordered_request) {
        (true, _) => Reliability::Unreliable,
        (false, true) => Reliability::ReliableOrdered,
        (false, false) => Reliability::Reliable,
    };
    ep.handle(now, from, frame(0, reliability, 0, 0, request));
    // The reliable index of the next reliable frame, and the next ordering index.
    let next = u32::from(!quirks.unreliable_request);
    let next_order = u32::from(quirks.ordered_request);
    let (accepted, ordered) = frames(&drain(ep, now, from))
        .into_iter()
        .find_map(|f| match ConnectedMessage::decode(f.payload) {
            Ok(ConnectedMessage::ConnectionRequestAccepted(a)) => {
                Some((a, f.reliability.is_ordered()))
            }
            _ => None,
        })
        .ok_or("no 0x10")?;
    if ordered && quirks.unordered_accepted {
        return Err("0x10 took an ordering index".into());
    }
    if quirks.stop_at_accepted {
        return Ok(Vec::new());
    }
    let nic = NewIncomingConnection {
        server_address: server,
        internal_addresses: vec![addr::UNASSIGNED; 20],
        ping_time: if quirks.echo_own_time {
            REQUEST_TIME
        } else {
            accepted.accepted_time
        },
        pong_time: REQUEST_TIME + 1,
    }
    .to_vec();
    ep.handle(
        now,
        from,
        frame(1, Reliability::ReliableOrdered, next, next_order, nic),
    );
    let seq = if quirks.restart_numbers { 1 } else { 2 };
    let hello = vec![0x86, 1, 2, 3];
    let ordered = Reliability::ReliableOrdered;
    ep.handle(
        now,
        from,
        frame(seq, ordered, next + 1, next_order + 1, hello),
    );
    let mut delivered = Vec::new();
    let mut connected = false;
    while let Some(e) = ep.poll_event() {
        match e {
            Event::Connected { addr, .. } if addr == from => connected = true,
            Event::Message { payload, .. } => delivered.push(payload),
            _ => {}
        }
    }
    let _ = drain(ep, now, from);
    if !connected {
        return Err(format!("not connected: {:?}", ep.stats()));
    }
    Ok(delivered)
}

fn client(i: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 2], 40_000 + i))
}

#[test]
fn a_calm_default_server_takes_every_quirky_client() {
    let all = [
        (
            "jsp-raknet",
            Quirks {
                unreliable_request: true,
                no_cookies: true,
                ..Quirks::default()
            },
        ),
        (
            "rust-raknet",
            Quirks {
                echo_own_time: true,
                no_cookies: true,
                ordered_request: true,
                ..Quirks::default()
            },
        ),
        (
            "rak-rs",
            Quirks {
                echo_own_time: true,
                no_cookies: true,
                restart_numbers: true,
                unordered_accepted: true,
                ..Quirks::default()
            },
        ),
        ("official", Quirks::default()),
    ];
    let (mut ep, now, addr) = server(EndpointConfig::default());
    for (i, (name, quirks)) in all.into_iter().enumerate() {
        let got = scripted(&mut ep, now, addr, client(i as u16), quirks);
        assert_eq!(
            got,
            Ok(vec![Bytes::from_static(&[0x86, 1, 2, 3])]),
            "{name}"
        );
    }
    let stats = ep.stats();
    assert_eq!(stats.connections, 4);
    // The two clients that echoed their own time are unproven; the others proved their
    // address by echoing ours.
    assert_eq!((stats.unproven, stats.strict), (2, false), "{stats:?}");
}

#[test]
fn unproven_connections_have_a_cap_per_ip_and_in_all() {
    let (mut ep, now, addr) = server(EndpointConfig {
        admission: AdmissionLimits {
            max_unproven: 20,
            max_unproven_per_ip: 3,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    });
    let quirky = Quirks {
        echo_own_time: true,
        ..Quirks::default()
    };
    for i in 0..3 {
        assert!(scripted(&mut ep, now, addr, client(i), quirky).is_ok());
    }
    // The fourth from that IP is told it was refused (0x15 after its 0x13)...
    assert!(scripted(&mut ep, now, addr, client(3), quirky).is_err());
    assert_eq!(ep.stats().refused_unproven, 1);
    // ... while a client that echoes our time is not affected.
    assert!(scripted(&mut ep, now, addr, client(4), Quirks::default()).is_ok());
    // Other IPs (each of a /24 of its own) share the global cap: 17 more fit, the 18th
    // does not.
    let mut ok = 0;
    for i in 0..20u8 {
        let from = SocketAddr::from(([127, 0, 1 + i, 1], 5000));
        ok += usize::from(scripted(&mut ep, now, addr, from, quirky).is_ok());
    }
    assert_eq!((ok, ep.stats().unproven), (17, 20));
}

/// A network's name, its `i`-th host and the cap it should reach.
type NetworkCase = (&'static str, fn(u16) -> SocketAddr, usize);

/// Hosts of one network share a cap of their own, growing with the network: an IPv4 /24
/// holds four hosts' worth of unproven connections, an IPv6 /56 two and a /48 four.
#[test]
fn unproven_connections_have_a_cap_per_network() {
    let quirky = Quirks {
        echo_own_time: true,
        ..Quirks::default()
    };
    let cases: [NetworkCase; 3] = [
        (
            "IPv4 /24",
            |i| SocketAddr::from(([10, 9, 9, i as u8], 5000 + i)),
            12,
        ),
        (
            "IPv6 /56",
            |i| SocketAddr::from(([0x2001, 0xdb8, 0, i, 0, 0, 0, 1], 5000 + i)),
            6,
        ),
        (
            "IPv6 /48",
            |i| SocketAddr::from(([0x2001, 0xdb8, 0, i << 8, 0, 0, 0, 1], 5000 + i)),
            12,
        ),
    ];
    for (name, host, cap) in cases {
        let (mut ep, now, addr) = server(EndpointConfig {
            admission: AdmissionLimits {
                max_unproven_per_ip: 3,
                ..AdmissionLimits::default()
            },
            ..EndpointConfig::default()
        });
        // Two connections from each of 10 hosts of the network (under the per-host cap).
        let mut ok = 0;
        for i in 0..20u16 {
            let from = host(i / 2);
            let from = SocketAddr::new(from.ip(), 6000 + i);
            ok += usize::from(scripted(&mut ep, now, addr, from, quirky).is_ok());
        }
        let stats = ep.stats();
        assert_eq!((ok, stats.unproven), (cap, cap), "{name}: {stats:?}");
        assert_eq!(stats.refused_unproven, (20 - cap) as u64, "{name}");
        // A client of that network that echoes our time is not affected.
        let from = SocketAddr::new(host(11).ip(), 7000);
        assert!(
            scripted(&mut ep, now, addr, from, Quirks::default()).is_ok(),
            "{name}"
        );
    }
}

/// Spoofed cookie-less OCR2s from `n` addresses.
fn flood(ep: &mut Endpoint, now: Instant, server: SocketAddr, n: u32, base: u32) {
    for i in base..base + n {
        let [a, b, c, d] = (0x0a00_0000 + i).to_be_bytes();
        let from = SocketAddr::from(([a, b, c, d], 30_000));
        let ocr2 = OpenConnectionRequest2 {
            cookie: None,
            client_challenge: None,
            server_address: server,
            mtu: 1400,
            client_guid: u64::from(i) + 1_000_000,
        };
        ep.handle(now, from, ocr2.to_vec().into());
    }
}

#[test]
fn a_spoofed_flood_turns_the_handshake_strict_and_its_end_turns_it_calm() {
    let (mut ep, mut now, addr) = server(EndpointConfig::default());
    // 1,000 spoofed OCR2s a second, for 3 s, in 10 ms steps.
    for step in 0..300 {
        flood(&mut ep, now, addr, 10, step * 10);
        now += Duration::from_millis(10);
        ep.handle_timeout(now);
        if step == 99 {
            // Within the first second the server turned strict...
            assert!(ep.stats().strict, "{:?}", ep.stats());
            // ... so a quirky client is refused while it lasts: it cannot take a cookie.
            let quirky = Quirks {
                no_cookies: true,
                ..Quirks::default()
            };
            assert!(scripted(&mut ep, now, addr, client(1), quirky).is_err());
            // A client that takes a cookie and echoes our time connects at once.
            assert_eq!(
                scripted(&mut ep, now, addr, client(2), Quirks::default()).map(|m| m.len()),
                Ok(1)
            );
        }
    }
    let stats = ep.stats();
    assert_eq!((stats.strict, stats.strict_entered), (true, 1));
    // Spoofed OCR2s cannot answer a cookie: most of the flood left no record.
    assert!(stats.half_open < 300, "{stats:?}");
    // A 0x13 that does not echo our time is refused while strict, cookie or not.
    let rust_raknet = Quirks {
        echo_own_time: true,
        ..Quirks::default()
    };
    assert!(scripted(&mut ep, now, addr, client(3), rust_raknet).is_err());
    assert!(ep.stats().bad_echo >= 1);
    // The flood stops. Its records linger until the handshake timeout (10 s), and the
    // server turns calm 10 s after the pressure fell (the hysteresis): then it takes the
    // quirky clients again.
    for _ in 0..22 {
        now += Duration::from_secs(1);
        ep.handle_timeout(now);
    }
    let stats = ep.stats();
    assert_eq!((stats.strict, stats.strict_left), (false, 1), "{stats:?}");
    let jsp = Quirks {
        unreliable_request: true,
        no_cookies: true,
        ..Quirks::default()
    };
    assert!(scripted(&mut ep, now, addr, client(4), jsp).is_ok());
    assert!(scripted(&mut ep, now, addr, client(5), rust_raknet).is_ok());
}

/// Spoofed cookie-less OCR2s from the players' own IP (a NAT many players share), made while
/// the server was calm, fill that IP's share of half-open handshakes before the flood turns
/// it strict. A player from that IP who echoes the cookie must not wait behind them until
/// they time out: the unproven records give way (`make attack`'s ocr2-players-ip row lost
/// 10 of 18 players for 7 s).
#[test]
fn spoofed_records_from_a_players_ip_give_way_to_the_player() {
    let (mut ep, mut now, addr) = server(EndpointConfig::default());
    let players_ip = client(0).ip();
    for port in 0..200u16 {
        let ocr2 = OpenConnectionRequest2 {
            cookie: None,
            client_challenge: None,
            server_address: addr,
            mtu: 1400,
            client_guid: 7_000_000 + u64::from(port),
        };
        ep.handle(
            now,
            SocketAddr::new(players_ip, 50_000 + port),
            ocr2.to_vec().into(),
        );
    }
    assert_eq!(
        ep.stats().half_open,
        64,
        "the IP's share is full: {:?}",
        ep.stats()
    );
    // Others keep the pressure on: the server is strict.
    flood(&mut ep, now, addr, 300, 0);
    now += Duration::from_millis(10);
    ep.handle_timeout(now);
    assert!(ep.stats().strict);
    // The player, from that IP, with the cookie: connected at once.
    let player = SocketAddr::new(players_ip, 40_000);
    assert_eq!(
        scripted(&mut ep, now, addr, player, Quirks::default()).map(|m| m.len()),
        Ok(1)
    );
}

/// 17 addresses (of 17 /24s) whose 64 ports each echoed the cookie, sent their 0x09 and never their 0x13
/// (again every handshake timeout) held all 1,024 slots: each 0x10 reserved one for 10 s.
/// Reservations are now capped (8 per IP, a quarter of the slots in all) and lapse 2 s after
/// their 0x10.
#[test]
fn handshakes_that_stop_at_0x10_cannot_hold_the_slots() {
    let (mut ep, mut now, addr) = server(EndpointConfig {
        use_cookies: CookieMode::Always,
        admission: AdmissionLimits {
            new_connections_per_ip_per_sec: 1_000,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    });
    let stopped = Quirks {
        stop_at_accepted: true,
        ..Quirks::default()
    };
    for a in 0..17u8 {
        for port in 0..64u16 {
            let from = SocketAddr::from(([127, 9, a, 1], 30_000 + port));
            assert_eq!(scripted(&mut ep, now, addr, from, stopped), Ok(Vec::new()));
        }
    }
    assert_eq!(ep.stats().half_open_reserved, 17 * 8);
    // Players connect meanwhile: more than the slots left unreserved would allow before.
    for i in 0..10 {
        assert_eq!(
            scripted(&mut ep, now, addr, client(i), Quirks::default()).map(|m| m.len()),
            Ok(1)
        );
    }
    now += Duration::from_millis(2_001);
    ep.handle_timeout(now);
    let stats = ep.stats();
    assert_eq!(
        (stats.half_open_reserved, stats.reservations_lapsed),
        (0, 136)
    );
    assert_eq!(stats.connections, 10, "{stats:?}");
}

#[test]
fn cookies_always_and_never_stay_as_they_were() {
    let (mut ep, now, addr) = server(EndpointConfig {
        use_cookies: CookieMode::Always,
        ..EndpointConfig::default()
    });
    let jsp = Quirks {
        unreliable_request: true,
        no_cookies: true,
        ..Quirks::default()
    };
    assert!(scripted(&mut ep, now, addr, client(1), jsp).is_err());
    assert!(scripted(&mut ep, now, addr, client(2), Quirks::default()).is_ok());
    let (mut ep, now, addr) = server(EndpointConfig {
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    });
    assert!(scripted(&mut ep, now, addr, client(1), jsp).is_ok());
}
