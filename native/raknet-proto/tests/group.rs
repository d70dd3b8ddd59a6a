//! Several endpoints of one server (one per thread, `SO_REUSEPORT` sockets on one port) share
//! their connection limits through an `EndpointGroup`. The kernel sends each client's
//! datagrams to one socket; here each client is pinned to one endpoint the same way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use raknet_proto::*;

const SERVER: &str = "127.0.0.1:19132";

struct Net {
    now: Instant,
    servers: Vec<Endpoint>,
    /// A client, its address and the server endpoint its datagrams land on.
    clients: Vec<(Endpoint, SocketAddr, usize)>,
    client_events: Vec<Vec<Event>>,
    server_events: Vec<Vec<Event>>,
    /// How many more datagrams of each client reach the server (`None`: all).
    delivered: Vec<Option<usize>>,
    /// The endpoints' group (with `shared: false`, one they do not use).
    group: Arc<EndpointGroup>,
    buf: Vec<u8>,
}

impl Net {
    /// `n` server endpoints sharing one group (or each alone with `shared: false`) and one
    /// GUID.
    fn new(n: usize, shared: bool, config: EndpointConfig) -> Self {
        let now = Instant::now();
        let group = Arc::new(EndpointGroup::default());
        let servers = (0..n)
            .map(|i| {
                let config = EndpointConfig {
                    rng_seed: 7 + i as u64,
                    guid: Some(0x5e5e),
                    ..config.clone()
                };
                let group = if shared {
                    group.clone()
                } else {
                    Arc::default()
                };
                Endpoint::new_in_group(config, SERVER.parse().unwrap(), now, group)
            })
            .collect();
        Self {
            now,
            servers,
            clients: Vec::new(),
            client_events: Vec::new(),
            server_events: vec![Vec::new(); n],
            delivered: Vec::new(),
            buf: Vec::with_capacity(2048),
            group,
        }
    }

    /// A client on `port` of 127.0.0.1 whose datagrams land on server endpoint `on`; it
    /// starts connecting at once.
    fn connect(&mut self, ip: &str, port: u16, on: usize) -> usize {
        self.connect_with(ip, port, on, EndpointConfig::default())
    }

    /// [`Net::connect`] with a client of `config`.
    fn connect_with(&mut self, ip: &str, port: u16, on: usize, config: EndpointConfig) -> usize {
        let addr = SocketAddr::new(ip.parse().unwrap(), port);
        let config = EndpointConfig {
            rng_seed: u64::from(port),
            accept_incoming: false,
            ..config
        };
        let mut client = Endpoint::new(config, addr, self.now);
        client.connect(self.now, SERVER.parse().unwrap()).unwrap();
        self.clients.push((client, addr, on));
        self.client_events.push(Vec::new());
        self.delivered.push(None);
        self.clients.len() - 1
    }

