//! Real client addresses behind a UDP proxy: the PROXY protocol v2 header (HAProxy's binary
//! format, carried in front of a datagram) and Cloudflare Spectrum's Simple Proxy Protocol
//! (SPP, a fixed 38-byte header on every datagram).
//!
//! The parsers here read untrusted bytes: they never panic, allocate nothing, and say why a
//! header is refused ([`HeaderError`]). [`ProxyLayer`] applies them for an endpoint: it
//! believes headers only from trusted source prefixes, remembers which proxy flow carries
//! which client (so that replies go back through the proxy), and bounds and expires that
//! memory like a half-open handshake's.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use bytes::Bytes;

use crate::addr;

/// The 12 bytes every PROXY v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];
/// The fixed part of a v2 header: signature, version/command, family/protocol, length.
pub const V2_FIXED_LEN: usize = 16;
/// A PROXY v1 header (text) starts with these bytes; v1 is for TCP streams, never trusted on
/// UDP.
pub const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The magic number an SPP header starts with.
pub const SPP_MAGIC: [u8; 2] = [0x56, 0xEC];
/// An SPP header's length.
pub const SPP_LEN: usize = 38;

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than its fixed part, or its length field runs past the datagram.
    Truncated,
    /// A PROXY v1 text header: not accepted on UDP.
    V1,
    /// Not version 2.
    Version,
    /// A command other than LOCAL (0) or PROXY (1).
    Command,
    /// An address family or transport protocol we do not know (UNIX sockets included: they
    /// name no IP address).
    Family,
    /// The length field is too short for the family's addresses.
    Length,
    /// A TLV runs past the header.
    Tlv,
    /// The client address is not one a client can send from (unspecified, multicast,
    /// broadcast, or port 0).
    Address,
    /// Not a header at all (no signature, or no SPP magic).
    Missing,
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "header truncated",
            Self::V1 => "PROXY v1 text header on UDP",
            Self::Version => "not PROXY protocol version 2",
            Self::Command => "unknown PROXY command",
            Self::Family => "unknown address family or protocol",
            Self::Length => "address block too short for its family",
            Self::Tlv => "TLV runs past the header",
            Self::Address => "client address not usable",
            Self::Missing => "no proxy header",
        })
    }
}

impl std::error::Error for HeaderError {}

/// A header that parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The client's address: `None` for a v2 LOCAL command or an UNSPEC family (the proxy
    /// speaking for itself, e.g. a health check).
    pub source: Option<SocketAddr>,
    /// The address the client sent to (the proxy's, as the proxy saw it), when given.
    pub destination: Option<SocketAddr>,
    /// Bytes of the datagram the header takes; the payload follows.
    pub len: usize,
}

/// Whether `data` starts with the PROXY v2 signature.
pub fn has_v2_signature(data: &[u8]) -> bool {
    data.starts_with(&V2_SIGNATURE)
}

/// Whether `data` starts with a PROXY v1 text header's prefix.
pub fn has_v1_prefix(data: &[u8]) -> bool {
    data.starts_with(V1_PREFIX)
}

/// Whether `data` starts with SPP's magic number.
pub fn has_spp_magic(data: &[u8]) -> bool {
    data.starts_with(&SPP_MAGIC)
}

