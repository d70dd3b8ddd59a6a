//! The server half of the offline handshake (OCR1/Reply1, OCR2/Reply2, cookies, protocol
//! and MTU negotiation) and the address validation that precedes any connection state.
//!
//! # Address validation before state
//!
//! A server must not hold a [`crate::Endpoint`] connection for an address that has not
//! shown it *receives* datagrams there: otherwise spoofed OCR2s fill the connection table
//! and a forged handshake makes us send to a victim (issue #11). Two proofs are used:
//!
//! * **Cookie** (every protocol, [`EndpointConfig::use_cookies`], the default): Reply1
//!   carries 32 bits of a SipHash of the address, a 2 s epoch and the protocol, under a key
//!   only the seed and secret give (see `rng`); OCR2 must echo it (§4.10). A valid OCR2 has
//!   proved the address at once. Official RakNet 4.x clients
//!   (protocol 6) built without libcat security take this cookie-only variant as Bedrock
//!   clients do: they echo the cookie and a "no challenge" byte.
//! * **Echoed server time** (cookies off, for a client that cannot take a cookie): every
//!   client echoes the server time of 0x10 (§6.3) as the "ping time" of 0x13 (§6.4). We
//!   make that time unpredictable: every timestamp this
//!   server sends a peer is its clock plus a keyed per-peer offset,
//!   `SipHash(key, address, client GUID) mod 2^40` ms (up to 35 years). The same offset is
//!   used for every later ping and pong, so clock synchronisation (§13) is unaffected: it
//!   only ever sees differences of that peer's times. A 0x13 whose echo is not exactly the
//!   time we sent can only come from someone who read our 0x10 at that address, with a
//!   chance of 2^-40 per blind guess.
//!
//! Until the proof, an address has only a [`HalfOpen`] record (at most 64 bytes), capped
//! globally and per IP, oldest evicted first, forgotten after the handshake timeout. 0x09
//! is answered from the record (an ACK and 0x10, datagram #0, rebuilt identically on
//! every repeat), and the [`crate::Endpoint`] creates the connection when a verified 0x13
//! arrives.
//!
//! # The connection slot
//!
//! 0x10 tells the client it is connected, so the slot must be the client's by then: a
//! server of several endpoint threads that filled up between the 0x10 and the 0x13 would
//! otherwise have accepted a client it then drops. Official RakNet takes the slot at OCR2.
//! We take it when the first 0x09 of a *validated* address (a cookie) is answered, and hold
//! it in the record until 0x13 hands it to the connection or the record is forgotten. A
//! server with no slot left answers that 0x09 with 0x14. An address without a cookie
//! (cookies off) is only proven by its 0x13, so its slot is taken then: a slot held for an
//! unproven address would let spoofed handshakes fill the server. If none is left by then,
//! the client is told with a 0x15 ([`ServerHandshake::late_refusal`]) instead of being left
//! to time out.
//!
//! # Anti-amplification
//!
//! Until an address is validated we send it at most
//! [`AdmissionLimits::max_amplification`] (3) times the bytes it sent us, as QUIC does
//! (RFC 9000 §8.1). Stateless replies (Reply1, Reply2, refusals, pongs) are checked against
//! the datagram that caused them; the half-open record accumulates bytes in and out from
//! OCR2 on (plus the OCR1 it remembers, see below) for the 0x09 → ACK + 0x10 exchange.
//! A blind attacker who never reads our replies therefore gets at most 3× what it sends.
//!
//! For cookie-less replies the OCR1's protocol and size are remembered per address (a
//! bounded table): the OCR2 has no room for the protocol, and the padded OCR1 (≥ 372 bytes)
//! is what pays for the 180-byte protocol-11 0x10 when cookies are off.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::admission::{ip_key, network_caps, BoundedMap, Network};
use crate::codec::Encode;
use crate::config::{AdmissionLimits, CookieMode, EndpointConfig};
use crate::datagram::{DataHeader, Datagram};
use crate::frame::{Frame, Frames};
use crate::group::EndpointGroup;
use crate::message::{
    id, AlreadyConnected, ConnectedMessage, ConnectionRequestAccepted, IncompatibleProtocolVersion,
    OpenConnectionReply1, OpenConnectionReply2, OpenConnectionRequest1, OpenConnectionRequest2,
};
use crate::reliability::Reliability;
use crate::rng::{derive, siphash24};
use crate::seq::{DatagramSeq, MessageIndex, OrderIndex};
use crate::stats::EndpointStats;

/// How long a cookie epoch lasts; cookies of the current and previous epoch are accepted.
const COOKIE_EPOCH_MS: u64 = 2000;
/// The per-peer clock offset is below this (2^40 ms, about 35 years).
const OFFSET_MASK: u64 = (1 << 40) - 1;
/// Strict mode ends this long after the pressure last stood above a quarter of a threshold.
const CALM_AFTER_MS: u64 = 10_000;
/// `accepted_ms` before 0x10 was sent.
const NOT_ACCEPTED: u64 = u64::MAX;
/// OCR2 sizes without a cookie (IPv4, IPv6 server address): 1 + 16 + 7|29 + 2 + 8.
const OCR2_PLAIN_LENS: [usize; 2] = [34, 56];

