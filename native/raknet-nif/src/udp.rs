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

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use tokio::net::UdpSocket;

/// Datagrams per `recvmmsg` / `sendmmsg` call at most.
pub(crate) const BATCH: usize = 32;
/// Room for one datagram: RakNet's largest MTU is 1492, and a longer datagram is cut here
/// (the engine then rejects it as malformed).
const DATAGRAM_ROOM: usize = 2048;

/// A datagram received: its bytes, its source, and the local address it was sent to when the
/// socket reports it (and it is one a reply can be sent from).
pub(crate) struct Received {
    pub(crate) data: Bytes,
    pub(crate) from: SocketAddr,
    pub(crate) local: Option<IpAddr>,
}

/// Datagrams to send, in order, with their destination and source address (see
/// [`Udp::send_batch`]); up to [`BATCH`] of them.
#[derive(Default)]
pub(crate) struct Outbox {
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
    pub(crate) fn push(&mut self, data: &[u8], to: SocketAddr, source: Option<IpAddr>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.items.push(Outgoing {
            start,
            len: data.len(),
            to,
            source,
        });
    }

    pub(crate) fn is_full(&self) -> bool {
        self.items.len() >= BATCH
    }

    /// How many datagrams it holds.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.items.clear();
    }

    fn data(&self, item: &Outgoing) -> &[u8] {
        self.bytes
            .get(item.start..item.start + item.len)
            .unwrap_or(&[])
    }
}

/// Datagrams and system calls, both ways, since the socket was opened.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) datagrams_in: u64,
    pub(crate) recv_calls: u64,
    pub(crate) datagrams_out: u64,
    pub(crate) send_calls: u64,
}

/// The socket and whether it reports local addresses.
pub(crate) struct Udp {
    /// Shared with the endpoint thread's loop, which waits for readiness without holding the
    /// driver (see `driver::Shared`).
    socket: Arc<UdpSocket>,
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
    counters: Counters,
}

impl Udp {
    /// `batched`: use `recvmmsg` / `sendmmsg` where the system has them.
    pub(crate) fn new(socket: UdpSocket, pktinfo: bool, batched: bool) -> Self {
        let ipv6 = socket.local_addr().is_ok_and(|a| a.is_ipv6());
        #[cfg(not(target_os = "linux"))]
        let _ = batched;
        Self {
            socket: Arc::new(socket),
            pktinfo,
            ipv6,
            bufs: vec![vec![0; DATAGRAM_ROOM]],
            #[cfg(target_os = "linux")]
            mmsg: batched,
            counters: Counters::default(),
        }
    }

    pub(crate) fn counters(&self) -> Counters {
        self.counters
    }

    /// The socket, for waiting on its readiness.
    pub(crate) fn io(&self) -> Arc<UdpSocket> {
        self.socket.clone()
    }

