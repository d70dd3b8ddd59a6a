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

use std::io;
use std::net::{IpAddr, SocketAddr};

use tokio::net::UdpSocket;

/// The socket and whether it reports local addresses.
pub(crate) struct Udp {
    socket: UdpSocket,
    /// `IP_PKTINFO` / `IPV6_RECVPKTINFO` is on: receive and send with control messages.
    pktinfo: bool,
    /// An IPv6 socket (perhaps dual-stack) takes `IPV6_PKTINFO`, an IPv4 one `IP_PKTINFO`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    ipv6: bool,
}

impl Udp {
    pub(crate) fn new(socket: UdpSocket, pktinfo: bool) -> Self {
        let ipv6 = socket.local_addr().is_ok_and(|a| a.is_ipv6());
        Self {
            socket,
            pktinfo,
            ipv6,
        }
    }

    /// Whether datagrams come with their local address (and replies can choose theirs).
    pub(crate) fn pktinfo(&self) -> bool {
        self.pktinfo
    }

    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.socket.readable().await
    }

    /// One datagram, if one is waiting: its length, its source, and the local address it was
    /// sent to when the socket reports it (and it is one a reply can be sent from).
    pub(crate) fn try_recv(
        &self,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        #[cfg(target_os = "linux")]
        if self.pktinfo {
            return sys::try_recv(&self.socket, buf);
        }
        let (n, from) = self.socket.try_recv_from(buf)?;
        Ok((n, from, None))
    }

    /// Send one datagram now, from `source` when given (`WouldBlock` if the buffer is full).
    pub(crate) fn try_send(
        &self,
        data: &[u8],
        to: SocketAddr,
        source: Option<IpAddr>,
    ) -> io::Result<usize> {
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

    /// Send one datagram, waiting for room in the socket buffer.
    pub(crate) async fn send(
        &self,
        data: &[u8],
        to: SocketAddr,
        source: Option<IpAddr>,
    ) -> io::Result<usize> {
        loop {
            match self.try_send(data, to, source) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.socket.writable().await?,
                done => return done,
            }
        }
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

    use nix::libc;
    use nix::sys::socket::{
        recvmsg, sendmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
        SockaddrStorage,
    };
    use tokio::io::Interest;
    use tokio::net::UdpSocket;

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
            let mut v4 = None;
            let mut v6 = None;
            // Err: the control messages were truncated; the datagram itself is fine.
            for cmsg in msg.cmsgs().into_iter().flatten() {
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
            let local = v4.or(v6).filter(|ip| usable_source(*ip));
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
            (false, IpAddr::V4(ip)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from_ne_bytes(ip.octets()),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                send(&[ControlMessage::Ipv4PacketInfo(&info)])
            }
            (true, ip) => {
                // On a dual-stack socket an IPv4 source is given v4-mapped.
                let ip = match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: ip.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                send(&[ControlMessage::Ipv6PacketInfo(&info)])
            }
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
