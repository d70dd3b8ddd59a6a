//! Endpoint configuration: every default and every hostile-input limit, documented.

use std::time::Duration;

/// Limits that bound what a peer can make us hold. Each one is counted in
/// [`crate::ConnectionStats`] when it fires.
///
/// Build one with struct-update syntax: `Limits { max_connections: 10_000, ..Limits::default() }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most fragments one split message may have. A peer that announces more is
    /// disconnected with [`crate::DisconnectReason::LimitExceeded`], and a send that would
    /// need more is refused with [`crate::SendError::TooLarge`] (the peer is assumed to take
    /// as many as we do). Default 16 384 (about 22 MiB at MTU 1492; Bedrock resource packs
    /// reach several MB).
    pub max_split_parts: u32,
    /// Most split messages being reassembled at once per connection. Fragments of further
    /// messages are refused (their datagram is not acknowledged, so the sender retries).
    /// Default 64.
    pub max_concurrent_splits: usize,
    /// Most bytes of the peer's data a connection buffers: fragments in reassembly,
    /// messages held for ordering behind a gap, and messages that came before the
    /// handshake ended, each counted with [`Limits::PIECE_OVERHEAD`] on top of its payload.
    /// Beyond it such frames are refused as above (a frame that is delivered at once never
    /// is). Default 64 MiB.
    pub max_reassembly_bytes: usize,
    /// The same, for all the connections of an endpoint together: the memory a crowd of
    /// peers can make it hold. Default 512 MiB.
    ///
    /// Shared fairly: each connection is guaranteed its share
    /// ([`Limits::buffered_share`], 256 KiB by default), and only the first half of the
    /// budget is open to connections beyond their share. A few peers that fill the open half
    /// (a held gap behind which they pile up messages) cannot take the share of anyone else:
    /// every other player's split messages up to its share still get through.
    pub max_endpoint_buffered_bytes: usize,
    /// Most bytes one reassembled message may have; a larger announced message is a
    /// violation. Default 32 MiB.
    pub max_message_bytes: usize,
    /// Most out-of-order messages held per ordering channel; beyond it they are refused
    /// (not acknowledged) until the gap fills. Default 4096.
    pub max_held_per_channel: usize,
    /// How far ahead of the oldest missing reliable message index a frame may be before
    /// it is refused. Bounds the duplicate filter's memory. Default 65 536.
    pub max_reliable_window: u32,
    /// Most sequence numbers one ACK/NAK may make us walk; the rest is ignored (official
    /// RakNet could be hung with a single range of 2^24 numbers). Default 8192.
    pub max_ack_numbers: u32,
    /// Gap in datagram numbers beyond which a datagram is ignored as garbage (official
    /// 50 000). Default 50 000.
    pub max_datagram_gap: u32,
    /// Most bytes queued or unacknowledged for sending per connection; `send` fails with
    /// [`crate::SendError::QueueFull`] beyond it. Each frame counts its payload plus
    /// [`Limits::SEND_OVERHEAD`]. Default 64 MiB.
    pub max_send_queue_bytes: usize,
    /// The same for all the connections of an endpoint (of an [`crate::EndpointGroup`])
    /// together: what slow readers can make the server hold. Shared as the receive budget
    /// is: each connection is guaranteed [`Limits::send_share`] (512 KiB with the
    /// defaults), and only the first half of the budget is open beyond shares; a send
    /// beyond fails with [`crate::SendError::QueueFull`]. Default 1 GiB (the per-connection
    /// cap alone would let 1,024 slow readers hold 64 GiB).
    pub max_endpoint_send_bytes: usize,
    /// Most reliable frames in flight (sent, not yet acknowledged) per connection; further
    /// reliable frames wait in the queue. Default 1024 (official 512). A
    /// [`CongestionControl::Bbr`] connection whose window holds more goes beyond it, up to
    /// [`Limits::max_bbr_reliable_in_flight`].
    pub max_reliable_in_flight: usize,
    /// Most reliable frames in flight per [`CongestionControl::Bbr`] connection. Its limit
    /// follows its congestion window (which BBR sizes from the bandwidth-delay product):
    /// twice the full-size datagrams the window holds, so that the window and not a frame
    /// count bounds a bulk transfer, at most this and at least `max_reliable_in_flight`. A
    /// fixed 1024 frames of about 1.4 kB cap a 20 ms path near 72 MB/s: 16 MiB at 0 % loss
    /// take 0.35 s (47 MB/s), and 0.21 s (79 MB/s) with the window's limit, which peaks at
    /// about 5900 frames. Default 16 384.
    ///
    /// Memory: a frame in flight holds a slice of its message and about 100–200 bytes of
    /// bookkeeping (its record and a hash-map slot), which the send queue limit
    /// ([`Limits::max_send_queue_bytes`]) counts as its payload plus
    /// [`Limits::SEND_OVERHEAD`]. The peer must accept that many reliable frames ahead of the oldest missing one:
    /// this engine does up to [`Limits::max_reliable_window`] (65 536), official RakNet up to
    /// 1 000 000; RakLib keeps a window of 2048 and drops what lies beyond it. To cap a BBR
    /// connection at `n` frames, set both this and `max_reliable_in_flight` to `n`.
    pub max_bbr_reliable_in_flight: usize,
    /// Most connections (including handshakes in progress) per endpoint; OCR2 beyond it
    /// is answered with 0x14. Default 1024.
    pub max_connections: usize,
    /// Most messages held for a connection before its handshake ends (a server's between
    /// the peer's 0x09 and 0x13, a client's until the server's 0x10); more are refused
    /// until it ends. They count against [`Limits::max_reassembly_bytes`] too. Default 64.
    pub max_early_messages: usize,
    /// Most messages a second a peer may send, sustained, with bursts of twice that; a peer
    /// over it is closed with [`crate::Limit::MessageRate`] (each message is a handler call:
    /// one 1,464-byte datagram holds 365 four-byte messages). While the application pauses
    /// receiving, the peer earns what it is kept from sending (up to a minute's worth).
    /// `None`: no limit. Default 1,000.
    pub max_messages_per_sec: Option<u32>,
}

