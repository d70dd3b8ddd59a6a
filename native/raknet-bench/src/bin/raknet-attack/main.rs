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
    SignalFlood,
    SignalSlow,
}

const ALL_ATTACKS: [Attack; 21] = [
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
    Attack::SignalFlood,
    Attack::SignalSlow,
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
            Attack::SignalFlood => "signal-flood",
            Attack::SignalSlow => "signal-slow",
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

mod attacks;
mod legit;
mod rawconn;
mod report;
mod signaling;
mod util;

use attacks::*;
use legit::*;
use rawconn::*;
use report::*;
use signaling::*;
use util::*;

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
