//! An endpoint's UDP socket, and on Linux the local address each datagram was sent to.
//!
//! A socket bound to every address (`0.0.0.0`, `::`) would otherwise answer from the kernel's
//! preferred source address: a client that sent to `127.0.0.2`, or to the second public
//! address of a multi-homed host, gets replies from another address and (matching replies by
//! server address, as official RakNet does) drops them. Such a socket receives with `recvmsg`
//! and `IP_PKTINFO` / `IPV6_RECVPKTINFO`, learning each datagram's local destination, and the
//! driver sends replies with `sendmsg` carrying `IP_PKTINFO` / `IPV6_PKTINFO` so that they leave
//! from the address the peer used. Sockets bound to one address, and other systems, use plain
//! `recv_from` / `send_to`.
//!
//! On Linux datagrams are read and written in batches, up to [`BATCH`] per system call, with
//! `recvmmsg` / `sendmmsg` (the same control messages per datagram); elsewhere, or where the
//! kernel lacks them (`ENOSYS`), one call per datagram.
//!
//! On Linux 4.18 and later, consecutive datagrams to one peer of one size (a bulk transfer's
//! split packets; the last may be shorter) go as one buffer with a `UDP_SEGMENT` control
//! message (UDP generic segmentation offload): the kernel passes the run through its stack
//! once and cuts it into the same datagrams at the end (in the network card where it can).
//! Where the kernel refuses it the socket goes back to one datagram per `sendmmsg` entry.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;

/// Datagrams per `recvmmsg` / `sendmmsg` call at most.
pub const BATCH: usize = 32;
/// Room for one datagram: RakNet's largest MTU is 1492, and a longer datagram is cut here
/// (the engine then rejects it as malformed).
const DATAGRAM_ROOM: usize = 2048;

/// A datagram received: its bytes, its source, and the local address it was sent to when the
/// socket reports it (and it is one a reply can be sent from).
pub struct Received {
    /// The datagram's bytes.
    pub data: Bytes,
    /// Its source address (an IPv4 peer of a dual-stack socket as plain IPv4).
    pub from: SocketAddr,
    /// The local address it was sent to, when the socket reports it.
    pub local: Option<IpAddr>,
}

/// Datagrams to send, in order, with their destination and source address (see
/// [`Udp::send_batch`]); up to [`BATCH`] of them.
#[derive(Default)]
pub struct Outbox {
    bytes: Vec<u8>,
    items: Vec<Outgoing>,
}

#[derive(Clone, Copy)]
struct Outgoing {
    start: usize,
    len: usize,
    to: SocketAddr,
    source: Option<IpAddr>,
}

impl Outbox {
    /// Heap bytes held by the buffers (capacity).
    pub fn heap_bytes(&self) -> usize {
        raknet_proto::memory::vec(&self.bytes) + raknet_proto::memory::vec(&self.items)
    }

    /// Adds a datagram after those already held.
    pub fn push(&mut self, data: &[u8], to: SocketAddr, source: Option<IpAddr>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.items.push(Outgoing {
            start,
            len: data.len(),
            to,
            source,
        });
    }

    /// Whether it holds [`BATCH`] datagrams: send them before adding more.
    pub fn is_full(&self) -> bool {
        self.items.len() >= BATCH
    }