/// A handshake between OCR2 and 0x13: all the server holds for an unvalidated address.
#[derive(Debug, Clone, Copy)]
struct HalfOpen {
    guid: u64,
    created_ms: u64,
    /// Our (local) clock when 0x10 was first built; [`NOT_ACCEPTED`] before.
    accepted_ms: u64,
    /// The 0x09's client time, echoed in every copy of 0x10.
    request_time: u64,
    /// The client datagram that last carried 0x09 and nothing else reliable: the
    /// connection acknowledges it when 0x13 creates it. A datagram that also carried
    /// other reliable frames is never recorded: those frames were not taken, so
    /// acknowledging it would make the client forget them (issue #12).
    request_seq: Option<u32>,
    /// The 0x09 came in a reliable frame: it took the client's first reliable index.
    request_reliable: bool,
    /// The 0x09 came ordered (rust-raknet sends it so): its channel and ordering index,
    /// packed by [`pack_order`]; [`NOT_ORDERED`] when it did not (official sends it
    /// reliable, jsp-raknet unreliable).
    request_order: u32,
    bytes_in: u32,
    bytes_out: u32,
    mtu: u16,
    protocol: u8,
    /// The address proved itself with a cookie: no amplification limit.
    validated: bool,
    /// This handshake holds one of the group's connection slots (see the module docs).
    reserved: bool,
}

const _: () = assert!(std::mem::size_of::<HalfOpen>() <= 64);

/// What the OCR1 of a cookie-less reply told us.
#[derive(Debug, Clone, Copy)]
struct Ocr1Seen {
    protocol: u8,
    bytes: u16,
}

/// The facts a server connection is created from when 0x13 verifies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accepted {
    pub(crate) guid: u64,
    pub(crate) protocol: u8,
    pub(crate) mtu: u16,
    /// Added to every timestamp we send this peer.
    pub(crate) clock_offset: u64,
    /// When OCR2 arrived (the handshake timeout runs from it), endpoint milliseconds.
    pub(crate) created_ms: u64,
    /// The datagram that carried 0x13: the peer's receive window starts there.
    pub(crate) client_seq: DatagramSeq,
    /// The datagram that carried the 0x09 we answered, if any: still to acknowledge.
    pub(crate) request_seq: Option<DatagramSeq>,
    /// 0x10 sent → verified 0x13 received: a round trip the peer cannot shorten.
    pub(crate) rtt_sample: Option<Duration>,
    /// The address was proven by a cookie at OCR2.
    pub(crate) proven: bool,
    /// This 0x13 echoed our time. With neither, the connection is *unproven* (taken while
    /// calm, see [`CookieMode`]).
    pub(crate) echoed: bool,
    /// The 0x09 was reliable (official): the client's reliable indices go on from 1. An
    /// unreliable one (jsp-raknet) took none, and 0x13 is the client's reliable index 0.
    pub(crate) request_reliable: bool,
    /// The 0x09 was ordered (rust-raknet): the channel and ordering index it took, which
    /// the connection's receive side counts as delivered (else the client's 0x13, the next
    /// index, would wait for ever behind a 0x09 that the handshake took).
    pub(crate) request_order: Option<(u8, OrderIndex)>,
}

/// [`HalfOpen::request_order`] when the 0x09 was not ordered.
const NOT_ORDERED: u32 = u32::MAX;

/// A channel (< 32) and a 24-bit ordering index in one `u32`, to keep [`HalfOpen`] small.
fn pack_order(order: Option<(u8, OrderIndex)>) -> u32 {
    order.map_or(NOT_ORDERED, |(channel, index)| {
        u32::from(channel) << 24 | index.get()
    })
}

fn unpack_order(packed: u32) -> Option<(u8, OrderIndex)> {
    (packed != NOT_ORDERED).then(|| ((packed >> 24) as u8, OrderIndex::new(packed & 0xff_ffff)))
}

/// What to do with a connected datagram from an address without a connection.
#[derive(Debug)]
pub(crate) enum Step {
    /// Not ours to answer (no handshake, or nothing valid in it); already counted.
    Drop,
    /// Replies were queued (or withheld by the budget); nothing else.
    Answered,
    /// A validated 0x09 found no free connection slot: the record is gone; refuse with 0x14.
    Full,
    /// A verified 0x13: create the connection and hand it this datagram.
    Establish(Accepted),
}

/// How strict the handshake is now, from the pressure measured on it (see [`CookieMode`]).
#[derive(Debug, Default)]
struct Pressure {
    strict: bool,
    /// Unproven handshakes started in the current second (`second`), and in the one before.
    second: u64,
    this_second: u32,
    last_second: u32,
    /// Until when the pressure counts as present (it stood above a quarter of a threshold).
    hot_until_ms: u64,
}

