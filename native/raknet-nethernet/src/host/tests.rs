//! A `str0m` peer playing the Minecraft client against a [`Host`], on a virtual clock.

use super::*;
use crate::identity::{envelope, PublicKey};
use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::channel::{ChannelConfig, Reliability};

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

struct Client {
    rtc: Rtc,
    reliable: Option<ChannelId>,
    unreliable: Option<ChannelId>,
    received: Vec<(bool, Vec<u8>)>,
    reassembler: Reassembler,
    closed: bool,
}

/// The client's offer (with `identity` as its a=identity, if any) and pending state.
fn client(now: Instant) -> (Client, String, SdpPendingOffer) {
    let mut rtc = Rtc::builder()
        .set_crypto_provider(Arc::new(str0m::crypto::from_feature_flags()))
        .build(now);
    rtc.add_local_candidate(Candidate::host(CLIENT.parse().unwrap(), "udp").unwrap());
    let mut api = rtc.sdp_api();
    api.add_channel(RELIABLE_LABEL.into());
    api.add_channel_with_config(ChannelConfig {
        label: UNRELIABLE_LABEL.into(),
        ordered: false,
        reliability: Reliability::MaxRetransmits { retransmits: 0 },
        ..Default::default()
    });
    let (offer, pending) = api.apply().unwrap();
    let client = Client {
        rtc,
        reliable: None,
        unreliable: None,
        received: Vec::new(),
        reassembler: Reassembler::new(1 << 24),
        closed: false,
    };
    (client, offer.to_sdp_string(), pending)
}

