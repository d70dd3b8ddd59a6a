//! Third-party Rust RakNet clients from crates.io, driven the way the interop tests drive
//! jsp-raknet: each has quirks official RakNet tolerates.
//!
//! * rust-raknet 1.4 cannot read an open-connection-reply-1 that carries a cookie, puts its
//!   own connection-request time in the "ping time" of its new-incoming-connection (0x13),
//!   where the server's 0x10 time belongs, and sends its 0x09 reliable-ordered;
//! * rak-rs 0.3 (protocol 10) cannot read the cookie either, echoes its own time too, numbers
//!   its datagrams anew after the handshake and reads 0x10 outside its ordering. It cannot
//!   send a message larger than its MTU (its split path sends none of the fragments), so its
//!   requests stay small and only the replies are split.
//!
//! ```text
//! rust-peers rust-raknet|rak-rs HOST PORT COUNT SIZE [TIMEOUT_MS]
//! ```
//!
//! Connects, prints `CONNECTED`, sends COUNT reliable-ordered requests (0xFE, Bedrock's
//! game-packet id, the only one rust-raknet sends; [`MARK`]; the index and SIZE, 2 bytes each;
//! filler up to SIZE bytes, split when that exceeds the MTU; at most [`RAK_RS_REQUEST`] for
//! rak-rs) for replies of SIZE bytes that start as the request did (the test's server sends
//! them), waits for every reply and prints `ECHOED n IN_ORDER yes|no`, closes and exits 0.
//! Prints `ERROR ...` and exits 1 when it cannot connect, `TIMEOUT` after TIMEOUT_MS (20 s),
//! and exits when its stdin closes.

use std::io::Read;
use std::net::SocketAddr;
use std::process::exit;
use std::time::Duration;

/// Bedrock's game packet: rust-raknet refuses to send a message with any other first byte.
const ECHO_ID: u8 = 0xfe;
/// The second byte. rak-rs reads a message's second byte as a message id when the first is
/// not one of its own (it parses the message as an offline one, which takes the first
/// byte, then as a connected one) and keeps the message if that parses: with a second byte
/// of 0x00 it takes a reply for a connected ping and answers it with a pong.
const MARK: u8 = 0xee;
/// Bytes before the filler: id, mark, index, reply size.
const HEADER: usize = 6;
/// The largest request rak-rs is given: below its MTU.
const RAK_RS_REQUEST: usize = 1_000;

struct Run {
    server: SocketAddr,
    count: u16,
    /// The size of each reply, and of each request but rak-rs's.
    size: u16,
}

impl Run {
    fn request(&self, i: u16, max: usize) -> Vec<u8> {
        let mut m = vec![0x55; usize::from(self.size).min(max)];
        m[..2].copy_from_slice(&[ECHO_ID, MARK]);
        m[2..4].copy_from_slice(&i.to_be_bytes());
        m[4..6].copy_from_slice(&self.size.to_be_bytes());
        m
    }

    /// The index of a reply to one of ours, `None` for anything else the server sent.
    fn reply_index(&self, m: &[u8]) -> Option<u16> {
        let ours = m.len() == usize::from(self.size) && m[..2] == [ECHO_ID, MARK];
        ours.then(|| u16::from_be_bytes([m[2], m[3]]))
    }
}

fn finish(replies: &[u16]) -> ! {
    let in_order = replies
        .iter()
        .enumerate()
        .all(|(i, &v)| usize::from(v) == i);
    let yes = if in_order { "yes" } else { "no" };
    println!("ECHOED {} IN_ORDER {yes}", replies.len());
    exit(0)
}

fn fail(line: String) -> ! {
    println!("{line}");
    exit(1)
}

async fn rust_raknet(run: Run) {
    use rust_raknet::{RaknetSocket, Reliability};
    let socket = match RaknetSocket::connect(&run.server).await {
        Ok(s) => s,
        Err(e) => fail(format!("ERROR {e:?}")),
    };
    println!("CONNECTED");
    for i in 0..run.count {
        let request = run.request(i, usize::MAX);
        if let Err(e) = socket.send(&request, Reliability::ReliableOrdered).await {
            fail(format!("ERROR send {e:?}"));
        }
    }
    let mut replies = Vec::new();
    while replies.len() < usize::from(run.count) {
        match socket.recv().await {
            Ok(m) => replies.extend(run.reply_index(&m)),
            Err(e) => fail(format!("ERROR recv {e:?} after {}", replies.len())),
        }
    }
    let _ = socket.close().await;
    finish(&replies)
}

async fn rak_rs(run: Run) {
    use rak_rs::client::{Client, DEFAULT_MTU};
    let mut client = Client::new(10, DEFAULT_MTU).with_handshake_attempts(3);
    if let Err(e) = client.connect(run.server).await {
        fail(format!("ERROR {e:?}"));
    }
    println!("CONNECTED");
    for i in 0..run.count {
        if let Err(e) = client.send_ord(&run.request(i, RAK_RS_REQUEST), 0).await {
            fail(format!("ERROR send {e:?}"));
        }
    }
    let mut replies = Vec::new();
    while replies.len() < usize::from(run.count) {
        match client.recv().await {
            Ok(m) => replies.extend(run.reply_index(&m)),
            Err(e) => fail(format!("ERROR recv {e:?} after {}", replies.len())),
        }
    }
    client.close().await;
    finish(&replies)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        fail("usage: rust-peers rust-raknet|rak-rs HOST PORT COUNT SIZE [TIMEOUT_MS]".into())
    };
    let [library, host, port, count, size, rest @ ..] = args.as_slice() else {
        usage()
    };
    let server = format!("{host}:{port}").parse().unwrap_or_else(|_| usage());
    let count = count.parse().unwrap_or_else(|_| usage());
    let size: u16 = size.parse().unwrap_or_else(|_| usage());
    if usize::from(size) < HEADER {
        usage()
    }
    let timeout_ms = rest
        .first()
        .map_or(Ok(20_000), |t| t.parse())
        .unwrap_or_else(|_| usage());
    let run = Run {
        server,
        count,
        size,
    };

    // The test closes our stdin when it gives up: never outlive it.
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        fail("STDIN CLOSED".into())
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("ERROR runtime {e}")));
    runtime.block_on(async {
        let work = async {
            match library.as_str() {
                "rust-raknet" => rust_raknet(run).await,
                "rak-rs" => rak_rs(run).await,
                _ => usage(),
            }
        };
        let limit = Duration::from_millis(timeout_ms);
        if tokio::time::timeout(limit, work).await.is_err() {
            fail("TIMEOUT".into())
        }
    })
}
