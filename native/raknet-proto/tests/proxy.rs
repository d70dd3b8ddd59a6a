//! Issue #32: clients behind a trusted UDP proxy. Client engines speak through a scripted
//! proxy (each client gets a port of the proxy's address, and the proxy's header names the
//! client): the server must see each client's real address everywhere (events, per-IP
//! limits, bans), send replies back through the proxy's flow, and drop headers from
//! sources it does not trust.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::proxy::{self, IpPrefix, ProxyConfig, ProxyMode};
use raknet_proto::*;

const SERVER: &str = "192.0.2.1:19132";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

struct Client {
    ep: Endpoint,
    conn: ConnId,
    /// The address the server's socket sees this client's datagrams come from (a port of
    /// the proxy, or the client itself when it is direct).
    seen_as: SocketAddr,
    connected: bool,
    disconnected: bool,
    messages: Vec<Bytes>,
}

struct Net {
    now: Instant,
    server: Endpoint,
    clients: Vec<Client>,
    /// Connected events of the server: the address it names each peer by.
    accepted: HashMap<ConnId, SocketAddr>,
    mode: ProxyMode,
}

impl Net {
    fn new(mode: ProxyMode, trusted: &str, tweak: impl FnOnce(&mut EndpointConfig)) -> Self {
        let now = Instant::now();
        let mut config = EndpointConfig {
            proxy: Some(ProxyConfig::new(
                mode,
                vec![trusted.parse::<IpPrefix>().unwrap()],
            )),
            ..EndpointConfig::default()
        };
        tweak(&mut config);
        Self {
            now,
            server: Endpoint::new(config, sa(SERVER), now),
            clients: Vec::new(),
            accepted: HashMap::new(),
            mode,
        }
    }

    /// A client with real address `real`, seen by the server as `seen_as`: through a proxy
    /// that writes its header (`header`), or direct.
    fn add(&mut self, real: &str, seen_as: &str, header: bool) -> usize {
        let real = sa(real);
        let config = EndpointConfig {
            accept_incoming: false,
            rng_seed: self.clients.len() as u64 + 1,
            send_proxy_header: header.then_some((self.mode, real)),
            ..EndpointConfig::default()
        };
        let mut ep = Endpoint::new(config, real, self.now);
        let conn = ep.connect(self.now, sa(SERVER)).unwrap();
        self.clients.push(Client {
            ep,
            conn,
            seen_as: sa(seen_as),
            connected: false,
            disconnected: false,
            messages: Vec::new(),
        });
        self.clients.len() - 1
    }

    /// Move every datagram until nothing moves, then let 10 ms pass; `rounds` times.
    fn run(&mut self, rounds: usize) {
        let mut buf = Vec::new();
        for _ in 0..rounds {
            let mut moved = true;
            while moved {
                moved = false;
                for c in &mut self.clients {
                    while let Some(tx) = c.ep.poll_transmit(self.now, &mut buf) {
                        assert_eq!(tx.destination, sa(SERVER));
                        moved = true;
                        let d = Bytes::copy_from_slice(&buf[..tx.size]);
                        self.server.handle(self.now, c.seen_as, d);
                    }
                }
                while let Some(tx) = self.server.poll_transmit(self.now, &mut buf) {
                    moved = true;
                    let Some(c) = self
                        .clients
                        .iter_mut()
                        .find(|c| c.seen_as == tx.destination)
                    else {
                        panic!("a reply to {} reached no client", tx.destination);
                    };
                    let d = &buf[..tx.size];
                    if self.mode == ProxyMode::Spectrum && c.ep.config().send_proxy_header.is_some()
                    {
                        // The reply carries the header (the client takes it off, as a proxy).
                        let h = proxy::parse_spp(d).expect("reply carries the SPP header");
                        assert_eq!(h.source, c.ep.config().send_proxy_header.map(|s| s.1));
                    }
                    c.ep.handle(self.now, sa(SERVER), Bytes::copy_from_slice(d));
                }
                for c in &mut self.clients {
                    while let Some(e) = c.ep.poll_event() {
                        match e {
                            Event::Connected { .. } => c.connected = true,
                            Event::Disconnected { .. } => c.disconnected = true,
                            Event::Message { payload, .. } => c.messages.push(payload),
                            _ => {}
                        }
                    }
                }
                while let Some(e) = self.server.poll_event() {
                    match e {
                        Event::Connected { conn, addr, .. } => {
                            self.accepted.insert(conn, addr);
                        }
                        Event::Message { conn, payload, .. } => {
                            // Echo.
                            let opts = SendOptions::new(Reliability::ReliableOrdered);
                            let _ = self.server.send(self.now, conn, payload, opts);
                        }
                        _ => {}
                    }
                }
            }
            self.now += Duration::from_millis(10);
            self.server.handle_timeout(self.now);
            for c in &mut self.clients {
                c.ep.handle_timeout(self.now);
            }
        }
    }

