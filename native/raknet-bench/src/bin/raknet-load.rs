//! `raknet-load`: open N RakNet connections to any server, send at a rate, report.
//!
//! Every simulated player has its own UDP socket and client engine; all of them run as tasks
//! on one thread. Each message carries its send time, so when the server echoes (as
//! `make server` does) the round trip is measured. Progress is printed every second and a
//! summary at the end.
//!
//! ```text
//! raknet-load [--host 127.0.0.1] [--port 19132] [--connections 100] [--rate 20] [--size 64]
//!             [--reliability reliable_ordered] [--channel 0] [--duration 10] [--protocol 11]
//! ```

use std::cell::RefCell;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{Endpoint, EndpointConfig, Event, Priority, Reliability, SendOptions};
use tokio::net::UdpSocket;

struct Args {
    server: SocketAddr,
    connections: usize,
    rate: f64,
    size: usize,
    reliability: Reliability,
    channel: u8,
    duration: Duration,
    protocol: u8,
}

fn parse_args() -> Result<Args, String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = 19132u16;
    let mut a = Args {
        server: "127.0.0.1:19132".parse().unwrap_or_else(|_| unreachable!()),
        connections: 100,
        rate: 20.0,
        size: 64,
        reliability: Reliability::ReliableOrdered,
        channel: 0,
        duration: Duration::from_secs(10),
        protocol: 11,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |_: std::num::ParseIntError| format!("bad value for {flag}: {value}");
        let badf = |_: std::num::ParseFloatError| format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--host" => host = value.clone(),
            "--port" => port = value.parse().map_err(bad)?,
            "--connections" => a.connections = value.parse().map_err(bad)?,
            "--rate" => a.rate = value.parse().map_err(badf)?,
            "--size" => a.size = value.parse::<usize>().map_err(bad)?.max(17),
            "--channel" => a.channel = value.parse().map_err(bad)?,
            "--duration" => a.duration = Duration::from_secs_f64(value.parse().map_err(badf)?),
            "--protocol" => a.protocol = value.parse().map_err(bad)?,
            "--reliability" => {
                a.reliability = match value.as_str() {
                    "unreliable" => Reliability::Unreliable,
                    "unreliable_sequenced" => Reliability::UnreliableSequenced,
                    "reliable" => Reliability::Reliable,
                    "reliable_ordered" => Reliability::ReliableOrdered,
                    "reliable_sequenced" => Reliability::ReliableSequenced,
                    other => return Err(format!("unknown reliability {other}")),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    let ip = if host == "localhost" {
        "127.0.0.1".to_string()
    } else {
        host
    };
    a.server = SocketAddr::new(
        ip.parse()
            .map_err(|_| format!("host must be an IP address: {ip}"))?,
        port,
    );
    Ok(a)
}

#[derive(Default)]
struct Totals {
    connected: usize,
    failed: usize,
    disconnected: usize,
    sent: u64,
    received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    rtts_us: Vec<u32>,
    failures: Vec<String>,
}

async fn player(args: Rc<Args>, totals: Rc<RefCell<Totals>>, start: Instant, id: usize) {
    let bind = if args.server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let Ok(socket) = UdpSocket::bind(bind).await else {
        totals.borrow_mut().failed += 1;
        return;
    };
    let local = socket.local_addr().unwrap_or(args.server);
    let config = EndpointConfig {
        rng_seed: id as u64 ^ 0x10ad,
        protocol_versions: vec![args.protocol],
        accept_incoming: false,
        ..EndpointConfig::default()
    };
    let mut ep = Endpoint::new(config, local, Instant::now());
    let Ok(conn) = ep.connect(Instant::now(), args.server) else {
        totals.borrow_mut().failed += 1;
        return;
    };
    let interval = Duration::from_secs_f64(1.0 / args.rate.max(0.001));
    // Spread the players' send times over one interval.
    let mut next_send: Option<Instant> = None;
    let stop = start + args.duration;
    let (mut recv, mut buf) = (vec![0u8; 2048], Vec::with_capacity(2048));
    let opts = SendOptions {
        reliability: args.reliability,
        channel: args.channel,
        priority: Priority::High,
    };
    let mut seq = 0u64;
    let mut connected = false;
    let mut ever_connected = false;
    loop {
        let now = Instant::now();
        if now >= stop + Duration::from_secs(1) {
            break;
        }
        let wake = [
            ep.poll_timeout(),
            next_send.filter(|_| now < stop),
            Some(stop + Duration::from_secs(1)),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now);
        tokio::select! {
            r = socket.readable() => {
                if r.is_ok() {
                    loop {
                        match socket.try_recv_from(&mut recv) {
                            Ok((n, from)) => ep.handle(Instant::now(), from, Bytes::copy_from_slice(&recv[..n])),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(_) => break,
                        }
                    }
                }
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
        }
        let now = Instant::now();
        ep.handle_timeout(now);
        if connected && now < stop && next_send.is_some_and(|t| now >= t) {
            let mut payload = Vec::with_capacity(args.size);
            payload.push(0x86);
            payload.extend_from_slice(&(now - start).as_micros().to_be_bytes()[8..]);
            payload.extend_from_slice(&seq.to_be_bytes());
            payload.resize(args.size, 0);
            seq += 1;
            if ep.send(now, conn, Bytes::from(payload), opts).is_ok() {
                let mut t = totals.borrow_mut();
                t.sent += 1;
                t.bytes_sent += args.size as u64;
            }
            next_send = next_send.map(|t| t + interval);
        }
        while let Some(e) = ep.poll_event() {
            let mut t = totals.borrow_mut();
            match e {
                Event::Connected { .. } => {
                    connected = true;
                    ever_connected = true;
                    t.connected += 1;
                    next_send = Some(now + interval.mul_f64((id % 97) as f64 / 97.0));
                }
                Event::Message { payload, .. } => {
                    t.received += 1;
                    t.bytes_received += payload.len() as u64;
                    if payload.len() >= 9 && payload[0] == 0x86 {
                        let sent_us =
                            u64::from_be_bytes(payload[1..9].try_into().unwrap_or([0; 8]));
                        let rtt = (now - start).as_micros() as u64
                            - sent_us.min((now - start).as_micros() as u64);
                        t.rtts_us.push(rtt.min(u64::from(u32::MAX)) as u32);
                    }
                }
                Event::Disconnected { reason, .. } => {
                    if ever_connected {
                        t.disconnected += 1;
                    } else {
                        t.failed += 1;
                        if t.failures.len() < 5 {
                            t.failures.push(reason.to_string());
                        }
                    }
                    return;
                }
                _ => {}
            }
        }
        while let Some(tx) = ep.poll_transmit(now, &mut buf) {
            let _ = socket.send_to(&buf[..tx.size], tx.destination).await;
        }
        if now >= stop && connected {
            ep.close(now, conn);
            connected = false;
            next_send = None;
        }
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

fn main() {
    let args = match parse_args() {
        Ok(a) => Rc::new(a),
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("raknet-load: {e}");
            std::process::exit(1);
        }
    };
    let totals = Rc::new(RefCell::new(Totals::default()));
    let start = Instant::now();
    println!(
        "raknet-load: {} connections to {} at {}/s each, {} B {:?} on channel {}, {:?}",
        args.connections,
        args.server,
        args.rate,
        args.size,
        args.reliability,
        args.channel,
        args.duration
    );
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let mut handles = Vec::new();
        for id in 0..args.connections {
            handles.push(tokio::task::spawn_local(player(
                args.clone(),
                totals.clone(),
                start,
                id,
            )));
        }
        let progress = {
            let totals = totals.clone();
            let args = args.clone();
            tokio::task::spawn_local(async move {
                let mut last = (0u64, 0u64);
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let t = totals.borrow();
                    println!(
                        "  {:>5.1}s connected {}/{} failed {} | out {}/s in {}/s",
                        start.elapsed().as_secs_f64(),
                        t.connected - t.disconnected.min(t.connected),
                        args.connections,
                        t.failed,
                        t.sent - last.0,
                        t.received - last.1
                    );
                    last = (t.sent, t.received);
                }
            })
        };
        for h in handles {
            let _ = h.await;
        }
        progress.abort();
    });
    let mut t = totals.take();
    t.rtts_us.sort_unstable();
    let secs = args.duration.as_secs_f64();
    println!("summary:");
    println!(
        "  connections   {} ok, {} failed{}",
        t.connected,
        t.failed,
        if t.failures.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.failures.join("; "))
        }
    );
    println!(
        "  sent          {} messages ({:.0}/s, {:.2} MB/s)",
        t.sent,
        t.sent as f64 / secs,
        t.bytes_sent as f64 / secs / 1e6
    );
    println!(
        "  received      {} messages ({:.0}/s, {:.2} MB/s)",
        t.received,
        t.received as f64 / secs,
        t.bytes_received as f64 / secs / 1e6
    );
    if !t.rtts_us.is_empty() {
        println!(
            "  round trip    p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} echoes)",
            percentile(&t.rtts_us, 0.5),
            percentile(&t.rtts_us, 0.99),
            percentile(&t.rtts_us, 1.0),
            t.rtts_us.len()
        );
        let lost = t.sent.saturating_sub(t.received);
        println!(
            "  unanswered    {lost} ({:.2} %)",
            lost as f64 * 100.0 / t.sent.max(1) as f64
        );
    }
    if t.connected == 0 {
        std::process::exit(1);
    }
}
