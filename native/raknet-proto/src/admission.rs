//! Admission control: the bounded per-address tables, rate limits and bans that decide
//! whether a stranger's datagram gets an answer at all (issue #11, "survive the hostile
//! internet"). Everything here is keyed by what a spoofer controls (source addresses), so
//! every table has a cap and evicts its oldest entry rather than grow.

use crate::rng::siphash24;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A map with at most `cap` entries that evicts the oldest insertion first.
///
/// Insertion order is kept in a queue of `(key, stamp)`; an entry removed or re-inserted
/// leaves a stale queue entry behind, recognised by its stamp and compacted away when the
/// queue grows past twice the cap. So memory stays within a constant factor of `cap`.
#[derive(Debug)]
pub(crate) struct BoundedMap<K, V> {
    map: HashMap<K, (V, u64)>,
    order: VecDeque<(K, u64)>,
    next_stamp: u64,
    cap: usize,
}

impl<K: Copy + Eq + Hash, V> BoundedMap<K, V> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            next_stamp: 0,
            cap,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|(v, _)| v)
    }

    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k).map(|(v, _)| v)
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|(v, _)| v)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, (v, _))| (k, v))
    }

    /// Heap bytes held: the map and its insertion queue (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::memory::map(&self.map) + crate::memory::deque(&self.order)
    }

    /// The oldest live entry.
    pub(crate) fn oldest(&mut self) -> Option<(K, &V)> {
        self.drop_stale_front();
        let (k, _) = *self.order.front()?;
        self.map.get(&k).map(|(v, _)| (k, v))
    }

    fn drop_stale_front(&mut self) {
        while let Some(&(k, stamp)) = self.order.front() {
            if self.map.get(&k).is_some_and(|(_, s)| *s == stamp) {
                break;
            }
            self.order.pop_front();
        }
    }

    /// Insert (or replace, making it the newest). Returns the entries evicted to make room.
    pub(crate) fn insert(&mut self, k: K, v: V) -> Vec<(K, V)> {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.map.insert(k, (v, stamp));
        self.order.push_back((k, stamp));
        let mut evicted = Vec::new();
        while self.map.len() > self.cap {
            self.drop_stale_front();
            let Some((old, _)) = self.order.pop_front() else {
                break;
            };
            if let Some((v, _)) = self.map.remove(&old) {
                evicted.push((old, v));
            }
        }
        if self.order.len() > 2 * self.cap.max(8) {
            let map = &self.map;
            self.order
                .retain(|(k, stamp)| map.get(k).is_some_and(|(_, s)| s == stamp));
        }
        evicted
    }
}

/// A token bucket in milli-tokens, refilled from a millisecond clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenBucket {
    milli_tokens: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket.
    pub(crate) fn full(burst: u64, now_ms: u64) -> Self {
        Self {
            milli_tokens: burst * 1000,
            last_ms: now_ms,
        }
    }

    /// Take `cost` tokens if there are enough, refilling `per_sec` tokens a second up to
    /// `burst` first.
    pub(crate) fn take(&mut self, now_ms: u64, cost: u64, per_sec: u64, burst: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(elapsed.saturating_mul(per_sec))
            .min(burst.saturating_mul(1000));
        let cost = cost.saturating_mul(1000);
        if self.milli_tokens >= cost {
            self.milli_tokens -= cost;
            true
        } else {
            false
        }
    }
}

/// The address a per-IP limit or a ban counts `ip` under: an IPv4 address itself; an IPv6
/// address by its /64 prefix, the network a subscriber gets (one host with a /64 has 2^64
/// addresses to rotate through, so counting full addresses would bound nothing). An
/// IPv4-mapped address counts as its IPv4 address.
pub fn ip_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// Per-IP token buckets (IPv6 by /64, see [`ip_key`]), at most `cap` IPs remembered (an
/// evicted IP starts afresh with a full bucket: eviction forgives, so the global budgets
/// stay the backstop).
#[derive(Debug)]
pub(crate) struct IpRates {
    buckets: BoundedMap<IpAddr, TokenBucket>,
}