    /// Receive what is waiting, up to [`BATCH`] datagrams in one call, appending them to
    /// `out`. `Ok(true)` when the call emptied the socket (a batch call that returned less
    /// than it had room for): there is no need to ask again until it is readable, and the
    /// call that would only have found nothing is saved. `WouldBlock` when nothing waits;
    /// another error (an ICMP error reported on the socket) consumes that error only.
    pub(crate) fn try_recv_batch(&mut self, out: &mut Vec<Received>) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        if self.mmsg {
            match sys::recv_many(&self.socket, self.pktinfo, &mut self.bufs, out) {
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSYS) => self.mmsg = false,
                done => {
                    self.counters.recv_calls += 1;
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
        self.counters.recv_calls += 1;
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
    pub(crate) fn send_batch(&mut self, out: &Outbox, from: usize) -> usize {
        let mut next = from;
        while let Some(first) = out.items.get(next) {
            #[cfg(target_os = "linux")]
            if self.mmsg {
                // One call sends a run of datagrams that share their source address (the
                // control message is the same for all of them).
                let run = out.items[next..]
                    .iter()
                    .take_while(|i| i.source == first.source)
                    .count();
                let items = &out.items[next..next + run];
                let source = first.source.filter(|_| self.pktinfo);
                match sys::send_many(&self.socket, self.ipv6, source, out, items) {
                    Ok(sent) if sent > 0 => {
                        self.counters.send_calls += 1;
                        self.counters.datagrams_out += sent as u64;
                        next += sent;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.counters.send_calls += 1;
                        return next;
                    }
                    Err(e) if e.raw_os_error() == Some(nix::libc::ENOSYS) => {
                        self.mmsg = false;
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return next,
                Err(_) => {}
            }
            next += 1;
        }
        next
    }

    /// Whether datagrams come with their local address (and replies can choose theirs).
    pub(crate) fn pktinfo(&self) -> bool {
        self.pktinfo
    }

    /// One datagram, if one is waiting: its length, its source, and the local address it was
    /// sent to when the socket reports it (and it is one a reply can be sent from).
    fn try_recv(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        #[cfg(target_os = "linux")]
        if self.pktinfo {
            return sys::try_recv(&self.socket, buf);
        }
        let (n, from) = self.socket.try_recv_from(buf)?;
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
                    _ => self.socket.try_send_to(data, to),
                });
        }
        #[cfg(not(target_os = "linux"))]
        let _ = source;
        self.socket.try_send_to(data, to)
    }
}

/// Ask the kernel for each datagram's local address when `socket` is bound to every address
/// (on a dual-stack socket for both families). Returns whether it is on; if not, the endpoint
/// works as before, answering from the kernel's choice.
pub(crate) fn enable_pktinfo(socket: &socket2::Socket, bind: SocketAddr, dual_stack: bool) -> bool {
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

    use bytes::Bytes;
    use nix::libc;
    use nix::sys::socket::{
        recvmmsg, recvmsg, sendmmsg, sendmsg, setsockopt, sockopt, ControlMessage,
        ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
    };
    use tokio::io::Interest;
    use tokio::net::UdpSocket;

    use super::{Outbox, Outgoing, Received, BATCH};

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
        socket: &UdpSocket,
        pktinfo: bool,
        bufs: &mut [Vec<u8>],
        out: &mut Vec<Received>,
    ) -> io::Result<(usize, bool)> {
        let control = pktinfo.then(|| Vec::with_capacity(CONTROL_ROOM));
        let room = bufs.len();
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(room, control);
        let mut read = None;
        let done = socket.try_io(Interest::READABLE, || {
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

    /// One `sendmmsg` of `items`, all from `source` (the control message is shared), or as
    /// many of them as one call takes; returns how many were sent. `ipv6_socket` tells which
    /// control message the socket takes.
    pub(super) fn send_many(
        socket: &UdpSocket,
        ipv6_socket: bool,
        source: Option<IpAddr>,
        out: &Outbox,
        items: &[Outgoing],
    ) -> io::Result<usize> {
        let items = items.get(..items.len().min(BATCH)).unwrap_or(&[]);
        let iovs: Vec<[IoSlice<'_>; 1]> =
            items.iter().map(|i| [IoSlice::new(out.data(i))]).collect();
        let addrs: Vec<Option<SockaddrStorage>> = items
            .iter()
            .map(|i| Some(SockaddrStorage::from(i.to)))
            .collect();
        let v4;
        let v6;
        let (cmsg, room) = match (source, ipv6_socket) {
            (Some(IpAddr::V4(ip)), false) => {
                v4 = in_pktinfo(ip);
                (
                    Some(ControlMessage::Ipv4PacketInfo(&v4)),
                    Some(nix::cmsg_space!(libc::in_pktinfo)),
                )
            }
            (Some(ip), true) => {
                v6 = in6_pktinfo(ip);
                (
                    Some(ControlMessage::Ipv6PacketInfo(&v6)),
                    Some(nix::cmsg_space!(libc::in6_pktinfo)),
                )
            }
            // An IPv6 source on an IPv4 socket cannot be one of ours.
            _ => (None, None),
        };
        // The room is exactly one control message: the kernel reads all of it as messages.
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(items.len(), room);
        let cmsgs: &[ControlMessage<'_>] = match &cmsg {
            Some(c) => std::slice::from_ref(c),
            None => &[],
        };
        socket.try_io(Interest::WRITABLE, || {
            let sent = sendmmsg(
                socket.as_raw_fd(),
                &mut headers,
                &iovs,
                &addrs,
                cmsgs,
                MsgFlags::empty(),
            )?;
            Ok(sent.count())
        })
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
        socket: &UdpSocket,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        socket.try_io(Interest::READABLE, || {
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
        socket: &UdpSocket,
        ipv6_socket: bool,
        data: &[u8],
        to: SocketAddr,
        source: IpAddr,
    ) -> io::Result<usize> {
        let iov = [IoSlice::new(data)];
        let to = SockaddrStorage::from(to);
        let send = |cmsg: &[ControlMessage<'_>]| {
            socket.try_io(Interest::WRITABLE, || {
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