    /// How many datagrams it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Forget every datagram (they were sent), keeping the buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.items.clear();
    }

    fn data(&self, item: &Outgoing) -> &[u8] {
        self.bytes
            .get(item.start..item.start + item.len)
            .unwrap_or(&[])
    }

    /// The bytes of consecutive `items`, one after another as they were pushed.
    #[cfg(target_os = "linux")]
    fn span(&self, items: &[Outgoing]) -> &[u8] {
        match (items.first(), items.last()) {
            (Some(first), Some(last)) => self
                .bytes
                .get(first.start..last.start + last.len)
                .unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// Datagrams one `UDP_SEGMENT` send carries at most: the kernel's `UDP_MAX_SEGMENTS` (64 from
/// 4.18; later kernels allow more).
#[cfg(target_os = "linux")]
const GSO_MAX_SEGMENTS: usize = 64;
/// Bytes one `UDP_SEGMENT` send carries at most: before segmentation the run is one IP packet,
/// whose 16-bit length covers its headers too: 65,535 - 20 (IPv4 header) - 8 (UDP header) =
/// 65,507 (IPv6 allows 65,527; a dual-stack socket sends IPv4 too, so the IPv4 bound for all).
/// At RakNet's largest datagram (1,492 - 28 = 1,464 bytes) that is 44 datagrams.
#[cfg(target_os = "linux")]
const GSO_MAX_BYTES: usize = 65_535 - 20 - 8;

/// How many datagrams from the first of `items` on can go as one `UDP_SEGMENT` send: those
/// with its destination and source and its length, then perhaps one shorter (which ends the
/// run: the kernel cuts every segment but the last at the first one's length), within
/// [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`]. 1 when the next datagram cannot join.
#[cfg(target_os = "linux")]
fn gso_run(items: &[Outgoing]) -> usize {
    let Some(first) = items.first() else {
        return 0;
    };
    let max = match first.len {
        0 => 1,
        len => (GSO_MAX_BYTES / len).min(GSO_MAX_SEGMENTS),
    };
    let mut n = 1;
    for item in items.iter().skip(1) {
        if n >= max
            || item.to != first.to
            || item.source != first.source
            || item.len == 0
            || item.len > first.len
        {
            break;
        }
        n += 1;
        if item.len < first.len {
            break;
        }
    }
    n
}

/// One system call's worth of a run of datagrams that share their source: entries of
/// `sendmmsg`, each a range of datagrams (one datagram each without GSO), and the segment size
/// they share under GSO. Every entry of a GSO call is a run of [`gso_run`] of that size, at
/// least two datagrams; a call without GSO stops where such a run begins.
#[cfg(target_os = "linux")]
struct Call {
    entries: Vec<std::ops::Range<usize>>,
    segment: Option<u16>,
}

#[cfg(target_os = "linux")]
impl Call {
    fn plan(items: &[Outgoing], gso: bool) -> Call {
        let items = items.get(..items.len().min(BATCH)).unwrap_or(&[]);
        let mut entries = Vec::new();
        let mut at = 0;
        if !gso {
            entries.extend((0..items.len()).map(|i| i..i + 1));
            return Call {
                entries,
                segment: None,
            };
        }
        let first = gso_run(items);
        let segment = match items.first().map(|i| u16::try_from(i.len)) {
            Some(Ok(len)) if first >= 2 => len,
            _ => {
                // Single datagrams up to the next run GSO could carry.
                while at < items.len() && (at == 0 || gso_run(&items[at..]) < 2) {
                    entries.push(at..at + 1);
                    at += 1;
                }
                return Call {
                    entries,
                    segment: None,
                };
            }
        };
        // Runs of that segment size, each one entry.
        while let Some(item) = items.get(at) {
            let n = gso_run(&items[at..]);
            if n < 2 || item.len != usize::from(segment) {
                break;
            }
            entries.push(at..at + n);
            at += n;
        }
        Call {
            entries,
            segment: Some(segment),
        }
    }
}

/// Whether runs of datagrams to one peer go as one `UDP_SEGMENT` send (Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gso {
    /// Each datagram its own `sendmmsg` entry.
    Off,
    /// Where the kernel has it.
    On,
    /// Tests only: the first segmented send asks for 1-byte segments, more than the kernel
    /// takes in one send (it refuses with `EINVAL`), to exercise the way back to `Off`; runs
    /// too short for that (128 bytes or less) go unsegmented until then.
    RefuseFirst,
}

/// Datagrams and system calls, both ways, since the socket was opened.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Filled in by [`Udp::counters`] from the socket's own count ([`Sock::reads`]).
    pub recv_calls: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Send system calls made.
    pub send_calls: u64,
    /// Send calls that carried `UDP_SEGMENT` runs (counted in `send_calls` too).
    pub gso_sends: u64,
    /// Datagrams those calls sent (counted in `datagrams_out` too).
    pub gso_datagrams: u64,
    /// Segmented sends the kernel refused: at most one, as the socket then stops trying.
    pub gso_refused: u64,
    /// Sends that found the send buffer full: the datagrams left waited for room.
    pub send_full: u64,
}