/// Parse the PROXY v2 header at the start of `data`.
///
/// Accepts the PROXY and LOCAL commands, IPv4 and IPv6 with DGRAM or STREAM (some proxies
/// send STREAM's value over UDP) or UNSPEC protocol, and the UNSPEC family (no address).
/// TLVs are walked to check their framing and otherwise ignored.
pub fn parse_v2(data: &[u8]) -> Result<Header, HeaderError> {
    if !has_v2_signature(data) {
        return Err(if has_v1_prefix(data) {
            HeaderError::V1
        } else if V2_SIGNATURE.starts_with(data) {
            HeaderError::Truncated
        } else {
            HeaderError::Missing
        });
    }
    if data.len() < V2_FIXED_LEN {
        return Err(HeaderError::Truncated);
    }
    let (version, command) = (data[12] >> 4, data[12] & 0x0F);
    if version != 2 {
        return Err(HeaderError::Version);
    }
    if command > 1 {
        return Err(HeaderError::Command);
    }
    let (family, protocol) = (data[13] >> 4, data[13] & 0x0F);
    if protocol > 2 {
        return Err(HeaderError::Family);
    }
    let body_len = usize::from(u16::from_be_bytes([data[14], data[15]]));
    let len = V2_FIXED_LEN + body_len;
    let Some(body) = data.get(V2_FIXED_LEN..len) else {
        return Err(HeaderError::Truncated);
    };
    if command == 0 {
        // LOCAL: the proxy speaks for itself; the address block and TLVs are ignored.
        return Ok(Header {
            source: None,
            destination: None,
            len,
        });
    }
    let (addresses, rest) = match family {
        0 => (None, body),
        1 => {
            let Some((a, rest)) = body.split_first_chunk::<12>() else {
                return Err(HeaderError::Length);
            };
            let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(a[at], a[at + 1], a[at + 2], a[at + 3]));
            let pair = (
                SocketAddr::new(ip(0), port_at(a, 8)),
                SocketAddr::new(ip(4), port_at(a, 10)),
            );
            (Some(pair), rest)
        }
        2 => {
            let Some((a, rest)) = body.split_first_chunk::<36>() else {
                return Err(HeaderError::Length);
            };
            let pair = (
                SocketAddr::new(ipv6_at(a, 0), port_at(a, 32)),
                SocketAddr::new(ipv6_at(a, 16), port_at(a, 34)),
            );
            (Some(pair), rest)
        }
        _ => return Err(HeaderError::Family),
    };
    check_tlvs(rest)?;
    // UNSPEC: no address given; the datagram is the proxy's own.
    let Some((source, destination)) = addresses else {
        return Ok(Header {
            source: None,
            destination: None,
            len,
        });
    };
    let source = addr::unmap(source);
    if !usable(source) {
        return Err(HeaderError::Address);
    }
    Ok(Header {
        source: Some(source),
        destination: Some(addr::unmap(destination)),
        len,
    })
}

/// Walk the TLVs after the address block: each is a type byte, a 16-bit big-endian length
/// and that many bytes, and together they fill the block exactly.
fn check_tlvs(mut rest: &[u8]) -> Result<(), HeaderError> {
    while !rest.is_empty() {
        let Some((&[_kind, hi, lo], after)) = rest.split_first_chunk::<3>() else {
            return Err(HeaderError::Tlv);
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        rest = after.get(len..).ok_or(HeaderError::Tlv)?;
    }
    Ok(())
}

/// Parse the SPP header at the start of `data`: the client's address (its `source`) and the
/// proxy's (its `destination`).
pub fn parse_spp(data: &[u8]) -> Result<Header, HeaderError> {
    if !has_spp_magic(data) {
        return Err(HeaderError::Missing);
    }
    let Some(h) = data.first_chunk::<SPP_LEN>() else {
        return Err(HeaderError::Truncated);
    };
    let source = addr::unmap(SocketAddr::new(ipv6_at(h, 2), port_at(h, 34)));
    let destination = addr::unmap(SocketAddr::new(ipv6_at(h, 18), port_at(h, 36)));
    if !usable(source) {
        return Err(HeaderError::Address);
    }
    Ok(Header {
        source: Some(source),
        destination: Some(destination),
        len: SPP_LEN,
    })
}

/// The IPv6 address in the 16 bytes of `b` from `at` (the caller checked the length).
fn ipv6_at(b: &[u8], at: usize) -> IpAddr {
    let mut octets = [0u8; 16];
    octets.copy_from_slice(&b[at..at + 16]);
    IpAddr::V6(Ipv6Addr::from(octets))
}

/// The big-endian port in the 2 bytes of `b` from `at` (the caller checked the length).
fn port_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Whether a client can send from `a`.
fn usable(a: SocketAddr) -> bool {
    let ip = a.ip();
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    a.port() != 0 && !ip.is_unspecified() && !ip.is_multicast() && !broadcast
}

/// Write a PROXY v2 header (command PROXY, protocol DGRAM) saying `source` sent to
/// `destination`. Mixed families are written as IPv6 (IPv4 addresses mapped).
pub fn write_v2(source: SocketAddr, destination: SocketAddr, out: &mut Vec<u8>) {
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21);
    match (addr::unmap(source), addr::unmap(destination)) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            out.push(0x12);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
        }
        (s, d) => {
            out.push(0x22);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6_octets(s.ip()));
            out.extend_from_slice(&v6_octets(d.ip()));
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
}

