//! Both roles of the handshake against the captured official RakNet 4.081 vectors
//! (protocol reference §15 sets A-C): official bytes in, our bytes checked field by field.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{hex, unassigned};
use raknet_proto::*;

const MAGIC: &str = "00ffff00fefefefefdfdfdfd12345678";

struct Peer {
    ep: Endpoint,
    now: Instant,
    buf: Vec<u8>,
}

impl Peer {
    fn new(config: EndpointConfig, local: &str) -> Self {
        let now = Instant::now();
        Self {
            ep: Endpoint::new(config, local.parse().unwrap(), now),
            now,
            buf: Vec::new(),
        }
    }

    fn feed(&mut self, from: SocketAddr, bytes: Bytes) {
        self.ep.handle(self.now, from, bytes);
    }

    fn out(&mut self) -> Vec<(SocketAddr, Bytes)> {
        let mut v = Vec::new();
        while let Some(t) = self.ep.poll_transmit(self.now, &mut self.buf) {
            v.push((t.destination, Bytes::copy_from_slice(&self.buf[..t.size])));
        }
        v
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.ep.handle_timeout(self.now);
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.ep.poll_event()).collect()
    }
}

fn frames(datagram: &Bytes) -> Vec<Frame> {
    Datagram::decode(datagram.clone(), false)
        .unwrap()
        .frames()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn server_role_answers_the_official_client_like_official_does() {
    // Without cookies, as the captured official server (no security): its replies are
    // compared byte for byte, and the captured client's OCR2 carries none.
    let config = EndpointConfig {
        protocol_versions: vec![6],
        guid: Some(0x000660db22f1b6b3),
        use_cookies: CookieMode::Never,
        ..EndpointConfig::default()
    };
    let mut s = Peer::new(config, "127.0.0.1:29001");
    let client: SocketAddr = "127.0.0.1:29050".parse().unwrap();

    // A3 -> A4: protocol 11 refused with our protocol before the magic.
    s.feed(client, hex(&format!("05 {MAGIC} 0b {}", "00".repeat(600))));
    assert_eq!(
        s.out(),
        vec![(client, hex(&format!("19 06 {MAGIC} 000660db22f1b6b3")))]
    );

    // A5 -> A6: Reply1 with MTU 576, no security: byte-exact.
    s.feed(client, hex(&format!("05 {MAGIC} 06 {}", "00".repeat(530))));
    assert_eq!(
        s.out(),
        vec![(client, hex(&format!("06 {MAGIC} 000660db22f1b6b3 00 0240")))]
    );

    // A7 -> A8: Reply2 byte-exact.
    s.feed(
        client,
        hex(&format!("07 {MAGIC} 0480fffffe7149 0240 1122334455667788")),
    );
    assert_eq!(
        s.out(),
        vec![(
            client,
            hex(&format!(
                "08 {MAGIC} 000660db22f1b6b3 0480fffffe717a 0240 00"
            ))
        )]
    );
    // A lost Reply2 is answered again for the same GUID (official §4.9)...
    s.feed(
        client,
        hex(&format!("07 {MAGIC} 0480fffffe7149 0240 1122334455667788")),
    );
    assert_eq!(s.out()[0].1[0], message::id::OPEN_CONNECTION_REPLY_2);
    // ...and A9: the same GUID from another port is already connected.
    s.feed(
        "127.0.0.1:29051".parse().unwrap(),
        hex(&format!("07 {MAGIC} 0480fffffe7149 0240 1122334455667788")),
    );
    assert_eq!(s.out()[0].1, hex(&format!("12 {MAGIC} 000660db22f1b6b3")));

    // B1 -> B3: 0x10 as official builds it, except the server time: ours is offset by a
    // keyed per-peer secret (the 0x13 must echo it: the proof that this address receives);
    // and it goes reliable, not reliable-ordered (official's clients take either; rak-rs
    // takes only a 0x10 outside the ordering). The ACK of the 0x09 waits for the proof too.
    s.advance(Duration::from_millis(502));
    s.feed(
        client,
        hex("84 000000 | 40 0090 000000 | 09 1122334455667788 0000000000000064 00"),
    );
    let out = s.out();
    assert_eq!(out.len(), 1, "only 0x10: {out:?}");
    let expected = hex(&format!(
        "84 000000 | 40 0300 000000 | 10 0480fffffe717a 0000 0480fffffe7149 {} 0000000000000064",
        unassigned(9)
    ));
    let data = &out[0].1;
    assert_eq!(data.len(), expected.len() + 8);
    assert_eq!(data[..expected.len()], expected[..]);
    let server_time = u64::from_be_bytes(data[expected.len()..].try_into().unwrap());
    assert_ne!(server_time, 0x1f6, "the server time must not be guessable");
    assert_eq!(s.ep.stats().connections, 0, "no connection before 0x13");
    assert_eq!(s.ep.stats().half_open, 1);
    // A repeated 0x09 (our 0x10 was lost) gets the identical 0x10 again.
    s.feed(
        client,
        hex("84 010000 | 40 0090 000000 | 09 1122334455667788 0000000000000064 00"),
    );
    assert_eq!(s.out(), vec![(client, data.clone())]);

    // C3-style 0x13 + ping echoing our time: the server is connected, answers with its own
    // ping and a pong.
    s.feed(
        client,
        hex(&format!(
            "84 020000 | 60 02f0 010000 000000 00 | 13 0480fffffe7149 0480fffffe717a {} {server_time:016x} 0000000000000200 | 00 0048 | 00 0000000000000200",
            unassigned(9)
        )),
    );
    let events = s.events();
    assert!(matches!(
        events[0],
        Event::Connected {
            guid: 0x1122334455667788,
            protocol: 6,
            mtu: 576,
            role: Role::Server,
            ..
        }
    ));
    let out = s.out();
    let payloads: Vec<Bytes> = out
        .iter()
        .filter(|(_, d)| d[0] & 0xc0 == 0x80)
        .flat_map(|(_, d)| frames(d))
        .map(|f| f.payload)
        .collect();
    assert!(payloads
        .iter()
        .any(|p| p[0] == message::id::CONNECTED_PING && p.len() == 9));
    let pong = payloads
        .iter()
        .find(|p| p[0] == message::id::CONNECTED_PONG)
        .expect("pong");
    assert_eq!(
        ConnectedPong::decode(&mut pong.clone()).unwrap().ping_time,
        0x200
    );
    // B2/C5: the 0x09 we answered (its latest copy, #1) and the 0x13 (#2) are acknowledged
    // within the ACK delay: here at once, with the ping and pong, behind them (official sends
    // its ACKs ahead of its data; UDP keeps no order between datagrams, and behind them the
    // two go as one GSO send).
    assert_eq!(out.last(), Some(&(client, hex("c0 0001 00 010000 020000"))));
    s.advance(Duration::from_millis(10));
    assert_eq!(s.out(), vec![], "acknowledged once");
}

#[test]
fn client_role_speaks_to_an_official_server_like_official_does() {
    let config = EndpointConfig {
        protocol_versions: vec![6],
        guid: Some(0x000660db2347eb49),
        ..EndpointConfig::default()
    };
    let mut c = Peer::new(config, "127.0.0.1:29060");
    let server: SocketAddr = "127.0.0.1:29001".parse().unwrap();
    let id = c.ep.connect(c.now, server).unwrap();

    // The first OCR1 probes MTU 1492: 1464 bytes, like official's.
    let out = c.out();
    assert_eq!(
        out,
        vec![(server, hex(&format!("05 {MAGIC} 06 {}", "00".repeat(1446))))]
    );

    // Reply1 (MTU 1492) -> OCR2 byte-exact as C's official client sends it.
    c.feed(server, hex(&format!("06 {MAGIC} 000660db22f1b6b3 00 05d4")));
    assert_eq!(
        c.out(),
        vec![(
            server,
            hex(&format!("07 {MAGIC} 0480fffffe7149 05d4 000660db2347eb49"))
        )]
    );

    // Reply2 -> C1: the connection request, RELIABLE ri 0, our time.
    c.advance(Duration::from_millis(5670));
    c.feed(
        server,
        hex(&format!(
            "08 {MAGIC} 000660db22f1b6b3 0480fffffe7184 05d4 00"
        )),
    );
    let out = c.out();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].1,
        hex("84 000000 | 40 0090 000000 | 09 000660db2347eb49 0000000000001626 00")
    );

    // C2 -> C3: connected; 0x13 (RELIABLE_ORDERED ri 1 oi 0) and a ping, in one datagram.
    c.advance(Duration::from_millis(10));
    c.out(); // nothing due yet but keep the clock honest
    c.feed(
        server,
        hex(&format!(
            "84 000000 | 60 0300 000000 000000 00 | 10 0480fffffe7184 0000 0480fffffe7149 {} 0000000000001626 0000000000001626",
            unassigned(9)
        )),
    );
    let events = c.events();
    assert!(
        matches!(events[0], Event::Connected { conn, role: Role::Client, mtu: 1492, guid: 0x000660db22f1b6b3, .. } if conn == id)
    );
    let out = c.out();
    let data: Vec<_> = out.iter().filter(|(_, d)| d[0] & 0xc0 == 0x80).collect();
    assert_eq!(data.len(), 1, "0x13 and the ping travel together");
    // C3: ri 1 (the 0x09 had ri 0), oi 0.
    let expected = hex(&format!(
        "84 010000 | 60 02f0 010000 000000 00 | 13 0480fffffe7149 0480fffffe7184 {} 0000000000001626 0000000000001630 | 00 0048 | 00 0000000000001630",
        unassigned(9)
    ));
    assert_eq!(data[0].1, expected);
    assert!(c.ep.is_connected(id));
}