/// The socket as the endpoint uses it. On Unix it is registered with the runtime for reads
/// only: every datagram sent frees room in the send buffer, which raises an edge for a
/// registration that also asks for writes, and that woke the endpoint thread for nothing once
/// per send (an inline send on a scheduler included). Writes are plain non-blocking calls;
/// room to write is waited for, rarely, through a duplicate registered for writes only while
/// it is needed. Elsewhere tokio's `UdpSocket` does both.
pub struct Sock {
    /// Receive system calls made: a read the runtime knows would block makes none.
    reads: std::sync::atomic::AtomicU64,
    #[cfg(unix)]
    io: tokio::io::unix::AsyncFd<std::net::UdpSocket>,
    #[cfg(not(unix))]
    io: tokio::net::UdpSocket,
    /// The same socket, for the system calls (tokio's socket keeps the readiness).
    #[cfg(not(unix))]
    raw: std::net::UdpSocket,
}

// `AsyncFd::with_interest` is deprecated because a generic `T` may change the descriptor it
// reports; a `std::net::UdpSocket` owns its one descriptor until dropped (by the `AsyncFd`).
#[allow(deprecated)]
impl Sock {
    /// Register a non-blocking socket with the current runtime.
    pub fn new(socket: std::net::UdpSocket) -> io::Result<Self> {
        #[cfg(unix)]
        {
            let io =
                tokio::io::unix::AsyncFd::with_interest(socket, tokio::io::Interest::READABLE)?;
            Ok(Self {
                reads: Default::default(),
                io,
            })
        }
        #[cfg(not(unix))]
        {
            let raw = socket.try_clone()?;
            Ok(Self {
                reads: Default::default(),
                io: tokio::net::UdpSocket::from_std(socket)?,
                raw,
            })
        }
    }

    /// The socket for system calls that need no readiness (options, addresses).
    pub fn raw(&self) -> &std::net::UdpSocket {
        #[cfg(unix)]
        return self.io.get_ref();
        #[cfg(not(unix))]
        &self.raw
    }

    /// A read: `f` runs while the socket is known readable, and a `WouldBlock` from it clears
    /// that (without `f` when it is not).
    pub fn read<R>(&self, f: impl FnOnce(&std::net::UdpSocket) -> io::Result<R>) -> io::Result<R> {
        let counted = |socket: &std::net::UdpSocket| {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            f(socket)
        };
        #[cfg(unix)]
        return self.io.try_io(tokio::io::Interest::READABLE, counted);
        #[cfg(not(unix))]
        self.io
            .try_io(tokio::io::Interest::READABLE, || counted(&self.raw))
    }

    /// Receive system calls made so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A write, now (`WouldBlock` when the send buffer is full).
    pub fn write<R>(&self, f: impl FnOnce(&std::net::UdpSocket) -> io::Result<R>) -> io::Result<R> {
        #[cfg(unix)]
        return f(self.io.get_ref());
        #[cfg(not(unix))]
        self.io
            .try_io(tokio::io::Interest::WRITABLE, || f(&self.raw))
    }

    /// Until the socket may be readable.
    pub async fn readable(&self) -> io::Result<()> {
        #[cfg(unix)]
        return self.io.readable().await.map(|_| ());
        #[cfg(not(unix))]
        self.io.readable().await
    }

    /// A wait for room in the send buffer, for while datagrams wait for it.
    pub fn write_wait(self: &Arc<Self>) -> io::Result<WriteWait> {
        #[cfg(unix)]
        {
            // A duplicate registered for writes, only while needed: registered for good, each
            // datagram sent would raise a write edge and wake the thread for nothing.
            let fd = tokio::io::unix::AsyncFd::with_interest(
                self.io.get_ref().try_clone()?,
                tokio::io::Interest::WRITABLE,
            )?;
            Ok(WriteWait { fd })
        }
        #[cfg(not(unix))]
        Ok(WriteWait { sock: self.clone() })
    }
}

/// See [`Sock::write_wait`]. Kept across the loop's turns while the send buffer stays full:
/// one registration (a `dup`, two `epoll_ctl` and a `close`) per episode, not per turn.
pub struct WriteWait {
    #[cfg(unix)]
    fd: tokio::io::unix::AsyncFd<std::net::UdpSocket>,
    #[cfg(not(unix))]
    sock: Arc<Sock>,
}

impl WriteWait {
    /// Until the send buffer has room. Epoll reports a socket already writable at once; the
    /// readiness is cleared as it is reported, so the next wait lasts until a new edge, which
    /// a send that finds the buffer full again is sure to be followed by.
    pub async fn ready(&self) -> io::Result<()> {
        #[cfg(unix)]
        {
            let mut guard = self.fd.writable().await?;
            guard.clear_ready();
            Ok(())
        }
        #[cfg(not(unix))]
        self.sock.io.writable().await
    }
}