impl Pressure {
    fn roll(&mut self, now_ms: u64) {
        let second = now_ms / 1000;
        if second != self.second {
            self.last_second = if second == self.second + 1 {
                self.this_second
            } else {
                0
            };
            self.this_second = 0;
            self.second = second;
        }
    }

    /// Look at the pressure now; `true` if the mode changed.
    fn update(&mut self, limits: &AdmissionLimits, now_ms: u64, half_open: usize) -> bool {
        self.roll(now_ms);
        let rate = self.this_second.max(self.last_second);
        let per_sec = limits.strict_handshakes_per_sec;
        if half_open * 4 >= limits.strict_half_open || rate * 4 >= per_sec {
            self.hot_until_ms = now_ms + CALM_AFTER_MS;
        }
        let strict = if half_open >= limits.strict_half_open || rate >= per_sec {
            true
        } else {
            self.strict && now_ms < self.hot_until_ms
        };
        std::mem::replace(&mut self.strict, strict) != strict
    }
}

/// How long a slot reserved at 0x10 waits for the client's 0x13 (a real client sends it one
/// round trip after the 0x10) before it goes back to the group. A late 0x13 takes a slot
/// again if one is free. Without this, 17 addresses whose 64 ports each sent a 0x09 and
/// never a 0x13, again every handshake timeout, held all 1,024 slots.
pub(crate) const RESERVE_MS: u64 = 2_000;
/// Most reserved slots one IP (IPv6: one /64) holds at once; its further clients are
/// accepted without one (their slot is taken at 0x13, as a cookie-less client's is).
pub(crate) const MAX_RESERVED_PER_IP: usize = 8;

/// Most reserved slots at once: a quarter of `max_connections` (at least one).
fn max_reserved(config: &EndpointConfig) -> usize {
    (config.limits.max_connections / 4).max(1)
}

/// The server's handshake state: keys, half-open records, remembered OCR1s.
#[derive(Debug)]
pub(crate) struct ServerHandshake {
    cookie_key: (u64, u64),
    offset_key: (u64, u64),
    /// Capped at `max_half_open`, the oldest forgotten first. With cookies every record is
    /// proven and spoofed sources make none; without, every record is unproven.
    half_open: BoundedMap<SocketAddr, HalfOpen>,
    /// The addresses of each network's records (each host, an IPv4 address or IPv6 /64,
    /// and its wider networks, see [`network_caps`]), oldest first: a handshake from a full
    /// network pushes out that network's oldest unproven one.
    per_network: HashMap<Network, VecDeque<SocketAddr>>,
    guids: HashMap<u64, SocketAddr>,
    ocr1: BoundedMap<SocketAddr, Ocr1Seen>,
    /// Where the slots of reserved records come from and go back to.
    group: Arc<EndpointGroup>,
    /// Records holding a slot, in all and by IP key.
    reserved: usize,
    reserved_per_ip: HashMap<IpAddr, usize>,
    /// When each reservation lapses ([`RESERVE_MS`] after its 0x10), oldest first; entries
    /// of records gone meanwhile are skipped when they come up.
    reservations: VecDeque<(u64, SocketAddr)>,
    /// Reservations that lapsed without a 0x13.
    reservations_lapsed: u64,
    pressure: Pressure,
}

impl Drop for ServerHandshake {
    /// Slots held by handshakes go back to the group (the endpoint's thread ended).
    fn drop(&mut self) {
        for (addr, h) in self.half_open.iter() {
            if h.reserved {
                self.group.release(addr.ip());
            }
        }
    }
}

/// How young an unproven half-open record of a full network (`cap` records) is kept from a
/// newcomer's eviction ([`ServerHandshake::on_ocr2`]): the time in which `cap` unproven OCR2s
/// are twice the rate that turns strict mode (cookies) on. Holding a network's players out
/// by replacing their records then takes a flood that proves them instead: with the
/// defaults, 64 OCR2s per 250 ms from one address, against 128 a second for strict mode.
/// Between 100 ms and 1 s.
fn young_half_open_ms(config: &EndpointConfig, cap: usize) -> u64 {
    let strict = u64::from(config.admission.strict_handshakes_per_sec.max(1));
    (cap as u64 * 1000 / (2 * strict)).clamp(100, 1000)
}

/// Whether `reply` bytes may answer `request` bytes from an unvalidated address.
pub(crate) fn within_amplification(config: &EndpointConfig, request: usize, reply: usize) -> bool {
    reply <= request.saturating_mul(config.admission.max_amplification as usize)
}

