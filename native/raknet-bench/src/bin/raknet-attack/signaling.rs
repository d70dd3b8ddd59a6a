//! Attacks on NetherNet's HTTP signaling (TCP, the UDP port's number): a flood of bogus
//! offers from many addresses, and slow requests that never finish. Meanwhile a player polls
//! `GET /v1/join` from 127.0.0.1 every 100 ms; its answers go in the row's note (the RakNet
//! players' columns still measure RakNet beside it).

use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::*;

/// How often the player asks for the status.
const STATUS_INTERVAL: Duration = Duration::from_millis(100);
/// A status request not answered by then failed.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Bogus offers in flight at once.
const FLOOD_WORKERS: usize = 64;
/// A slow request's next byte, this often.
const SLOW_BYTE_INTERVAL: Duration = Duration::from_secs(1);

/// What the player saw of signaling.
#[derive(Default)]
struct Status {
    ok: usize,
    failed: usize,
    ms: Vec<f64>,
}

fn signaling(ctx: &Ctx) -> SocketAddr {
    ctx.server
}

async fn connect_from(src: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(src, 0))?;
    socket.connect(to).await
}

/// One request; the status code and the reply's length (0 on any failure).
async fn request(src: IpAddr, to: SocketAddr, data: &[u8]) -> (u16, usize) {
    let Ok(mut stream) = connect_from(src, to).await else {
        return (0, 0);
    };
    if stream.write_all(data).await.is_err() {
        return (0, 0);
    }
    let mut reply = Vec::new();
    if stream.read_to_end(&mut reply).await.is_err() {
        return (0, reply.len());
    }
    let code = std::str::from_utf8(reply.get(9..12).unwrap_or(&[]))
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, reply.len())
}

/// The player's status polls until `end`.
async fn poll_status(to: SocketAddr, end: Instant) -> Status {
    let mut status = Status::default();
    let get = b"GET /v1/join HTTP/1.1\r\nhost: server\r\n\r\n";
    let mut next = Instant::now();
    while next < end {
        let t = Instant::now();
        let result = tokio::time::timeout(
            STATUS_TIMEOUT,
            request(IpAddr::from([127, 0, 0, 1]), to, get),
        )
        .await;
        match result {
            Ok((200, _)) => {
                status.ok += 1;
                status.ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            _ => status.failed += 1,
        }
        next += STATUS_INTERVAL;
        tokio::time::sleep_until(next.into()).await;
    }
    status
}

fn status_note(s: &Status) -> String {
    let mut ms = s.ms.clone();
    ms.sort_by(f64::total_cmp);
    let p = |q| percentile(&ms, q).map_or("-".to_string(), |v| format!("{v:.1}"));
    format!(
        "player's GET /v1/join: {} of {} answered 200 (p50 {} ms, p99 {} ms)",
        s.ok,
        s.ok + s.failed,
        p(0.5),
        p(0.99)
    )
}

/// Bogus offers (an SDP without a data channel) from `ctx.sources` addresses in turn, at
/// `ctx.conn_rate` a second, `FLOOD_WORKERS` at once.
pub(crate) async fn signal_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let to = signaling(ctx);
    let player = tokio::task::spawn_local(poll_status(to, end));
    let body = format!("v=0\r\n{}", "a=x-junk:0123456789abcdef\r\n".repeat(24));
    let offer = Rc::new(format!(
        "POST /v1/join/1 HTTP/1.1\r\ncontent-type: application/sdp\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    let codes = Rc::new(std::cell::RefCell::new(std::collections::BTreeMap::<
        u16,
        u64,
    >::new()));
    let interval = Duration::from_secs_f64(FLOOD_WORKERS as f64 / ctx.conn_rate);
    let workers: Vec<_> = (0..FLOOD_WORKERS)
        .map(|w| {
            let (offer, codes, traffic) = (offer.clone(), codes.clone(), traffic.clone());
            let sources = ctx.sources;
            tokio::task::spawn_local(async move {
                let mut i = w;
                let mut next = Instant::now();
                while Instant::now() < end {
                    let src = IpAddr::V4(source_ip(i % sources));
                    traffic.sent(offer.len());
                    let (code, len) = request(src, to, offer.as_bytes()).await;
                    traffic.received(len);
                    *codes.borrow_mut().entry(code).or_default() += 1;
                    i += FLOOD_WORKERS;
                    next += interval;
                    tokio::time::sleep_until(next.max(Instant::now()).into()).await;
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let status = player.await.map_err(|e| e.to_string())?;
    let codes: Vec<String> = codes
        .borrow()
        .iter()
        .map(|(code, n)| match code {
            0 => format!("{n} failed"),
            c => format!("{n} x {c}"),
        })
        .collect();
    Ok(format!(
        "bogus offers from {} addresses: {}; {}",
        ctx.sources,
        codes.join(", "),
        status_note(&status)
    ))
}

/// `ctx.slow_connections` requests from as many addresses, one byte of their head a second,
/// never finished; a connection the server closes is opened again.
pub(crate) async fn signal_slow(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let to = signaling(ctx);
    let player = tokio::task::spawn_local(poll_status(to, end));
    let reopened = Rc::new(std::cell::Cell::new(0u64));
    let slow: Vec<_> = (0..ctx.slow_connections)
        .map(|i| {
            let (traffic, reopened) = (traffic.clone(), reopened.clone());
            let src = IpAddr::V4(source_ip(i));
            tokio::task::spawn_local(async move {
                let head = b"GET /v1/join HTTP/1.1\r\nx-slow: ";
                while Instant::now() < end {
                    let Ok(mut stream) = connect_from(src, to).await else {
                        tokio::time::sleep(SLOW_BYTE_INTERVAL).await;
                        continue;
                    };
                    let mut at = 0;
                    loop {
                        let byte = [head.get(at).copied().unwrap_or(b'a')];
                        if Instant::now() >= end || stream.write_all(&byte).await.is_err() {
                            break;
                        }
                        traffic.sent(1);
                        at += 1;
                        // A reply (503) or a close ends this connection: open another.
                        let mut buf = [0u8; 512];
                        match tokio::time::timeout(SLOW_BYTE_INTERVAL, stream.read(&mut buf)).await
                        {
                            Ok(Ok(0)) | Ok(Err(_)) => break,
                            Ok(Ok(n)) => {
                                traffic.received(n);
                                break;
                            }
                            Err(_) => {}
                        }
                    }
                    if Instant::now() < end {
                        reopened.set(reopened.get() + 1);
                    }
                }
            })
        })
        .collect();
    for s in slow {
        let _ = s.await;
    }
    let status = player.await.map_err(|e| e.to_string())?;
    Ok(format!(
        "{} slow requests from as many addresses, {} closed by the server and reopened; {}",
        ctx.slow_connections,
        reopened.get(),
        status_note(&status)
    ))
}
