//! `raknet-relay`: a lossy UDP relay on loopback, for benchmarks over real sockets.
//!
//! ```text
//! raknet-relay --target 127.0.0.1:19132 [--loss 0.05] [--seed 1]
//! ```
//!
//! Binds `127.0.0.1:0`, prints `RELAY <port>` on stdout, and forwards datagrams between each
//! client and the target, dropping each one (in either direction) with probability `--loss`.
//! Every client gets its own upstream socket, so the target sees one address per client. The
//! relay exits when its standard input closes, so a benchmark that spawns it as a port cannot
//! leak it. At exit it prints `DROPPED <n> FORWARDED <n>` on stderr.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

/// Bytes of socket buffer asked for on every relay socket (the kernel caps it at rmem_max).
const SOCKET_BUFFER: usize = 4 << 20;

struct Args {
    target: SocketAddr,
    loss: f64,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut target = None;
    let (mut loss, mut seed) = (0.0, 1);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--target" => target = Some(value.parse().map_err(|_| bad())?),
            "--loss" => loss = value.parse().map_err(|_| bad())?,
            "--seed" => seed = value.parse().map_err(|_| bad())?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if !(0.0..1.0).contains(&loss) {
        return Err(format!("--loss must be in [0, 1), got {loss}"));
    }
    let target: SocketAddr = target.ok_or("--target is required")?;
    if !target.ip().is_loopback() {
        return Err(format!("the relay only targets loopback, not {target}"));
    }
    Ok(Args { target, loss, seed })
}

/// A seeded SplitMix64 deciding which datagrams to drop.
struct Dropper {
    state: u64,
    threshold: u64,
}

impl Dropper {
    fn new(seed: u64, loss: f64) -> Self {
        Self {
            state: seed,
            // `loss` is in [0, 1): the product fits a u64.
            threshold: (loss * u64::MAX as f64) as u64,
        }
    }

    fn drop_next(&mut self) -> bool {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) < self.threshold
    }
}

#[derive(Default)]
struct Counters {
    dropped: AtomicU64,
    forwarded: AtomicU64,
}

/// Forward one datagram unless the dropper says otherwise.
fn forward(
    dropper: &mut Dropper,
    counters: &Counters,
    socket: &UdpSocket,
    data: &[u8],
    to: SocketAddr,
) {
    if dropper.drop_next() {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
    } else if socket.send_to(data, to).is_ok() {
        counters.forwarded.fetch_add(1, Ordering::Relaxed);
    }
}

fn bind_loopback() -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    // Best effort: a small buffer only means the relay itself drops under bursts.
    let sock = socket2::SockRef::from(&socket);
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    Ok(socket)
}

fn run(args: Args) -> std::io::Result<()> {
    let front = Arc::new(bind_loopback()?);
    let counters = Arc::new(Counters::default());
    println!("RELAY {}", front.local_addr()?.port());
    std::io::stdout().flush()?;

    // Exit when whoever started the relay goes away.
    {
        let counters = counters.clone();
        thread::spawn(move || {
            let mut sink = [0u8; 64];
            while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
            eprintln!(
                "DROPPED {} FORWARDED {}",
                counters.dropped.load(Ordering::Relaxed),
                counters.forwarded.load(Ordering::Relaxed)
            );
            std::process::exit(0);
        });
    }

    let mut upstream: HashMap<SocketAddr, UdpSocket> = HashMap::new();
    let mut dropper = Dropper::new(args.seed, args.loss);
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, client) = front.recv_from(&mut buf)?;
        let back = match upstream.entry(client) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let back = bind_loopback()?;
                let reader = back.try_clone()?;
                let (front, counters) = (front.clone(), counters.clone());
                let mut back_dropper =
                    Dropper::new(args.seed ^ u64::from(client.port()), args.loss);
                thread::spawn(move || {
                    let mut buf = vec![0u8; 65_536];
                    while let Ok((n, _)) = reader.recv_from(&mut buf) {
                        forward(&mut back_dropper, &counters, &front, &buf[..n], client);
                    }
                });
                e.insert(back)
            }
        };
        forward(&mut dropper, &counters, back, &buf[..n], args.target);
    }
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("raknet-relay: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("raknet-relay: {e}");
        std::process::exit(1);
    }
}