/// The socket and whether it reports local addresses.
pub struct Udp {
    /// Shared with the endpoint thread's loop, which waits for readiness without holding the
    /// driver (see `driver::Shared`).
    socket: Arc<Sock>,
    /// `IP_PKTINFO` / `IPV6_RECVPKTINFO` is on: receive and send with control messages.
    pktinfo: bool,
    /// An IPv6 socket (perhaps dual-stack) takes `IPV6_PKTINFO`, an IPv4 one `IP_PKTINFO`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    ipv6: bool,
    /// Receive buffers: one for the per-datagram path, more as batches fill (up to
    /// [`BATCH`]), so that an endpoint with little traffic keeps little memory.
    bufs: Vec<Vec<u8>>,
    /// Whether `recvmmsg` / `sendmmsg` are used (not once the kernel said it lacks them).
    #[cfg(target_os = "linux")]
    mmsg: bool,
    /// Whether runs to one peer go with `UDP_SEGMENT` (not once the kernel refused it).
    #[cfg(target_os = "linux")]
    gso: bool,
    /// Tests only: see [`Gso::RefuseFirst`].
    #[cfg(target_os = "linux")]
    gso_fault: bool,
    /// Whether a `UDP_SEGMENT` send has worked on this socket: until one has, any error of
    /// one turns GSO off.
    #[cfg(target_os = "linux")]
    gso_worked: bool,
    /// Tests only ([`Udp::fake_full_buffer`]): whether the next send finds the buffer "full".
    full_fault: Option<bool>,
    counters: Counters,
}

impl Udp {
    /// `batched`: use `recvmmsg` / `sendmmsg` where the system has them; `gso`: and send runs
    /// to one peer with `UDP_SEGMENT` where the kernel has it.
    pub fn new(socket: Sock, pktinfo: bool, batched: bool, gso: Gso) -> Self {
        let ipv6 = socket.raw().local_addr().is_ok_and(|a| a.is_ipv6());
        #[cfg(not(target_os = "linux"))]
        let _ = (batched, gso);
        // Kernels before 4.18 ignore a `UDP_SEGMENT` control message (the peer would get the
        // whole run as one datagram); they refuse the socket option, which asks nothing here.
        #[cfg(target_os = "linux")]
        let (gso, gso_fault) = (
            batched && gso != Gso::Off && sys::gso_supported(socket.raw()),
            gso == Gso::RefuseFirst,
        );
        Self {
            socket: Arc::new(socket),
            pktinfo,
            ipv6,
            bufs: vec![vec![0; DATAGRAM_ROOM]],
            #[cfg(target_os = "linux")]
            mmsg: batched,
            #[cfg(target_os = "linux")]
            gso,
            #[cfg(target_os = "linux")]
            gso_fault,
            #[cfg(target_os = "linux")]
            gso_worked: false,
            full_fault: None,
            counters: Counters::default(),
        }
    }

    /// Tests only: every other call of [`Udp::send_batch`] sends nothing, as if the send
    /// buffer were full, so that the wait for room runs whatever the kernel does (loopback
    /// never fills a send buffer: the receiver is charged for the datagrams at once).
    pub fn fake_full_buffer(&mut self) {
        self.full_fault = Some(true);
    }

    /// The counters since the socket was opened.
    pub fn counters(&self) -> Counters {
        Counters {
            recv_calls: self.socket.reads(),
            ..self.counters
        }
    }

    /// The socket, for waiting on its readiness.
    pub fn io(&self) -> Arc<Sock> {
        self.socket.clone()
    }

