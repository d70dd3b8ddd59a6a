//! Fuzz target bodies, shared by the cargo-fuzz targets in `native/fuzz` and by the
//! seed-corpus tests, so that stable CI exercises exactly what the fuzzer runs.
//!
//! Each body decodes arbitrary bytes; when decoding succeeds it re-encodes the value and
//! checks that decoding the encoding gives the same value back (decoding is idempotent).
//! Each returns whether the input decoded, so that the seed tests can tell a seed that
//! still exercises the round trip from one that stopped decoding.

use bytes::Bytes;

use crate::proxy::{self, Inbound, ProxyConfig, ProxyLayer, ProxyMode};
use crate::{
    addr, ConnectedMessage, CookieMode, Datagram, Decode, Encode, Frame, OfflineMessage,
    Timestamped,
};

fn check<T: PartialEq + std::fmt::Debug>(first: &T, second: &T, what: &str) {
    assert_eq!(
        first, second,
        "{what}: decode(encode(decode(x))) != decode(x)"
    );
}

/// Decode a connected datagram in both layouts, and every frame it holds.
pub fn datagram(data: &[u8]) -> bool {
    let mut decoded = false;
    for timestamps in [false, true] {
        let Ok(d) = Datagram::decode(Bytes::copy_from_slice(data), timestamps) else {
            continue;
        };
        match &d {
            Datagram::Ack(ack) => {
                // Compare encodings: the arrival-rate float may be NaN, which never
                // equals itself.
                let wire = ack.to_vec();
                let again = match Datagram::decode(Bytes::from(wire.clone()), timestamps) {
                    Ok(Datagram::Ack(again)) => again.to_vec(),
                    other => panic!("re-encoded ACK decodes as {other:?}"),
                };
                check(&wire, &again, "ack");
            }
            Datagram::Nak(nak) => {
                let again = Datagram::decode(Bytes::from(nak.to_vec()), timestamps);
                check(&Ok(d.clone()), &again, "nak");
            }
            Datagram::Data { .. } => {
                // Decoded only if every frame does (in at least one layout).
                let mut frames = true;
                for f in d.frames() {
                    match f {
                        Ok(f) => frame_round_trip(&f),
                        Err(_) => frames = false,
                    }
                }
                if !frames {
                    continue;
                }
            }
        }
        decoded = true;
    }
    decoded
}

fn frame_round_trip(f: &Frame) {
    let mut again = Frame::decode(&mut Bytes::from(f.to_vec())).expect("re-encoded frame decodes");
    // Receipt kinds go on the wire as their base type.
    again.reliability = f.reliability;
    check(f, &again, "frame");
}

/// Decode one frame.
pub fn frame(data: &[u8]) -> bool {
    let Ok(f) = Frame::decode(&mut Bytes::copy_from_slice(data)) else {
        return false;
    };
    frame_round_trip(&f);
    true
}

/// Decode an ACK or NAK: the first byte's two low bits pick the flags put in its place (an
/// ACK, a NAK, or an ACK with the arrival-rate float).
pub fn ack(data: &[u8]) -> bool {
    let Some((&first, rest)) = data.split_first() else {
        return false;
    };
    let flag = match first & 3 {
        1 => 0xa0,
        3 => 0xe0,
        _ => 0xc0,
    };
    let mut v = Vec::with_capacity(data.len());
    v.push(flag);
    v.extend_from_slice(rest);
    datagram(&v)
}

/// Decode an offline message, with and without an OCR2 cookie.
pub fn offline(data: &[u8]) -> bool {
    let _ = OfflineMessage::is_offline(data);
    let mut decoded = false;
    for cookie in [false, true] {
        if let Ok(m) = OfflineMessage::decode(&mut Bytes::copy_from_slice(data), cookie) {
            let again = OfflineMessage::decode(&mut Bytes::from(m.to_vec()), cookie);
            check(&Ok(m), &again, "offline message");
            decoded = true;
        }
    }
    decoded
}