impl Limits {
    /// What the receive budgets ([`max_reassembly_bytes`](Self::max_reassembly_bytes),
    /// [`max_endpoint_buffered_bytes`](Self::max_endpoint_buffered_bytes)) count for each
    /// piece of a peer's data held, on top of its payload: a fragment in reassembly, a
    /// message held for ordering or until the handshake ends. It stands for the map entry
    /// that keeps the piece and its own allocation: counted by payload alone, a peer's
    /// one-byte pieces would hold about a hundred times what the budgets read
    /// (`tests/held_memory.rs` checks that the count covers what is allocated).
    pub const PIECE_OVERHEAD: usize = 128;

    /// What [`max_send_queue_bytes`](Self::max_send_queue_bytes) counts for each frame
    /// queued or awaiting acknowledgement, on top of its payload: the frame's own record.
    /// Counted by payload alone, a slow peer sent one-byte messages held some hundred times
    /// the budget.
    pub const SEND_OVERHEAD: usize = 128;

    /// The receive buffer each connection is guaranteed whatever the others hold: half of
    /// [`max_endpoint_buffered_bytes`](Self::max_endpoint_buffered_bytes) divided among
    /// [`max_connections`](Self::max_connections) (256 KiB with the defaults; a Bedrock login
    /// is at most about 100 KB). The other half is open to any connection, within its own
    /// [`max_reassembly_bytes`](Self::max_reassembly_bytes), while the total stays below it.
    pub fn buffered_share(&self) -> usize {
        self.max_endpoint_buffered_bytes / 2 / self.max_connections.max(1)
    }

    /// The send backlog each connection is guaranteed whatever the others hold: half of
    /// [`max_endpoint_send_bytes`](Self::max_endpoint_send_bytes) divided among
    /// [`max_connections`](Self::max_connections) (512 KiB with the defaults).
    pub fn send_share(&self) -> usize {
        self.max_endpoint_send_bytes / 2 / self.max_connections.max(1)
    }

    /// The send budgets, for whoever checks a send before it reaches the engine.
    pub fn send_budget(&self) -> SendBudget {
        SendBudget {
            per_connection: self.max_send_queue_bytes,
            endpoint: self.max_endpoint_send_bytes,
            share: self.send_share(),
        }
    }
}

