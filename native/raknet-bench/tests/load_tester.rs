//! The load tester against our own engine in a short run: every connection succeeds and every
//! echo comes back.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{ConnId, Endpoint, EndpointConfig, Event, Reliability, SendOptions};

/// An engine on `127.0.0.1:0` on its own thread, handing each message to `on_message`
/// (which may send or close). Returns its port and a function that stops it.
fn server(
    mut on_message: impl FnMut(&mut Endpoint, Instant, ConnId, Bytes) + Send + 'static,
) -> (u16, impl FnOnce()) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut ep = Endpoint::new(
                EndpointConfig::default(),
                socket.local_addr().unwrap(),
                Instant::now(),
            );
            let (mut recv, mut send) = (vec![0u8; 2048], Vec::new());
            socket
                .set_read_timeout(Some(Duration::from_millis(2)))
                .unwrap();
            while !stop.load(Ordering::Relaxed) {
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
                    if let Event::Message { conn, payload, .. } = e {
                        on_message(&mut ep, now, conn, payload);
                    }
                }
                while let Some(t) = ep.poll_transmit(now, &mut send) {
                    socket.send_to(&send[..t.size], t.destination).unwrap();
                }
            }
        })
    };
    let stop = move || {
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap();
    };
    (port, stop)
}

/// `raknet-load` for `connections` players at 50 msg/s for a second; its standard output.
fn load(port: u16, connections: usize) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_raknet-load"))
        .args([
            "--port",
            &port.to_string(),
            "--connections",
            &connections.to_string(),
            "--rate",
            "50",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn load_tester_runs_against_an_echo_server() {
    let (port, stop) = server(|ep, now, conn, payload| {
        let _ = ep.send(
            now,
            conn,
            payload,
            SendOptions::new(Reliability::ReliableOrdered),
        );
    });
    let (ok, stdout) = load(port, 20);
    stop();
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("connections   20 ok, 0 failed, 0 closed before the end"),
        "{stdout}"
    );
    assert!(stdout.contains("unanswered    0 (0.00 %)"), "{stdout}");
    assert!(stdout.contains("round trip    p50"), "{stdout}");
}

/// A server that accepts players and then closes them (one at its connection limit refuses
/// a player after the handshake) is not holding them: the summary says so, and why, where
/// it used to count them among the connections that were ok and say nothing more.
#[test]
fn load_tester_counts_players_the_server_closed() {
    let (port, stop) = server(|ep, now, conn, _| ep.close(now, conn));
    let (_, stdout) = load(port, 5);
    stop();
    assert!(
        stdout.contains("connections   5 ok, 0 failed, 5 closed before the end ("),
        "{stdout}"
    );
}
