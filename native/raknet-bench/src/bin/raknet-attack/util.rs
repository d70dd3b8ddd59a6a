//! Traffic counting and small helpers

use crate::*;

/// Packets and bytes an attack sent and received back.
#[derive(Default)]
pub(crate) struct Traffic {
    pub(crate) sent_pkts: Cell<u64>,
    pub(crate) sent_bytes: Cell<u64>,
    pub(crate) recv_pkts: Cell<u64>,
    pub(crate) recv_bytes: Cell<u64>,
    /// Sends the kernel refused (socket buffer full and the like).
    pub(crate) send_errors: Cell<u64>,
    pub(crate) first_send: Cell<Option<Instant>>,
    pub(crate) last_send: Cell<Option<Instant>>,
}

impl Traffic {
    pub(crate) fn sent(&self, n: usize) {
        self.sent_pkts.set(self.sent_pkts.get() + 1);
        self.sent_bytes.set(self.sent_bytes.get() + n as u64);
        let now = Instant::now();
        if self.first_send.get().is_none() {
            self.first_send.set(Some(now));
        }
        self.last_send.set(Some(now));
    }

    /// Packets per second while sending (first to last send).
    pub(crate) fn rate(&self) -> f64 {
        match (self.first_send.get(), self.last_send.get()) {
            (Some(a), Some(b)) if b > a => self.sent_pkts.get() as f64 / (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }

    pub(crate) fn received(&self, n: usize) {
        self.recv_pkts.set(self.recv_pkts.get() + 1);
        self.recv_bytes.set(self.recv_bytes.get() + n as u64);
    }
}

pub(crate) fn encode<E: Encode>(m: &E) -> Vec<u8> {
    let mut v = Vec::with_capacity(m.encoded_len());
    m.encode(&mut v);
    v
}

/// Milliseconds since the tool started: the "time" field of handshake messages.
pub(crate) fn now_ms(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// xorshift64*: GUIDs and garbage; no cryptographic need.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

pub(crate) fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    t | 1
}

/// The i-th stand-in host: 127.1.0.1, 127.1.0.2, ... (250 per third octet).
pub(crate) fn source_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        127,
        1 + (i / 62_500) as u8,
        ((i / 250) % 250) as u8,
        (i % 250 + 1) as u8,
    )
}

thread_local! {
    /// Attack sockets stay open until the attack's recovery has been measured: a closed
    /// socket would make the kernel answer the server with ICMP port-unreachable, which a
    /// spoofed source that absorbs replies silently never does.
    static HELD: std::cell::RefCell<Vec<Rc<UdpSocket>>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) fn hold(sock: &Rc<UdpSocket>) {
    HELD.with(|h| h.borrow_mut().push(sock.clone()));
}

pub(crate) fn release_held() {
    HELD.with(|h| h.borrow_mut().clear());
}

/// `n` sockets, the `i`th bound to `ip(i)` on a free port, held until the row ends.
pub(crate) async fn bind_pool(
    n: usize,
    ip: impl Fn(usize) -> Ipv4Addr,
) -> Result<Vec<Rc<UdpSocket>>, String> {
    let mut pool = Vec::with_capacity(n);
    for i in 0..n {
        let ip = ip(i);
        let s = UdpSocket::bind((ip, 0))
            .await
            .map_err(|e| format!("bind {ip}: {e} (raise `ulimit -n`?)"))?;
        let s = Rc::new(s);
        hold(&s);
        pool.push(s);
    }
    // Let the reactor see the new sockets writable before the first try_send_to.
    tokio::time::sleep(Duration::from_millis(2)).await;
    Ok(pool)
}

/// Count everything the server sends to `sock` until `until`.
pub(crate) async fn drain(sock: Rc<UdpSocket>, traffic: Rc<Traffic>, until: Instant) {
    let mut buf = vec![0u8; 2048];
    loop {
        tokio::select! {
            r = sock.readable() => {
                if r.is_err() {
                    return;
                }
                for _ in 0..1024 {
                    match sock.try_recv_from(&mut buf) {
                        Ok((n, _)) => traffic.received(n),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(_) => continue,
                    }
                }
            }
            () = sleep_until(until.into()) => return,
        }
    }
}

pub(crate) fn spawn_drains(pool: &[Rc<UdpSocket>], traffic: &Rc<Traffic>, until: Instant) {
    for s in pool {
        tokio::task::spawn_local(drain(s.clone(), traffic.clone(), until));
    }
}

/// How many of `max` sends at `rate` per second since `start` are due by `now` (the first at
/// once).
pub(crate) fn due(start: Instant, now: Instant, rate: f64, max: u64) -> u64 {
    (((now - start).as_secs_f64() * rate) as u64 + 1).min(max)
}

/// Call `send(k)` for k = 0, 1, ... at `rate` per second until `end` or `max` calls.
pub(crate) async fn paced(rate: f64, end: Instant, max: u64, mut send: impl FnMut(u64)) -> u64 {
    let start = Instant::now();
    let mut k = 0u64;
    while k < max {
        let now = Instant::now();
        if now >= end {
            break;
        }
        while k < due(start, now, rate, max) {
            send(k);
            k += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    k
}

pub(crate) fn try_send(sock: &UdpSocket, to: SocketAddr, pkt: &[u8], traffic: &Traffic) {
    if sock.try_send_to(pkt, to).is_ok() {
        traffic.sent(pkt.len());
    } else {
        traffic.send_errors.set(traffic.send_errors.get() + 1);
    }
}

// ---------------------------------------------------------------------------------------
// Server process: pid, CPU, RSS, socket drops

/// (inode, drops) of the UDP socket bound to `port` on IPv4, from /proc/net/udp.
pub(crate) fn udp_socket(port: u16) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/net/udp").ok()?;
    let want = format!(":{port:04X}");
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local = f.get(1)?;
        if !local.ends_with(&want) || f.get(2) != Some(&"00000000:0000") {
            return None;
        }
        Some((f.get(9)?.parse().ok()?, f.last()?.parse().ok()?))
    })
}

/// The process holding the socket bound to `port` (scans /proc/*/fd).
pub(crate) fn find_server_pid(port: u16) -> Option<u32> {
    let (inode, _) = udp_socket(port)?;
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == target) {
                return Some(pid);
            }
        }
    }
    None
}

pub(crate) fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