impl IpRates {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buckets: BoundedMap::new(cap),
        }
    }

    /// Heap bytes held (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.buckets.heap_bytes()
    }

    /// Take one token for `ip` at `per_sec` a second with a burst of `burst`.
    pub(crate) fn take(&mut self, ip: IpAddr, now_ms: u64, per_sec: u64, burst: u64) -> bool {
        let ip = ip_key(ip);
        if let Some(b) = self.buckets.get_mut(&ip) {
            return b.take(now_ms, 1, per_sec, burst);
        }
        let mut b = TokenBucket::full(burst, now_ms);
        let ok = b.take(now_ms, 1, per_sec, burst);
        self.buckets.insert(ip, b);
        ok
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.len()
    }
}

/// The IPs (IPv6 by /64, see [`ip_key`]) of players who completed a handshake: returning
/// players, whose pings draw on a pong budget of their own. A flood of spoofed pings spends
/// the strangers' budget, and the players who were on the server still see it in their
/// server list. Entries are written only for proven addresses (a completed handshake), so a
/// spoofer cannot add any.
///
/// A fixed table of 64-bit fingerprints that the endpoints of a group share without a lock:
/// a connection writes its IP's slot and a ping reads one (a relaxed atomic each way). An IP
/// that lands on a taken slot replaces the one there, so the table never grows and a player
/// stays remembered until another IP lands on the same slot: of the last [`KnownIps::SLOTS`]
/// distinct IPs about 63 % are remembered, a player seen 1,000 distinct IPs ago 94 %. The
/// fingerprints are keyed (SipHash under keys derived from the seed and secret of the
/// endpoint that allocates the table, which the NIF draws from the OS), so an attacker
/// cannot work out offline which addresses of theirs would evict a given player. It is
/// allocated by the first connection, so client endpoints, which accept none, never pay for
/// it.
#[derive(Debug, Default)]
pub(crate) struct KnownIps {
    table: OnceLock<KnownTable>,
}

#[derive(Debug)]
struct KnownTable {
    keys: (u64, u64),
    slots: Box<[AtomicU64]>,
}

impl KnownTable {
    /// A nonzero fingerprint of `ip`'s key; its high bits pick the slot (the lowest is always
    /// set).
    fn fingerprint(&self, ip: IpAddr) -> u64 {
        let h = match ip_key(ip) {
            IpAddr::V4(v4) => siphash24(self.keys.0, self.keys.1, &v4.octets()),
            IpAddr::V6(v6) => siphash24(self.keys.0, self.keys.1, &v6.octets()),
        };
        h | 1
    }

    fn slot(&self, fingerprint: u64) -> &AtomicU64 {
        &self.slots[(fingerprint >> 32) as usize % KnownIps::SLOTS]
    }
}

impl KnownIps {
    /// Slots in the table (128 KiB).
    pub(crate) const SLOTS: usize = 1 << 14;

    /// Remember `ip`. `keys` gives the fingerprints' SipHash keys if this is the first
    /// insert, which allocates the table.
    pub(crate) fn insert(&self, ip: IpAddr, keys: impl FnOnce() -> (u64, u64)) {
        let table = self.table.get_or_init(|| KnownTable {
            keys: keys(),
            slots: (0..Self::SLOTS).map(|_| AtomicU64::new(0)).collect(),
        });
        let f = table.fingerprint(ip);
        table.slot(f).store(f, Ordering::Relaxed);
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let Some(table) = self.table.get() else {
            return false;
        };
        let f = table.fingerprint(ip);
        table.slot(f).load(Ordering::Relaxed) == f
    }
}