/// What a connection may hold queued or unacknowledged for sending ([`Limits::send_budget`]):
/// the one rule the engine's `send` and a caller that checks before enqueueing (the NIF's
/// `conn_send`, on a scheduler thread) both apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendBudget {
    /// [`Limits::max_send_queue_bytes`].
    pub per_connection: usize,
    /// [`Limits::max_endpoint_send_bytes`].
    pub endpoint: usize,
    /// [`Limits::send_share`].
    pub share: usize,
}

impl SendBudget {
    /// Whether a connection may hold `mine` bytes while all of its endpoint's together hold
    /// `total` (`mine` included): within its own budget, and within its share of the
    /// endpoint's or the open half of it. The bytes beyond shares never pass half the
    /// budget and the shares add up to the other half, so a connection within its share is
    /// never refused for what the others hold.
    pub fn fits(&self, mine: usize, total: usize) -> bool {
        mine <= self.per_connection
            && total <= self.endpoint
            && (mine <= self.share || total <= self.endpoint / 2)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_split_parts: 16_384,
            max_concurrent_splits: 64,
            max_reassembly_bytes: 64 << 20,
            max_endpoint_buffered_bytes: 512 << 20,
            max_message_bytes: 32 << 20,
            max_held_per_channel: 4096,
            max_reliable_window: 65_536,
            max_ack_numbers: 8192,
            max_datagram_gap: 50_000,
            max_send_queue_bytes: 64 << 20,
            max_endpoint_send_bytes: 1 << 30,
            max_reliable_in_flight: 1024,
            max_bbr_reliable_in_flight: 16_384,
            max_connections: 1024,
            max_early_messages: 64,
            max_messages_per_sec: Some(1_000),
        }
    }
}

/// Limits on what strangers (addresses without a connection) get from an endpoint. Every
/// refusal or drop they cause is counted in [`crate::EndpointStats`]; every table they can
/// fill is capped and evicts its oldest entry.
///
/// The defaults protect a public server and still let 100 players behind one NAT (one
/// IP) connect at once: they get up to 64 handshakes in flight, 128 connections, and 20 new
/// connections a second (the rest retry, as clients do on their own).
///
/// Build one with struct-update syntax:
/// `AdmissionLimits { max_connections_per_ip: 8, ..AdmissionLimits::default() }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Most handshakes between OCR2 and 0x13 held at once (each a record of at most 64
    /// bytes, no connection): beyond it the oldest is forgotten. With cookies a spoofed OCR2
    /// makes no record, so only real clients compete for these. Default 4096.
    pub max_half_open: usize,
    /// Most of those from one IP (IPv6: from one /64). Beyond it an OCR2 proven by its
    /// cookie is dropped until one completes or expires; without cookies one takes the
    /// place of that IP's oldest unproven handshake (spoofed or not, they look the same), so
    /// without cookies spoofing a player's IP keeps that player out only at a full share per
    /// round trip of the player. Wider networks have caps of their own, at multiples of
    /// this: an IPv6 /56 twice, a /48 and an IPv4 /24 four times (as for
    /// [`max_connections_per_ip`](Self::max_connections_per_ip)). Default 64.
    pub max_half_open_per_ip: usize,
    /// Most connections one IP (IPv6: one /64) may hold; OCR2 beyond it gets 0x14. Wider
    /// networks have growing caps: an IPv6 /56 twice this, a /48 four times, an IPv4 /24
    /// four times. Default 128.
    pub max_connections_per_ip: usize,
    /// New connections (handshakes started) per IP per second, with a burst of as many;
    /// beyond it OCR2 gets 0x1A "IP recently connected" (official's
    /// `SetLimitIPConnectionFrequency`, 10 a second). A handshake counts once its address
    /// is proven: at OCR2 with a cookie; without one, at its verified 0x13, which is then
    /// answered with a 0x15 if over the limit. Spoofed OCR2s never count. Loopback is not
    /// exempt: a test or a local load generator that connects faster raises it. Default 20.
    pub new_connections_per_ip_per_sec: u32,
    /// Unconnected pongs per source IP per second, with a burst of as many. Default 16.
    pub pongs_per_ip_per_sec: u32,
    /// Largest pong as a multiple of its ping. A Bedrock MOTD (100-150 bytes) makes a pong
    /// of 4-6 times the 33-byte ping, so less would hide a Bedrock server from server lists;
    /// the per-IP and global pong budgets bound what a spoofer can reflect. Default 6.
    pub pong_amplification: u32,
    /// Unconnected pong bytes per second over all sources (with a burst of one second's
    /// worth). Default 256 KiB. The IPs of players who completed a handshake have a budget of
    /// this size of their own, so pongs total at most twice this.
    pub pong_bytes_per_sec: u64,
    /// Anti-amplification factor, as QUIC's: until an address has shown it receives our
    /// datagrams, we send it at most this many times the bytes it sent us (per handshake;
    /// a pong at most this many times its ping). Default 3.
    pub max_amplification: u32,
    /// Most IPs remembered by each per-IP rate table (oldest evicted). Default 16 384.
    pub max_tracked_ips: usize,
    /// Pressure that turns the handshake strict (see [`CookieMode`]): this many half-open
    /// handshakes at once. Default 256 (a sixteenth of `max_half_open`).
    pub strict_half_open: usize,
    /// ... or this many handshakes without proof of address started in one second.
    /// Default 128.
    pub strict_handshakes_per_sec: u32,
    /// Connections whose 0x13 did not echo our time (accepted only while calm: see
    /// [`CookieMode`]) held at once, over all IPs. Default 256.
    pub max_unproven: usize,
    /// Of those, the most from one IP (IPv6: one /64); an IPv6 /56 twice this, a /48 and an
    /// IPv4 /24 four times. Default 16.
    pub max_unproven_per_ip: usize,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            max_half_open: 4096,
            max_half_open_per_ip: 64,
            max_connections_per_ip: 128,
            new_connections_per_ip_per_sec: 20,
            pongs_per_ip_per_sec: 16,
            pong_amplification: 6,
            pong_bytes_per_sec: 256 << 10,
            max_amplification: 3,
            max_tracked_ips: 16_384,
            strict_half_open: 256,
            strict_handshakes_per_sec: 128,
            max_unproven: 256,
            max_unproven_per_ip: 16,
        }
    }
}

