//! `raknet-relay`: a lossy, duplicating, reordering UDP relay on loopback, for benchmarks and
//! soak tests over real sockets.
//!
//! ```text
//! raknet-relay --target 127.0.0.1:19132 [--loss 0.05] [--dup 0.02] [--reorder 0.05] [--seed 1]
//! ```
//!
//! Binds `127.0.0.1:0`, prints `RELAY <port>` on stdout, and forwards datagrams between each
//! client and the target. On each path (one per client and direction) a datagram is dropped
//! with probability `--loss`; one that is not dropped is held back with probability
//! `--reorder` and sent right after the next datagram of its path (at most one is held per
//! path, and a held datagram is released after [`HOLD_MAX`] when no other comes), and it is
//! sent twice with probability `--dup`. Every decision comes from a SplitMix64 stream seeded
//! from `--seed` and the client's port, so a path's decisions do not depend on thread timing.
//!
//! Every client gets its own upstream socket, so the target sees one address per client. The
//! relay exits when its standard input closes, so a benchmark that spawns it as a port cannot
//! leak it. Each line read on standard input makes it print
//! `STATS dropped <n> duplicated <n> reordered <n> forwarded <n>` on stdout; at exit it prints
//! `DROPPED <n> FORWARDED <n>` on stderr.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, ErrorKind, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Bytes of socket buffer asked for on every relay socket (the kernel caps it at rmem_max).
const SOCKET_BUFFER: usize = 4 << 20;

/// How long a held-back datagram waits for the next one on its path before it is sent anyway:
/// the reordering stays a reordering, not a loss, on a path that went quiet.
const HOLD_MAX: Duration = Duration::from_millis(20);

/// Stack of each per-client thread: it only copies datagrams (1,000 clients, 1,000 threads).
const THREAD_STACK: usize = 256 << 10;

struct Args {
    target: SocketAddr,
    impair: Impairments,
    seed: u64,
}

/// The probabilities of the three faults, in [0, 1).
#[derive(Clone, Copy)]
struct Impairments {
    loss: f64,
    dup: f64,
    reorder: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut target = None;
    let mut impair = Impairments {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
    };
    let mut seed = 1;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--target" => target = Some(value.parse().map_err(|_| bad())?),
            "--loss" => impair.loss = value.parse().map_err(|_| bad())?,
            "--dup" => impair.dup = value.parse().map_err(|_| bad())?,
            "--reorder" => impair.reorder = value.parse().map_err(|_| bad())?,
            "--seed" => seed = value.parse().map_err(|_| bad())?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    for (name, p) in [
        ("--loss", impair.loss),
        ("--dup", impair.dup),
        ("--reorder", impair.reorder),
    ] {
        if !(0.0..1.0).contains(&p) {
            return Err(format!("{name} must be in [0, 1), got {p}"));
        }
    }
    let target: SocketAddr = target.ok_or("--target is required")?;
    if !target.ip().is_loopback() {
        return Err(format!("the relay only targets loopback, not {target}"));
    }
    Ok(Args {
        target,
        impair,
        seed,
    })
}

/// A seeded SplitMix64 stream: one per path.
struct Rng(u64);

impl Rng {
    /// True with probability `p` (in [0, 1)).
    fn chance(&mut self, p: f64) -> bool {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // `p` is in [0, 1): the product fits a u64.
        (z ^ (z >> 31)) < (p * u64::MAX as f64) as u64
    }
}

#[derive(Default)]
struct Counters {
    dropped: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    forwarded: AtomicU64,
}

impl Counters {
    fn line(&self) -> String {
        format!(
            "STATS dropped {} duplicated {} reordered {} forwarded {}",
            self.dropped.load(Ordering::Relaxed),
            self.duplicated.load(Ordering::Relaxed),
            self.reordered.load(Ordering::Relaxed),
            self.forwarded.load(Ordering::Relaxed)
        )
    }
}

/// One direction of one client's traffic: its fault decisions and the datagram it holds back.
struct Path {
    rng: Rng,
    held: Option<(Vec<u8>, Instant)>,
}

impl Path {
    fn new(seed: u64) -> Self {
        Self {
            rng: Rng(seed),
            held: None,
        }
    }

