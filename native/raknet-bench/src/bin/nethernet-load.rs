//! NetherNet load from one client: signaling over HTTP, then messages over the data channels
//! (`make bench` scenario 11, beside RakNet's scenario 1).
//!
//!     nethernet-load --url http://127.0.0.1:PORT --mode oneway|echo [--count N] [--size B]
//!                    [--rate R --duration S]
//!
//! `oneway`: N reliable messages as fast as the channel takes them, then the end marker
//! (0x87), on which the benchmark's handler hangs up: the rate is N over the time to that.
//! `echo`: N reliable messages, at most 256 unanswered; the rate is N over the time to the
//! last echo. With `--rate`, `echo` paces R messages a second for S seconds instead and
//! reports the round trip's p50 and p99.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use raknet_nethernet::client::{Client, ClientEvent};
use raknet_nethernet::host::SendError;

const WINDOW: usize = 256;

struct Args {
    url: String,
    echo: bool,
    count: usize,
    size: usize,
    rate: Option<u64>,
    duration: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: String::new(),
        echo: false,
        count: 100_000,
        size: 64,
        rate: None,
        duration: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|_| format!("{flag}: {value}"));
        match flag.as_str() {
            "--url" => a.url = value.clone(),
            "--mode" => a.echo = value == "echo",
            "--count" => a.count = number()? as usize,
            "--size" => a.size = number()?.max(1) as usize,
            "--rate" => a.rate = Some(number()?.max(1)),
            "--duration" => a.duration = number()?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.url.is_empty() {
        return Err("--url is required".into());
    }
    Ok(a)
}

/// POST the offer; the answer's body.
fn signal(url: &str, offer: &str) -> Result<String, String> {
    let host = url.strip_prefix("http://").ok_or("only http:// URLs")?;
    let host = host.trim_end_matches('/');
    let mut tcp = TcpStream::connect(host).map_err(|e| format!("signaling: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        tcp,
        "POST /v1/join/4242 HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/sdp\r\ncontent-length: {}\r\n\r\n{offer}",
        offer.len()
    )
    .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tcp.read_to_string(&mut reply).map_err(|e| e.to_string())?;
    let (head, body) = reply.split_once("\r\n\r\n").ok_or("no HTTP reply")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("signaling refused: {head} {body}"));
    }
    Ok(body.to_owned())
}

struct Conn {
    client: Client,
    socket: UdpSocket,
    buf: Vec<u8>,
}