fn ip16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl ServerHandshake {
    pub(crate) fn new(config: &EndpointConfig, group: Arc<EndpointGroup>) -> Self {
        let cap = config.admission.max_half_open;
        let key = |label: &[u8]| derive(config.rng_seed, config.secret, label);
        let [c0, c1, o0, o1] = group.handshake_keys(|| {
            [
                key(b"cookie key 0"),
                key(b"cookie key 1"),
                key(b"offset key 0"),
                key(b"offset key 1"),
            ]
        });
        Self {
            cookie_key: (c0, c1),
            offset_key: (o0, o1),
            half_open: BoundedMap::new(cap),
            per_network: HashMap::new(),
            guids: HashMap::new(),
            ocr1: BoundedMap::new(cap),
            group,
            reserved: 0,
            reserved_per_ip: HashMap::new(),
            reservations: VecDeque::new(),
            reservations_lapsed: 0,
            pressure: Pressure::default(),
        }
    }

    /// Reserved slots that lapsed because no 0x13 came within [`RESERVE_MS`].
    pub(crate) fn reservations_lapsed(&self) -> u64 {
        self.reservations_lapsed
    }

    /// Whether a validated client at `ip` may reserve a slot at its 0x10 (the caps above).
    fn may_reserve(&self, config: &EndpointConfig, ip: IpAddr) -> bool {
        self.reserved < max_reserved(config)
            && self.reserved_per_ip.get(&ip_key(ip)).copied().unwrap_or(0) < MAX_RESERVED_PER_IP
    }

    /// `h` of `addr` gives its slot back to the group.
    fn unreserve(&mut self, addr: SocketAddr, h: &mut HalfOpen) {
        if !std::mem::replace(&mut h.reserved, false) {
            return;
        }
        self.reserved -= 1;
        let key = ip_key(addr.ip());
        if let Some(n) = self.reserved_per_ip.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.reserved_per_ip.remove(&key);
            }
        }
        self.group.release(addr.ip());
    }

    /// Whether the handshake is strict now (see [`CookieMode`]).
    pub(crate) fn strict(&self) -> bool {
        self.pressure.strict
    }

    /// Measure the pressure (see [`CookieMode`]); counts a change of mode.
    pub(crate) fn update_pressure(
        &mut self,
        config: &EndpointConfig,
        now_ms: u64,
        stats: &mut EndpointStats,
    ) {
        let half_open = self.half_open.len();
        if self.pressure.update(&config.admission, now_ms, half_open) {
            if self.pressure.strict {
                stats.strict_entered += 1;
            } else {
                stats.strict_left += 1;
            }
        }
    }

    /// Whether Reply1 carries a cookie now.
    fn cookies_now(&self, config: &EndpointConfig) -> bool {
        match config.use_cookies {
            CookieMode::Always => true,
            CookieMode::Never => false,
            CookieMode::Auto => self.pressure.strict,
        }
    }

    /// Heap bytes held: the half-open records, their per-IP and GUID indexes, remembered
    /// OCR1s (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        use crate::memory::{deque, map};
        let per_network: usize = self.per_network.values().map(deque).sum();
        self.half_open.heap_bytes()
            + map(&self.per_network)
            + per_network
            + map(&self.guids)
            + self.ocr1.heap_bytes()
    }

    /// Handshakes between OCR2 and 0x13 held now.
    pub(crate) fn half_open(&self) -> usize {
        self.half_open.len()
    }

    /// Of those, the ones holding a connection slot.
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Whether `addr` has a live half-open handshake.
    pub(crate) fn is_half_open(&self, addr: SocketAddr) -> bool {
        self.half_open.get(&addr).is_some()
    }

    /// Whether a half-open handshake uses `guid` from an address other than `from`.
    pub(crate) fn guid_elsewhere(&self, guid: u64, from: SocketAddr) -> bool {
        self.guids.get(&guid).is_some_and(|a| *a != from)
    }

    /// The clock offset for a peer (see the module docs).
    pub(crate) fn clock_offset(&self, from: SocketAddr, guid: u64) -> u64 {
        let mut data = [0u8; 16 + 2 + 8];
        data[..16].copy_from_slice(&ip16(from.ip()));
        data[16..18].copy_from_slice(&from.port().to_be_bytes());
        data[18..].copy_from_slice(&guid.to_be_bytes());
        siphash24(self.offset_key.0, self.offset_key.1, &data) & OFFSET_MASK
    }

    fn cookie(&self, from: SocketAddr, epoch: u64, protocol: u8) -> u32 {
        let mut data = [0u8; 16 + 2 + 8 + 1];
        data[..16].copy_from_slice(&ip16(from.ip()));
        data[16..18].copy_from_slice(&from.port().to_be_bytes());
        data[18..26].copy_from_slice(&epoch.to_be_bytes());
        data[26] = protocol;
        siphash24(self.cookie_key.0, self.cookie_key.1, &data) as u32
    }

    /// Decode an OCR2 with or without a cookie. Its size tells which: a cookie adds 5 bytes
    /// (and a challenge 64 more), so the cookie-less sizes 34 and 56 never collide with it.
    pub(crate) fn decode_ocr2(buf: &Bytes) -> Option<OpenConnectionRequest2> {
        let cookie = !OCR2_PLAIN_LENS.contains(&buf.len());
        OpenConnectionRequest2::decode_with_cookie(&mut buf.clone(), cookie).ok()
    }

    /// Answer an OCR1 (`len` bytes). `None`: nothing to send (counted).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ocr1(
        &mut self,
        config: &EndpointConfig,
        now_ms: u64,
        from: SocketAddr,
        req: OpenConnectionRequest1,
        len: usize,
        server_guid: u64,
        stats: &mut EndpointStats,
    ) -> Option<Vec<u8>> {
        // The padding is the client's proof of the MTU it probes; an unpadded OCR1 (18
        // bytes) probes nothing and would let a spoofer trade 18 bytes for our 26-28.
        if req.mtu < config.min_mtu {
            stats.ocr1_too_small += 1;
            return None;
        }
        if !config.protocol_versions.contains(&req.protocol) {
            stats.incompatible_protocol += 1;
            let protocol = config.protocol_versions.first().copied().unwrap_or(6);
            return Some(
                IncompatibleProtocolVersion {
                    protocol,
                    server_guid,
                }
                .to_vec(),
            );
        }
        self.update_pressure(config, now_ms, stats);
        let cookie = self
            .cookies_now(config)
            .then(|| self.cookie(from, now_ms / COOKIE_EPOCH_MS, req.protocol));
        if cookie.is_none() {
            self.ocr1.insert(
                from,
                Ocr1Seen {
                    protocol: req.protocol,
                    bytes: u16::try_from(len).unwrap_or(u16::MAX),
                },
            );
        }
        let reply = OpenConnectionReply1 {
            server_guid,
            cookie,
            server_public_key: None,
            mtu: req.mtu.clamp(config.min_mtu, config.max_mtu),
        }
        .to_vec();
        if !within_amplification(config, len, reply.len()) {
            stats.amplification_limited += 1;
            return None;
        }
        Some(reply)
    }

    /// The protocol and validation an OCR2 establishes, or `None` to drop it (counted).
    fn ocr2_protocol(
        &mut self,
        config: &EndpointConfig,
        now_ms: u64,
        from: SocketAddr,
        req: &OpenConnectionRequest2,
        stats: &mut EndpointStats,
    ) -> Option<(u8, bool, usize)> {
        if let Some(cookie) = req.cookie {
            // The OCR2 has no room for the protocol: the cookie of one of the protocols
            // served, this epoch or the last, tells it. All 32 bits are checked (a blind
            // guess is right once in 2^32 per protocol and epoch).
            let epoch = now_ms / COOKIE_EPOCH_MS;
            let epochs = [Some(epoch), epoch.checked_sub(1)];
            let issued = config.use_cookies != CookieMode::Never;
            let protocol = issued.then(|| {
                config.protocol_versions.iter().copied().find(|&p| {
                    epochs
                        .iter()
                        .flatten()
                        .any(|&e| cookie == self.cookie(from, e, p))
                })
            });
            let Some(Some(protocol)) = protocol else {
                stats.bad_cookies += 1;
                return None;
            };
            return Some((protocol, true, 0));
        }
        // The protocol of the OCR1 remembered, else the first one served.
        let seen = self.ocr1.get(&from).copied();
        // Every Reply1 carried a cookie (always, or strict now and this address's OCR1 not
        // answered without one while calm): an OCR2 without one answers none of ours.
        if config.use_cookies == CookieMode::Always || (self.cookies_now(config) && seen.is_none())
        {
            stats.bad_cookies += 1;
            return None;
        }
        let protocol = seen
            .map(|s| s.protocol)
            .or_else(|| config.protocol_versions.first().copied())?;
        Some((protocol, false, seen.map_or(0, |s| usize::from(s.bytes))))
    }

    /// Handle an OCR2 (`len` bytes) from an address without a connection. `refusal` is
    /// the endpoint's verdict on capacity (0x12/0x14/0x1A), given the protocol is known and
    /// whether a cookie proved the address. Returns the reply to send, if any.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ocr2(
        &mut self,
        config: &EndpointConfig,
        now_ms: u64,
        from: SocketAddr,
        req: OpenConnectionRequest2,
        len: usize,
        server_guid: u64,
        stats: &mut EndpointStats,
        refusal: impl FnOnce(&mut EndpointStats, bool) -> Option<Vec<u8>>,
    ) -> Option<Vec<u8>> {
        self.expire(config, now_ms);
        let (protocol, validated, ocr1_bytes) =
            self.ocr2_protocol(config, now_ms, from, &req, stats)?;
        let mtu = req.mtu.clamp(config.min_mtu, config.max_mtu);
        let reply2 = |mtu| {
            OpenConnectionReply2 {
                server_guid,
                client_address: from,
                mtu,
                security_answer: None,
            }
            .to_vec()
        };
        if let Some(h) = self.half_open.get_mut(&from) {
            if h.guid != req.client_guid {
                // Client restarted without disconnecting, or someone else (§4.9).
                stats.refused_already_connected += 1;
                return Some(AlreadyConnected { server_guid }.to_vec());
            }
            // Our Reply2 was lost: send it again (official §4.9), within the budget.
            let reply = reply2(h.mtu);
            h.bytes_in = h.bytes_in.saturating_add(len as u32);
            return Self::spend(config, h, reply, stats);
        }
        if self.guids.contains_key(&req.client_guid) {
            stats.refused_already_connected += 1;
            return Some(AlreadyConnected { server_guid }.to_vec());
        }
        if let Some(refused) = refusal(stats, validated) {
            return within_amplification(config, len, refused.len()).then_some(refused);
        }
        let networks = network_caps(from.ip(), config.admission.max_half_open_per_ip);
        for (net, cap) in networks.clone() {
            if self.per_network.get(&net).map_or(0, VecDeque::len) < cap {
                continue;
            }
            stats.half_open_per_ip_full += 1;
            // Unproven handshakes (no cookie) cannot be told from spoofed ones: the
            // network's oldest unproven one gives way, to a proven one (which must not wait
            // behind spoofed records made while the server was calm) and to a newer unproven
            // one (so keeping a player out takes a full share of spoofed OCR2s per round trip
            // of the player, not one per handshake timeout). A network with its full share of
            // proven handshakes under way holds real hosts: the newcomer waits.
            //
            // But an unproven record younger than `young_half_open_ms` stays, unless the
            // newcomer is proven: it is as likely a real player whose Reply2 just left and
            // whose 0x09 is on its way (a burst of players behind one NAT, all at once), and
            // taking its place would leave it sending its 0x09 to no record until its
            // timeout. The newcomer waits instead, and its client's OCR1 schedule brings it
            // back (official clients keep sending OCR1 until a Reply2 comes).
            let half_open = &self.half_open;
            let (oldest, created_ms) = self.per_network.get(&net)?.iter().find_map(|a| {
                let h = half_open.get(a).filter(|h| !h.validated)?;
                Some((*a, h.created_ms))
            })?;
            if !validated && now_ms.saturating_sub(created_ms) < young_half_open_ms(config, cap) {
                stats.half_open_newcomers_waited += 1;
                return None;
            }
            if let Some(old) = self.half_open.remove(&oldest) {
                self.forget(oldest, &old);
            }
        }
        self.ocr1.remove(&from);
        let mut record = HalfOpen {
            guid: req.client_guid,
            created_ms: now_ms,
            accepted_ms: NOT_ACCEPTED,
            request_time: 0,
            request_seq: None,
            request_reliable: true,
            request_order: NOT_ORDERED,
            bytes_in: (len + ocr1_bytes) as u32,
            bytes_out: 0,
            mtu,
            protocol,
            validated,
            reserved: false,
        };
        let reply = Self::spend(config, &mut record, reply2(mtu), stats);
        for (net, _) in networks {
            self.per_network.entry(net).or_default().push_back(from);
        }
        self.guids.insert(req.client_guid, from);
        for (addr, old) in self.half_open.insert(from, record) {
            stats.half_open_evicted += 1;
            self.forget(addr, &old);
        }
        if !validated {
            self.pressure.roll(now_ms);
            self.pressure.this_second += 1;
        }
        self.update_pressure(config, now_ms, stats);
        reply
    }

    /// Count `reply` against `h`'s budget; `None` if it does not fit (counted).
    fn spend(
        config: &EndpointConfig,
        h: &mut HalfOpen,
        reply: Vec<u8>,
        stats: &mut EndpointStats,
    ) -> Option<Vec<u8>> {
        let out = h.bytes_out as usize + reply.len();
        if !h.validated && !within_amplification(config, h.bytes_in as usize, out) {
            stats.amplification_limited += 1;
            return None;
        }
        h.bytes_out = out as u32;
        Some(reply)
    }

    fn forget(&mut self, addr: SocketAddr, h: &HalfOpen) {
        let mut h = *h;
        self.unreserve(addr, &mut h);
        for (net, _) in network_caps(addr.ip(), 0) {
            if let Some(addrs) = self.per_network.get_mut(&net) {
                // At most the network's cap to look through.
                if let Some(i) = addrs.iter().position(|a| *a == addr) {
                    addrs.remove(i);
                }
                if addrs.is_empty() {
                    self.per_network.remove(&net);
                }
            }
        }
        if self.guids.get(&h.guid) == Some(&addr) {
            self.guids.remove(&h.guid);
        }
    }

    /// Drop the record of `addr` (it was refused); a slot it held goes back to the group.
    pub(crate) fn remove(&mut self, addr: SocketAddr) {
        if let Some(h) = self.half_open.remove(&addr) {
            self.forget(addr, &h);
        }
    }

    /// Drop the record of `addr`, whose 0x13 verified. `true`: the record held a slot, which
    /// now belongs to the caller (the new connection).
    pub(crate) fn establish(&mut self, addr: SocketAddr) -> bool {
        let Some(mut h) = self.half_open.remove(&addr) else {
            return false;
        };
        let reserved = h.reserved;
        if reserved {
            // The slot goes to the connection: off the counts, not back to the group.
            h.reserved = false;
            self.reserved -= 1;
            let key = ip_key(addr.ip());
            if let Some(n) = self.reserved_per_ip.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.reserved_per_ip.remove(&key);
                }
            }
        }
        self.forget(addr, &h);
        reserved
    }

    /// When [`ServerHandshake::expire`] must run next (endpoint milliseconds): while a record
    /// holds a slot, the oldest record's expiry, so a client that never sends its 0x13 gives
    /// the slot back on time even to an endpoint that receives nothing. `None` otherwise:
    /// other records only hold memory, and are forgotten by the next call.
    pub(crate) fn next_expiry(&mut self, config: &EndpointConfig) -> Option<u64> {
        if self.reserved == 0 {
            return None;
        }
        let ttl = config.handshake_timeout.as_millis() as u64;
        let (_, oldest) = self.half_open.oldest()?;
        let lapse = self.reservations.front().map_or(u64::MAX, |(t, _)| *t);
        Some(oldest.created_ms.saturating_add(ttl).min(lapse))
    }

    /// Forget handshakes older than the handshake timeout (oldest first: creation order
    /// is expiry order).
    pub(crate) fn expire(&mut self, config: &EndpointConfig, now_ms: u64) {
        let ttl = config.handshake_timeout.as_millis() as u64;
        while let Some((addr, h)) = self.half_open.oldest() {
            if h.created_ms.saturating_add(ttl) > now_ms {
                break;
            }
            let h = *h;
            self.half_open.remove(&addr);
            self.forget(addr, &h);
        }
        while let Some(&(deadline, addr)) = self.reservations.front() {
            if deadline > now_ms {
                break;
            }
            self.reservations.pop_front();
            let lapsed = self.half_open.get(&addr).is_some_and(|h| {
                h.reserved && h.accepted_ms.saturating_add(RESERVE_MS) == deadline
            });
            if lapsed {
                if let Some(mut h) = self.half_open.get(&addr).copied() {
                    self.unreserve(addr, &mut h);
                    if let Some(r) = self.half_open.get_mut(&addr) {
                        *r = h;
                    }
                    self.reservations_lapsed += 1;
                }
            }
        }
    }

    /// A connected datagram from a half-open address: answer 0x09 from the record, and
    /// verify 0x13. `out` receives the datagrams to send. `open`: the endpoint takes new
    /// connections now (not suspended).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_datagram(
        &mut self,
        config: &EndpointConfig,
        open: bool,
        now_ms: u64,
        now_us: u32,
        from: SocketAddr,
        local_addr: SocketAddr,
        datagram: &Bytes,
        stats: &mut EndpointStats,
        out: &mut Vec<Vec<u8>>,
    ) -> Step {
        self.expire(config, now_ms);
        let offset = match self.half_open.get(&from) {
            Some(h) => self.clock_offset(from, h.guid),
            None => {
                stats.unknown_peer += 1;
                return Step::Drop;
            }
        };
        let may_reserve = self.may_reserve(config, from.ip());
        let Some(h) = self.half_open.get_mut(&from) else {
            return Step::Drop;
        };
        h.bytes_in = h.bytes_in.saturating_add(datagram.len() as u32);
        let (header, body) = match Datagram::decode(datagram.clone(), config.datagram_timestamps) {
            Ok(Datagram::Data { header, body }) => (header, body),
            // The client's ACK of our 0x10 (or a NAK): nothing to answer.
            Ok(_) => return Step::Answered,
            Err(_) => {
                stats.malformed += 1;
                return Step::Drop;
            }
        };
        let mut request = None;
        // Whether the datagram holds something reliable besides the 0x09 (or a frame we
        // cannot read): then it must stay unacknowledged, for the client to resend it.
        let mut more = false;
        let strict = self.pressure.strict;
        for frame in Frames::new(body) {
            let Ok(frame) = frame else {
                more = true;
                break;
            };
            // 0x09 and 0x13 are taken in any reliability, as official RakNet takes them
            // (jsp-raknet sends its 0x09 unreliable); anything else unreliable is dropped.
            let reliable = frame.reliability.is_reliable();
            let order = frame
                .reliability
                .is_ordered()
                .then_some((frame.order_channel, frame.order_index));
            let handshake = matches!(
                frame.payload.first(),
                Some(&id::CONNECTION_REQUEST) | Some(&id::NEW_INCOMING_CONNECTION)
            );
            if frame.split.is_some() || !handshake {
                more |= reliable;
                continue;
            }
            match ConnectedMessage::decode(frame.payload) {
                Ok(ConnectedMessage::NewIncomingConnection(nic)) => {
                    let echoed = h.accepted_ms != NOT_ACCEPTED
                        && nic.ping_time == offset.wrapping_add(h.accepted_ms);
                    // While calm, a 0x13 that does not echo our time is taken as unproven
                    // (rust-raknet and rak-rs echo their own 0x09 time instead); while
                    // strict, every one must echo, cookie or not, so that a blind spoofer
                    // cannot slip a 0x13 in before the player's. Never before our 0x10.
                    if !echoed && (strict || h.accepted_ms == NOT_ACCEPTED) {
                        stats.bad_echo += 1;
                        return Step::Drop;
                    }
                    let accepted = Accepted {
                        guid: h.guid,
                        protocol: h.protocol,
                        mtu: h.mtu,
                        clock_offset: offset,
                        created_ms: h.created_ms,
                        client_seq: header.seq,
                        request_seq: h.request_seq.map(DatagramSeq::new),
                        rtt_sample: echoed
                            .then(|| Duration::from_millis(now_ms.saturating_sub(h.accepted_ms))),
                        proven: h.validated,
                        echoed,
                        request_reliable: h.request_reliable,
                        request_order: unpack_order(h.request_order),
                    };
                    return Step::Establish(accepted);
                }
                Ok(ConnectedMessage::ConnectionRequest(req)) => {
                    more |= request.is_some();
                    request = Some((req, reliable, order));
                }
                _ => more = true,
            }
        }
        let Some((req, request_reliable, request_order)) = request else {
            // Anything else before 0x13 (a reordered ping, say) is dropped unacknowledged;
            // the client resends what was reliable.
            stats.handshake_dropped += 1;
            return Step::Drop;
        };
        if req.client_guid != h.guid || req.use_security {
            stats.handshake_dropped += 1;
            return Step::Drop;
        }
        if h.accepted_ms == NOT_ACCEPTED {
            // A validated client is told "accepted" only with its slot taken (module docs).
            // Beyond the reservation caps it is accepted without one: its slot is taken at
            // 0x13, as a cookie-less client's is.
            if h.validated && may_reserve {
                let limits = (
                    config.limits.max_connections,
                    config.admission.max_connections_per_ip,
                );
                if !(open && self.group.take(from.ip(), limits.0, limits.1)) {
                    self.remove(from);
                    return Step::Full;
                }
                h.reserved = true;
                self.reserved += 1;
                *self.reserved_per_ip.entry(ip_key(from.ip())).or_default() += 1;
                self.reservations
                    .push_back((now_ms.saturating_add(RESERVE_MS), from));
            }
            h.accepted_ms = now_ms;
            h.request_time = req.time;
        }
        h.request_reliable = request_reliable;
        h.request_order = pack_order(request_order);
        if !more {
            h.request_seq = Some(header.seq.get());
        }
        // 0x10 is built identically on every repeat of 0x09: datagram #0, reliable index 0,
        // not ordered. Official also ACKs the 0x09 at once (§6.1); we do not: without a
        // connection nothing would resend a lost 0x10, so the client's own 0x09 resends (its RTO) must keep asking for it. The connection acknowledges the
        // 0x09 when 0x13 creates it, if a datagram carried it alone (`request_seq`); else
        // the client's next 0x09 resend is acknowledged by the connection.
        let internal = config.internal_address_list(h.protocol, local_addr);
        let accepted = ConnectionRequestAccepted {
            client_address: from,
            system_index: 0,
            internal_addresses: internal,
            request_time: h.request_time,
            accepted_time: offset.wrapping_add(h.accepted_ms),
        };
        let data = server_datagram(config, 0, accepted.to_vec(), now_us);
        if let Some(data) = Self::spend(config, h, data, stats) {
            out.push(data);
        }
        Step::Answered
    }

    /// The datagram that tells a client whose 0x13 just verified that the server filled up
    /// after its 0x10 (module docs): a 0x15, the server's second datagram and message, as a
    /// connection would have sent it. Sent once: if it is lost, the client times out.
    pub(crate) fn late_refusal(config: &EndpointConfig, now_us: u32) -> Vec<u8> {
        let notification = vec![id::DISCONNECTION_NOTIFICATION];
        server_datagram(config, 1, notification, now_us)
    }
}