    /// Forward one datagram through the faults. Returns true when it is now held back.
    fn forward(
        &mut self,
        impair: Impairments,
        counters: &Counters,
        socket: &UdpSocket,
        data: &[u8],
        to: SocketAddr,
    ) -> bool {
        if self.rng.chance(impair.loss) {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if self.held.is_none() && self.rng.chance(impair.reorder) {
            counters.reordered.fetch_add(1, Ordering::Relaxed);
            self.held = Some((data.to_vec(), Instant::now()));
            return true;
        }
        send(counters, socket, data, to);
        if self.rng.chance(impair.dup) {
            counters.duplicated.fetch_add(1, Ordering::Relaxed);
            send(counters, socket, data, to);
        }
        if let Some((held, _)) = self.held.take() {
            send(counters, socket, &held, to);
        }
        false
    }

    /// Send the held datagram if it has waited [`HOLD_MAX`] by `now`.
    fn release_expired(
        &mut self,
        now: Instant,
        counters: &Counters,
        socket: &UdpSocket,
        to: SocketAddr,
    ) {
        if self
            .held
            .as_ref()
            .is_some_and(|(_, at)| now >= *at + HOLD_MAX)
        {
            if let Some((held, _)) = self.held.take() {
                send(counters, socket, &held, to);
            }
        }
    }

    /// How long a receive may block: until the held datagram is due, or for ever.
    fn timeout(&self, now: Instant) -> Option<Duration> {
        self.held.as_ref().map(|(_, at)| {
            (*at + HOLD_MAX)
                .saturating_duration_since(now)
                .max(Duration::from_millis(1))
        })
    }
}

fn send(counters: &Counters, socket: &UdpSocket, data: &[u8], to: SocketAddr) {
    if socket.send_to(data, to).is_ok() {
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

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// The target-to-client direction of one client: its own thread, blocking on its socket.
fn run_back(
    reader: UdpSocket,
    front: Arc<UdpSocket>,
    counters: Arc<Counters>,
    impair: Impairments,
    mut path: Path,
    client: SocketAddr,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        if reader
            .set_read_timeout(path.timeout(Instant::now()))
            .is_err()
        {
            return;
        }
        match reader.recv_from(&mut buf) {
            Ok((n, _)) => {
                path.forward(impair, &counters, &front, &buf[..n], client);
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
        path.release_expired(Instant::now(), &counters, &front, client);
    }
}

struct Upstream {
    socket: UdpSocket,
    path: Path,
}

fn run(args: Args) -> std::io::Result<()> {
    let front = Arc::new(bind_loopback()?);
    let counters = Arc::new(Counters::default());
    println!("RELAY {}", front.local_addr()?.port());
    std::io::stdout().flush()?;

    // Report on request, and exit when whoever started the relay goes away.
    {
        let counters = counters.clone();
        thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if line.is_err() {
                    break;
                }
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", counters.line());
                let _ = out.flush();
            }
            // Not eprintln!: it panics when stderr is a closed pipe (a port that merged it into
            // stdout and is gone), and a panic here would leave the relay running.
            let _ = writeln!(
                std::io::stderr(),
                "DROPPED {} FORWARDED {}",
                counters.dropped.load(Ordering::Relaxed),
                counters.forwarded.load(Ordering::Relaxed)
            );
            std::process::exit(0);
        });
    }

    let impair = args.impair;
    let mut upstream: HashMap<SocketAddr, Upstream> = HashMap::new();
    // Clients holding a datagram, oldest first: holds are HOLD_MAX long, so deadlines come in
    // this order and the front thread never scans every client.
    let mut holding: VecDeque<(Instant, SocketAddr)> = VecDeque::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        let now = Instant::now();
        while let Some(&(at, client)) = holding.front() {
            if now < at + HOLD_MAX {
                break;
            }
            holding.pop_front();
            if let Some(up) = upstream.get_mut(&client) {
                up.path
                    .release_expired(now, &counters, &up.socket, args.target);
            }
        }
        let timeout = holding
            .front()
            .map(|(at, _)| (*at + HOLD_MAX).saturating_duration_since(now))
            .map(|d| d.max(Duration::from_millis(1)));
        front.set_read_timeout(timeout)?;
        let (n, client) = match front.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        };
        let up = match upstream.entry(client) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let socket = bind_loopback()?;
                let reader = socket.try_clone()?;
                let (front, counters) = (front.clone(), counters.clone());
                let back = Path::new(args.seed ^ u64::from(client.port()));
                thread::Builder::new()
                    .stack_size(THREAD_STACK)
                    .spawn(move || run_back(reader, front, counters, impair, back, client))?;
                e.insert(Upstream {
                    socket,
                    path: Path::new(args.seed ^ u64::from(client.port()).rotate_left(32) ^ 0x5eed),
                })
            }
        };
        if up
            .path
            .forward(impair, &counters, &up.socket, &buf[..n], args.target)
        {
            holding.push_back((Instant::now(), client));
        }
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
