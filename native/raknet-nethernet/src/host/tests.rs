//! [`Client`] playing the Minecraft client against a [`Host`], on a virtual clock.

use super::*;
use crate::client::{AnswerError, Client, ClientEvent, PlayerIdentity};
use crate::framing::FRAGMENT_PAYLOAD;
use crate::identity::envelope;
use std::net::IpAddr;

const SERVER: &str = "10.0.0.1:19132";
const CLIENT: &str = "10.0.0.2:50000";
const NOW_UNIX: u64 = 1_800_000_000;

#[test]
fn classify_by_first_bytes() {
    // A STUN binding request with no attributes.
    let mut stun = vec![0x00, 0x01, 0x00, 0x00];
    stun.extend_from_slice(&STUN_COOKIE);
    stun.extend_from_slice(&[7; 12]);
    assert_eq!(classify(&stun), Kind::Stun);
    // A RakNet ping whose time holds the cookie: its length field does not match.
    let mut ping = vec![0x01, 0, 0, 0];
    ping.extend_from_slice(&STUN_COOKIE);
    ping.resize(33, 0);
    assert_eq!(classify(&ping), Kind::Other);
    let dtls = [22, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10];
    assert_eq!(classify(&dtls), Kind::Dtls);
    // RakNet's offline and connected datagrams.
    for raknet in [
        &[0x05u8, 0, 0xFF][..],
        &[0x84, 0, 0, 0],
        &[0x07; 40],
        &[0x1c; 40],
    ] {
        assert_eq!(classify(raknet), Kind::Other);
    }
}

#[test]
fn stun_username_names_our_session() {
    let mut msg = vec![0x00, 0x01, 0x00, 0x10];
    msg.extend_from_slice(&STUN_COOKIE);
    msg.extend_from_slice(&[1; 12]);
    msg.extend_from_slice(&[0x00, 0x06, 0x00, 0x09]);
    msg.extend_from_slice(b"abcd:wxyz\0\0\0");
    assert_eq!(stun_local_ufrag(&msg), Some("abcd"));
    assert_eq!(stun_local_ufrag(&msg[..24]), None);
}