impl AdmissionLimits {
    /// What each of `endpoints` endpoints enforces when they serve one address together (a
    /// server's endpoint threads, one `SO_REUSEPORT` socket each, every client on one of
    /// them): the budgets over all sources that each endpoint counts on its own, divided and
    /// rounded up. The limits their [`crate::EndpointGroup`] counts for all of them
    /// (connections per IP), the ratios, the table sizes and the per-IP budgets stay whole.
    ///
    /// A per-IP budget is not divided because the kernel spreads one address's clients over
    /// the endpoints by their ports, unevenly: with the rate of new connections halved on
    /// each of 2 threads, 20 players connecting together from one address (a LAN party, a
    /// NAT) lost one of their 14th to 20th (whichever made a thread's 11th) in 7 runs of 8,
    /// against a documented burst of 20, and a server
    /// list pinging from one port reached one thread and got half its pongs. An address
    /// whose clients land on several threads may get up to `endpoints` times a per-IP rate
    /// (the divided budgets over all sources, and the group's connections per IP, still
    /// hold).
    ///
    /// ```
    /// # use raknet_proto::AdmissionLimits;
    /// let share = AdmissionLimits::default().endpoint_share(3);
    /// assert_eq!((share.strict_handshakes_per_sec, share.max_half_open), (43, 1366));
    /// assert_eq!((share.pongs_per_ip_per_sec, share.new_connections_per_ip_per_sec), (16, 20));
    /// assert_eq!((share.max_half_open_per_ip, share.max_unproven_per_ip), (64, 16));
    /// assert_eq!(share.max_connections_per_ip, 128);
    /// ```
    #[must_use]
    pub fn endpoint_share(&self, endpoints: usize) -> Self {
        let n = endpoints.max(1);
        let part = |v: usize| v.div_ceil(n);
        let part32 = |v: u32| v.div_ceil(u32::try_from(n).unwrap_or(u32::MAX));
        Self {
            max_half_open: part(self.max_half_open),
            pong_bytes_per_sec: self.pong_bytes_per_sec.div_ceil(n as u64),
            strict_half_open: part(self.strict_half_open),
            strict_handshakes_per_sec: part32(self.strict_handshakes_per_sec),
            max_unproven: part(self.max_unproven),
            ..self.clone()
        }
    }
}