/// Run both sides until `done` or 30 virtual seconds pass; returns the host's events.
fn run(
    now: &mut Instant,
    host: &mut Host,
    client: &mut Client,
    events: &mut Vec<HostEvent>,
    mut done: impl FnMut(&Client, &[HostEvent]) -> bool,
) {
    let (server, client_addr) = (SERVER.parse().unwrap(), CLIENT.parse().unwrap());
    let end = *now + Duration::from_secs(30);
    while *now < end && !done(client, events) {
        let client_next;
        loop {
            match client.rtc.poll_output().unwrap() {
                Output::Transmit(t) => {
                    host.handle(*now, client_addr, &t.contents);
                }
                Output::Timeout(at) => {
                    client_next = at;
                    break;
                }
                Output::Event(Event::ChannelOpen(id, label)) if label == RELIABLE_LABEL => {
                    client.reliable = Some(id)
                }
                Output::Event(Event::ChannelOpen(id, _)) => client.unreliable = Some(id),
                Output::Event(Event::ChannelData(d)) => {
                    if Some(d.id) == client.reliable {
                        if let Some(m) = client.reassembler.push(&d.data).unwrap() {
                            client.received.push((true, m));
                        }
                    } else {
                        let m = framing::unfragmented(&d.data).unwrap();
                        client.received.push((false, m.to_vec()));
                    }
                }
                Output::Event(Event::Closed) => client.closed = true,
                Output::Event(_) => {}
            }
        }
        let mut delivered = false;
        // One datagram at a time, the client's output polled between (as a socket loop does).
        if let Some((to, data)) = host.poll_transmit() {
            assert_eq!(to, client_addr);
            let r = Receive::new(Protocol::Udp, server, client_addr, &data).unwrap();
            client.rtc.handle_input(Input::Receive(*now, r)).unwrap();
            delivered = true;
        }
        while let Some(e) = host.poll_event() {
            events.push(e);
            delivered = true;
        }
        if delivered {
            continue;
        }
        let next = [Some(client_next), host.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap()
            .max(*now + Duration::from_millis(1));
        *now = next.min(*now + Duration::from_millis(50));
        client.rtc.handle_input(Input::Timeout(*now)).unwrap();
        host.handle_timeout(*now);
    }
}

fn host(auth: ClientAuth) -> Host {
    let config = HostConfig {
        candidates: vec![SERVER.parse().unwrap()],
        client_auth: auth,
        domain: "test.example".into(),
        ..HostConfig::default()
    };
    Host::new(config, OperatorKey::generate()).unwrap()
}

/// The player's assertion for `offer`: the test plays the auth service with `auth`.
fn with_player_identity(offer: &str, auth: &OperatorKey, xuid: &str) -> String {
    let player = OperatorKey::generate();
    let mut claims = Claims::new();
    claims.insert("xuid".into(), xuid.into());
    claims.insert("cpk".into(), player.jwk());
    let token = auth.sign_jwt(claims);
    let fps = sdp::fingerprints(offer);
    sdp::with_identity(
        offer,
        &envelope("auth.example", &token, &player.sign_fingerprints(&fps)),
    )
}

/// Connect a client: offer, answer (its assertion checked as a client would), channels open.
fn connect(
    now: &mut Instant,
    host: &mut Host,
    offer_identity: Option<&OperatorKey>,
) -> (Client, SessionId, Vec<HostEvent>) {
    let (mut client, offer, pending) = client(*now);
    let offer = match offer_identity {
        Some(auth) => with_player_identity(&offer, auth, "2535400000000000"),
        None => offer,
    };
    let (id, answer) = host.accept_offer(*now, NOW_UNIX, &offer, &[]).unwrap();
    let parsed = Offer::parse(&answer).unwrap();
    let assertion = Assertion::parse(parsed.identity.as_deref().unwrap()).unwrap();
    let checked = assertion
        .verify(&parsed.fingerprints, &Trust::SelfSigned, NOW_UNIX)
        .unwrap();
    assert_eq!(checked.claims["cpk"], host.operator_jwk());
    assert_eq!(assertion.domain, "test.example");
    let answer = SdpAnswer::from_sdp_string(&parsed.sdp).unwrap();
    client.rtc.sdp_api().accept_answer(pending, answer).unwrap();
    let mut events = Vec::new();
    run(now, host, &mut client, &mut events, |c, e| {
        c.unreliable.is_some() && c.reliable.is_some() && !e.is_empty()
    });
    (client, id, events)
}

#[test]
fn client_connects_and_messages_flow_both_ways() {
    let mut now = Instant::now();
    let mut host = host(ClientAuth::Open);
    let (mut client, id, mut events) = connect(&mut now, &mut host, None);
    match events.remove(0) {
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

    // A 100 KB message, fragmented on the reliable channel, and a small unreliable one.
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let reliable = client.reliable.unwrap();
    for frame in framing::fragments(&big, FRAGMENT_PAYLOAD).unwrap() {
        assert!(client
            .rtc
            .channel(reliable)
            .unwrap()
            .write(true, &frame)
            .unwrap());
    }
    let unreliable = client.unreliable.unwrap();
    assert!(client
        .rtc
        .channel(unreliable)
        .unwrap()
        .write(true, b"\0ping")
        .unwrap());
    run(&mut now, &mut host, &mut client, &mut events, |_, e| {
        e.len() >= 2
    });
    let mut got: Vec<_> = events
        .drain(..)
        .map(|e| match e {
            HostEvent::Message {
                payload, reliable, ..
            } => (reliable, payload),
            other => panic!("{other:?}"),
        })
        .collect();
    got.sort();
    assert_eq!(got, vec![(false, b"ping".to_vec()), (true, big.clone())]);

    // Echo both back.
    host.send(now, id, true, &big).unwrap();
    host.send(now, id, false, b"pong").unwrap();
    run(&mut now, &mut host, &mut client, &mut events, |c, _| {
        c.received.len() >= 2
    });
    client.received.sort();
    assert_eq!(
        client.received,
        vec![(false, b"pong".to_vec()), (true, big)]
    );
    assert_eq!(
        host.send(now, id, false, &vec![0; FRAGMENT_PAYLOAD + 1]),
        Err(SendError::TooLarge)
    );

    // Closing tells the application once.
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
}

#[test]
fn required_identity_admits_the_auth_services_players_only() {
    let auth = OperatorKey::generate();
    let mut now = Instant::now();
    let mut host = host(ClientAuth::Required(Trust::Keys(vec![auth.public()])));
    let (_, offer, _) = client(now);
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &offer, &[]).unwrap_err(),
        OfferError::Identity(IdentityError::Missing)
    );
    let forged = with_player_identity(&offer, &OperatorKey::generate(), "1");
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &forged, &[]).unwrap_err(),
        OfferError::Identity(IdentityError::UntrustedToken)
    );
    let (_, _, events) = connect(&mut now, &mut host, Some(&auth));
    match &events[0] {
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
    let _ = PublicKey::from_jwk(&auth.jwk()).unwrap();
}

#[test]
fn unanswered_negotiations_expire_and_bound_the_host() {
    let mut now = Instant::now();
    let mut host = Host::new(
        HostConfig {
            candidates: vec![SERVER.parse().unwrap()],
            max_negotiating: 2,
            ..HostConfig::default()
        },
        OperatorKey::generate(),
    )
    .unwrap();
    for _ in 0..2 {
        let (_, offer, _) = client(now);
        host.accept_offer(now, NOW_UNIX, &offer, &[]).unwrap();
    }
    let (_, offer, _) = client(now);
    assert_eq!(
        host.accept_offer(now, NOW_UNIX, &offer, &[]).unwrap_err(),
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
    host.accept_offer(now, NOW_UNIX, &offer, &[]).unwrap();
    // Garbage SDP is refused, counted.
    assert!(matches!(
        host.accept_offer(now, NOW_UNIX, "v=0\r\n", &[]),
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
