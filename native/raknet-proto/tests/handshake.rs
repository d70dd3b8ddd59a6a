//! Both roles of the handshake between two engines, over the simulator, and every refusal.

mod common;

use std::time::Duration;

use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

fn cfg() -> EndpointConfig {
    EndpointConfig::default()
}

fn failure(events: &[Event]) -> Option<ConnectError> {
    events.iter().find_map(|e| match e {
        Event::Disconnected {
            reason: DisconnectReason::ConnectFailed(err),
            ..
        } => Some(*err),
        _ => None,
    })
}

#[test]
fn handshake_completes_for_both_roles() {
    let mut p = Pair::new(1, cfg(), cfg(), LinkConfig::default());
    let (c, s) = p.connect();
    let Some(Event::Connected {
        role,
        protocol,
        mtu,
        guid,
        addr,
        ..
    }) = p
        .client_events
        .iter()
        .find(|e| matches!(e, Event::Connected { .. }))
        .cloned()
    else {
        panic!()
    };
    assert_eq!((role, protocol, mtu), (Role::Client, 11, 1492));
    assert_eq!(guid, p.server.guid());
    assert_eq!(addr, p.server_addr);
    let Some(Event::Connected {
        role, guid, addr, ..
    }) = p
        .server_events
        .iter()
        .find(|e| matches!(e, Event::Connected { .. }))
        .cloned()
    else {
        panic!()
    };
    assert_eq!(
        (role, guid, addr),
        (Role::Server, p.client.guid(), p.client_addr)
    );
    assert!(p.client.is_connected(c) && p.server.is_connected(s));
    assert_eq!(p.server.stats().connections, 1);
}

#[test]
fn handshake_survives_heavy_loss() {
    let mut connected = 0;
    for seed in 0..20 {
        let link = LinkConfig {
            loss: 0.3,
            ..LinkConfig::default()
        }
        .with_delay(Duration::from_millis(20));
        let mut p = Pair::new(seed, cfg(), cfg(), link);
        p.client.connect(p.now, p.server_addr).unwrap();
        let ok = p.drive_until(Duration::from_secs(10), |p| {
            p.client_events.iter().any(|e| {
                matches!(e, Event::Connected { .. }) || matches!(e, Event::Disconnected { .. })
            })
        });
        assert!(ok, "seed {seed}: no outcome");
        // At 30 % loss each way a 10 s handshake can fail, and only by timing out: as
        // official RakNet's, each OCR1 attempt needs four datagrams through (0.7^4 = 0.24)
        // to reach the connected stage.
        match failure(&p.client_events) {
            None => connected += 1,
            Some(e) => assert_eq!(e, ConnectError::Timeout, "seed {seed}"),
        }
    }
    eprintln!("{connected} of 20 handshakes completed at 30 % loss each way");
    // 16 of these 20 seeds; a handshake that never completed would fail here.
    assert!(connected >= 14, "{connected} of 20 handshakes completed");
}

#[test]
fn mtu_discovery_falls_back_to_what_the_path_carries() {
    let link = LinkConfig {
        mtu: Some(1200 - 28),
        ..LinkConfig::default()
    };
    let mut p = Pair::new(2, cfg(), cfg(), link);
    let (c, _) = p.connect();
    assert_eq!(p.client.mtu(c), Some(1200));
    // 4 attempts of 500 ms at 1492 were dropped first.
    assert!(
        p.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        p.elapsed()
    );
}

#[test]
fn server_caps_the_mtu() {
    let server = EndpointConfig {
        max_mtu: 1400,
        ..cfg()
    };
    let mut p = Pair::new(3, server, cfg(), LinkConfig::default());
    let (c, s) = p.connect();
    assert_eq!(p.client.mtu(c), Some(1400));
    assert_eq!(p.server.mtu(s), Some(1400));
}

#[test]
fn handshake_rejects_incompatible_protocol() {
    let client = EndpointConfig {
        protocol_versions: vec![5],
        ..cfg()
    };
    let server = EndpointConfig {
        protocol_versions: vec![6],
        ..cfg()
    };
    let mut p = Pair::new(4, server, client, LinkConfig::default());
    p.client.connect(p.now, p.server_addr).unwrap();
    assert!(
        p.drive_until(Duration::from_secs(5), |p| failure(&p.client_events)
            .is_some())
    );
    assert_eq!(
        failure(&p.client_events),
        Some(ConnectError::IncompatibleProtocol { server_protocol: 6 })
    );
    assert_eq!(p.server.stats().incompatible_protocol, 1);
}