/// Write an SPP header: `client` sent to the proxy at `proxy`.
pub fn write_spp(client: SocketAddr, proxy: SocketAddr, out: &mut Vec<u8>) {
    out.extend_from_slice(&SPP_MAGIC);
    out.extend_from_slice(&v6_octets(client.ip()));
    out.extend_from_slice(&v6_octets(proxy.ip()));
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&proxy.port().to_be_bytes());
}

fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// An address prefix: `10.0.0.0/8`, `2001:db8::/32`, or one address (`192.0.2.7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// The prefix of `len` bits of `addr` (bits past it are ignored); `None` if `len` is
    /// longer than the address.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        match (addr, addr::unmap_ip(addr)) {
            (IpAddr::V4(_), v4) => (len <= 32).then_some(Self { addr: v4, len }),
            // `::ffff:a.b.c.d/n` is the IPv4 prefix of n - 96 bits (shorter ones would take
            // in more than IPv4-mapped addresses: refused).
            (IpAddr::V6(_), v4 @ IpAddr::V4(_)) => len
                .checked_sub(96)
                .filter(|&n| n <= 32)
                .map(|len| Self { addr: v4, len }),
            (IpAddr::V6(_), v6) => (len <= 128).then_some(Self { addr: v6, len }),
        }
    }

    /// Whether `ip` (IPv4-mapped IPv6 counts as IPv4) is inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, addr::unmap_ip(ip)) {
            (IpAddr::V4(p), IpAddr::V4(a)) => same_bits(
                u128::from(p.to_bits()),
                u128::from(a.to_bits()),
                32,
                self.len,
            ),
            (IpAddr::V6(p), IpAddr::V6(a)) => same_bits(p.to_bits(), a.to_bits(), 128, self.len),
            _ => false,
        }
    }
}

/// Whether the first `len` of the `width` low bits of `a` and `b` agree.
fn same_bits(a: u128, b: u128, width: u32, len: u8) -> bool {
    let len = u32::from(len);
    len == 0 || (len <= width && (a ^ b) >> (width - len) == 0)
}

impl FromStr for IpPrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not an address prefix: {s:?}");
        let (ip, len) = match s.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (s, None),
        };
        let ip: IpAddr = ip.trim().parse().map_err(|_| bad())?;
        let len = match len {
            Some(len) => len.trim().parse().map_err(|_| bad())?,
            None if ip.is_ipv4() => 32,
            None => 128,
        };
        Self::new(ip, len).ok_or_else(bad)
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Where a trusted proxy puts the client's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// A PROXY v2 header on the first datagram of a flow (frp, playit, sozu), in front of it
    /// or alone in a datagram of its own; the flow's later datagrams carry none.
    V2First,
    /// A PROXY v2 header on every datagram.
    V2Every,
    /// Cloudflare Spectrum's SPP header on every datagram; replies carry one too (the proxy
    /// strips it).
    Spectrum,
}