    /// Receive what is waiting, up to [`BATCH`] datagrams in one call, appending them to
    /// `out`. `Ok(true)` when the call emptied the socket (a batch call that returned less
    /// than it had room for): there is no need to ask again until it is readable, and the
    /// call that would only have found nothing is saved. `WouldBlock` when nothing waits;
    /// another error (an ICMP error reported on the socket) consumes that error only.
    pub fn try_recv_batch(&mut self, out: &mut Vec<Received>) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        if self.mmsg {
            match sys::recv_many(&self.socket, self.pktinfo, &mut self.bufs, out) {
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSYS) => self.mmsg = false,
                done => {
                    let (got, drained) = done?;
                    self.counters.datagrams_in += got as u64;
                    // A full batch: more are probably waiting; read more per call next time.
                    if got == self.bufs.len() && got < BATCH {
                        let more = self.bufs.len().min(BATCH - got);
                        self.bufs
                            .extend(std::iter::repeat_with(|| vec![0; DATAGRAM_ROOM]).take(more));
                    }
                    return Ok(drained);
                }
            }
        }
        let mut bufs = std::mem::take(&mut self.bufs);
        let buf = bufs.first_mut().map(Vec::as_mut_slice).unwrap_or(&mut []);
        let got = self.try_recv(buf).map(|(n, from, local)| Received {
            data: Bytes::copy_from_slice(buf.get(..n).unwrap_or(&[])),
            from,
            local,
        });
        self.bufs = bufs;
        out.push(got?);
        self.counters.datagrams_in += 1;
        Ok(false)
    }

    /// Send the datagrams of `out` from index `from` on, in order, in batches where the system
    /// has them; never waits. Returns the index of the first datagram not sent: `out.len()`
    /// when all went, less when the socket buffer is full (send the rest once the socket is
    /// writable). A datagram the kernel refuses (an unreachable peer) is skipped: the engine's
    /// timers handle the silence.
    pub fn send_batch(&mut self, out: &Outbox, from: usize) -> usize {
        if let (Some(full), true) = (&mut self.full_fault, from < out.items.len()) {
            *full = !*full;
            if !*full {
                self.counters.send_full += 1;
                return from;
            }
        }
        let mut next = from;
        while let Some(first) = out.items.get(next) {
            #[cfg(target_os = "linux")]
            if self.mmsg {
                // One call sends datagrams that share their source address (the control
                // messages are the same for all of them): single datagrams, or runs to one
                // peer of one segment size under GSO.
                let run = out.items[next..]
                    .iter()
                    .take_while(|i| i.source == first.source)
                    .count();
                let items = &out.items[next..next + run];
                let mut call = Call::plan(items, self.gso);
                if self.gso_fault && call.segment.is_some() {
                    // Over 128 bytes in 1-byte segments: over the kernel's UDP_MAX_SEGMENTS
                    // (64, 128 in newer kernels), which it refuses rather than send. A shorter
                    // run goes unsegmented, so that the first segmented send is the refused one
                    // (a datagram and the ACK behind it make runs of some 64 bytes).
                    let run_bytes: usize = call
                        .entries
                        .first()
                        .and_then(|r| items.get(r.clone()))
                        .map_or(0, |run| run.iter().map(|i| i.len).sum());
                    call = if run_bytes > 128 {
                        Call {
                            segment: Some(1),
                            ..call
                        }
                    } else {
                        Call::plan(items, false)
                    };
                }
                let source = first.source.filter(|_| self.pktinfo);
                match sys::send_many(&self.socket, self.ipv6, source, out, items, &call) {
                    Ok(sent) if sent > 0 => {
                        // Entries sent: the datagrams up to the end of the last.
                        let datagrams = call
                            .entries
                            .iter()
                            .take(sent)
                            .next_back()
                            .map_or(0, |r| r.end);
                        self.counters.send_calls += 1;
                        self.counters.datagrams_out += datagrams as u64;
                        if call.segment.is_some() {
                            self.gso_worked = true;
                            self.counters.gso_sends += 1;
                            self.counters.gso_datagrams += datagrams as u64;
                        }
                        next += datagrams;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.counters.send_calls += 1;
                        self.counters.send_full += 1;
                        return next;
                    }
                    Err(e) if e.raw_os_error() == Some(nix::libc::ENOSYS) => {
                        self.mmsg = false;
                        continue;
                    }
                    // The kernel refused the segmentation (or the first try of it failed
                    // whatever the reason): these datagrams, and all later ones, go one per
                    // entry.
                    Err(e) if call.segment.is_some() && (!self.gso_worked || gso_refused(&e)) => {
                        self.counters.send_calls += 1;
                        self.counters.gso_refused += 1;
                        self.gso = false;
                        continue;
                    }
                    // The first datagram of the run failed: it goes alone below (which also
                    // retries it from the kernel's choice of source).
                    _ => self.counters.send_calls += 1,
                }
            }
            self.counters.send_calls += 1;
            match self.try_send(out.data(first), first.to, first.source) {
                Ok(_) => self.counters.datagrams_out += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.counters.send_full += 1;
                    return next;
                }
                Err(_) => {}
            }
            next += 1;
        }
        next
    }

    /// Whether datagrams come with their local address (and replies can choose theirs).
    pub fn pktinfo(&self) -> bool {
        self.pktinfo
    }

    /// One datagram, if one is waiting: its length, its source, and the local address it was
    /// sent to when the socket reports it (and it is one a reply can be sent from).
    fn try_recv(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        #[cfg(target_os = "linux")]
        if self.pktinfo {
            return sys::try_recv(&self.socket, buf);
        }
        let (n, from) = self.socket.read(|s| s.recv_from(buf))?;
        Ok((n, from, None))
    }

    /// Send one datagram now, from `source` when given (`WouldBlock` if the buffer is full).
    fn try_send(&self, data: &[u8], to: SocketAddr, source: Option<IpAddr>) -> io::Result<usize> {
        #[cfg(target_os = "linux")]
        if let (true, Some(source)) = (self.pktinfo, source) {
            return sys::try_send(&self.socket, self.ipv6, data, to, source)
                // The address may be gone from the host: the kernel's choice beats silence.
                .or_else(|e| match e.kind() {
                    io::ErrorKind::WouldBlock => Err(e),
                    _ => self.socket.write(|s| s.send_to(data, to)),
                });
        }
        #[cfg(not(target_os = "linux"))]
        let _ = source;
        self.socket.write(|s| s.send_to(data, to))
    }
}

