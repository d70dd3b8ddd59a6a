//! A NetherNet echo server on std sockets: HTTP signaling (`GET /v1/join`,
//! `POST /v1/join/{id}`) on a TCP port and the WebRTC sessions on a UDP socket, every message
//! echoed on the channel it came on. The interop test (`test/interop/nethernet_test.exs`)
//! connects aiortc, an independent WebRTC implementation, to it.
//!
//! `echo_host [UDP_ADDR [HTTP_ADDR]]` (default 127.0.0.1:0 for both); prints
//! `udp=<addr> http=<addr>` once listening. Runs until stdin closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use raknet_nethernet::host::{classify, Host, HostConfig, HostEvent, Kind};
use raknet_nethernet::identity::OperatorKey;

/// Header bytes of a request at most, and body bytes.
const MAX_HEAD: usize = 8 * 1024;
const MAX_BODY: usize = 16 * 1024;

type Offer = (String, mpsc::Sender<Result<String, String>>);

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let udp_addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let http_addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let socket = UdpSocket::bind(&udp_addr)?;
    let listener = TcpListener::bind(&http_addr)?;
    let local = socket.local_addr()?;
    println!("udp={local} http={}", listener.local_addr()?);
    std::io::stdout().flush()?;

    let config = HostConfig {
        candidates: vec![local],
        domain: "echo_host.example".into(),
        ..HostConfig::default()
    };
    let mut host = Host::new(config, OperatorKey::generate()).map_err(std::io::Error::other)?;
    let (offers, offer_rx) = mpsc::channel::<Offer>();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = serve(stream, &offers);
        }
    });
    // Stop when whoever started us closes our stdin.
    let (stop_tx, stop) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = stop_tx.send(());
    });

    let mut buf = vec![0u8; 65_536];
    while stop.try_recv().is_err() {
        let now = Instant::now();
        while let Ok((offer, reply)) = offer_rx.try_recv() {
            let answer = host
                .accept_offer(now, unix_now(), &offer, &[], None)
                .map(|(_, answer)| answer)
                .map_err(|e| e.to_string());
            let _ = reply.send(answer);
        }
        host.handle_timeout(now);
        flush(&mut host, &socket);
        let wait = host
            .poll_timeout()
            .map_or(Duration::from_millis(20), |at| {
                at.saturating_duration_since(now)
            })
            .clamp(Duration::from_millis(1), Duration::from_millis(20));
        socket.set_read_timeout(Some(wait))?;
        if let Ok((len, from)) = socket.recv_from(&mut buf) {
            let data = &buf[..len];
            if classify(data) != Kind::Other {
                host.handle(Instant::now(), from, data);
            }
        }
        flush(&mut host, &socket);
    }
    Ok(())
}

/// Send what the host wrote; echo its messages.
fn flush(host: &mut Host, socket: &UdpSocket) {
    loop {
        while let Some((to, data)) = host.poll_transmit() {
            let _ = socket.send_to(&data, to);
        }
        let Some(event) = host.poll_event() else {
            return;
        };
        match event {
            HostEvent::Connected { id, addr, identity } => {
                let xuid = identity
                    .as_ref()
                    .and_then(|i| i.claims.get("xuid").cloned());
                eprintln!("connected {id:?} from {addr}, xuid {xuid:?}");
            }
            HostEvent::Message {
                id,
                payload,
                reliable,
            } => {
                if let Err(e) = host.send(Instant::now(), id, reliable, &payload) {
                    eprintln!("echo refused: {e:?}");
                }
            }
            HostEvent::Disconnected { id, reason } => eprintln!("disconnected {id:?}: {reason:?}"),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One HTTP/1.1 request, answered and closed.
fn serve(stream: TcpStream, offers: &mpsc::Sender<Offer>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut head = Vec::new();
    let mut content_length = 0usize;
    let mut request_line = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || head.len() + line.len() > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(line.as_bytes());
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if request_line.is_empty() {
            request_line = line.to_owned();
        } else if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.trim().parse().unwrap_or(usize::MAX);
            }
        }
    }
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, kind, body) = match (method, path) {
        ("GET", "/v1/join") => (
            "200 OK",
            "application/json",
            r#"{"name":"echo_host","protocol":0,"version":"0","level":"-","players":0,"maxPlayers":10,"gameType":0}"#.to_owned(),
        ),
        ("POST", p) if p.starts_with("/v1/join/") && content_length <= MAX_BODY => {
            let mut body = vec![0; content_length];
            reader.read_exact(&mut body)?;
            let (tx, rx) = mpsc::channel();
            let offer = String::from_utf8_lossy(&body).into_owned();
            let _ = offers.send((offer, tx));
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ok(answer)) => ("200 OK", "application/sdp", answer),
                Ok(Err(e)) => ("400 Bad Request", "text/plain", e),
                Err(_) => ("503 Service Unavailable", "text/plain", String::new()),
            }
        }
        ("POST", _) => ("413 Payload Too Large", "text/plain", String::new()),
        _ => ("404 Not Found", "text/plain", String::new()),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}
