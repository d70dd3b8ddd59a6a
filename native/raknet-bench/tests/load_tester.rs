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
use raknet_proto::{Endpoint, EndpointConfig, Event, Reliability, SendOptions};

#[test]
fn load_tester_runs_against_an_echo_server() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
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
                        let _ = ep.send(
                            now,
                            conn,
                            payload,
                            SendOptions::new(Reliability::ReliableOrdered),
                        );
                    }
                }
                while let Some(t) = ep.poll_transmit(now, &mut send) {
                    socket.send_to(&send[..t.size], t.destination).unwrap();
                }
            }
        })
    };
    let out = Command::new(env!("CARGO_BIN_EXE_raknet-load"))
        .args([
            "--port",
            &port.to_string(),
            "--connections",
            "20",
            "--rate",
            "50",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("connections   20 ok, 0 failed"), "{stdout}");
    assert!(stdout.contains("unanswered    0 (0.00 %)"), "{stdout}");
    assert!(stdout.contains("round trip    p50"), "{stdout}");
}
