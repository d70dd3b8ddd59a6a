//! Interop with official RakNet 4.081 (the C++ library, PyPI `raknet`): the official client
//! connects to this engine over real loopback UDP at protocols 6 and 11, exchanges every
//! reliability at 16 B, 1 KB, 5 KB and 100 KB, and disconnects cleanly.
//!
//! Needs the venv that `make venv` (run by `make test`) creates; set `RAKNET_PYTHON` to use
//! another interpreter with `raknet` installed.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{DisconnectReason, Endpoint, EndpointConfig, Event, Reliability, SendOptions};

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RAKNET_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run `make venv` (make test does) or set RAKNET_PYTHON",
        venv.display()
    );
    venv
}

/// Run an echo server on 127.0.0.1:0 until `stop`; returns its port, and sends every event
/// but messages to `events`.
fn echo_server(
    stop: Arc<AtomicBool>,
    events: mpsc::Sender<Event>,
) -> (u16, thread::JoinHandle<()>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = socket.local_addr().unwrap();
    let handle = thread::spawn(move || {
        let mut ep = Endpoint::new(EndpointConfig::default(), local, Instant::now());
        let (mut recv, mut send) = (vec![0u8; 2048], Vec::new());
        while !stop.load(Ordering::Relaxed) {
            let wait = ep.poll_timeout().map_or(Duration::from_millis(20), |t| {
                t.saturating_duration_since(Instant::now())
            });
            socket
                .set_read_timeout(Some(
                    wait.clamp(Duration::from_millis(1), Duration::from_millis(20)),
                ))
                .unwrap();
            match socket.recv_from(&mut recv) {
                Ok((n, from)) => {
                    ep.handle(Instant::now(), from, Bytes::copy_from_slice(&recv[..n]))
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("{e}"),
            }
            let now = Instant::now();
            ep.handle_timeout(now);
            while let Some(e) = ep.poll_event() {
                if let Event::Message { conn, payload, .. } = &e {
                    ep.send(
                        now,
                        *conn,
                        payload.clone(),
                        SendOptions::new(Reliability::ReliableOrdered),
                    )
                    .unwrap();
                }
                if !matches!(e, Event::Message { .. }) {
                    let _ = events.send(e);
                }
            }
            while let Some(t) = ep.poll_transmit(now, &mut send) {
                socket.send_to(&send[..t.size], t.destination).unwrap();
            }
        }
    });
    (local.port(), handle)
}

fn official_client_round_trip(protocol: u8) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (port, server) = echo_server(stop.clone(), tx);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/official_client.py");
    let out = Command::new(python())
        .arg(&script)
        .args(["127.0.0.1", &port.to_string(), &protocol.to_string()])
        .output()
        .expect("run the official client");
    // Collect the server's events until the client's disconnection arrives (or 5 s pass).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let done = matches!(e, Event::Disconnected { .. });
        events.push(e);
        if done {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "official client: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("OK"), "{stdout}");
    assert!(
        matches!(events.first(), Some(Event::Connected { protocol: p, .. }) if *p == protocol),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Disconnected {
                reason: DisconnectReason::PeerClosed,
                ..
            }
        )),
        "no clean disconnect: {events:?}"
    );
}

#[test]
fn official_client_exchanges_every_reliability_at_protocol_6() {
    official_client_round_trip(6);
}

#[test]
fn official_client_exchanges_every_reliability_at_protocol_11() {
    official_client_round_trip(11);
}