/// Which congestion controller the connections of an endpoint use (see
/// [`crate::Controller`]). Only the sender's choice matters: the wire format is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// Rate- and delay-based ([`crate::Bbr`]): paces at the measured bottleneck bandwidth and
    /// keeps about a bandwidth-delay product in flight. Random loss does not slow it down;
    /// only heavy, persistent loss (over 20 % of two consecutive round trips) does. While
    /// cruising it bounds its rate by the queueing delay it measures, so flows sharing a
    /// bottleneck converge to equal shares and keep the queue short (`tests/congestion.rs`).
    /// The queueing delay is the minimum over four round trips, so that per-datagram delay
    /// jitter does not read as a queue (16 MiB over a path of 10 ms each way with 5 ms of
    /// jitter that reorders datagrams: 20–60 MB/s on the test's seeds, Reno 1.0). A queue
    /// that a loss-based flow keeps (over 5 ms in most of 32 round trips) makes it compete as
    /// an AIMD flow until a ProbeRTT finds the queue gone: against one Reno flow at a 2 MB/s
    /// bottleneck it gets 0.77–0.93 MB/s (`bbr_and_reno_share_a_bottleneck`). Not the default.
    Bbr,
    /// Loss-based, as official RakNet ([`crate::SlidingWindow`], Reno-like): slow start,
    /// congestion avoidance, 0.7× on a NAK. Every loss reads as congestion, so throughput
    /// falls steeply on a lossy path (about 1/√loss), and it fills a bottleneck's queue.
    #[default]
    Reno,
}

/// When the server's handshake demands proof of address ([`EndpointConfig::use_cookies`]).
///
/// Official RakNet accepts every client that follows the handshake loosely; third-party
/// clients rely on it (jsp-raknet cannot read a Reply1 carrying a cookie and sends its 0x09
/// unreliable; rust-raknet and rak-rs cannot read the cookie either, and echo their own
/// 0x09 time in 0x13 where ours belongs). So the server is only as strict as the pressure on
/// it requires, as SYN cookies switch on when a queue fills:
///
/// * **calm**: Reply1 carries no cookie (in [`CookieMode::Auto`]); a 0x13 that does not
///   echo the time of our 0x10 is accepted as *unproven* (a spoofer could have sent it):
///   such connections count against [`AdmissionLimits::max_unproven`] and
///   [`AdmissionLimits::max_unproven_per_ip`];
/// * **strict**, while [`AdmissionLimits::strict_half_open`] handshakes are half-open or
///   [`AdmissionLimits::strict_handshakes_per_sec`] unproven ones start in a second: Reply1
///   carries a cookie (in `Auto`) that the OCR2 must echo, and every 0x13 must echo our time.
///   Clients that cannot do both are refused until the pressure ends, 10 s after it falls
///   below a quarter of both thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CookieMode {
    /// Cookies only while strict. The default.
    #[default]
    Auto,
    /// Cookies always; OCR2 without one is dropped. Echoes are still required only while
    /// strict.
    Always,
    /// Never a cookie (for clients built with libcat security, which expect a challenge
    /// instead). Echoes are still required while strict.
    Never,
}

impl From<bool> for CookieMode {
    fn from(on: bool) -> Self {
        if on {
            Self::Always
        } else {
            Self::Never
        }
    }
}