/// X-Plane's `:host`: a server bound to every interface writes the address its clients see
/// first among the internal addresses of 0x10, with the bound port.
#[test]
fn server_writes_its_advertised_address_first_in_accepted() {
    let advertised = |ip: Option<&str>| {
        let config = EndpointConfig {
            protocol_versions: vec![6],
            advertised_ip: ip.map(|ip| ip.parse().unwrap()),
            // The captured client's cookie-less OCR2 is replayed.
            use_cookies: CookieMode::Never,
            ..EndpointConfig::default()
        };
        let mut s = Peer::new(config, "0.0.0.0:29001");
        let client: SocketAddr = "127.0.0.1:29050".parse().unwrap();
        s.feed(client, hex(&format!("05 {MAGIC} 06 {}", "00".repeat(530))));
        s.feed(
            client,
            hex(&format!("07 {MAGIC} 0480fffffe7149 0240 1122334455667788")),
        );
        s.out();
        s.feed(
            client,
            hex("84 000000 | 40 0090 000000 | 09 1122334455667788 0000000000000064 00"),
        );
        let accepted = s
            .out()
            .iter()
            .filter(|(_, d)| d[0] & 0xc0 == 0x80)
            .flat_map(|(_, d)| frames(d))
            .find(|f| f.payload[0] == message::id::CONNECTION_REQUEST_ACCEPTED)
            .expect("0x10 sent");
        let msg = ConnectionRequestAccepted::decode(&mut accepted.payload.clone()).unwrap();
        assert_eq!(msg.internal_addresses.len(), 10);
        msg.internal_addresses[0]
    };
    assert_eq!(
        advertised(Some("127.0.0.1")),
        "127.0.0.1:29001".parse().unwrap()
    );
    assert_eq!(advertised(None), "0.0.0.0:29001".parse().unwrap());
}
