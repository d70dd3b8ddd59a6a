//! The socket layer over real loopback sockets: batches and `UDP_SEGMENT` runs arrive as the
//! datagrams they were, in order, with each one's size; every path (batched or one call per
//! datagram, segmentation on, off or refused by the kernel) gives the same datagrams.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use raknet_udp::{Gso, Outbox, Received, Sock, Udp, BATCH};

fn socket(ip: &str) -> UdpSocket {
    let s = UdpSocket::bind((ip, 0)).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Datagrams of these sizes, each filled with its index: runs of equal sizes (what
/// segmentation joins), a shorter one ending a run, and single ones.
fn sizes() -> Vec<usize> {
    let mut v = vec![1_000; 10];
    v.push(400);
    v.extend([1_464; 8]);
    v.extend([17, 1_464, 1_464, 3, 900, 900]);
    v
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    vec![i as u8; len]
}

/// Send every datagram of `sizes` to `to` through a `Udp` in `mode`; returns its counters.
fn send_all(udp: &mut Udp, to: SocketAddr, sizes: &[usize]) -> raknet_udp::Counters {
    let mut out = Outbox::default();
    for chunk in sizes.chunks(BATCH).enumerate() {
        let (c, lens) = chunk;
        out.clear();
        for (j, len) in lens.iter().enumerate() {
            out.push(&payload(c * BATCH + j, *len), to, None);
        }
        let mut from = 0;
        while from < out.len() {
            from = udp.send_batch(&out, from);
        }
    }
    udp.counters()
}

/// Read `n` datagrams from `udp`, waiting for readiness (bounded).
async fn recv_n(udp: &mut Udp, n: usize) -> Vec<Received> {
    let mut got = Vec::new();
    let io = udp.io();
    while got.len() < n {
        tokio::time::timeout(Duration::from_secs(5), io.readable())
            .await
            .expect("datagrams arrive")
            .unwrap();
        while got.len() < n {
            match udp.try_recv_batch(&mut got) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    got
}

fn check(got: &[Received], sizes: &[usize], from: SocketAddr) {
    assert_eq!(got.len(), sizes.len());
    for (i, (r, len)) in got.iter().zip(sizes).enumerate() {
        assert_eq!(r.from, from, "datagram {i}");
        assert_eq!(r.data.as_ref(), payload(i, *len).as_slice(), "datagram {i}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_path_delivers_the_same_datagrams() {
    for (batched, gso) in [
        (true, Gso::On),
        (true, Gso::Off),
        (true, Gso::RefuseFirst),
        (false, Gso::Off),
    ] {
        let (a, b) = (socket("127.0.0.1"), socket("127.0.0.1"));
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut sender = Udp::new(Sock::new(a).unwrap(), false, batched, gso);
        let mut receiver = Udp::new(Sock::new(b).unwrap(), false, batched, Gso::Off);
        let sizes = sizes();
        let counters = send_all(&mut sender, b_addr, &sizes);
        let got = recv_n(&mut receiver, sizes.len()).await;
        check(&got, &sizes, a_addr);
        assert_eq!(
            counters.datagrams_out,
            sizes.len() as u64,
            "{batched} {gso:?}"
        );
        let received = receiver.counters();
        assert_eq!(received.datagrams_in, sizes.len() as u64);
        if cfg!(target_os = "linux") && batched {
            // Batches: fewer calls than datagrams, both ways.
            assert!(counters.send_calls < counters.datagrams_out, "{gso:?}");
            assert!(received.recv_calls < received.datagrams_in, "{gso:?}");
        }
        match gso {
            Gso::On if cfg!(target_os = "linux") => {
                // The runs of equal sizes went as segmented sends (where the kernel has it).
                if counters.gso_refused == 0 {
                    assert!(counters.gso_sends > 0 && counters.gso_datagrams >= 19);
                }
            }
            Gso::RefuseFirst => assert!(counters.gso_refused <= 1),
            _ => assert_eq!(counters.gso_sends, 0),
        }
    }
}

/// Over IPv6 too, where the host has it.
#[tokio::test(flavor = "current_thread")]
async fn ipv6_loopback() {
    let (Ok(a), Ok(b)) = (UdpSocket::bind("[::1]:0"), UdpSocket::bind("[::1]:0")) else {
        return;
    };
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let mut sender = Udp::new(Sock::new(a).unwrap(), false, true, Gso::On);
    let mut receiver = Udp::new(Sock::new(b).unwrap(), false, true, Gso::Off);
    let sizes = sizes();
    send_all(&mut sender, b_addr, &sizes);
    let got = recv_n(&mut receiver, sizes.len()).await;
    check(&got, &sizes, a_addr);
}

/// A socket bound to every address learns the local address each datagram was sent to, and
/// a reply sent from it leaves from that address (Linux).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn replies_leave_from_the_address_the_peer_used() {
    let any = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    let bind: SocketAddr = "0.0.0.0:0".parse().unwrap();
    any.bind(&bind.into()).unwrap();
    any.set_nonblocking(true).unwrap();
    assert!(raknet_udp::enable_pktinfo(&any, bind, false));
    let port = any.local_addr().unwrap().as_socket().unwrap().port();
    let mut server = Udp::new(Sock::new(any.into()).unwrap(), true, true, Gso::Off);
    assert!(server.pktinfo());
    let client = socket("127.0.0.1");
    let to: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
    client.send_to(b"hello", to).unwrap();
    let got = recv_n(&mut server, 1).await;
    assert_eq!(got[0].local, Some("127.0.0.2".parse().unwrap()));
    let mut out = Outbox::default();
    out.push(b"reply", got[0].from, got[0].local);
    assert_eq!(server.send_batch(&out, 0), 1);
    client.set_nonblocking(false).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = client.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"reply"[..], to));
}
