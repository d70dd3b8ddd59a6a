//! The physical limit on this machine, for comparison with the RakNet numbers:
//!
//! 1. raw loopback UDP datagrams/s through one socket (a sender thread blasting 64-byte
//!    datagrams at a receiver thread), and
//! 2. raw UDP round trip (a blocking echo thread) at 1,000 pings per second: p50/p99.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn throughput() -> f64 {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let addr = rx.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        thread::spawn(move || {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let payload = [0x86u8; 64];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    let _ = tx.send_to(&payload, addr);
                }
            }
        })
    };
    let mut buf = [0u8; 2048];
    // Warm up, then count for two seconds.
    let warm = Instant::now() + Duration::from_millis(200);
    while Instant::now() < warm {
        let _ = rx.recv_from(&mut buf);
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(2) {
        if rx.recv_from(&mut buf).is_ok() {
            n += 1;
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    rate
}

fn latency() -> (f64, f64) {
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    echo.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let addr = echo.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = echo.recv_from(&mut buf) {
                    let _ = echo.send_to(&buf[..n], from);
                }
            }
        })
    };
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut rtts = Vec::with_capacity(3000);
    let mut buf = [0u8; 2048];
    let mut next = Instant::now();
    for i in 0..3000u32 {
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        next += Duration::from_millis(1);
        let t = Instant::now();
        client.send_to(&i.to_be_bytes(), addr).unwrap();
        if client.recv_from(&mut buf).is_ok() {
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    rtts.sort_by(f64::total_cmp);
    (rtts[rtts.len() / 2], rtts[rtts.len() * 99 / 100])
}

fn main() {
    let mut rates: Vec<f64> = (0..3).map(|_| throughput()).collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "raw UDP, one socket, 64 B datagrams: median {:.0} datagrams/s received (3 runs x 2 s)",
        rates[1]
    );
    let (p50, p99) = latency();
    println!("raw UDP round trip at 1,000/s: p50 {p50:.1} µs, p99 {p99:.1} µs (3,000 pings)");
}