/// How an endpoint learns client addresses from proxies in front of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The header format.
    pub mode: ProxyMode,
    /// Sources whose headers are believed. A header from anyone else is dropped (counted);
    /// their datagrams without one are served as direct clients.
    pub trusted: Vec<IpPrefix>,
    /// Drop datagrams from trusted sources that arrive without a header (and, in
    /// [`ProxyMode::V2First`], without a flow a header opened).
    pub required: bool,
    /// Proxy flows remembered at most (each maps a proxy address and port to a client);
    /// new flows past it are dropped until old ones expire.
    pub max_flows: usize,
}

impl ProxyConfig {
    /// A configuration trusting `trusted`, headers optional, 16,384 flows.
    pub fn new(mode: ProxyMode, trusted: Vec<IpPrefix>) -> Self {
        Self {
            mode,
            trusted,
            required: false,
            max_flows: 16_384,
        }
    }

    /// Whether headers from `ip` are believed.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|p| p.contains(ip))
    }
}

/// Counters of what the proxy layer did with datagrams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Datagrams whose client address came from a header or a flow.
    pub proxied: u64,
    /// Datagrams from untrusted sources that carried a header (or a v1 text one): dropped.
    pub untrusted_header: u64,
    /// Headers from trusted sources that did not parse: dropped.
    pub malformed_header: u64,
    /// Datagrams from trusted sources without a header (or flow) while one is required:
    /// dropped.
    pub missing_header: u64,
    /// New clients refused because `max_flows` were remembered: dropped.
    pub flows_full: u64,
    /// Datagrams for a client that came through a proxy whose route is gone (the proxy gave
    /// its port to another client, or the client went quiet): dropped rather than sent to
    /// the client's own address, which would go around the proxy.
    pub replies_dropped: u64,
    /// Clients with a route through a proxy now.
    pub flows: usize,
}

/// How replies reach a client that came through a proxy.
#[derive(Debug)]
struct Route {
    /// The proxy's address and port the client's datagrams came from.
    via: SocketAddr,
    /// The header to put in front of replies (Spectrum), client and proxy as received.
    reply_header: Option<[u8; SPP_LEN]>,
    last_ms: u64,
}

/// What [`ProxyLayer::inbound`] made of a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// Hand `payload` to the protocol as coming from `from`.
    Datagram {
        /// The client: the header's (or flow's) address, or the sender's own.
        from: SocketAddr,
        /// The datagram without its header.
        payload: Bytes,
    },
    /// Nothing for the protocol: a header alone in its datagram (its flow is remembered), or
    /// a drop (counted).
    Nothing,
}

/// Where [`ProxyLayer::outbound`] sends a datagram for a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbound<'a> {
    /// Through the proxy at `via` (with Spectrum's header in front, when given).
    Via(SocketAddr, Option<&'a [u8; SPP_LEN]>),
    /// To the client's own address: it never came through a proxy.
    Direct,
    /// Nowhere: it came through a proxy and its route is gone (counted).
    Drop,
}

/// The proxy support of an endpoint: it turns datagrams from proxies into datagrams from
/// clients, and tells replies to clients which proxy flow to take.
///
/// Every route (client to proxy address and port) lives while the client sends: one idle for
/// longer than the layer's idle time is gone. With [`ProxyMode::V2First`] the proxy's port
/// also stands for the client in later datagrams (a flow). A client whose route went away
/// (the proxy gave its port to another client, or it went quiet) is remembered for another
/// idle time as an orphan: what the endpoint still sends it is dropped, never sent around the
/// proxy to the client's own address.
#[derive(Debug)]
pub struct ProxyLayer {
    config: ProxyConfig,
    /// [`ProxyMode::V2First`]: the client each proxy address and port carries, and when it
    /// last did.
    flows: HashMap<SocketAddr, (SocketAddr, u64)>,
    /// Each proxied client's way back.
    routes: HashMap<SocketAddr, Route>,
    /// Clients that came through a proxy and lost their route, since when.
    orphans: HashMap<SocketAddr, u64>,
    /// How long a route or flow lives without a datagram.
    idle_ms: u64,
    last_sweep_ms: u64,
    stats: ProxyStats,
}

