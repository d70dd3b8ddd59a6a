//! Two endpoints joined by two seeded lossy links, on a virtual clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_netsim::{Link, LinkConfig};
use raknet_proto::{
    ConnId, ConnectOptions, Endpoint, EndpointConfig, Event, Reliability, SendOptions,
};

pub const SERVER: &str = "127.0.0.1:19132";
pub const CLIENT: &str = "127.0.0.1:40000";

pub struct Pair {
    pub now: Instant,
    pub start: Instant,
    pub server: Endpoint,
    pub client: Endpoint,
    pub server_addr: SocketAddr,
    pub client_addr: SocketAddr,
    pub c2s: Link,
    pub s2c: Link,
    pub server_events: Vec<Event>,
    pub client_events: Vec<Event>,
    /// The first byte (the datagram's flags) of every datagram each side sent, in order.
    pub client_sent: Vec<u8>,
    pub server_sent: Vec<u8>,
    /// The server's NAKs never leave (a peer that does not send them, or loses them all).
    pub drop_server_naks: bool,
    buf: Vec<u8>,
}

impl Pair {
    pub fn new(
        seed: u64,
        server: EndpointConfig,
        client: EndpointConfig,
        link: LinkConfig,
    ) -> Self {
        let addrs = (SERVER.parse().unwrap(), CLIENT.parse().unwrap());
        Self::new_at(seed, server, client, link, addrs)
    }

    /// [`Pair::new`] with the server's and the client's addresses (IPv6 ones, say).
    #[allow(dead_code)]
    pub fn new_at(
        seed: u64,
        server: EndpointConfig,
        client: EndpointConfig,
        link: LinkConfig,
        (server_addr, client_addr): (SocketAddr, SocketAddr),
    ) -> Self {
        let start = Instant::now();
        Self {
            now: start,
            start,
            server: Endpoint::new(
                EndpointConfig {
                    rng_seed: seed,
                    ..server
                },
                server_addr,
                start,
            ),
            client: Endpoint::new(
                EndpointConfig {
                    rng_seed: seed ^ 0xc1,
                    ..client
                },
                client_addr,
                start,
            ),
            server_addr,
            client_addr,
            c2s: Link::new(link.clone(), seed.wrapping_mul(31) ^ 1),
            s2c: Link::new(link, seed.wrapping_mul(37) ^ 2),
            server_events: Vec::new(),
            client_events: Vec::new(),
            client_sent: Vec::new(),
            server_sent: Vec::new(),
            drop_server_naks: false,
            buf: Vec::with_capacity(2048),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Exchange everything that is due now, until nothing moves.
    fn settle(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.client.poll_transmit(self.now, &mut self.buf) {
                assert_eq!(t.destination, self.server_addr);
                self.client_sent.push(self.buf[0]);
                self.c2s.send(self.now, self.buf[..t.size].to_vec());
                moved = true;
            }
            while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf) {
                let nak = self.buf[0] & 0xE0 == 0xA0;
                if t.destination == self.client_addr && !(nak && self.drop_server_naks) {
                    self.server_sent.push(self.buf[0]);
                    self.s2c.send(self.now, self.buf[..t.size].to_vec());
                }
                moved = true;
            }
            while let Some(d) = self.c2s.poll_recv(self.now) {
                self.server
                    .handle(self.now, self.client_addr, Bytes::from(d));
                moved = true;
            }
            while let Some(d) = self.s2c.poll_recv(self.now) {
                self.client
                    .handle(self.now, self.server_addr, Bytes::from(d));
                moved = true;
            }
            while let Some(e) = self.server.poll_event() {
                self.server_events.push(e);
            }
            while let Some(e) = self.client.poll_event() {
                self.client_events.push(e);
            }
            if !moved {
                return;
            }
        }
    }

    /// The earliest deadline of either endpoint or link.
    fn next_deadline(&mut self) -> Option<Instant> {
        [
            self.server.poll_timeout(),
            self.client.poll_timeout(),
            self.c2s.poll_timeout(),
            self.s2c.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advance to the next deadline. Returns `false` when nothing is scheduled at all.
    pub fn step(&mut self) -> bool {
        self.settle();
        let Some(next) = self.next_deadline() else {
            return false;
        };
        // Never stand still: a deadline in the past still advances the clock a little.
        self.now = next.max(self.now + Duration::from_micros(1));
        self.server.handle_timeout(self.now);
        self.client.handle_timeout(self.now);
        self.settle();
        true
    }

    /// Exchange what can move now (sends made since the last step included), without
    /// advancing the clock.
    pub fn flush(&mut self) {
        self.settle();
    }

    /// Exchange everything due before `t`, then stand at `t` (`drive_until` steps on to the
    /// next deadline, which may be seconds away once the connection is quiet).
    pub fn advance_to(&mut self, t: Instant) {
        self.drive_until(t.saturating_duration_since(self.now), |p| {
            p.next_deadline().is_none_or(|n| n > t)
        });
        self.now = self.now.max(t);
    }

    /// Messages the server has received (its `Event::Message`s so far).
    pub fn server_messages(&self) -> usize {
        count_messages(&self.server_events)
    }

    /// Messages the client has received (its `Event::Message`s so far).
    pub fn client_messages(&self) -> usize {
        count_messages(&self.client_events)
    }

    /// Step until `done` holds or `limit` of virtual time passes; returns whether it held.
    pub fn drive_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let deadline = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.now >= deadline || !self.step() {
                return done(self);
            }
        }
    }

    /// Send one `size`-byte reliable_ordered message (type 0x86, then zeros) from the client
    /// on `conn` and drive until the server has it, for at most `limit` of virtual time.
    /// Returns whether it arrived. Earlier server events are cleared first.
    pub fn deliver_one(&mut self, conn: ConnId, size: usize, limit: Duration) -> bool {
        self.server_events.clear();
        let mut data = vec![0u8; size];
        data[0] = 0x86;
        self.client
            .send(
                self.now,
                conn,
                Bytes::from(data),
                SendOptions::new(Reliability::ReliableOrdered),
            )
            .expect("the message is queued");
        self.drive_until(limit, |p| {
            p.server_events
                .iter()
                .any(|e| matches!(e, Event::Message { payload, .. } if payload.len() == size))
        })
    }

    /// Connect the client; returns (client's id, server's id).
    pub fn connect(&mut self) -> (ConnId, ConnId) {
        self.connect_with(ConnectOptions::default())
    }

    /// [`Pair::connect`] with settings of the connection's own.
    pub fn connect_with(&mut self, opts: ConnectOptions) -> (ConnId, ConnId) {
        let id = self
            .client
            .connect_with(self.now, self.server_addr, opts)
            .expect("connect starts");
        let ok = self.drive_until(Duration::from_secs(30), |p| {
            p.client_events
                .iter()
                .any(|e| matches!(e, Event::Connected { .. }))
                && p.server_events
                    .iter()
                    .any(|e| matches!(e, Event::Connected { .. }))
        });
        assert!(
            ok,
            "handshake did not complete: client {:?} server {:?}",
            self.client_events, self.server_events
        );
        let server_id = self
            .server_events
            .iter()
            .find_map(|e| match e {
                Event::Connected { conn, .. } => Some(*conn),
                _ => None,
            })
            .unwrap();
        (id, server_id)
    }
}

fn count_messages(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Message { .. }))
        .count()
}