#[test]
fn handshake_accepts_each_configured_protocol() {
    for protocol in [6, 10, 11] {
        let client = EndpointConfig {
            protocol_versions: vec![protocol],
            ..cfg()
        };
        let mut p = Pair::new(5, cfg(), client, LinkConfig::default());
        p.connect();
        let server_protocol = p.server_events.iter().find_map(|e| match e {
            Event::Connected { protocol, .. } => Some(*protocol),
            _ => None,
        });
        assert_eq!(server_protocol, Some(protocol));
    }
}

#[test]
fn handshake_refused_when_full() {
    let server = EndpointConfig {
        limits: Limits {
            max_connections: 0,
            ..Limits::default()
        },
        ..cfg()
    };
    let mut p = Pair::new(6, server, cfg(), LinkConfig::default());
    p.client.connect(p.now, p.server_addr).unwrap();
    assert!(
        p.drive_until(Duration::from_secs(5), |p| failure(&p.client_events)
            .is_some())
    );
    assert_eq!(
        failure(&p.client_events),
        Some(ConnectError::NoFreeIncomingConnections)
    );
}

/// Try connecting a fresh client from `port` to the pair's server: `None` on success, else
/// why it failed.
fn connect_another(p: &mut Pair, port: u16) -> Option<ConnectError> {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // Its own seed: a GUID of its own (the server refuses a GUID it already has).
    let config = EndpointConfig {
        rng_seed: u64::from(port),
        ..cfg()
    };
    p.client = Endpoint::new(config, addr, p.now);
    p.client_addr = addr;
    p.client_events.clear();
    p.client.connect(p.now, p.server_addr).unwrap();
    p.drive_until(Duration::from_secs(10), |p| {
        p.client_events
            .iter()
            .any(|e| matches!(e, Event::Connected { .. } | Event::Disconnected { .. }))
    });
    failure(&p.client_events)
}

#[test]
fn a_suspended_server_keeps_its_players_answers_pings_and_refuses_newcomers() {
    let mut p = Pair::new(8, cfg(), cfg(), LinkConfig::default());
    let (c, s) = p.connect();
    p.server.set_suspended(true);
    assert_eq!(
        connect_another(&mut p, 40001),
        Some(ConnectError::NoFreeIncomingConnections)
    );
    p.client.ping(p.now, p.server_addr);
    assert!(p.drive_until(Duration::from_secs(1), |p| p
        .client_events
        .iter()
        .any(|e| matches!(e, Event::Pong { .. }))));
    assert!(p.server.is_connected(s), "the first player stays");
    let _ = c;

    p.server.set_suspended(false);
    assert_eq!(connect_another(&mut p, 40002), None);

    // Two players now; a limit of two refuses a third and closes no one.
    p.server.set_max_connections(2);
    assert_eq!(
        connect_another(&mut p, 40003),
        Some(ConnectError::NoFreeIncomingConnections)
    );
    assert_eq!(p.server.stats().connections, 2);
}

#[test]
fn handshake_refused_when_banned() {
    let mut p = Pair::new(7, cfg(), cfg(), LinkConfig::default());
    p.server.ban(p.now, p.client_addr.ip(), None);
    p.client.connect(p.now, p.server_addr).unwrap();
    assert!(
        p.drive_until(Duration::from_secs(5), |p| failure(&p.client_events)
            .is_some())
    );
    assert_eq!(failure(&p.client_events), Some(ConnectError::Banned));
}

/// A GUID ban closes that client's connection, refuses its next attempt with 0x17 from any
/// address, and is lifted by `unban_guid`; other GUIDs from the same address get in.
#[test]
fn a_guid_ban_closes_and_refuses_that_client_only() {
    let mut p = Pair::new(27, cfg(), cfg(), LinkConfig::default());
    let (c, _s) = p.connect();
    let guid = p.client.guid();
    p.server
        .ban_guid(p.now, guid, Some(Duration::from_secs(60)));
    assert!(p.drive_until(Duration::from_secs(5), |p| {
        p.server.stats().connections == 0 && !p.client.is_connected(c)
    }));
    let left = p.server.banned_guids(p.now);
    assert!(matches!(left[..], [(g, Some(d))] if g == guid && d <= Duration::from_secs(60)));

    p.client_events.clear();
    p.client.connect(p.now, p.server_addr).unwrap();
    assert!(
        p.drive_until(Duration::from_secs(5), |p| failure(&p.client_events)
            .is_some())
    );
    assert_eq!(failure(&p.client_events), Some(ConnectError::Banned));

    p.server.unban_guid(guid);
    assert!(p.server.banned_guids(p.now).is_empty());
    p.client_events.clear();
    p.client.connect(p.now, p.server_addr).unwrap();
    assert!(p.drive_until(Duration::from_secs(5), |p| p
        .client_events
        .iter()
        .any(|e| matches!(e, Event::Connected { .. }))));

    // Banned again: another client of the same IP is not that GUID, and gets in.
    p.server.ban_guid(p.now, guid, None);
    assert_eq!(connect_another(&mut p, 40005), None);
    assert_ne!(p.client.guid(), guid);
}