/// Decode a connected control message (and the timestamp prefix).
pub fn connected_message(data: &[u8]) -> bool {
    let payload = Bytes::copy_from_slice(data);
    let _ = Timestamped::split(&payload);
    let Ok(m) = ConnectedMessage::decode(payload) else {
        return false;
    };
    let encoded = match &m {
        ConnectedMessage::ConnectedPing(x) => x.to_vec(),
        ConnectedMessage::ConnectedPong(x) => x.to_vec(),
        ConnectedMessage::ConnectionRequest(x) => x.to_vec(),
        ConnectedMessage::ConnectionRequestAccepted(x) => x.to_vec(),
        ConnectedMessage::NewIncomingConnection(x) => x.to_vec(),
        _ => return true,
    };
    check(
        &Ok(m),
        &ConnectedMessage::decode(Bytes::from(encoded)),
        "connected message",
    );
    true
}

/// Decode a system address.
pub fn address(data: &[u8]) -> bool {
    let Ok(a) = addr::decode(&mut Bytes::copy_from_slice(data)) else {
        return false;
    };
    let mut out = Vec::new();
    addr::encode(&a, &mut out);
    check(&Ok(a), &addr::decode(&mut Bytes::from(out)), "address");
    true
}

/// A proxy header parser: [`proxy::parse_v2`] or [`proxy::parse_spp`].
type HeaderParser = fn(&[u8]) -> Result<proxy::Header, proxy::HeaderError>;

/// Parse a proxy header (PROXY v2 and SPP) and run it through a [`ProxyLayer`] that trusts
/// its sender and one that does not: a datagram is attributed to the header's client only
/// when the header parsed (and then to exactly that client, with exactly the bytes after
/// it), an untrusted sender's header never is, and a parsed header written again parses to
/// the same addresses.
pub fn proxy_header(data: &[u8]) -> bool {
    let proxy_addr: std::net::SocketAddr = ([10, 0, 0, 1], 7).into();
    let stranger: std::net::SocketAddr = ([192, 0, 2, 1], 7).into();
    let trusted = || vec![proxy::IpPrefix::new([10, 0, 0, 0].into(), 8).unwrap()];
    // Trusted prefixes come from operators' text: never a panic, and never wider than said.
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(prefix) = text.parse::<proxy::IpPrefix>() {
            let _ = prefix.contains(proxy_addr.ip());
            let _ = prefix.contains(std::net::Ipv6Addr::LOCALHOST.into());
        }
    }
    let mut parsed = false;
    let modes: [(ProxyMode, HeaderParser); 2] = [
        (ProxyMode::V2Every, proxy::parse_v2),
        (ProxyMode::Spectrum, proxy::parse_spp),
    ];
    for (mode, parse) in modes {
        let result = parse(data);
        let mut layer = ProxyLayer::new(ProxyConfig::new(mode, trusted()), 1_000);
        match (
            &result,
            layer.inbound(0, proxy_addr, Bytes::copy_from_slice(data)),
        ) {
            (Ok(h), Inbound::Datagram { from, payload }) => {
                assert_eq!(from, h.source.unwrap_or(proxy_addr), "{mode:?}");
                assert_eq!(&payload[..], &data[h.len..], "{mode:?}");
            }
            (Ok(h), Inbound::Nothing) => assert_eq!(h.len, data.len(), "{mode:?}"),
            (Err(_), Inbound::Datagram { from, payload }) => {
                assert_eq!(from, proxy_addr, "{mode:?}: misattributed");
                assert_eq!(&payload[..], data, "{mode:?}");
            }
            (Err(_), Inbound::Nothing) => {}
        }
        match layer.inbound(0, stranger, Bytes::copy_from_slice(data)) {
            Inbound::Datagram { from, .. } => assert_eq!(from, stranger, "{mode:?}"),
            Inbound::Nothing => assert!(data.len() >= 2, "{mode:?}"),
        }
        let Ok(h) = result else { continue };
        parsed = true;
        assert!(h.len <= data.len());
        if let (Some(source), Some(destination)) = (h.source, h.destination) {
            let mut again = Vec::new();
            match mode {
                ProxyMode::Spectrum => proxy::write_spp(source, destination, &mut again),
                _ => proxy::write_v2(source, destination, &mut again),
            }
            let back = parse(&again).expect("a written header parses");
            assert_eq!((back.source, back.destination), (h.source, h.destination));
        }
    }
    parsed
}