impl ProxyLayer {
    /// A layer for `config`; routes idle for `idle_ms` are gone (an endpoint passes the
    /// longer of its connection timeout and its handshake timeout: a live connection hears
    /// from its client more often than that).
    pub fn new(config: ProxyConfig, idle_ms: u64) -> Self {
        Self {
            config,
            flows: HashMap::new(),
            routes: HashMap::new(),
            orphans: HashMap::new(),
            idle_ms,
            last_sweep_ms: 0,
            stats: ProxyStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            flows: self.routes.len(),
            ..self.stats
        }
    }

    fn fresh(&self, last_ms: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(last_ms) <= self.idle_ms
    }

    /// A datagram `from` the socket's point of view, at `now_ms`.
    pub fn inbound(&mut self, now_ms: u64, from: SocketAddr, datagram: Bytes) -> Inbound {
        let header_like = match self.config.mode {
            ProxyMode::V2First | ProxyMode::V2Every => {
                has_v2_signature(&datagram) || has_v1_prefix(&datagram)
            }
            ProxyMode::Spectrum => has_spp_magic(&datagram),
        };
        if !self.config.trusts(from.ip()) {
            if header_like {
                self.stats.untrusted_header += 1;
                return Inbound::Nothing;
            }
            return Inbound::Datagram {
                from,
                payload: datagram,
            };
        }
        if !header_like {
            // Only a first-datagram proxy leaves its flow's later datagrams bare; where every
            // datagram carries a header, a bare one is the proxy's own.
            if let Some(client) = self.flow_client(now_ms, from) {
                self.stats.proxied += 1;
                return Inbound::Datagram {
                    from: client,
                    payload: datagram,
                };
            }
            if self.config.required {
                self.stats.missing_header += 1;
                return Inbound::Nothing;
            }
            return Inbound::Datagram {
                from,
                payload: datagram,
            };
        }
        let parsed = match self.config.mode {
            ProxyMode::Spectrum => parse_spp(&datagram),
            _ => parse_v2(&datagram),
        };
        let Ok(header) = parsed else {
            self.stats.malformed_header += 1;
            return Inbound::Nothing;
        };
        let payload = datagram.slice(header.len..);
        let Some(client) = header.source else {
            // The proxy speaking for itself.
            return if payload.is_empty() {
                Inbound::Nothing
            } else {
                Inbound::Datagram { from, payload }
            };
        };
        let reply_header = (self.config.mode == ProxyMode::Spectrum).then(|| {
            let mut h = [0u8; SPP_LEN];
            h.copy_from_slice(&datagram[..SPP_LEN]);
            h
        });
        if !self.remember(now_ms, from, client, reply_header) {
            self.stats.flows_full += 1;
            return Inbound::Nothing;
        }
        self.stats.proxied += 1;
        if payload.is_empty() {
            return Inbound::Nothing;
        }
        Inbound::Datagram {
            from: client,
            payload,
        }
    }

    /// The client a bare datagram from `via` belongs to ([`ProxyMode::V2First`] flows still
    /// alive), refreshing its flow and route.
    fn flow_client(&mut self, now_ms: u64, via: SocketAddr) -> Option<SocketAddr> {
        if self.config.mode != ProxyMode::V2First {
            return None;
        }
        let &(client, last_ms) = self.flows.get(&via)?;
        if !self.fresh(last_ms, now_ms) {
            self.flows.remove(&via);
            self.lose_route(client, via, now_ms);
            return None;
        }
        self.flows.insert(via, (client, now_ms));
        match self.routes.get_mut(&client) {
            Some(route) if route.via == via => route.last_ms = now_ms,
            _ => return None,
        }
        Some(client)
    }