/// A ban closes the connections it covers (a network's too), and only those; the peer is
/// sent 0x15 (its acknowledgement is dropped with everything else from the banned network,
/// so the server's side ends after its linger).
#[test]
fn a_ban_closes_the_connections_it_covers() {
    for len in [None, Some(24), Some(8)] {
        let mut p = Pair::new(17, cfg(), cfg(), LinkConfig::default());
        let (c, s) = p.connect();
        // A network that does not hold the client first: nothing closes.
        p.server
            .ban_prefix(p.now, "10.9.9.9".parse().unwrap(), len, None);
        p.drive_until(Duration::from_millis(200), |_| false);
        assert!(p.server.is_connected(s) && p.client.is_connected(c));
        p.server.ban_prefix(p.now, p.client_addr.ip(), len, None);
        assert!(
            p.drive_until(Duration::from_secs(5), |p| {
                p.server.stats().connections == 0 && !p.client.is_connected(c)
            }),
            "{len:?}"
        );
        assert!(p.client_events.iter().any(|e| matches!(
            e,
            Event::Disconnected {
                reason: DisconnectReason::PeerClosed,
                ..
            }
        )));
    }
}

#[test]
fn handshake_times_out_without_a_server() {
    let mut p = Pair::new(
        8,
        cfg(),
        cfg(),
        LinkConfig {
            loss: 1.0,
            ..LinkConfig::default()
        },
    );
    p.client.connect(p.now, p.server_addr).unwrap();
    assert!(
        p.drive_until(Duration::from_secs(30), |p| failure(&p.client_events)
            .is_some())
    );
    assert_eq!(failure(&p.client_events), Some(ConnectError::Timeout));
    // 12 OCR1 attempts every 500 ms, then give up.
    assert!(p.elapsed() <= Duration::from_secs(10), "{:?}", p.elapsed());
    assert_eq!(p.c2s.stats().sent, 12);
}

#[test]
fn cookies_let_real_clients_in_and_keep_spoofers_out() {
    let server = EndpointConfig {
        use_cookies: CookieMode::Always,
        ..cfg()
    };
    let mut p = Pair::new(9, server, cfg(), LinkConfig::default());
    p.connect();
    // A spoofed OCR2 (no cookie exchange) from another address is dropped silently.
    let spoof = OpenConnectionRequest2 {
        cookie: Some(0xdead_beef),
        client_challenge: None,
        server_address: p.server_addr,
        mtu: 1492,
        client_guid: 42,
    };
    p.server.handle(
        p.now,
        "127.0.0.1:40001".parse().unwrap(),
        bytes::Bytes::from(spoof.to_vec()),
    );
    let mut buf = Vec::new();
    assert!(p.server.poll_transmit(p.now, &mut buf).is_none());
    assert_eq!(p.server.stats().bad_cookies, 1);
    assert_eq!(p.server.stats().connections, 1);
}

#[test]
fn duplicate_guid_gets_already_connected() {
    let mut p = Pair::new(10, cfg(), cfg(), LinkConfig::default());
    p.connect();
    // The same client GUID from another port.
    let ocr2 = OpenConnectionRequest2 {
        cookie: None,
        client_challenge: None,
        server_address: p.server_addr,
        mtu: 1492,
        client_guid: p.client.guid(),
    };
    let other = "127.0.0.1:40002".parse().unwrap();
    p.server
        .handle(p.now, other, bytes::Bytes::from(ocr2.to_vec()));
    let mut buf = Vec::new();
    let t = p.server.poll_transmit(p.now, &mut buf).unwrap();
    assert_eq!(t.destination, other);
    assert_eq!(buf[0], message::id::ALREADY_CONNECTED);
}

#[test]
fn unconnected_ping_returns_the_offline_response() {
    let server = EndpointConfig {
        offline_ping_response: bytes::Bytes::from_static(b"hello"),
        ..cfg()
    };
    let mut p = Pair::new(
        11,
        server,
        cfg(),
        LinkConfig::default().with_delay(Duration::from_millis(5)),
    );
    p.client.ping(p.now, p.server_addr);
    assert!(p.drive_until(Duration::from_secs(1), |p| !p.client_events.is_empty()));
    match &p.client_events[0] {
        Event::Pong { from, pong, rtt } => {
            assert_eq!(*from, p.server_addr);
            assert_eq!(&pong.data[..], b"hello");
            assert_eq!(*rtt, Duration::from_millis(10));
        }
        other => panic!("{other:?}"),
    }
    p.server
        .set_offline_ping_response(bytes::Bytes::from_static(b"MOTD 2"))
        .unwrap();
    p.client.ping(p.now, p.server_addr);
    assert!(p.drive_until(Duration::from_secs(1), |p| p.client_events.len() == 2));
    assert!(matches!(&p.client_events[1], Event::Pong { pong, .. } if &pong.data[..] == b"MOTD 2"));
}

