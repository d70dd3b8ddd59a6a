//! What the engine's heap holds, by structure, and the trimming that keeps it from growing
//! with the traffic a connection has carried (issue #35).
//!
//! Every container of a connection is bounded by a limit ([`crate::Limits`]); but a `Vec`,
//! `VecDeque` or `HashMap` keeps the capacity of its largest moment, and the largest moment of
//! a lossy connection keeps growing slowly with time (a longer loss burst, a deeper reorder).
//! Over a 20-minute simulated soak one connection pair grew 65 KB that way, in power-of-two
//! steps. So each connection trims its containers once per keep-alive ping
//! ([`crate::EndpointConfig::ping_interval`]): a container holding less than a quarter of its
//! capacity shrinks to twice what it holds. Reallocation costs at most one copy of what it holds
//! per ping interval.
//!
//! The byte counts are estimates from capacities and element sizes (a `HashMap` bucket is
//! its entry plus a control byte) plus the payload bytes the structure keeps alive. They
//! attribute memory; `RakNet.native_memory/0` is what the allocator really holds.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::mem::size_of;

/// Heap bytes an [`crate::Endpoint`] holds, by structure ([`crate::Endpoint::heap_usage`]).
///
/// The per-connection fields are summed over the endpoint's connections.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeapUsage {
    /// Messages queued to send: the priority queues and their payloads.
    pub send_queue: usize,
    /// Reliable frames sent and not acknowledged (with their payloads), the resend queue and
    /// outstanding receipts.
    pub in_flight: usize,
    /// Records of the datagrams sent: those in flight, and lost ones kept for a late ACK
    /// (at most 512 per connection).
    pub flight_records: usize,
    /// Datagram numbers to ACK or NAK, ACK ranges repeated, datagrams refused while paused.
    pub acks: usize,
    /// The duplicate filter over reliable message indices.
    pub reliable_window: usize,
    /// Messages held for ordering or sequencing, on every channel.
    pub ordering: usize,
    /// Fragments of split messages being reassembled.
    pub reassembly: usize,
    /// The congestion controller's filters.
    pub congestion: usize,
    /// Events and messages not yet taken by the application (and messages that came
    /// before the handshake ended).
    pub events: usize,
    /// The connection table: slots (each connection's fixed-size state), the address and
    /// GUID indexes, timers.
    pub connections: usize,
    /// Half-open handshakes and what they index (per-IP lists, GUIDs, remembered OCR1s).
    pub handshakes: usize,
    /// Per-IP rate buckets and bans.
    pub admission: usize,
    /// Offline replies waiting to be sent, and endpoint events not yet polled.
    pub endpoint_queues: usize,
}