    /// `client`'s route through `via` ends (if it still goes there): it becomes an orphan.
    fn lose_route(&mut self, client: SocketAddr, via: SocketAddr, now_ms: u64) {
        if self.routes.get(&client).is_some_and(|r| r.via == via) {
            self.routes.remove(&client);
            if self.orphans.len() >= self.config.max_flows {
                self.sweep(now_ms);
            }
            if self.orphans.len() < self.config.max_flows {
                self.orphans.insert(client, now_ms);
            }
        }
    }

    /// Route `client` through `via`; false if the table is full.
    fn remember(
        &mut self,
        now_ms: u64,
        via: SocketAddr,
        client: SocketAddr,
        reply_header: Option<[u8; SPP_LEN]>,
    ) -> bool {
        if !self.routes.contains_key(&client) && self.routes.len() >= self.config.max_flows {
            // At most one sweep a second: a flood of new clients must not make every
            // datagram walk the table.
            if now_ms.saturating_sub(self.last_sweep_ms) >= 1_000 {
                self.sweep(now_ms);
            }
            if self.routes.len() >= self.config.max_flows {
                return false;
            }
        }
        if self.config.mode == ProxyMode::V2First {
            if let Some((old, _)) = self.flows.insert(via, (client, now_ms)) {
                if old != client {
                    // The proxy gave its port to another client.
                    self.lose_route(old, via, now_ms);
                }
            }
        }
        if let Some(previous) = self.routes.insert(
            client,
            Route {
                via,
                reply_header,
                last_ms: now_ms,
            },
        ) {
            // The client came through another port of the proxy: that flow is stale.
            if previous.via != via && self.flows.get(&previous.via).is_some_and(|f| f.0 == client) {
                self.flows.remove(&previous.via);
            }
        }
        self.orphans.remove(&client);
        true
    }

    /// Forget routes and flows idle for longer than the layer's idle time (their clients
    /// become orphans), and orphans that have been so for as long.
    pub fn sweep(&mut self, now_ms: u64) {
        self.last_sweep_ms = now_ms;
        let idle = self.idle_ms;
        let fresh = |last: u64| now_ms.saturating_sub(last) <= idle;
        self.flows.retain(|_, (_, last)| fresh(*last));
        let mut lost = Vec::new();
        self.routes.retain(|client, route| {
            let keep = fresh(route.last_ms);
            if !keep {
                lost.push(*client);
            }
            keep
        });
        self.orphans.retain(|_, since| fresh(*since));
        for client in lost {
            if self.orphans.len() < self.config.max_flows {
                self.orphans.insert(client, now_ms);
            }
        }
    }

    /// Sweep once a second at most (an endpoint calls this from its timers).
    pub fn tick(&mut self, now_ms: u64) {
        if now_ms.saturating_sub(self.last_sweep_ms) >= 1_000 {
            self.sweep(now_ms);
        }
    }

    /// Where a datagram for `client` goes at `now_ms`.
    pub fn outbound(&mut self, now_ms: u64, client: SocketAddr) -> Outbound<'_> {
        let fresh = self
            .routes
            .get(&client)
            .map(|route| self.fresh(route.last_ms, now_ms));
        match fresh {
            Some(true) => {
                let route = &self.routes[&client];
                Outbound::Via(route.via, route.reply_header.as_ref())
            }
            Some(false) => {
                self.stats.replies_dropped += 1;
                Outbound::Drop
            }
            None if self.orphans.contains_key(&client) => {
                self.stats.replies_dropped += 1;
                Outbound::Drop
            }
            None => Outbound::Direct,
        }
    }

    /// Heap bytes held (see [`crate::memory`]).
    pub fn heap_bytes(&self) -> usize {
        crate::memory::map(&self.flows)
            + crate::memory::map(&self.routes)
            + crate::memory::map(&self.orphans)
    }

    /// Whether any client came through a proxy (replies need [`Self::outbound`]).
    pub fn carries_any(&self) -> bool {
        !self.routes.is_empty() || !self.orphans.is_empty()
    }
}

#[cfg(test)]
mod tests;