/// Whether a failed `UDP_SEGMENT` send says the socket, route or device cannot segment (rather
/// than that the peer is unreachable): `EIO` (no checksum offload), `EINVAL` (a segment longer
/// than the route's MTU, or too many), `EMSGSIZE`, `ENOPROTOOPT`, `EOPNOTSUPP`.
#[cfg(target_os = "linux")]
fn gso_refused(e: &io::Error) -> bool {
    use nix::libc;
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

/// Ask the kernel for each datagram's local address when `socket` is bound to every address
/// (on a dual-stack socket for both families). Returns whether it is on; if not, the endpoint
/// works as before, answering from the kernel's choice.
pub fn enable_pktinfo(socket: &socket2::Socket, bind: SocketAddr, dual_stack: bool) -> bool {
    if !bind.ip().is_unspecified() {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        sys::enable(socket, bind.is_ipv6(), dual_stack)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (socket, dual_stack);
        false
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io::{self, IoSlice, IoSliceMut};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::fd::AsRawFd;

    use super::Sock;
    use bytes::Bytes;
    use nix::libc;
    use nix::sys::socket::{
        recvmmsg, recvmsg, sendmmsg, sendmsg, setsockopt, sockopt, ControlMessage,
        ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
    };

    use super::{Call, Outbox, Outgoing, Received};

    /// Room for a received datagram's control messages, as [`ControlBuffer`].
    const CONTROL_ROOM: usize = 128;

    // The headers `recvmmsg` and `sendmmsg` fill in are made for each call: they hold raw
    // pointers (the endpoint's future must be `Send`), and a reused receive header would keep
    // the control length the kernel shrank it to for an earlier datagram (nix does not restore
    // it), cutting later control messages.

    /// One `recvmmsg` into `bufs`; returns how many datagrams it appended to `out`.
    /// One `recvmmsg` into `bufs`: how many datagrams it read, and whether that emptied the
    /// socket (fewer than `bufs` had room for). Then the socket's readiness is cleared as a
    /// `WouldBlock` would clear it, which is safe: a datagram arriving after the call raises a
    /// new edge-triggered event, so the loop is woken for it.
    pub(super) fn recv_many(
        socket: &Sock,
        pktinfo: bool,
        bufs: &mut [Vec<u8>],
        out: &mut Vec<Received>,
    ) -> io::Result<(usize, bool)> {
        let control = pktinfo.then(|| Vec::with_capacity(CONTROL_ROOM));
        let room = bufs.len();
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(room, control);
        let mut read = None;
        let done = socket.read(|socket| {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
                .iter_mut()
                .map(|b| [IoSliceMut::new(b.as_mut_slice())])
                .collect();
            let msgs = recvmmsg(
                socket.as_raw_fd(),
                &mut headers,
                iovs.iter_mut(),
                MsgFlags::empty(),
                None,
            )?;
            let mut n = 0;
            for msg in msgs {
                n += 1;
                // A datagram without a source address cannot be answered: dropped.
                let Some(from) = msg.address.as_ref().and_then(std_addr) else {
                    continue;
                };
                let local = if pktinfo {
                    msg.cmsgs().ok().and_then(local_addr)
                } else {
                    None
                };
                let data = msg.iovs().next().unwrap_or(&[]);
                out.push(Received {
                    data: Bytes::copy_from_slice(data),
                    from,
                    local,
                });
            }
            if n < room {
                // Emptied: tell tokio so (clearing the readiness) without another call.
                read = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match (done, read) {
            (_, Some(n)) => Ok((n, true)),
            (done, None) => done.map(|n| (n, false)),
        }
    }

    /// One `sendmmsg` of `call`'s entries of `items`, all from `source` and of `call`'s
    /// segment size under GSO (the control messages are shared); returns how many entries
    /// were sent. `ipv6_socket` tells which control message the socket takes.
    pub(super) fn send_many(
        socket: &Sock,
        ipv6_socket: bool,
        source: Option<IpAddr>,
        out: &Outbox,
        items: &[Outgoing],
        call: &Call,
    ) -> io::Result<usize> {
        let iovs: Vec<[IoSlice<'_>; 1]> = call
            .entries
            .iter()
            .map(|r| [IoSlice::new(out.span(items.get(r.clone()).unwrap_or(&[])))])
            .collect();
        let addrs: Vec<Option<SockaddrStorage>> = call
            .entries
            .iter()
            .map(|r| items.get(r.start).map(|i| SockaddrStorage::from(i.to)))
            .collect();
        let v4;
        let v6;
        let mut cmsgs = Vec::with_capacity(2);
        let pktinfo = match (source, ipv6_socket) {
            (Some(IpAddr::V4(ip)), false) => {
                v4 = in_pktinfo(ip);
                cmsgs.push(ControlMessage::Ipv4PacketInfo(&v4));
                Some(false)
            }
            (Some(ip), true) => {
                v6 = in6_pktinfo(ip);
                cmsgs.push(ControlMessage::Ipv6PacketInfo(&v6));
                Some(true)
            }
            // An IPv6 source on an IPv4 socket cannot be one of ours.
            _ => None,
        };
        if let Some(segment) = &call.segment {
            cmsgs.push(ControlMessage::UdpGsoSegments(segment));
        }
        // The room is exactly the control messages: the kernel reads all of it as messages.
        let room = match (pktinfo, call.segment.is_some()) {
            (None, false) => None,
            (None, true) => Some(nix::cmsg_space!(u16)),
            (Some(false), false) => Some(nix::cmsg_space!(libc::in_pktinfo)),
            (Some(false), true) => Some(nix::cmsg_space!(libc::in_pktinfo, u16)),
            (Some(true), false) => Some(nix::cmsg_space!(libc::in6_pktinfo)),
            (Some(true), true) => Some(nix::cmsg_space!(libc::in6_pktinfo, u16)),
        };
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(call.entries.len(), room);
        socket.write(|socket| {
            let sent = sendmmsg(
                socket.as_raw_fd(),
                &mut headers,
                &iovs,
                &addrs,
                &cmsgs,
                MsgFlags::empty(),
            )?;
            Ok(sent.count())
        })
    }

    /// Whether the kernel segments `UDP_SEGMENT` sends (Linux 4.18 and later): it knows the
    /// socket option. Setting 0 leaves the socket's sends as they were (no default segment
    /// size).
    pub(super) fn gso_supported(socket: &std::net::UdpSocket) -> bool {
        setsockopt(socket, sockopt::UdpGsoSegment, &0).is_ok()
    }

    fn in_pktinfo(ip: Ipv4Addr) -> libc::in_pktinfo {
        libc::in_pktinfo {
            ipi_ifindex: 0,
            ipi_spec_dst: libc::in_addr {
                s_addr: u32::from_ne_bytes(ip.octets()),
            },
            ipi_addr: libc::in_addr { s_addr: 0 },
        }
    }

    /// On a dual-stack socket an IPv4 source is given v4-mapped.
    fn in6_pktinfo(ip: IpAddr) -> libc::in6_pktinfo {
        let ip = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        libc::in6_pktinfo {
            ipi6_addr: libc::in6_addr {
                s6_addr: ip.octets(),
            },
            ipi6_ifindex: 0,
        }
    }

    /// The local address a datagram was sent to, from its control messages, if a reply can
    /// leave from it.
    fn local_addr(cmsgs: impl Iterator<Item = ControlMessageOwned>) -> Option<IpAddr> {
        let mut v4 = None;
        let mut v6 = None;
        for cmsg in cmsgs {
            match cmsg {
                // ipi_spec_dst: the local address to answer from, even for a datagram
                // sent to a broadcast address (network byte order in memory).
                ControlMessageOwned::Ipv4PacketInfo(info) => {
                    v4 = Some(IpAddr::V4(Ipv4Addr::from(
                        info.ipi_spec_dst.s_addr.to_ne_bytes(),
                    )));
                }
                ControlMessageOwned::Ipv6PacketInfo(info) => {
                    v6 = Some(Ipv6Addr::from(info.ipi6_addr.s6_addr).to_canonical());
                }
                _ => {}
            }
        }
        v4.or(v6).filter(|ip| usable_source(*ip))
    }

    /// Room for one `in_pktinfo` and one `in6_pktinfo` control message (72 bytes on 64-bit
    /// Linux), aligned for `cmsghdr`. A datagram whose messages do not fit is still received,
    /// without a local address.
    #[repr(C, align(8))]
    struct ControlBuffer([u8; 128]);

    pub(super) fn enable(socket: &socket2::Socket, ipv6: bool, dual_stack: bool) -> bool {
        if ipv6 {
            // IPV6_PKTINFO also comes with IPv4 datagrams of a dual-stack socket, but carries
            // their header's destination (a broadcast address for LAN discovery); IP_PKTINFO
            // also gives the interface address to answer from.
            let v6 = setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true).is_ok();
            if dual_stack {
                let _ = setsockopt(socket, sockopt::Ipv4PacketInfo, &true);
            }
            v6
        } else {
            setsockopt(socket, sockopt::Ipv4PacketInfo, &true).is_ok()
        }
    }

    pub(super) fn try_recv(
        socket: &Sock,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        socket.read(|socket| {
            let mut control = ControlBuffer([0; 128]);
            let mut iov = [IoSliceMut::new(buf)];
            let msg = recvmsg::<SockaddrStorage>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut control.0),
                MsgFlags::empty(),
            )?;
            let from =
                msg.address.as_ref().and_then(std_addr).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "no source address")
                })?;
            // Err: the control messages were truncated; the datagram itself is fine.
            let local = msg.cmsgs().ok().and_then(local_addr);
            Ok((msg.bytes, from, local))
        })
    }

    /// Send from `source`; `ipv6_socket` tells which control message the socket takes.
    pub(super) fn try_send(
        socket: &Sock,
        ipv6_socket: bool,
        data: &[u8],
        to: SocketAddr,
        source: IpAddr,
    ) -> io::Result<usize> {
        let iov = [IoSlice::new(data)];
        let to = SockaddrStorage::from(to);
        let send = |cmsg: &[ControlMessage<'_>]| {
            socket.write(|socket| {
                Ok(sendmsg(
                    socket.as_raw_fd(),
                    &iov,
                    cmsg,
                    MsgFlags::empty(),
                    Some(&to),
                )?)
            })
        };
        match (ipv6_socket, source) {
            (false, IpAddr::V4(ip)) => send(&[ControlMessage::Ipv4PacketInfo(&in_pktinfo(ip))]),
            (true, ip) => send(&[ControlMessage::Ipv6PacketInfo(&in6_pktinfo(ip))]),
            // An IPv6 source on an IPv4 socket cannot be one of ours.
            (false, IpAddr::V6(_)) => send(&[]),
        }
    }

    /// Whether a reply can leave from `ip`: not from a broadcast or multicast group address a
    /// datagram was sent to (the kernel then chooses).
    fn usable_source(ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
            IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
        }
    }

    fn std_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
        match (addr.as_sockaddr_in(), addr.as_sockaddr_in6()) {
            (Some(v4), _) => Some(SocketAddr::V4((*v4).into())),
            (None, Some(v6)) => Some(SocketAddr::V6((*v6).into())),
            (None, None) => None,
        }
    }
}