/// The network of `ip` with a prefix of `len` bits (at most 32 for IPv4, 128 for IPv6):
/// `prefix("2001:db8:1:2::9", 48)` is `2001:db8:1::`. An IPv4-mapped IPv6 address is
/// taken as its IPv4 address.
pub fn prefix(ip: IpAddr, len: u8) -> IpAddr {
    match crate::addr::unmap(std::net::SocketAddr::new(ip, 0)).ip() {
        IpAddr::V4(v4) => {
            let len = u32::from(len.min(32));
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let len = u32::from(len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

/// The prefix length a ban or limit of one host takes by default: an IPv4 address, an IPv6
/// /64 (see [`ip_key`]).
pub fn host_prefix_len(ip: IpAddr) -> u8 {
    match crate::addr::unmap(std::net::SocketAddr::new(ip, 0)).ip() {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 64,
    }
}

/// The network a ban of `ip` with a prefix of `len` bits covers (`None`: the host's, see
/// [`host_prefix_len`]; a longer prefix is cut to the host's): what
/// [`Endpoint::ban_prefix`](crate::Endpoint::ban_prefix) and
/// [`Endpoint::unban_prefix`](crate::Endpoint::unban_prefix) key a ban by, so
/// `2001:db8::1` and `2001:db8::2/128` are one ban, and `::ffff:10.0.0.1` is `10.0.0.1`'s.
pub fn ban_network(ip: IpAddr, len: Option<u8>) -> (IpAddr, u8) {
    let host = host_prefix_len(ip);
    let len = len.unwrap_or(host).min(host);
    (prefix(ip, len), len)
}

/// A network: a prefix and its length in bits (`(2001:db8::, 48)`).
pub(crate) type Network = (IpAddr, u8);

/// The networks a per-host limit also bounds, with their caps: the host (an IPv4 address,
/// an IPv6 /64) at `per_host`, and wider networks at growing multiples of it, so that one
/// provider's addresses cannot take what everyone shares: an IPv6 /56 (256 /64s, what a
/// provider gives one customer) at twice it, a /48 (65,536 /64s, what a free tunnel broker
/// gives anyone) at four times, an IPv4 /24 at four times.
pub(crate) fn network_caps(
    ip: IpAddr,
    per_host: usize,
) -> impl Iterator<Item = (Network, usize)> + Clone {
    let host = host_prefix_len(ip);
    let wider: &'static [(u8, usize)] = if host == 32 {
        &[(24, 4)]
    } else {
        &[(56, 2), (48, 4)]
    };
    std::iter::once(((prefix(ip, host), host), per_host)).chain(
        wider
            .iter()
            .map(move |&(len, times)| ((prefix(ip, len), len), per_host.saturating_mul(times))),
    )
}

/// How many of something each network holds (every host and the wider networks of
/// [`network_caps`]), and how many in all: connections, unproven connections.
#[derive(Debug, Default)]
pub(crate) struct NetworkCounts {
    by_network: HashMap<Network, usize>,
    total: usize,
}

impl NetworkCounts {
    /// How many in all.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// How many `ip`'s host (an IPv4 address, an IPv6 /64) holds.
    pub(crate) fn of_host(&self, ip: IpAddr) -> usize {
        let len = host_prefix_len(ip);
        self.by_network
            .get(&(prefix(ip, len), len))
            .copied()
            .unwrap_or(0)
    }

    /// Whether `ip`'s host, or one of its wider networks, holds its cap (`per_host` for the
    /// host, see [`network_caps`]).
    pub(crate) fn full(&self, ip: IpAddr, per_host: usize) -> bool {
        network_caps(ip, per_host)
            .any(|(net, cap)| self.by_network.get(&net).copied().unwrap_or(0) >= cap)
    }

    /// Count one more for `ip`.
    pub(crate) fn add(&mut self, ip: IpAddr) {
        for (net, _) in network_caps(ip, 0) {
            *self.by_network.entry(net).or_insert(0) += 1;
        }
        self.total += 1;
    }

    /// Count one less for `ip` (one that [`Self::add`] counted).
    pub(crate) fn remove(&mut self, ip: IpAddr) {
        for (net, _) in network_caps(ip, 0) {
            if let Some(n) = self.by_network.get_mut(&net) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.by_network.remove(&net);
                }
            }
        }
        self.total = self.total.saturating_sub(1);
    }

    /// Heap bytes held (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::memory::map(&self.by_network)
    }
}

/// Bans of peers by GUID (the 8 bytes a RakNet client sends in its OCR2 and 0x09), each
/// with its end in the endpoint's milliseconds (`None`: until lifted). A GUID is the
/// client's own choice, so this stops a known client (a cheat build, a player who moved to
/// another address), not an attacker, who draws a new one.
#[derive(Debug, Default)]
pub(crate) struct GuidBans(HashMap<u64, Option<u64>>);