    fn settle(&mut self) {
        let server: SocketAddr = SERVER.parse().unwrap();
        loop {
            let mut moved = false;
            for ((client, addr, on), delivered) in self.clients.iter_mut().zip(&mut self.delivered)
            {
                while let Some(t) = client.poll_transmit(self.now, &mut self.buf) {
                    moved = true;
                    if let Some(left) = delivered {
                        if *left == 0 {
                            continue;
                        }
                        *left -= 1;
                    }
                    let d = Bytes::copy_from_slice(&self.buf[..t.size]);
                    self.servers[*on].handle(self.now, *addr, d);
                }
            }
            for (i, s) in self.servers.iter_mut().enumerate() {
                while let Some(t) = s.poll_transmit(self.now, &mut self.buf) {
                    let d = Bytes::copy_from_slice(&self.buf[..t.size]);
                    if let Some((c, _, _)) = self.clients.iter_mut().find(|c| c.1 == t.destination)
                    {
                        c.handle(self.now, server, d);
                    }
                    moved = true;
                }
                while let Some(e) = s.poll_event() {
                    self.server_events[i].push(e);
                }
            }
            for (i, (c, _, _)) in self.clients.iter_mut().enumerate() {
                while let Some(e) = c.poll_event() {
                    self.client_events[i].push(e);
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Run for `d` of virtual time.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.settle();
            let next = self
                .servers
                .iter_mut()
                .chain(self.clients.iter_mut().map(|c| &mut c.0))
                .filter_map(|e| e.poll_timeout())
                .min()
                .unwrap_or(end);
            self.now = next.clamp(self.now + Duration::from_millis(1), end);
            for s in &mut self.servers {
                s.handle_timeout(self.now);
            }
            for (c, _, _) in &mut self.clients {
                c.handle_timeout(self.now);
            }
        }
        self.settle();
    }

    fn connected(&self, client: usize) -> bool {
        self.client_events[client]
            .iter()
            .any(|e| matches!(e, Event::Connected { .. }))
    }

    /// Endpoint 0's thread ends (a panic, say): it is dropped, and the clients with it; the
    /// other endpoint becomes endpoint 0.
    fn drop_first_endpoint(&mut self) {
        drop(self.servers.remove(0));
        self.server_events.remove(0);
        self.clients.clear();
        self.client_events.clear();
        self.delivered.clear();
    }

    /// Client `a` (on endpoint 0) has its OCR1, OCR2 and 0x09 delivered and nothing after:
    /// its handshake holds the only slot of a one-slot server. A client on endpoint 1 is
    /// refused with 0x14 meanwhile.
    fn handshake_holding_the_slot(&mut self) {
        let a = self.connect("127.0.0.1", 40_001, 0);
        self.delivered[a] = Some(3);
        self.run(Duration::from_millis(100));
        assert_eq!(self.servers[0].stats().half_open, 1);
        // The slot is held, and the stats say so: the application sees no connection yet.
        assert_eq!(self.servers[0].stats().half_open_reserved, 1);
        assert_eq!(self.server_connections(), 0);
        let b = self.connect("127.0.0.1", 40_002, 1);
        self.run(Duration::from_millis(100));
        assert_eq!(
            self.refusal(b),
            Some(DisconnectReason::ConnectFailed(
                ConnectError::NoFreeIncomingConnections
            ))
        );
    }

    /// Connections of the server, all endpoints together.
    fn server_connections(&self) -> usize {
        self.servers.iter().map(|s| s.stats().connections).sum()
    }

    fn refusal(&self, client: usize) -> Option<DisconnectReason> {
        self.client_events[client].iter().find_map(|e| match e {
            Event::Disconnected { reason, .. } => Some(*reason),
            _ => None,
        })
    }
}

/// A server of the given limits, with cookies always on: the slot tests below follow a
/// cookie-proven handshake, which takes its slot at 0x09 (without a cookie it is taken at
/// 0x13, see `a_cookieless_client_refused_late_is_told_at_once`).
fn limits(max_connections: usize, per_ip: usize) -> EndpointConfig {
    EndpointConfig {
        use_cookies: CookieMode::Always,
        limits: Limits {
            max_connections,
            ..Limits::default()
        },
        admission: AdmissionLimits {
            max_connections_per_ip: per_ip,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    }
}

#[test]
fn max_connections_holds_for_the_whole_group() {
    let mut net = Net::new(2, true, limits(2, 100));
    let a = net.connect("127.0.0.1", 40_001, 0);
    let b = net.connect("127.0.0.1", 40_002, 1);
    net.run(Duration::from_secs(2));
    assert!(net.connected(a) && net.connected(b));
    assert_eq!(net.servers[0].stats().connections, 1);
    assert_eq!(net.servers[1].stats().connections, 1);

    // Endpoint 1 holds one connection of its own, but the server's two slots are taken.
    let c = net.connect("127.0.0.1", 40_003, 1);
    net.run(Duration::from_secs(2));
    assert!(!net.connected(c));
    assert_eq!(
        net.refusal(c),
        Some(DisconnectReason::ConnectFailed(
            ConnectError::NoFreeIncomingConnections
        ))
    );

    // A connection ending on endpoint 0 frees a slot for a client of endpoint 1.
    let id = net.clients[a]
        .0
        .conn_by_addr(SERVER.parse().unwrap())
        .unwrap();
    net.clients[a].0.close(net.now, id);
    net.run(Duration::from_secs(2));
    assert_eq!(net.servers[0].stats().connections, 0);
    let d = net.connect("127.0.0.1", 40_004, 1);
    net.run(Duration::from_secs(2));
    assert!(net.connected(d));
}

#[test]
fn endpoints_without_a_shared_group_each_have_the_whole_limit() {
    // The control for the test above: alone, endpoint 1 would accept the third client.
    let mut net = Net::new(2, false, limits(2, 100));
    let a = net.connect("127.0.0.1", 40_001, 0);
    let b = net.connect("127.0.0.1", 40_002, 1);
    let c = net.connect("127.0.0.1", 40_003, 1);
    net.run(Duration::from_secs(2));
    assert!(net.connected(a) && net.connected(b) && net.connected(c));
}

#[test]
fn connections_per_ip_count_across_the_group() {
    let mut net = Net::new(2, true, limits(100, 1));
    let a = net.connect("127.0.0.1", 40_001, 0);
    net.run(Duration::from_secs(2));
    assert!(net.connected(a));
    // Same IP, another port, the other endpoint: the IP's one connection is taken.
    let b = net.connect("127.0.0.1", 40_002, 1);
    // Another IP is not affected.
    let c = net.connect("127.0.0.2", 40_002, 1);
    net.run(Duration::from_secs(2));
    assert!(!net.connected(b));
    assert!(net.connected(c));
}

#[test]
fn a_dropped_endpoint_gives_its_connections_back_to_the_group() {
    let mut net = Net::new(2, true, limits(1, 100));
    let a = net.connect("127.0.0.1", 40_001, 0);
    net.run(Duration::from_secs(2));
    assert!(net.connected(a));
    // Endpoint 0's thread ends: its connection no longer counts.
    net.drop_first_endpoint();
    let b = net.connect("127.0.0.1", 40_002, 0);
    net.run(Duration::from_secs(2));
    assert!(net.connected(b));
}

/// Two clients connect at once through two endpoints to a server with one slot. Both pass
/// OCR2 while the slot is free; whichever 0x09 comes first takes the slot, and the other
/// client is refused before it is told "accepted". Before the slot was taken at 0x09, both
/// got 0x10, both saw `Connected`, and the second's 0x13 was dropped: a client the server
/// never held, left to time out.
#[test]
fn a_client_told_accepted_holds_its_slot() {
    let mut net = Net::new(2, true, limits(1, 100));
    let a = net.connect("127.0.0.1", 40_001, 0);
    let b = net.connect("127.0.0.1", 40_002, 1);
    net.run(Duration::from_secs(2));
    assert!(net.connected(a));
    assert!(
        !net.connected(b),
        "the second client was told it was accepted"
    );
    assert_eq!(
        net.refusal(b),
        Some(DisconnectReason::ConnectFailed(
            ConnectError::NoFreeIncomingConnections
        ))
    );
    assert_eq!(net.server_connections(), 1);
    assert_eq!(net.servers[1].stats().refused_full_late, 1);
}

/// Without cookies a client's address is proven only by its 0x13, so its slot is taken
/// then. One that finds none left is told with a 0x15 at once.
#[test]
fn a_cookieless_client_refused_late_is_told_at_once() {
    let server = EndpointConfig {
        use_cookies: CookieMode::Never,
        ..limits(1, 100)
    };
    let mut net = Net::new(2, true, server);
    let official = EndpointConfig {
        protocol_versions: vec![6],
        ..EndpointConfig::default()
    };
    let a = net.connect_with("127.0.0.1", 40_001, 0, official.clone());
    let b = net.connect_with("127.0.0.1", 40_002, 1, official);
    net.run(Duration::from_millis(100));
    assert!(net.connected(a));
    assert_eq!(net.refusal(a), None);
    // B was accepted by 0x10, then refused at its 0x13: it learns so within 100 ms, not
    // after the 10 s timeout.
    assert!(net.connected(b));
    assert_eq!(net.refusal(b), Some(DisconnectReason::PeerClosed));
    assert_eq!(net.server_connections(), 1);
    assert_eq!(net.servers[1].stats().refused_full_late, 1);
}

/// A slot taken at 0x09 goes back when the handshake times out without its 0x13, on time
/// even though that endpoint receives nothing more.
#[test]
fn a_handshake_that_never_finishes_gives_its_slot_back() {
    let mut net = Net::new(2, true, limits(1, 100));
    net.handshake_holding_the_slot();
    // Endpoint 0's handshake times out after 10 s (it asks to be woken for that).
    let expiry = net.servers[0]
        .poll_timeout()
        .expect("a deadline for the held slot");
    assert!(expiry <= net.now + Duration::from_secs(10));
    net.run(Duration::from_secs(10));
    assert_eq!(net.servers[0].stats().half_open, 0);
    assert_eq!(net.servers[0].stats().half_open_reserved, 0);
    let c = net.connect("127.0.0.1", 40_003, 1);
    net.run(Duration::from_secs(1));
    assert!(net.connected(c));
}

/// A slot held by a handshake goes back to the group when its endpoint is dropped (its
/// thread ended), like the slots of its connections.
#[test]
fn a_dropped_endpoint_gives_its_handshakes_slots_back() {
    let mut net = Net::new(2, true, limits(1, 100));
    net.handshake_holding_the_slot();
    // Endpoint 0's thread ends with the handshake under way.
    net.drop_first_endpoint();
    let c = net.connect("127.0.0.1", 40_003, 0);
    net.run(Duration::from_secs(1));
    assert!(net.connected(c));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Clients of both protocols start at random times on either endpoint of a small server
    /// (with cookies, or without: slots taken at 0x09 or at 0x13), and
    /// some stop talking after a few datagrams (their handshake, or their connection, dies
    /// half-way). Once every timeout has run out, the group counts exactly the connections
    /// the endpoints hold (no slot leaked by a handshake, kept or refused), never more than
    /// the limit, and exactly the clients that still believe they are connected.
    #[test]
    fn slots_add_up_whatever_the_handshakes_do(
        max in 1usize..4,
        cookies in any::<bool>(),
        clients in proptest::collection::vec(
            (
                prop_oneof![Just(6u8), Just(11u8)],
                0usize..2,
                proptest::option::of(0usize..7),
                0u64..2_000,
            ),
            1..8,
        ),
    ) {
        let server = EndpointConfig {
            use_cookies: cookies.into(),
            ..limits(max, 100)
        };
        let mut net = Net::new(2, true, server);
        let mut clients = clients;
        clients.sort_by_key(|c| c.3);
        let mut at = 0;
        for (i, (protocol, on, budget, start_ms)) in clients.into_iter().enumerate() {
            net.run(Duration::from_millis(start_ms - at));
            at = start_ms;
            let config = EndpointConfig {
                protocol_versions: vec![protocol],
                ..EndpointConfig::default()
            };
            let c = net.connect_with("127.0.0.1", 41_000 + i as u16, on, config);
            net.delivered[c] = budget;
            prop_assert!(net.group.connections() <= max);
        }
        // Handshakes (10 s) and connections (10 s without a word) time out.
        net.run(Duration::from_secs(30));
        let held = net.server_connections();
        prop_assert_eq!(net.group.connections(), held);
        prop_assert!(held <= max);
        let alive = (0..net.clients.len())
            .filter(|&c| net.connected(c) && net.refusal(c).is_none())
            .count();
        prop_assert_eq!(alive, held);
    }
}

/// A GUID is one peer's on the whole server: a second client with a player's GUID is told
/// 0x12 (already connected) by whichever endpoint it reaches, over IPv4 or IPv6, and may
/// connect once the player has gone.
#[test]
fn a_guid_is_unique_across_the_group() {
    let mut net = Net::new(2, true, EndpointConfig::default());
    let same = || EndpointConfig {
        guid: Some(0xfeed),
        ..EndpointConfig::default()
    };
    let player = net.connect_with("127.0.0.1", 40_001, 0, same());
    net.run(Duration::from_secs(2));
    assert!(net.connected(player));
    for (ip, on) in [("127.0.0.2", 1), ("::1", 1), ("127.0.0.3", 0)] {
        let taker = net.connect_with(ip, 40_002, on, same());
        net.run(Duration::from_secs(2));
        assert!(!net.connected(taker), "{ip} took the player's GUID");
        assert_eq!(
            net.refusal(taker),
            Some(DisconnectReason::ConnectFailed(
                ConnectError::AlreadyConnected
            )),
            "{ip}"
        );
    }
    let id = net.clients[player]
        .0
        .conn_by_addr(SERVER.parse().unwrap())
        .unwrap();
    net.clients[player].0.close(net.now, id);
    net.run(Duration::from_secs(2));
    let again = net.connect_with("127.0.0.4", 40_003, 1, same());
    net.run(Duration::from_secs(2));
    assert!(net.connected(again));
}

/// A server's IPv4 and IPv6 sockets are two groups, each with its own limits, that share one
/// GUID table: a player's GUID cannot be taken over the other family either.
#[test]
fn groups_sharing_a_guid_table_keep_their_limits_apart() {
    let mut net = Net::new(2, false, EndpointConfig::default());
    let v4 = Arc::new(EndpointGroup::default());
    let v6 = Arc::new(EndpointGroup::sharing_guids(v4.guids()));
    net.servers = [v4, v6]
        .into_iter()
        .enumerate()
        .map(|(i, group)| {
            let config = EndpointConfig {
                rng_seed: 70 + i as u64,
                guid: Some(0x5e5e),
                ..limits(1, 1)
            };
            Endpoint::new_in_group(config, SERVER.parse().unwrap(), net.now, group)
        })
        .collect();
    let same = || EndpointConfig {
        guid: Some(0xfeed),
        ..EndpointConfig::default()
    };
    let player = net.connect_with("127.0.0.1", 40_001, 0, same());
    net.run(Duration::from_secs(2));
    assert!(net.connected(player));
    let taker = net.connect_with("::1", 40_002, 1, same());
    net.run(Duration::from_secs(2));
    assert_eq!(
        net.refusal(taker),
        Some(DisconnectReason::ConnectFailed(
            ConnectError::AlreadyConnected
        ))
    );
    // The other group's one slot is its own: another GUID takes it.
    let other = net.connect("::1", 40_003, 1);
    net.run(Duration::from_secs(2));
    assert!(net.connected(other));
}

/// Per-IP limits count IPv6 by /64, and a provider's wider networks too: a /56 holds twice
/// `max_connections_per_ip`, a /48 four times, an IPv4 /24 four times. Before, one /48 was
/// 65,536 "IPs", each with the whole per-IP limit.
#[test]
fn wider_networks_have_growing_caps() {
    let mut net = Net::new(2, true, limits(1_000, 2));
    let mut port = 40_000;
    let mut connect = |net: &mut Net, ip: &str| {
        // A port of its own: a client's GUID follows its seed, which is its port.
        port += 1;
        let c = net.connect(ip, port, 0);
        net.run(Duration::from_secs(1));
        net.connected(c)
    };
    // One host per /64, all in one /56: four (twice 2) connect.
    let v56: Vec<bool> = (1..=5)
        .map(|i| connect(&mut net, &format!("2001:db8:0:{i}::1")))
        .collect();
    assert_eq!(v56, [true, true, true, true, false]);
    // Another /56 of the same /48: four more reach the /48's eight.
    let other: Vec<bool> = (1..=5)
        .map(|i| connect(&mut net, &format!("2001:db8:0:1{i:02x}::1")))
        .collect();
    assert_eq!(other, [true, true, true, true, false]);
    assert!(!connect(&mut net, "2001:db8:0:200::1"), "the /48 is full");
    assert!(connect(&mut net, "2001:db8:1::1"), "the next /48 is not");
    // IPv4: eight in a /24, then the next /24.
    let v24: Vec<bool> = (1..=9)
        .map(|i| connect(&mut net, &format!("10.0.0.{i}")))
        .collect();
    assert_eq!(v24, [true, true, true, true, true, true, true, true, false]);
    assert!(connect(&mut net, "10.0.1.1"));
}

/// Issue #30: a handshake completes whichever endpoint of the group its datagrams reach. The
/// kernel keeps a client on one socket while the `SO_REUSEPORT` group stays the same; when it
/// changes (a thread restarted) a client's OCR2 can reach another endpoint than its OCR1 did.
/// Each endpoint had a cookie key of its own, so that OCR2 failed its cookie check; the keys
/// are the group's now.
#[test]
fn a_handshake_completes_whichever_endpoint_its_datagrams_reach() {
    let config = EndpointConfig {
        use_cookies: CookieMode::Always,
        ..EndpointConfig::default()
    };
    let mut net = Net::new(2, true, config);
    let a = net.connect("127.0.0.1", 40_001, 0);
    // Its OCR1 reaches endpoint 0, which answers with a cookie.
    let (now, server) = (net.now, SERVER.parse().unwrap());
    let (client, addr, _) = &mut net.clients[a];
    let t = client.poll_transmit(now, &mut net.buf).unwrap();
    net.servers[0].handle(now, *addr, Bytes::copy_from_slice(&net.buf[..t.size]));
    let t = net.servers[0].poll_transmit(now, &mut net.buf).unwrap();
    client.handle(now, server, Bytes::copy_from_slice(&net.buf[..t.size]));
    // From now on its datagrams land on endpoint 1: its OCR2 carries endpoint 0's cookie.
    net.clients[a].2 = 1;
    net.run(Duration::from_millis(500));
    assert!(net.connected(a), "{:?}", net.client_events[a]);
    let stats = net.servers[1].stats();
    assert_eq!(
        (stats.offline_in, stats.bad_cookies, stats.connections),
        (1, 0, 1),
        "the OCR2 was taken: {stats:?}"
    );
}