/// Run the host and `client` until `done` or 30 virtual seconds pass, one datagram at a time
/// and each timer when due (as a socket loop does); the events of both are collected.
fn run(
    now: &mut Instant,
    host: &mut Host,
    client: &mut Client,
    seen: &mut Seen,
    mut done: impl FnMut(&Seen) -> bool,
) {
    let (server, client_addr): (SocketAddr, SocketAddr) =
        (SERVER.parse().unwrap(), CLIENT.parse().unwrap());
    let end = *now + Duration::from_secs(30);
    while *now < end && !done(seen) {
        let mut moved = false;
        if let Some((to, data)) = client.poll_transmit() {
            assert_eq!(to, server);
            host.handle(*now, client_addr, &data);
            moved = true;
        }
        if let Some((to, data)) = host.poll_transmit() {
            assert_eq!(to, client_addr);
            client.handle(*now, server, &data);
            moved = true;
        }
        while let Some(e) = client.poll_event() {
            seen.client.push(e);
            moved = true;
        }
        while let Some(e) = host.poll_event() {
            seen.host.push(e);
            moved = true;
        }
        if moved {
            continue;
        }
        // Nothing moved: on to the earliest timer, and only the side it is due on runs it
        // (as an event loop does; running both at every step hid a stall once).
        let Some(next) = [client.poll_timeout(), host.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        *now = next.max(*now);
        if client.poll_timeout().is_some_and(|t| t <= *now) {
            client.handle_timeout(*now);
        }
        if host.poll_timeout().is_some_and(|t| t <= *now) {
            host.handle_timeout(*now);
        }
    }
}

/// What each side reported.
#[derive(Default)]
struct Seen {
    host: Vec<HostEvent>,
    client: Vec<ClientEvent>,
}

fn host(auth: ClientAuth) -> Host {
    host_with(HostConfig {
        client_auth: auth,
        domain: "test.example".into(),
        ..HostConfig::default()
    })
}

/// A host on [`SERVER`] with `config`'s limits and a fresh operator key.
fn host_with(config: HostConfig) -> Host {
    let config = HostConfig {
        candidates: vec![SERVER.parse().unwrap()],
        ..config
    };
    Host::new(config, OperatorKey::generate()).unwrap()
}

/// Two addresses offers come from.
fn two_addresses() -> (IpAddr, IpAddr) {
    (
        "198.51.100.1".parse().unwrap(),
        "198.51.100.2".parse().unwrap(),
    )
}

/// A player identity as the auth service `auth` would issue it.
fn player(auth: &OperatorKey, xuid: &str) -> PlayerIdentity {
    let key = OperatorKey::generate();
    let mut claims = Claims::new();
    claims.insert("xuid".into(), xuid.into());
    claims.insert("cpk".into(), key.jwk());
    PlayerIdentity {
        token: auth.sign_jwt(claims),
        key,
        domain: "auth.example".into(),
    }
}

fn offer(now: Instant, identity: Option<&PlayerIdentity>) -> (Client, String) {
    Client::new(now, CLIENT.parse().unwrap(), identity).unwrap()
}

/// Connect a client: offer, answer (its assertion checked as a client would), channels open.
fn connect(
    now: &mut Instant,
    host: &mut Host,
    identity: Option<&PlayerIdentity>,
) -> (Client, SessionId, Seen) {
    let (mut client, offer) = offer(*now, identity);
    let (id, answer) = host
        .accept_offer(*now, NOW_UNIX, &offer, &[], None)
        .unwrap();
    let server = client.accept_answer(*now, NOW_UNIX, &answer).unwrap();
    assert_eq!(server.claims["cpk"], host.operator_jwk());
    assert_eq!(server.claims["iss"], "test.example");
    let mut seen = Seen::default();
    run(now, host, &mut client, &mut seen, |s| {
        !s.host.is_empty() && !s.client.is_empty()
    });
    assert!(matches!(seen.client.remove(0), ClientEvent::Connected));
    (client, id, seen)
}

#[test]
fn client_connects_and_messages_flow_both_ways() {
    let mut now = Instant::now();
    let mut host = host(ClientAuth::Open);
    let (mut client, id, mut seen) = connect(&mut now, &mut host, None);
    match seen.host.remove(0) {
        HostEvent::Connected {
            id: got,
            addr,
            identity,
        } => {
            assert_eq!(got, id);
            assert_eq!(addr, CLIENT.parse().unwrap());
            assert!(identity.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(host.negotiating(), 0);

    // A small unreliable message, then a 100 KB one, fragmented on the reliable channel.
    // (An unreliable message sent behind a burst may be abandoned by SCTP: it has no
    // retransmissions. Each goes on its own here.)
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    for (reliable, message) in [(false, &b"ping"[..]), (true, &big[..])] {
        client.send(now, reliable, message).unwrap();
        run(&mut now, &mut host, &mut client, &mut seen, |s| {
            !s.host.is_empty()
        });
        match seen.host.remove(0) {
            HostEvent::Message {
                payload,
                reliable: got,
                ..
            } => {
                assert_eq!(got, reliable);
                assert!(payload == message, "{} bytes", payload.len());
            }
            other => panic!("{other:?}"),
        }
    }

    // Echo both back.
    for (reliable, message) in [(false, &b"pong"[..]), (true, &big[..])] {
        host.send(now, id, reliable, message).unwrap();
        run(&mut now, &mut host, &mut client, &mut seen, |s| {
            !s.client.is_empty()
        });
        match seen.client.remove(0) {
            ClientEvent::Message {
                payload,
                reliable: got,
            } => {
                assert_eq!(got, reliable);
                assert!(payload == message, "{} bytes", payload.len());
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        host.send(now, id, false, &vec![0; FRAGMENT_PAYLOAD + 1]),
        Err(SendError::TooLarge)
    );

    // Closing tells the application once; the client hears of it.
    host.close(now, id);
    assert!(matches!(
        host.poll_event(),
        Some(HostEvent::Disconnected {
            reason: CloseReason::LocalClose,
            ..
        })
    ));
    assert!(host.is_empty());
    assert_eq!(host.send(now, id, true, b"x"), Err(SendError::Closed));
    run(&mut now, &mut host, &mut client, &mut seen, |s| {
        !s.client.is_empty()
    });
    assert!(matches!(
        seen.client[..],
        [ClientEvent::Disconnected {
            reason: CloseReason::PeerClosed
        }]
    ));
}

#[test]
fn a_client_refuses_an_answer_whose_assertion_does_not_verify() {
    let now = Instant::now();
    let mut host = host(ClientAuth::Open);
    let (mut client, offer) = offer(now, None);
    let (_, answer) = host.accept_offer(now, NOW_UNIX, &offer, &[], None).unwrap();
    // Another key's assertion over the same fingerprints: not self-signed by its cpk.
    let parsed = Offer::parse(&answer).unwrap();
    let other = OperatorKey::generate();
    let forged = Assertion::parse(parsed.identity.as_deref().unwrap()).unwrap();
    let forged = envelope(
        "x",
        &forged.token,
        &other.sign_fingerprints(&parsed.fingerprints),
    );
    let forged = sdp::with_identity(&parsed.sdp, &forged);
    assert_eq!(
        client.accept_answer(now, NOW_UNIX, &forged).unwrap_err(),
        AnswerError::Identity(IdentityError::BadFingerprintSignature)
    );
    assert_eq!(
        client
            .accept_answer(now, NOW_UNIX, &parsed.sdp)
            .unwrap_err(),
        AnswerError::Identity(IdentityError::Missing)
    );
    client.accept_answer(now, NOW_UNIX, &answer).unwrap();
}

#[test]
fn required_identity_admits_the_auth_services_players_only() {
    let auth = OperatorKey::generate();
    let mut now = Instant::now();
    let mut host = host(ClientAuth::Required(Trust::Keys(vec![auth.public()])));
    let (_, anonymous) = offer(now, None);
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &anonymous, &[], None)
            .unwrap_err(),
        OfferError::Identity(IdentityError::Missing)
    );
    let forger = player(&OperatorKey::generate(), "1");
    let (_, forged) = offer(now, Some(&forger));
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &forged, &[], None)
            .unwrap_err(),
        OfferError::Identity(IdentityError::UntrustedToken)
    );
    let (_, _, seen) = connect(
        &mut now,
        &mut host,
        Some(&player(&auth, "2535400000000000")),
    );
    match &seen.host[0] {
        HostEvent::Connected {
            identity: Some(identity),
            ..
        } => {
            assert!(identity.token_verified);
            assert_eq!(identity.claims["xuid"], "2535400000000000");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(host.stats().offers_refused, 2);
}

#[test]
fn unanswered_negotiations_expire_and_bound_the_host() {
    let mut now = Instant::now();
    let mut host = host_with(HostConfig {
        max_negotiating: 2,
        ..HostConfig::default()
    });
    for _ in 0..2 {
        let (_, offer) = offer(now, None);
        host.accept_offer(now, NOW_UNIX, &offer, &[], None).unwrap();
    }
    let (_, third) = offer(now, None);
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &third, &[], None)
            .unwrap_err(),
        OfferError::Busy
    );
    // Nobody runs ICE: both expire, silently (they never opened).
    while let Some(at) = host.poll_timeout() {
        now = at;
        host.handle_timeout(now);
        while host.poll_transmit().is_some() {}
    }
    assert!(host.is_empty());
    assert_eq!(host.negotiating(), 0);
    assert!(host.poll_event().is_none());
    assert_eq!(host.stats().negotiations_expired, 2);
    host.accept_offer(now, NOW_UNIX, &third, &[], None).unwrap();
    // Garbage SDP is refused, counted.
    assert!(matches!(
        host.accept_offer(now, NOW_UNIX, "v=0\r\n", &[], None),
        Err(OfferError::Sdp(_))
    ));
}

#[test]
fn idle_session_times_out_once() {
    let mut now = Instant::now();
    let mut host = host(ClientAuth::Open);
    let (_client, id, _) = connect(&mut now, &mut host, None);
    // The client goes silent: the host gives up after idle_timeout.
    let end = now + Duration::from_secs(60);
    let mut ended = Vec::new();
    while let Some(at) = host.poll_timeout() {
        if at > end {
            break;
        }
        now = at;
        host.handle_timeout(now);
        while host.poll_transmit().is_some() {}
        while let Some(e) = host.poll_event() {
            ended.push(e);
        }
    }
    assert!(matches!(
        ended.as_slice(),
        [HostEvent::Disconnected { id: got, reason: CloseReason::Timeout }] if *got == id
    ));
    assert!(host.is_empty());
}

#[test]
fn one_address_gets_its_share_of_negotiations() {
    let now = Instant::now();
    let mut host = host_with(HostConfig {
        max_negotiating_per_ip: 2,
        ..HostConfig::default()
    });
    let (a, b) = two_addresses();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (_, o) = offer(now, None);
        ids.push(
            host.accept_offer(now, NOW_UNIX, &o, &[], Some(a))
                .unwrap()
                .0,
        );
    }
    let (_, o) = offer(now, None);
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &o, &[], Some(a))
            .unwrap_err(),
        OfferError::AddressBusy
    );
    // Another address is not held back by the first's.
    host.accept_offer(now, NOW_UNIX, &o, &[], Some(b)).unwrap();
    // A negotiation that ends gives its address's share back.
    host.close(now, ids[0]);
    host.accept_offer(now, NOW_UNIX, &o, &[], Some(a)).unwrap();
}

#[test]
fn under_pressure_a_new_address_takes_the_oldest_negotiation() {
    let now = Instant::now();
    let mut host = host_with(HostConfig {
        max_negotiating: 2,
        ..HostConfig::default()
    });
    let (a, b) = two_addresses();
    let (_, o) = offer(now, None);
    host.accept_offer(now, NOW_UNIX, &o, &[], Some(a)).unwrap();
    host.accept_offer(now + Duration::from_millis(1), NOW_UNIX, &o, &[], Some(a))
        .unwrap();
    // Every place taken: a's third waits its turn, b takes the oldest of a's.
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &o, &[], Some(a))
            .unwrap_err(),
        OfferError::Busy
    );
    host.accept_offer(now, NOW_UNIX, &o, &[], Some(b)).unwrap();
    assert_eq!(host.negotiating(), 2);
    assert_eq!(host.stats().negotiations_evicted, 1);
    // b holds one now: it waits its turn too, as does an offer whose sender is unknown.
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &o, &[], Some(b))
            .unwrap_err(),
        OfferError::Busy
    );
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &o, &[], None).unwrap_err(),
        OfferError::Busy
    );
    // Never reported: the evicted session had not opened.
    assert!(host.poll_event().is_none());
}