impl GuidBans {
    /// Heap bytes held (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::memory::map(&self.0)
    }

    pub(crate) fn ban(&mut self, guid: u64, until_ms: Option<u64>) {
        self.0.insert(guid, until_ms);
    }

    pub(crate) fn unban(&mut self, guid: u64) {
        self.0.remove(&guid);
    }

    /// Whether `guid` is banned at `now_ms`; an expired ban met here is dropped.
    pub(crate) fn is_banned(&mut self, guid: u64, now_ms: u64) -> bool {
        match self.0.get(&guid) {
            None => false,
            Some(None) => true,
            Some(Some(until)) if *until > now_ms => true,
            Some(Some(_)) => {
                self.0.remove(&guid);
                false
            }
        }
    }

    /// The active bans with the milliseconds left (`None`: until lifted).
    pub(crate) fn list(&mut self, now_ms: u64) -> Vec<(u64, Option<u64>)> {
        self.0.retain(|_, until| until.is_none_or(|t| t > now_ms));
        self.0
            .iter()
            .map(|(g, until)| (*g, until.map(|t| t - now_ms)))
            .collect()
    }
}

/// Banned networks, each until a deadline (milliseconds on the endpoint clock) or forever:
/// an IPv4 address or prefix (`/24`), an IPv6 prefix of at most 64 bits (a longer one is
/// taken as its /64, the network one subscriber gets). The operator fills it, not peers;
/// expired bans are dropped when looked at. A lookup masks the address once per prefix
/// length in use.
#[derive(Debug, Default)]
pub(crate) struct Bans {
    until: HashMap<(IpAddr, u8), Option<u64>>,
    /// The prefix lengths of the bans, with how many bans each.
    lens: std::collections::BTreeMap<u8, usize>,
}