    fn send(&mut self, i: usize, payload: &'static [u8]) {
        let c = &mut self.clients[i];
        let opts = SendOptions::new(Reliability::ReliableOrdered);
        c.ep.send(self.now, c.conn, Bytes::from_static(payload), opts)
            .unwrap();
    }
}

fn each_mode(test: impl Fn(ProxyMode)) {
    for mode in [ProxyMode::V2First, ProxyMode::V2Every, ProxyMode::Spectrum] {
        test(mode);
    }
}

#[test]
fn clients_behind_a_trusted_proxy_are_known_by_their_real_addresses() {
    each_mode(|mode| {
        let mut net = Net::new(mode, "10.0.0.0/8", |_| {});
        for i in 0..20 {
            net.add(
                &format!("203.0.113.{}:{}", i + 1, 40_000 + i),
                &format!("10.0.0.5:{}", 20_000 + i),
                true,
            );
        }
        // And one client straight to the server, beside them.
        net.add("198.51.100.7:5555", "198.51.100.7:5555", false);
        net.run(30);
        assert!(net.clients.iter().all(|c| c.connected), "{mode:?}");
        let mut seen: Vec<SocketAddr> = net.accepted.values().copied().collect();
        seen.sort();
        let mut want: Vec<SocketAddr> = (0..20)
            .map(|i| sa(&format!("203.0.113.{}:{}", i + 1, 40_000 + i)))
            .collect();
        want.push(sa("198.51.100.7:5555"));
        want.sort();
        assert_eq!(seen, want, "{mode:?}");
        // Messages go both ways through the proxy.
        for i in 0..21 {
            net.send(i, b"\x86hello");
        }
        net.run(10);
        for c in &net.clients {
            assert_eq!(
                c.messages,
                vec![Bytes::from_static(b"\x86hello")],
                "{mode:?}"
            );
        }
        let stats = net.server.stats().proxy;
        assert!(stats.proxied > 0, "{mode:?}");
        assert_eq!(stats.flows, 20, "{mode:?}");
        assert_eq!(stats.untrusted_header + stats.malformed_header, 0);
    });
}

#[test]
fn per_ip_limits_count_the_real_address_not_the_proxy() {
    let mut net = Net::new(ProxyMode::V2First, "10.0.0.0/8", |c| {
        c.admission.max_connections_per_ip = 1;
    });
    // Two players at distinct real IPs through one proxy IP: both get in.
    net.add("203.0.113.1:1000", "10.0.0.5:20000", true);
    net.add("203.0.113.2:1000", "10.0.0.5:20001", true);
    // A second connection from 203.0.113.1 (another port) is over that IP's limit.
    net.add("203.0.113.1:1001", "10.0.0.5:20002", true);
    net.run(30);
    // The third is refused (at its 0x13 when the handshakes overlap, as here: 0x15).
    let up: Vec<bool> = net
        .clients
        .iter()
        .map(|c| c.connected && !c.disconnected)
        .collect();
    assert_eq!(up, vec![true, true, false]);
    let mut seen: Vec<SocketAddr> = net.accepted.values().copied().collect();
    seen.sort();
    assert_eq!(seen, vec![sa("203.0.113.1:1000"), sa("203.0.113.2:1000")]);
    let stats = net.server.stats();
    assert_eq!(stats.refused_ip_connections + stats.refused_full_late, 1);
}