#[test]
fn client_falls_back_to_the_servers_protocol_when_it_speaks_it() {
    // A Bedrock-style client (11, 10, 6) reaching an official protocol-6 server.
    let server = EndpointConfig {
        protocol_versions: vec![6],
        ..cfg()
    };
    let mut p = Pair::new(12, server, cfg(), LinkConfig::default());
    p.connect();
    let protocol = p.client_events.iter().find_map(|e| match e {
        Event::Connected { protocol, .. } => Some(*protocol),
        _ => None,
    });
    assert_eq!(protocol, Some(6));
    assert_eq!(p.server.stats().incompatible_protocol, 1);
}

/// Once the server's Reply1 has named its GUID, a refusal, Reply1 or Reply2 from the server's
/// address with another GUID (spoofed by someone who knows both addresses) neither ends nor
/// steers the client's handshake: it is dropped and counted. The server's own refusal still
/// ends it.
#[test]
fn a_reply_with_another_guid_is_ignored_once_the_server_is_known() {
    use bytes::Bytes;
    use std::net::SocketAddr;
    use std::time::Instant;

    let client_addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let server: SocketAddr = "127.0.0.1:19132".parse().unwrap();
    let now = Instant::now();
    let config = EndpointConfig {
        accept_incoming: false,
        ..cfg()
    };
    let mut ep = Endpoint::new(config, client_addr, now);
    ep.connect(now, server).unwrap();
    let first_byte = |ep: &mut Endpoint, at| {
        let mut buf = Vec::new();
        let mut firsts = Vec::new();
        while let Some(tx) = ep.poll_transmit(at, &mut buf) {
            firsts.push(buf[..tx.size][0]);
        }
        firsts
    };
    assert_eq!(first_byte(&mut ep, now), vec![0x05]);
    let (guid, forged) = (0x5e12_u64, 0x0bad_u64);
    let reply1 = |server_guid| -> Bytes {
        OpenConnectionReply1 {
            server_guid,
            cookie: None,
            server_public_key: None,
            mtu: 1492,
        }
        .to_vec()
        .into()
    };
    ep.handle(now, server, reply1(guid));
    assert_eq!(first_byte(&mut ep, now), vec![0x07]);

    let spoofed: Vec<Bytes> = vec![
        AlreadyConnected {
            server_guid: forged,
        }
        .to_vec()
        .into(),
        NoFreeIncomingConnections {
            server_guid: forged,
        }
        .to_vec()
        .into(),
        ConnectionBanned {
            server_guid: forged,
        }
        .to_vec()
        .into(),
        IpRecentlyConnected {
            server_guid: forged,
        }
        .to_vec()
        .into(),
        IncompatibleProtocolVersion {
            protocol: 6,
            server_guid: forged,
        }
        .to_vec()
        .into(),
        OpenConnectionReply2 {
            server_guid: forged,
            client_address: client_addr,
            mtu: 1492,
            security_answer: None,
        }
        .to_vec()
        .into(),
        reply1(forged),
    ];
    let n = spoofed.len() as u64;
    for d in spoofed {
        ep.handle(now, server, d);
    }
    assert_eq!(ep.stats().offline_ignored, n);
    let mut events = Vec::new();
    while let Some(e) = ep.poll_event() {
        events.push(e);
    }
    assert_eq!(failure(&events), None, "{events:?}");
    // The forged Reply2 did not move it on to 0x09: nothing to send until the next OCR1.
    assert_eq!(first_byte(&mut ep, now), vec![]);
    // The OCR1 schedule starts a fresh Reply1 / OCR2 exchange; the GUID stays known.
    let later = now + Duration::from_millis(600);
    ep.handle_timeout(later);
    assert_eq!(first_byte(&mut ep, later), vec![0x05]);
    ep.handle(
        later,
        server,
        AlreadyConnected {
            server_guid: forged,
        }
        .to_vec()
        .into(),
    );
    assert_eq!(ep.stats().offline_ignored, n + 1);

    ep.handle(
        later,
        server,
        ConnectionBanned { server_guid: guid }.to_vec().into(),
    );
    while let Some(e) = ep.poll_event() {
        events.push(e);
    }
    assert_eq!(failure(&events), Some(ConnectError::Banned));
}