impl HeapUsage {
    /// Every field by name, in declaration order.
    pub fn entries(&self) -> [(&'static str, usize); 13] {
        [
            ("send_queue", self.send_queue),
            ("in_flight", self.in_flight),
            ("flight_records", self.flight_records),
            ("acks", self.acks),
            ("reliable_window", self.reliable_window),
            ("ordering", self.ordering),
            ("reassembly", self.reassembly),
            ("congestion", self.congestion),
            ("events", self.events),
            ("connections", self.connections),
            ("handshakes", self.handshakes),
            ("admission", self.admission),
            ("endpoint_queues", self.endpoint_queues),
        ]
    }

    /// The sum of every field.
    pub fn total(&self) -> usize {
        self.entries().iter().map(|(_, bytes)| bytes).sum()
    }
}

impl std::ops::AddAssign for HeapUsage {
    fn add_assign(&mut self, o: Self) {
        self.send_queue += o.send_queue;
        self.in_flight += o.in_flight;
        self.flight_records += o.flight_records;
        self.acks += o.acks;
        self.reliable_window += o.reliable_window;
        self.ordering += o.ordering;
        self.reassembly += o.reassembly;
        self.congestion += o.congestion;
        self.events += o.events;
        self.connections += o.connections;
        self.handshakes += o.handshakes;
        self.admission += o.admission;
        self.endpoint_queues += o.endpoint_queues;
    }
}

/// Heap bytes of a `Vec`'s buffer.
pub fn vec<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

/// Heap bytes of a `VecDeque`'s buffer.
pub fn deque<T>(v: &VecDeque<T>) -> usize {
    v.capacity() * size_of::<T>()
}

/// Heap bytes of a `HashMap`'s table: a power of two of buckets holding 7/8 of them (all but
/// one below 8), each an entry and a control byte.
pub fn map<K, V, S>(m: &HashMap<K, V, S>) -> usize {
    let cap = m.capacity();
    if cap == 0 {
        return 0;
    }
    let buckets = if cap < 8 {
        (cap + 1).next_power_of_two()
    } else {
        (cap * 8 / 7).next_power_of_two()
    };
    buckets * (size_of::<(K, V)>() + 1)
}

/// Heap bytes of a `BTreeMap`: nodes of up to 11 entries, counted as half full, plus a
/// node header each.
pub fn btree<K, V>(m: &BTreeMap<K, V>) -> usize {
    const NODE_OVERHEAD: usize = 16;
    m.len() * (size_of::<(K, V)>() * 2 + NODE_OVERHEAD)
}

/// Capacity kept by a container that holds a few elements (in elements): small enough not
/// to matter, large enough that it is not reallocated on every trim.
const KEEP: usize = 4;

/// The capacity a container of `len` elements and `cap` capacity trims to, if it should:
/// twice its length, at least [`KEEP`]; nothing when empty. Any capacity over that goes back
/// at once (at most one reallocation per container per ping interval), so that no capacity
/// once reached is kept: a rule that kept some slack (say, anything over a quarter full)
/// lets ever more connections come to sit at the largest capacity their few elements
/// allow, and the total grows for as long as the server runs.
fn trimmed(len: usize, cap: usize) -> Option<usize> {
    let keep = if len == 0 { 0 } else { (len * 2).max(KEEP) };
    (cap > keep).then_some(keep)
}

/// Give back a `Vec`'s capacity beyond twice its length (see [`trimmed`]).
pub(crate) fn trim_vec<T>(v: &mut Vec<T>) {
    if let Some(keep) = trimmed(v.len(), v.capacity()) {
        v.shrink_to(keep);
    }
}

/// Give back a `VecDeque`'s capacity beyond twice its length (see [`trimmed`]).
pub(crate) fn trim_deque<T>(v: &mut VecDeque<T>) {
    if let Some(keep) = trimmed(v.len(), v.capacity()) {
        v.shrink_to(keep);
    }
}

/// Give back a `HashMap`'s table beyond what twice its length needs (see [`trimmed`]); an
/// empty map frees its table entirely (most of a connection's 32 channels never hold a
/// message).
pub(crate) fn trim_map<K: Eq + Hash, V, S: BuildHasher>(m: &mut HashMap<K, V, S>) {
    if m.is_empty() {
        if m.capacity() > 0 {
            m.shrink_to(0);
        }
    } else if let Some(keep) = trimmed(m.len(), m.capacity()) {
        m.shrink_to(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_gives_back_what_a_burst_took() {
        let mut v: VecDeque<u64> = (0..1000).collect();
        v.truncate(10);
        trim_deque(&mut v);
        assert!(v.capacity() < 40, "{}", v.capacity());
        assert_eq!(v.len(), 10);

        // Half full: kept as it is.
        let mut w: Vec<u64> = Vec::with_capacity(64);
        w.extend(0..32);
        trim_vec(&mut w);
        assert_eq!(w.capacity(), 64);

        // A few elements where a burst once made room for eight: back to the floor (kept,
        // such capacities added up over a long run).
        let mut few: VecDeque<u64> = VecDeque::with_capacity(8);
        few.extend([1, 2]);
        trim_deque(&mut few);
        assert_eq!(few.capacity(), KEEP);

        // Empty: everything goes back, however small.
        let mut e: VecDeque<u64> = VecDeque::with_capacity(8);
        e.push_back(1);
        e.clear();
        trim_deque(&mut e);
        assert_eq!(e.capacity(), 0);

        let mut m: HashMap<u32, u64> = (0..1000).map(|i| (i, 0)).collect();
        let full = map(&m);
        m.retain(|k, _| *k < 3);
        trim_map(&mut m);
        assert!(map(&m) * 50 < full, "{} of {full}", map(&m));
        m.clear();
        trim_map(&mut m);
        assert_eq!((m.capacity(), map(&m)), (0, 0));
    }

    #[test]
    fn map_bytes_follow_the_table() {
        let mut m: HashMap<u32, u32> = HashMap::new();
        assert_eq!(map(&m), 0);
        m.insert(1, 1);
        // 3 entries fit in 4 buckets of 8 + 1 bytes.
        assert_eq!(map(&m), 4 * 9);
        m.extend((0..100).map(|i| (i, i)));
        assert_eq!(map(&m), 128 * 9);
    }
}