#[test]
fn a_ban_of_one_real_address_closes_only_that_client() {
    let mut net = Net::new(ProxyMode::V2Every, "10.0.0.0/8", |_| {});
    net.add("203.0.113.1:1000", "10.0.0.5:20000", true);
    net.add("203.0.113.2:1000", "10.0.0.5:20001", true);
    net.run(30);
    assert!(net.clients.iter().all(|c| c.connected));
    let now = net.now;
    net.server.ban(now, "203.0.113.1".parse().unwrap(), None);
    net.run(300);
    assert!(net.clients[0].disconnected);
    assert!(!net.clients[1].disconnected);
    net.send(1, b"\x86still here");
    net.run(10);
    assert_eq!(
        net.clients[1].messages,
        vec![Bytes::from_static(b"\x86still here")]
    );
}

#[test]
fn headers_from_untrusted_sources_are_dropped() {
    each_mode(|mode| {
        let mut net = Net::new(mode, "10.0.0.0/8", |_| {});
        // A stranger claiming to speak for 203.0.113.1 never gets a connection...
        net.add("203.0.113.1:1000", "192.0.2.77:20000", true);
        net.run(50);
        assert!(!net.clients[0].connected, "{mode:?}");
        assert!(net.accepted.is_empty(), "{mode:?}");
        assert!(net.server.stats().proxy.untrusted_header > 0, "{mode:?}");
    });
}

#[test]
fn required_headers_drop_bare_datagrams_from_the_proxy() {
    let mut net = Net::new(ProxyMode::V2Every, "10.0.0.0/8", |c| {
        if let Some(p) = c.proxy.as_mut() {
            p.required = true;
        }
    });
    net.add("10.0.0.5:20000", "10.0.0.5:20000", false);
    net.run(50);
    assert!(!net.clients[0].connected);
    assert!(net.server.stats().proxy.missing_header > 0);
}

#[test]
fn cookies_work_through_the_proxy() {
    let mut net = Net::new(ProxyMode::V2First, "10.0.0.0/8", |c| {
        c.use_cookies = CookieMode::Always;
    });
    net.add("203.0.113.1:1000", "10.0.0.5:20000", true);
    net.add("203.0.113.2:1000", "10.0.0.5:20001", true);
    net.run(30);
    assert!(net.clients.iter().all(|c| c.connected));
    assert_eq!(net.server.stats().bad_cookies, 0);
}

/// 10,000 headers, random or cut or with bytes changed, through the parsers and a proxy
/// layer (trusted and untrusted): no panic, and a datagram is attributed to a header's
/// client only when that header parsed (see `raknet_proto::fuzzing::proxy_header`).
#[test]
fn ten_thousand_hostile_headers() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut valid = Vec::new();
    let mut v4 = Vec::new();
    proxy::write_v2(sa("203.0.113.7:50000"), sa(SERVER), &mut v4);
    valid.push(v4);
    let mut v6 = Vec::new();
    proxy::write_v2(sa("[2001:db8::7]:4000"), sa("[2001:db8::1]:19132"), &mut v6);
    valid.push(v6);
    let mut spp = Vec::new();
    proxy::write_spp(sa("203.0.113.7:50000"), sa(SERVER), &mut spp);
    valid.push(spp);
    let mut parsed = 0;
    for i in 0..10_000u64 {
        let mut data = valid[(i % 3) as usize].clone();
        data.extend_from_slice(&[0x84, 0, 0, 0]);
        match next() % 4 {
            // Random bytes after a genuine signature or magic.
            0 => {
                let keep = if i % 3 == 2 { 2 } else { 12 };
                data.truncate(keep);
                for _ in 0..next() % 64 {
                    data.push(next() as u8);
                }
            }
            // Cut anywhere.
            1 => data.truncate((next() % data.len() as u64) as usize),
            // A few bytes changed.
            2 => {
                for _ in 0..1 + next() % 3 {
                    let at = (next() % data.len() as u64) as usize;
                    data[at] = next() as u8;
                }
            }
            // A length field changed.
            _ => {
                if data.len() > 15 {
                    data[14] = next() as u8;
                    data[15] = next() as u8;
                }
            }
        }
        parsed += usize::from(raknet_proto::fuzzing::proxy_header(&data));
    }
    // The mutations leave a fair share parsing, so attribution was checked on both sides.
    assert!(parsed > 1_000, "{parsed}");
}