impl Bans {
    /// Heap bytes held (see [`crate::memory`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::memory::map(&self.until) + crate::memory::btree(&self.lens)
    }

    fn key(ip: IpAddr, len: Option<u8>) -> (IpAddr, u8) {
        ban_network(ip, len)
    }

    pub(crate) fn ban(&mut self, ip: IpAddr, len: Option<u8>, until_ms: Option<u64>) {
        let key = Self::key(ip, len);
        if self.until.insert(key, until_ms).is_none() {
            *self.lens.entry(key.1).or_default() += 1;
        }
    }

    pub(crate) fn unban(&mut self, ip: IpAddr, len: Option<u8>) {
        let key = Self::key(ip, len);
        if self.until.remove(&key).is_some() {
            self.forget_len(key.1);
        }
    }

    fn forget_len(&mut self, len: u8) {
        if let Some(n) = self.lens.get_mut(&len) {
            *n -= 1;
            if *n == 0 {
                self.lens.remove(&len);
            }
        }
    }

    pub(crate) fn is_banned(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        if self.until.is_empty() {
            return false;
        }
        // No allocation per lookup (every datagram of a server with bans comes here): an
        // expired ban met on the way is dropped after the walk.
        let host = host_prefix_len(ip);
        let mut expired = None;
        for &len in self.lens.keys().filter(|&&l| l <= host) {
            let key = (prefix(ip, len), len);
            match self.until.get(&key) {
                None => {}
                Some(None) => return true,
                Some(Some(t)) if *t > now_ms => return true,
                Some(Some(_)) => expired = Some(key),
            }
        }
        if let Some(key) = expired {
            self.until.remove(&key);
            self.forget_len(key.1);
        }
        false
    }

    /// Every active ban: the network, its prefix length and the milliseconds it has left
    /// (`None`: until lifted).
    pub(crate) fn list(&mut self, now_ms: u64) -> Vec<(IpAddr, u8, Option<u64>)> {
        let expired: Vec<_> = self
            .until
            .iter()
            .filter(|(_, t)| t.is_some_and(|t| t <= now_ms))
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            self.until.remove(&key);
            self.forget_len(key.1);
        }
        let mut v: Vec<_> = self
            .until
            .iter()
            .map(|((ip, len), t)| (*ip, *len, t.map(|t| t - now_ms)))
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_mask_the_host_bits() {
        assert_eq!(prefix(ip("2001:db8:1:2::9"), 48), ip("2001:db8:1::"));
        assert_eq!(prefix(ip("2001:db8:1:2::9"), 56), ip("2001:db8:1::"));
        assert_eq!(prefix(ip("2001:db8:1:2ff::9"), 56), ip("2001:db8:1:200::"));
        assert_eq!(prefix(ip("203.0.113.77"), 24), ip("203.0.113.0"));
        assert_eq!(prefix(ip("::ffff:203.0.113.77"), 24), ip("203.0.113.0"));
        assert_eq!(prefix(ip("203.0.113.77"), 0), ip("0.0.0.0"));
        assert_eq!(prefix(ip("203.0.113.77"), 40), ip("203.0.113.77"));
    }

    #[test]
    fn bans_cover_their_prefix_and_lift_and_expire() {
        let mut b = Bans::default();
        b.ban(ip("2001:db8:1::"), Some(48), None);
        b.ban(ip("203.0.113.9"), Some(24), Some(1_000));
        b.ban(ip("198.51.100.1"), None, None);
        b.ban(ip("2001:db8:2::1"), Some(128), None);
        assert!(b.is_banned(ip("2001:db8:1:ffff::1"), 0));
        assert!(!b.is_banned(ip("2001:db8:2:1::1"), 0));
        // A prefix longer than a host's is the host's: the /64.
        assert!(b.is_banned(ip("2001:db8:2::77"), 0));
        assert!(b.is_banned(ip("203.0.113.200"), 999));
        assert!(!b.is_banned(ip("203.0.114.1"), 0));
        assert!(b.is_banned(ip("::ffff:198.51.100.1"), 0));
        assert!(!b.is_banned(ip("198.51.100.2"), 0));
        assert_eq!(
            b.list(500),
            vec![
                (ip("198.51.100.1"), 32, None),
                (ip("203.0.113.0"), 24, Some(500)),
                (ip("2001:db8:1::"), 48, None),
                (ip("2001:db8:2::"), 64, None),
            ]
        );
        assert!(!b.is_banned(ip("203.0.113.200"), 1_000), "expired");
        b.unban(ip("2001:db8:1::5"), Some(48));
        assert!(!b.is_banned(ip("2001:db8:1::1"), 0));
        assert_eq!(b.list(0).len(), 2);
        assert_eq!(b.lens.len(), 2, "{:?}", b.lens);
    }

    #[test]
    fn bounded_map_evicts_oldest_and_stays_bounded() {
        let mut m = BoundedMap::new(3);
        for i in 0..3u32 {
            assert!(m.insert(i, i).is_empty());
        }
        // Re-inserting 0 makes it the newest: 1 is evicted next.
        m.insert(0, 10);
        assert_eq!(m.insert(3, 3), vec![(1, 1)]);
        assert_eq!(m.len(), 3);
        assert_eq!(m.oldest().map(|(k, _)| k), Some(2));
        for i in 0..10_000u32 {
            m.insert(i % 5, i);
            m.remove(&(i % 7));
        }
        assert!(m.len() <= 3 && m.order.len() <= 16);
    }

    #[test]
    fn token_bucket_refills_at_its_rate() {
        let mut b = TokenBucket::full(2, 0);
        assert!(b.take(0, 1, 10, 2) && b.take(0, 1, 10, 2));
        assert!(!b.take(0, 1, 10, 2));
        assert!(!b.take(99, 1, 10, 2));
        assert!(b.take(100, 1, 10, 2));
    }

    #[test]
    fn ip_rates_are_bounded() {
        let mut r = IpRates::new(100);
        for i in 0..1000u32 {
            r.take(IpAddr::from(i.to_be_bytes()), 0, 1, 1);
        }
        assert_eq!(r.len(), 100);
    }

    #[test]
    fn ipv6_addresses_count_by_their_slash_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let key = ip_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"));
        assert_eq!(key, ip("2001:db8:1:2::"));
        assert_eq!(ip_key(ip("2001:db8:1:2::9")), key);
        assert_ne!(ip_key(ip("2001:db8:1:3::9")), key);
        assert_eq!(ip_key(ip("10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(ip_key(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        // A ban of one address covers its /64; so do per-IP budgets.
        let mut b = Bans::default();
        b.ban(ip("2001:db8:1:2::1"), None, None);
        assert!(b.is_banned(ip("2001:db8:1:2:ffff::7"), 0));
        assert!(!b.is_banned(ip("2001:db8:1:3::1"), 0));
        let mut r = IpRates::new(16);
        assert!(r.take(ip("2001:db8:1:2::1"), 0, 1, 1));
        assert!(!r.take(ip("2001:db8:1:2::2"), 0, 1, 1));
        assert!(r.take(ip("2001:db8:1:3::1"), 0, 1, 1));
    }

    #[test]
    fn bans_expire() {
        let mut b = Bans::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        b.ban(ip, None, Some(1000));
        assert!(b.is_banned(ip, 999));
        assert_eq!(b.list(400), vec![(ip, 32, Some(600))]);
        assert!(!b.is_banned(ip, 1000));
        assert!(b.list(0).is_empty());
    }

    #[test]
    fn known_ips_remember_players_by_ip_and_ipv6_by_64() {
        let known = KnownIps::default();
        let keys = || (1, 2);
        let player: IpAddr = "203.0.113.7".parse().unwrap();
        // Nothing allocated until a first player: a client endpoint pays nothing.
        assert!(known.table.get().is_none());
        assert!(!known.contains(player));
        known.insert(player, keys);
        assert!(known.contains(player));
        assert!(!known.contains("203.0.113.8".parse().unwrap()));
        let v6: IpAddr = "2001:db8:0:1::5".parse().unwrap();
        known.insert(v6, keys);
        assert!(known.contains("2001:db8:0:1:ffff::1".parse().unwrap()));
        assert!(!known.contains("2001:db8:0:2::5".parse().unwrap()));
        // A fixed table: many more players than slots leave it at its size, and the most
        // recent one is remembered.
        for i in 0..(3 * KnownIps::SLOTS as u32) {
            known.insert(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), keys);
        }
        assert_eq!(
            known.table.get().map(|t| t.slots.len()),
            Some(KnownIps::SLOTS)
        );
        let last = IpAddr::from((0x0a00_0000 + 3 * KnownIps::SLOTS as u32 - 1).to_be_bytes());
        assert!(known.contains(last));
        // Every slot is used, even and odd (the fingerprint's low bit, always set, once picked
        // the slot: half the table stayed empty). 3 x SLOTS insertions leave about 5 % empty.
        let slots = &known.table.get().unwrap().slots;
        let used = |parity| {
            (parity..KnownIps::SLOTS)
                .step_by(2)
                .filter(|&i| slots[i].load(Ordering::Relaxed) != 0)
                .count()
        };
        for parity in [0, 1] {
            assert!(
                used(parity) > KnownIps::SLOTS / 2 * 9 / 10,
                "{}",
                used(parity)
            );
        }
    }

    #[test]
    fn known_ips_fingerprints_are_keyed() {
        // Under other keys the same address gets another fingerprint, and so another slot:
        // which addresses share a player's slot cannot be computed without the keys. The
        // first insert's keys stay.
        let (a, b) = (KnownIps::default(), KnownIps::default());
        a.insert(IpAddr::from([198, 51, 100, 1]), || (1, 2));
        b.insert(IpAddr::from([198, 51, 100, 1]), || (3, 4));
        b.insert(IpAddr::from([198, 51, 100, 2]), || {
            unreachable!("keys asked for again")
        });
        let (ta, tb) = (a.table.get().unwrap(), b.table.get().unwrap());
        let ips = (0..16u8).map(|i| IpAddr::from([203, 0, 113, i]));
        let differ = ips
            .filter(|&ip| ta.fingerprint(ip) != tb.fingerprint(ip))
            .count();
        assert_eq!(differ, 16);
    }
}