impl Conn {
    /// Send what the client wrote, wait for a datagram up to `wait`, run timers; the events.
    fn pump(&mut self, wait: Duration) -> Vec<ClientEvent> {
        while let Some((to, data)) = self.client.poll_transmit() {
            let _ = self.socket.send_to(&data, to);
        }
        let now = Instant::now();
        let wait = self
            .client
            .poll_timeout()
            .map_or(wait, |at| at.saturating_duration_since(now).min(wait))
            .max(Duration::from_micros(50));
        let _ = self.socket.set_read_timeout(Some(wait));
        if let Ok((len, from)) = self.socket.recv_from(&mut self.buf) {
            self.client.handle(Instant::now(), from, &self.buf[..len]);
            // Whatever else is waiting, without blocking.
            let _ = self.socket.set_nonblocking(true);
            while let Ok((len, from)) = self.socket.recv_from(&mut self.buf) {
                self.client.handle(Instant::now(), from, &self.buf[..len]);
            }
            let _ = self.socket.set_nonblocking(false);
        }
        self.client.handle_timeout(Instant::now());
        while let Some((to, data)) = self.client.poll_transmit() {
            let _ = self.socket.send_to(&data, to);
        }
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// Send, pumping while the channel's buffer is full.
    fn send(&mut self, data: &[u8], events: &mut Vec<ClientEvent>) -> Result<(), String> {
        loop {
            match self.client.send(Instant::now(), true, data) {
                Ok(()) => return Ok(()),
                Err(SendError::Full) => events.extend(self.pump(Duration::from_millis(1))),
                Err(e) => return Err(format!("send: {e:?}")),
            }
        }
    }
}

fn connect(url: &str) -> Result<Conn, String> {
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let local: SocketAddr = socket.local_addr().map_err(|e| e.to_string())?;
    let (client, offer) = Client::new(Instant::now(), local, None)?;
    let answer = signal(url, &offer)?;
    let mut conn = Conn {
        client,
        socket,
        buf: vec![0; 65_536],
    };
    let now_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    conn.client
        .accept_answer(Instant::now(), now_unix, &answer)
        .map_err(|e| format!("answer: {e:?}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        for event in conn.pump(Duration::from_millis(5)) {
            match event {
                ClientEvent::Connected => return Ok(conn),
                ClientEvent::Disconnected { reason } => return Err(format!("{reason:?}")),
                ClientEvent::Message { .. } => {}
            }
        }
    }
    Err("channels did not open within 10 s".into())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("nethernet-load: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let a = args()?;
    let mut conn = connect(&a.url)?;
    let mut payload = vec![0u8; a.size];
    payload[0] = 0x86;
    let mut events = Vec::new();
    match (a.echo, a.rate) {
        (false, _) => {
            let t0 = Instant::now();
            for _ in 0..a.count {
                conn.send(&payload, &mut events)?;
            }
            conn.send(&[0x87], &mut events)?;
            // The handler hangs up on the marker: everything before it arrived.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if events
                    .iter()
                    .any(|e| matches!(e, ClientEvent::Disconnected { .. }))
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err("no hang-up within 60 s".into());
                }
                events = conn.pump(Duration::from_millis(5));
            }
            let secs = t0.elapsed().as_secs_f64();
            println!(
                "one way: {} messages of {} B in {secs:.3} s = {:.0} messages/s",
                a.count,
                a.size,
                a.count as f64 / secs
            );
        }
        (true, None) => {
            let t0 = Instant::now();
            let (mut sent, mut echoed) = (0usize, 0usize);
            while echoed < a.count {
                while sent < a.count && sent - echoed < WINDOW {
                    conn.send(&payload, &mut events)?;
                    sent += 1;
                }
                events.extend(conn.pump(Duration::from_millis(1)));
                for e in events.drain(..) {
                    match e {
                        ClientEvent::Message { .. } => echoed += 1,
                        ClientEvent::Disconnected { reason } => {
                            return Err(format!("closed after {echoed} echoes: {reason:?}"))
                        }
                        ClientEvent::Connected => {}
                    }
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            println!(
                "echo: {} messages of {} B in {secs:.3} s = {:.0} messages/s",
                a.count,
                a.size,
                a.count as f64 / secs
            );
        }
        (true, Some(rate)) => {
            let interval = Duration::from_nanos(1_000_000_000 / rate);
            let end = Instant::now() + Duration::from_secs(a.duration);
            let mut next = Instant::now();
            let mut in_flight = std::collections::VecDeque::new();
            let mut rtts = Vec::new();
            while Instant::now() < end || !in_flight.is_empty() {
                let now = Instant::now();
                if now >= next && now < end {
                    conn.send(&payload, &mut events)?;
                    in_flight.push_back(now);
                    next += interval;
                }
                let wait = next.saturating_duration_since(Instant::now());
                events.extend(conn.pump(wait.min(Duration::from_millis(1))));
                for e in events.drain(..) {
                    if let ClientEvent::Message { .. } = e {
                        // Echoes come back in order (the reliable channel is ordered).
                        if let Some(sent) = in_flight.pop_front() {
                            rtts.push(sent.elapsed());
                        }
                    }
                }
                if Instant::now() > end + Duration::from_secs(5) {
                    return Err(format!("{} echoes missing", in_flight.len()));
                }
            }
            rtts.sort();
            let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
            println!(
                "round trip p50 {:.3} ms, p99 {:.3} ms over {} echoes at {rate} msg/s",
                pct(0.5),
                pct(0.99),
                rtts.len()
            );
        }
    }
    conn.client.close(Instant::now());
    conn.pump(Duration::from_millis(1));
    Ok(())
}