/// Configuration of an [`crate::Endpoint`] and of every connection it owns.
///
/// Build one with struct-update syntax:
/// `EndpointConfig { use_cookies: CookieMode::Always, ..EndpointConfig::default() }`.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// With [`EndpointConfig::secret`], the 128-bit key the GUID and the handshake's secret
    /// keys (cookies, echoed time) are derived from; the same seed, secret and inputs give
    /// the same bytes. Default `0x5eed`.
    pub rng_seed: u64,
    /// The other half of that key. The defaults make every endpoint's secrets the same: an
    /// endpoint that faces the internet must get a random seed and secret (the NIF draws both
    /// from the operating system's randomness for every endpoint). Default `0`.
    pub secret: u64,
    /// This endpoint's GUID. `None` derives one from the seed and the secret. Default `None`.
    pub guid: Option<u64>,
    /// RakNet protocol versions accepted from clients; the first is the one clients send
    /// and the one named in 0x19 refusals. Default `[11, 10, 6]`.
    pub protocol_versions: Vec<u8>,
    /// Whether this endpoint accepts incoming connections. Default `true`.
    pub accept_incoming: bool,
    /// Largest MTU accepted or probed. Default 1492 (official maximum).
    pub max_mtu: u16,
    /// Smallest MTU accepted; smaller probes are raised to it. Default 400.
    pub min_mtu: u16,
    /// MTU sizes a client probes, in order. Default 1492, 1200, 576.
    pub mtu_probes: Vec<u16>,
    /// OCR1 attempts per probe size. Default 4.
    pub attempts_per_probe: u32,
    /// Interval between OCR1 attempts. Default 500 ms.
    pub connect_attempt_interval: Duration,
    /// When Reply1 carries the stateless anti-spoofing cookie that OCR2 must echo (the
    /// cookie-only variant of §4.10, which Bedrock clients and official RakNet 4.x clients
    /// built without libcat security accept), whatever the protocol. See [`CookieMode`].
    /// Default [`CookieMode::Auto`]: only under pressure.
    pub use_cookies: CookieMode,
    /// Internal addresses sent in 0x10/0x13 for protocol 6 (official 10; X-Plane's build 30).
    /// Protocols 10 and 11 always use 20, like Minecraft. Default 10.
    pub internal_addresses: usize,
    /// Put the 4-byte timestamp after the flag byte of data and ACK datagrams (official's
    /// UDT build, used by X-Plane's client). Both peers must agree. Default `false`.
    pub datagram_timestamps: bool,
    /// The server's own address as its clients see it, written first among the internal
    /// addresses of 0x10 ConnectionRequestAccepted (with the bound port). `None` writes the
    /// bound address (`0.0.0.0` on a socket that binds every interface). X-Plane's `:host`.
    /// Default `None`.
    pub advertised_ip: Option<std::net::IpAddr>,
    /// Strip an `ID_TIMESTAMP` (0x1B) prefix from received messages and turn its stamp into
    /// the message's transit time (official RakNet rewrites the stamp instead). `false`
    /// delivers such messages unchanged (type 0x1B, the peer's 8-byte stamp, then the inner
    /// message), as X-Plane's library does. Default `true`.
    pub strip_timestamps: bool,
    /// Close a connection after this long without receiving anything valid (garbage does not
    /// count), or when reliable data has waited this long without any acknowledgement.
    /// Default 10 s.
    pub timeout: Duration,
    /// Give up a handshake after this long. Default 10 s.
    pub handshake_timeout: Duration,
    /// Interval of connected pings (keepalive and clock sync). Default 5 s.
    pub ping_interval: Duration,
    /// Longest delay before received datagrams are acknowledged. Default 10 ms. An owed ACK
    /// also leaves earlier, with the next data sent to the same peer, if no ACK left in the
    /// last `ack_delay` (so ACKs are never more frequent than the delay allows).
    pub ack_delay: Duration,
    /// How long a gap in datagram numbers may last before it is NAKed: a datagram that was
    /// merely reordered arrives within it and no spurious resend happens. Official RakNet
    /// NAKs at once (zero). Default 5 ms.
    pub nak_delay: Duration,
    /// How long a message may wait for others to the same peer to share its datagram: data
    /// less than a datagram's worth, none of it `Immediate` and nothing to resend, is sent
    /// once its oldest message has waited this long (or once the queue fills a datagram).
    /// A game server that broadcasts many small messages (positions to a zone) sends a few
    /// datagrams per peer per tick instead of one per message, at the price of up to this
    /// much latency. Zero (the default) sends at once, as official RakNet does.
    pub send_delay: Duration,
    /// Congestion control of the data we send. Default [`CongestionControl::Reno`].
    pub congestion: CongestionControl,
    /// Unreliable messages queued longer than this are discarded unsent. Default 1 s.
    pub unreliable_timeout: Duration,
    /// How long a closing connection waits for its last messages to be acknowledged.
    /// Default 1 s.
    pub close_linger: Duration,
    /// Payload of unconnected pongs (the "offline ping response"). Default empty.
    pub offline_ping_response: bytes::Bytes,
    /// Hostile-input and memory limits.
    pub limits: Limits,
    /// Who gets an answer: half-open handshakes, per-IP caps and rates, pong budgets,
    /// anti-amplification.
    pub admission: AdmissionLimits,
    /// Proxies in front of this endpoint whose headers name the real client (PROXY v2,
    /// Cloudflare Spectrum's SPP): the client's address then stands for the peer everywhere
    /// (limits, bans, cookies, events), and replies go back through the proxy. `None` (the
    /// default) believes no header. See [`crate::proxy`].
    pub proxy: Option<crate::proxy::ProxyConfig>,
    /// Speak as a proxy would: put a header naming this address as the client in front of
    /// what this endpoint sends (tests, proxies written on this crate). With
    /// [`crate::proxy::ProxyMode::V2First`] the header goes on every offline datagram (the
    /// handshake, so a lost first datagram does not lose it) and not on connected ones.
    /// Default `None`.
    pub send_proxy_header: Option<(crate::proxy::ProxyMode, std::net::SocketAddr)>,
    /// Datagrams that are not RakNet to offer the application (GameSpy4 Query on the game
    /// port), and how often. `None` (the default) offers none.
    pub raw: Option<crate::RawConfig>,
    /// Where every 24-bit counter starts (datagram number, reliable, ordering indices) on
    /// both directions. RakNet starts at 0; tests set a value just below 2^24 on both peers
    /// to cross the wrap quickly. Never change it for a real peer.
    #[doc(hidden)]
    pub initial_index_for_tests: u32,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            rng_seed: 0x5eed,
            secret: 0,
            guid: None,
            protocol_versions: vec![11, 10, 6],
            accept_incoming: true,
            max_mtu: 1492,
            min_mtu: 400,
            mtu_probes: vec![1492, 1200, 576],
            attempts_per_probe: 4,
            connect_attempt_interval: Duration::from_millis(500),
            use_cookies: CookieMode::Auto,
            internal_addresses: 10,
            datagram_timestamps: false,
            advertised_ip: None,
            strip_timestamps: true,
            timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(5),
            ack_delay: Duration::from_millis(10),
            nak_delay: Duration::from_millis(5),
            send_delay: Duration::ZERO,
            congestion: CongestionControl::default(),
            unreliable_timeout: Duration::from_secs(1),
            close_linger: Duration::from_secs(1),
            offline_ping_response: bytes::Bytes::new(),
            limits: Limits::default(),
            admission: AdmissionLimits::default(),
            proxy: None,
            send_proxy_header: None,
            raw: None,
            initial_index_for_tests: 0,
        }
    }
}

impl EndpointConfig {
    /// The internal-address list of 0x10/0x13 on a connection of `protocol` from an endpoint
    /// bound to `local`: the address the peer sees first ([`EndpointConfig::advertised_ip`]
    /// or the bound one, with the bound port), then the unassigned placeholder.
    pub fn internal_address_list(
        &self,
        protocol: u8,
        local: std::net::SocketAddr,
    ) -> Vec<std::net::SocketAddr> {
        let n = self.internal_addresses_for(protocol);
        let mut list = vec![crate::addr::UNASSIGNED; n];
        if let Some(first) = list.first_mut() {
            let ip = self.advertised_ip.unwrap_or(local.ip());
            *first = std::net::SocketAddr::new(ip, local.port());
        }
        list
    }

    /// Internal addresses to send in 0x10/0x13 on a connection of `protocol`.
    pub fn internal_addresses_for(&self, protocol: u8) -> usize {
        if protocol >= 10 {
            20
        } else {
            self.internal_addresses
        }
    }
}