/// The server's `n`th datagram of a connection, carrying its `n`th message alone, reliable
/// and not ordered (0x10 is number 0). Official RakNet sends 0x10 reliable-ordered on channel
/// 0; CloudburstMC sends it reliable, and so do we: every client takes 0x10 in any
/// reliability, but rak-rs reads it outside its ordering, and then waits for ever for the
/// ordering index 0 it took before delivering anything on channel 0.
fn server_datagram(config: &EndpointConfig, n: u32, message: Vec<u8>, now_us: u32) -> Vec<u8> {
    let index = config.initial_index_for_tests.wrapping_add(n);
    let mut frame = Frame::new(Reliability::Reliable, Bytes::from(message));
    frame.message_index = MessageIndex::new(index);
    let mut dh = DataHeader::new(DatagramSeq::new(index));
    dh.needs_b_and_as = true;
    dh.timestamp = config.datagram_timestamps.then_some(now_us);
    let mut data = Vec::new();
    dh.encode(&mut data);
    frame.encode(&mut data);
    data
}

/// The server time a peer sees, given our local milliseconds and its offset.
pub(crate) fn wire_time(local_ms: u64, offset: u64) -> u64 {
    local_ms.wrapping_add(offset)
}

/// Our local milliseconds from a time we sent a peer (echoed back).
pub(crate) fn local_time(wire_ms: u64, offset: u64) -> u64 {
    wire_ms.wrapping_sub(offset)
}

#[cfg(test)]
mod tests;
