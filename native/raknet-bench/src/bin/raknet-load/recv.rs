//! Reading a socket: every datagram waiting on it, with the time the kernel received it.

use std::net::SocketAddr;
#[cfg(target_os = "linux")]
use std::time::Duration;
use std::time::Instant;

use mio::net::UdpSocket;

/// Room for the datagrams one receive call takes.
pub(crate) struct RecvBufs(Vec<Vec<u8>>);

impl Default for RecvBufs {
    fn default() -> Self {
        Self(vec![vec![0; 2048]; RECV_BATCH])
    }
}

/// Datagrams one receive call takes at most.
pub(crate) const RECV_BATCH: usize = 8;

/// Hand `f` every datagram waiting on `socket`. On Linux one `recvmmsg` per wake-up: the
/// socket is registered edge-triggered, and a call that comes back short emptied it (a
/// datagram arriving later raises a new event), so no second call is made to find nothing.
/// Load-tester CPU is what the server cannot use on a small machine.
#[cfg(target_os = "linux")]
pub(crate) fn recv_all(
    socket: &UdpSocket,
    bufs: &mut RecvBufs,
    mut f: impl FnMut(&[u8], SocketAddr, Option<Instant>),
) {
    use nix::sys::socket::{
        recvmmsg, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
    };
    use nix::sys::time::TimeSpec;
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;
    let room = bufs.0.len();
    let mut headers =
        MultiHeaders::<SockaddrStorage>::preallocate(room, Some(nix::cmsg_space!(TimeSpec)));
    // The kernel stamps datagrams with the real-time clock: an arrival is turned into an
    // `Instant` by its age, read against both clocks at once.
    let (now, wall) = (Instant::now(), std::time::SystemTime::now());
    let wall = wall
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut errors = 0;
    loop {
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
            .0
            .iter_mut()
            .map(|b| [IoSliceMut::new(b.as_mut_slice())])
            .collect();
        let msgs = match recvmmsg(
            socket.as_raw_fd(),
            &mut headers,
            iovs.iter_mut(),
            MsgFlags::empty(),
            None,
        ) {
            Ok(msgs) => msgs,
            // An error the socket reported once (a connected socket's ICMP "port
            // unreachable": the server was not up yet) may sit in front of datagrams: read
            // on, a few times at most.
            Err(e) if e != nix::errno::Errno::EAGAIN && errors < 3 => {
                errors += 1;
                continue;
            }
            // Emptied.
            Err(_) => return,
        };
        let mut n = 0;
        for msg in msgs {
            n += 1;
            let from = msg.address.as_ref().and_then(|a| {
                match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
                    (Some(v4), _) => Some(SocketAddr::V4((*v4).into())),
                    (None, Some(v6)) => Some(SocketAddr::V6((*v6).into())),
                    (None, None) => None,
                }
            });
            let arrived = msg.cmsgs().ok().and_then(|mut c| {
                c.find_map(|c| match c {
                    ControlMessageOwned::ScmTimestampns(ts) => Some(Duration::from(ts)),
                    _ => None,
                })
            });
            let arrived = arrived.and_then(|at| now.checked_sub(wall.saturating_sub(at)));
            if let (Some(from), Some(data)) = (from, msg.iovs().next()) {
                f(data, from, arrived);
            }
        }
        if n < room {
            return;
        }
    }
}

/// Elsewhere: one call per datagram, until the socket says it is empty.
#[cfg(not(target_os = "linux"))]
pub(crate) fn recv_all(
    socket: &UdpSocket,
    bufs: &mut RecvBufs,
    mut f: impl FnMut(&[u8], SocketAddr, Option<Instant>),
) {
    let Some(buf) = bufs.0.first_mut() else {
        return;
    };
    let mut errors = 0;
    loop {
        match socket.recv_from(buf) {
            Ok((n, from)) => f(buf.get(..n).unwrap_or(&[]), from, None),
            // See the Linux version: an error reported once may sit in front of datagrams.
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && errors < 3 => errors += 1,
            Err(_) => return,
        }
    }
}
