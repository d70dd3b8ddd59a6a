//! The physical limit on this machine, for comparison with the RakNet numbers:
//!
//! 1. raw loopback UDP datagrams/s through one socket (a sender thread blasting 64-byte
//!    datagrams at a receiver thread), and the CPU time a datagram costs there (both threads,
//!    sending and receiving, per datagram received; Linux), and
//! 2. raw UDP round trip (a blocking echo thread) at 1,000 pings per second: p50/p99, with a
//!    client that sleeps between pings (as `raknet-load` does: the reference for RakNet's
//!    echo round trip, whose every hop wakes a sleeping thread) and one that spins (no
//!    wake-up on the client side; on 2 cores it also competes with the echo thread).

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// One 2-second run: datagrams received per second, the process's CPU time per datagram
/// received (µs; `None` where /proc is missing) and the share of sent datagrams received.
fn throughput() -> (f64, Option<f64>, f64) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let addr = rx.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let (stop, sent) = (stop.clone(), sent.clone());
        thread::spawn(move || {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let payload = [0x86u8; 64];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    let _ = tx.send_to(&payload, addr);
                }
                sent.fetch_add(256, Ordering::Relaxed);
            }
        })
    };
    let mut buf = [0u8; 2048];
    // Warm up, then count for two seconds.
    let warm = Instant::now() + Duration::from_millis(200);
    while Instant::now() < warm {
        let _ = rx.recv_from(&mut buf);
    }
    let (start, cpu0, sent0) = (Instant::now(), cpu_seconds(), sent.load(Ordering::Relaxed));
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(2) {
        if rx.recv_from(&mut buf).is_ok() {
            n += 1;
        }
    }
    let (wall, cpu1, sent1) = (
        start.elapsed().as_secs_f64(),
        cpu_seconds(),
        sent.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    let cpu_us = match (cpu0, cpu1) {
        (Some(a), Some(b)) if n > 0 => Some((b - a) * 1e6 / n as f64),
        _ => None,
    };
    let delivered = n as f64 / (sent1 - sent0).max(1) as f64;
    (n as f64 / wall, cpu_us, delivered)
}

/// This process's CPU time (user + system, all threads) in seconds (clock ticks of 10 ms:
/// under 1 % of a 2-second run on two busy threads).
fn cpu_seconds() -> Option<f64> {
    raknet_bench::cpu_ticks(std::process::id()).map(|t| t as f64 / raknet_bench::USER_HZ)
}

/// How the latency client waits for its next ping.
#[derive(Clone, Copy)]
enum Pacing {
    Sleep,
    Spin,
}

fn latency(pacing: Pacing) -> (f64, f64) {
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
        match pacing {
            Pacing::Sleep => thread::sleep(next.saturating_duration_since(Instant::now())),
            Pacing::Spin => {
                while Instant::now() < next {
                    std::hint::spin_loop();
                }
            }
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
    let mut runs: Vec<(f64, Option<f64>, f64)> = (0..3).map(|_| throughput()).collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (rate, _, delivered) = runs[1];
    println!(
        "raw UDP, one socket, 64 B datagrams: median {rate:.0} datagrams/s received (3 runs x 2 s; {:.0} % of those sent)",
        delivered * 100.0
    );
    let mut cpu: Vec<f64> = runs.iter().filter_map(|r| r.1).collect();
    cpu.sort_by(f64::total_cmp);
    if let Some(us) = cpu.get(cpu.len() / 2) {
        println!(
            "raw UDP CPU per datagram received (sender and receiver threads): median {us:.2} µs"
        );
    }
    let (p50, p99) = latency(Pacing::Sleep);
    println!(
        "raw UDP round trip at 1,000/s, client sleeping between pings: p50 {p50:.1} µs, p99 {p99:.1} µs (3,000 pings)"
    );
    let (p50, p99) = latency(Pacing::Spin);
    println!(
        "raw UDP round trip at 1,000/s, client spinning between pings: p50 {p50:.1} µs, p99 {p99:.1} µs (3,000 pings)"
    );
}