/// Drive a server endpoint and two client endpoints that connect to it (from one IP) with a
/// script: datagrams of arbitrary bytes or genuine ones with a byte changed (from the peer's
/// address, the other's, or strangers'), genuine traffic, clock steps, sends, closes, pings,
/// bans and limit changes. The first byte picks the configuration (cookies, protocol,
/// datagram timestamps, congestion controller). No endpoint may panic, and the server never
/// holds more connections than its limit (one, of the two clients).
///
/// Returns what the script reached, so that tests can check their scripts go deep enough.
pub fn endpoint(data: &[u8]) -> EndpointFuzzReach {
    use crate::{CongestionControl, Endpoint, EndpointConfig, Event, Limits, Priority};
    use crate::{Reliability, SendOptions, Transmit};
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    const MAX_CONNECTIONS: usize = 1;
    let mut reach = EndpointFuzzReach::default();
    let Some((&flags, mut script)) = data.split_first() else {
        return reach;
    };
    let server_addr = SocketAddr::from(([10, 0, 0, 1], 19132));
    let client_addrs = [
        SocketAddr::from(([10, 0, 0, 2], 50000)),
        SocketAddr::from(([10, 0, 0, 2], 50001)),
    ];
    let strangers = [
        SocketAddr::from(([10, 0, 0, 3], 1)),
        SocketAddr::from(([10, 0, 0, 2], 50002)),
        SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1], 7)),
    ];
    let config = |accept_incoming: bool, seed: u64| EndpointConfig {
        rng_seed: seed,
        secret: seed ^ 0x5eed,
        accept_incoming,
        use_cookies: [CookieMode::Never, CookieMode::Always, CookieMode::Auto]
            [usize::from(flags & 3) % 3],
        protocol_versions: if flags & 2 != 0 { vec![6] } else { vec![11] },
        datagram_timestamps: flags & 4 != 0,
        congestion: if flags & 8 != 0 {
            CongestionControl::Bbr
        } else {
            CongestionControl::Reno
        },
        limits: Limits {
            max_connections: MAX_CONNECTIONS,
            ..Limits::default()
        },
        ..EndpointConfig::default()
    };
    let mut now = Instant::now();
    let mut server = Endpoint::new(config(true, 1), server_addr, now);
    let mut clients = [
        Endpoint::new(config(false, 2), client_addrs[0], now),
        Endpoint::new(config(false, 3), client_addrs[1], now),
    ];
    // Live connections: the server's, and each client's.
    let mut server_conns = Vec::new();
    let mut client_conns: [Vec<_>; 2] = [Vec::new(), Vec::new()];
    for (c, conns) in clients.iter_mut().zip(&mut client_conns) {
        conns.extend(c.connect(now, server_addr));
    }
    // The last genuine datagram each way: [to the server, to a client].
    let mut last: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut buf = Vec::new();

    fn take<'a>(script: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (head, tail) = script.split_at(n.min(script.len()));
        *script = tail;
        head
    }
    fn byte(script: &mut &[u8]) -> u8 {
        take(script, 1).first().copied().unwrap_or(0)
    }
    while let Some(&op) = take(&mut script, 1).first() {
        let arg = byte(&mut script);
        // Low nibble: the step; 0x10: towards a client (else the server); the top three
        // bits: which client (their low bit), and 5..=7 a stranger as the sender.
        let to_server = op & 0x10 == 0;
        let k = usize::from(op >> 5);
        let who = k & 1;
        let from = match k {
            5..=7 => strangers[k - 5],
            _ if to_server => client_addrs[who],
            _ => server_addr,
        };
        match op & 0x0f {
            0..=3 => {
                let bytes = Bytes::copy_from_slice(take(&mut script, usize::from(arg) * 6));
                if to_server {
                    server.handle(now, from, bytes);
                } else {
                    clients[who].handle(now, from, bytes);
                }
            }
            4..=6 => {
                let mut d = last[usize::from(!to_server)].clone();
                if !d.is_empty() {
                    let pos = usize::from(arg) % d.len();
                    d[pos] ^= take(&mut script, 1).first().copied().unwrap_or(0xff);
                    if to_server {
                        server.handle(now, from, Bytes::from(d));
                    } else {
                        clients[who].handle(now, from, Bytes::from(d));
                    }
                }
            }
            7..=9 => {
                // Genuine traffic every way, a bounded number of rounds.
                for _ in 0..=arg / 4 {
                    let mut moved = false;
                    for (c, &addr) in clients.iter_mut().zip(&client_addrs) {
                        while let Some(Transmit { destination, size }) =
                            c.poll_transmit(now, &mut buf)
                        {
                            if destination == server_addr {
                                last[0] = buf[..size].to_vec();
                                server.handle(now, addr, Bytes::copy_from_slice(&buf[..size]));
                                moved = true;
                            }
                        }
                    }
                    while let Some(Transmit { destination, size }) =
                        server.poll_transmit(now, &mut buf)
                    {
                        if let Some(i) = client_addrs.iter().position(|&a| a == destination) {
                            last[1] = buf[..size].to_vec();
                            let d = Bytes::copy_from_slice(&buf[..size]);
                            clients[i].handle(now, server_addr, d);
                            moved = true;
                        }
                    }
                    if !moved {
                        break;
                    }
                }
            }
            10 | 11 => {
                // The clock: up to ~1 s in ms steps, or up to ~64 s.
                now += if op & 1 == 0 {
                    Duration::from_millis(u64::from(arg) * 4)
                } else {
                    Duration::from_millis(u64::from(arg) * 250)
                };
                server.handle_timeout(now);
                for c in &mut clients {
                    c.handle_timeout(now);
                }
            }
            12 | 13 => {
                let (ep, conns) = if to_server {
                    (&mut server, &server_conns)
                } else {
                    (&mut clients[who], &client_conns[who])
                };
                if let Some(&conn) = conns.get(usize::from(arg) % conns.len().max(1)) {
                    let size = usize::from(byte(&mut script)) * 97;
                    let route = byte(&mut script);
                    let opts = SendOptions {
                        reliability: Reliability::ALL[usize::from(arg) % 8],
                        channel: route % 32,
                        priority: [
                            Priority::Immediate,
                            Priority::High,
                            Priority::Medium,
                            Priority::Low,
                        ][usize::from(route >> 5) % 4],
                    };
                    let _ = ep.send(now, conn, Bytes::from(vec![0x86; size.max(1)]), opts);
                }
            }
            14 => match arg % 6 {
                0 => {
                    if let Some(&c) = client_conns[who].last() {
                        clients[who].close(now, c);
                    }
                }
                1 => {
                    if let Some(&c) = server_conns.last() {
                        server.close(now, c);
                    }
                }
                2 => client_conns[who].extend(clients[who].connect(now, server_addr)),
                3 => clients[who].ping(now, server_addr),
                4 => {
                    let duration = (arg & 0x80 == 0).then(|| Duration::from_millis(u64::from(arg)));
                    server.ban(now, from.ip(), duration);
                }
                _ => server.shutdown(now),
            },
            _ => {
                server.set_suspended(arg & 1 != 0);
                server.set_max_connections(usize::from(arg % 8).min(MAX_CONNECTIONS));
            }
        }
        while let Some(e) = server.poll_event() {
            match e {
                Event::Connected { conn, .. } => {
                    reach.connections += 1;
                    server_conns.push(conn);
                }
                Event::Message { .. } => reach.messages += 1,
                Event::Disconnected { conn, .. } => server_conns.retain(|&c| c != conn),
                _ => {}
            }
        }
        for (c, conns) in clients.iter_mut().zip(&mut client_conns) {
            while let Some(e) = c.poll_event() {
                match e {
                    Event::Message { .. } => reach.messages += 1,
                    Event::Disconnected { conn, .. } => conns.retain(|&c| c != conn),
                    _ => {}
                }
            }
        }
        assert!(server.stats().connections <= MAX_CONNECTIONS);
        let _ = server.poll_timeout();
        for c in &mut clients {
            let _ = c.poll_timeout();
        }
    }
    reach
}

/// What an [`endpoint`] script reached.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EndpointFuzzReach {
    /// Connections the server accepted.
    pub connections: usize,
    /// Messages delivered, both ways.
    pub messages: usize,
}
