//! `raknet-echo`: a RakNet echo server on the engine alone (no BEAM), for the benchmark's
//! breakdown of the echo round trip into hops.
//!
//! ```text
//! raknet-echo [--raw]
//! ```
//!
//! Binds `127.0.0.1:0`, prints `ECHO <port>` on stdout, and echoes every message back
//! reliable-ordered (as the benchmark's Elixir handler does) from one thread that sleeps in a
//! blocking receive until a datagram or the engine's next timer, the way a raw UDP echo
//! thread waits. It exits when its standard input closes, so a benchmark that spawns it as a
//! port cannot leak it.
//!
//! Against `raknet-load` it measures what the engine adds to a raw UDP round trip (the
//! protocol's work and its ACKs); `RakNet.Server` on the same load adds the BEAM's hop on
//! top (the message to the handler process and its send back).
//!
//! `--raw` echoes plain UDP instead, for `raknet-load --raw`: every datagram starting with
//! `0x86` goes back as it came, followed by a 7-byte datagram (the size of a RakNet ACK of
//! one datagram); anything else (the client's ACK-sized answers) is read and dropped. With
//! the client's answer, that is a RakNet echo's four datagrams without the protocol: the
//! reference for the server's CPU per echo and for how many players one core holds.

use std::io::{ErrorKind, Read};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use raknet_proto::{
    AdmissionLimits, Endpoint, EndpointConfig, Event, Limits, Reliability, SendOptions,
};

/// The socket buffers `RakNet.Server` asks for.
const SOCKET_BUFFER: usize = 8 << 20;

/// The longest the thread sleeps with no timer due (it still notices a closed stdin).
const IDLE: Duration = Duration::from_millis(100);

/// Datagrams read at most, when a timer is due, before it runs.
const CATCH_UP: usize = 1024;

/// How far from the engine's next timer a receive may wake before its timeout is set again
/// (the engine's timers count in milliseconds).
const TIMER_SLACK: Duration = Duration::from_millis(1);

fn main() -> std::io::Result<()> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    // The buffers `RakNet.Server` asks for (best effort, as it does).
    let sock = socket2::SockRef::from(&socket);
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    let local = socket.local_addr()?;
    println!("ECHO {}", local.port());

    // Ends the process when the benchmark closes our stdin.
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });

    if std::env::args().any(|a| a == "--raw") {
        return echo_raw(&socket);
    }

    // Every player of a local load generator comes from 127.0.0.1: the per-IP admission
    // limits are a server's for the Internet, raised here as the benchmark's server does,
    // and so is the count of connections (the default 1,024 refused the rest of a
    // 3,000-player run after the handshake, which the per-core reference then read as
    // echoes the engine could not keep up with).
    let config = EndpointConfig {
        limits: Limits {
            max_connections: 20_000,
            max_messages_per_sec: None,
            ..Limits::default()
        },
        admission: AdmissionLimits {
            max_connections_per_ip: 20_000,
            max_half_open_per_ip: 20_000,
            new_connections_per_ip_per_sec: 100_000,
            ..AdmissionLimits::default()
        },
        ..EndpointConfig::default()
    };
    let mut ep = Endpoint::new(config, local, Instant::now());
    let echo = SendOptions::new(Reliability::ReliableOrdered);
    let (mut inbox, mut out) = (vec![0u8; 2048], Vec::with_capacity(2048));
    // The receive timeout now set: changed only when it would wake the thread more than
    // TIMER_SLACK away from the engine's next timer, not before every receive (a system
    // call per datagram that the raw echo does not make). None set yet: the first loop sets
    // one, however soon the first timer.
    let mut timeout = Duration::MAX;
    loop {
        let now = Instant::now();
        let wait = ep
            .poll_timeout()
            .map_or(IDLE, |t| t.saturating_duration_since(now))
            .clamp(Duration::from_micros(1), IDLE);
        if wait.abs_diff(timeout) > TIMER_SLACK {
            socket.set_read_timeout(Some(wait))?;
            timeout = wait;
        }
        // One datagram per blocking receive, as the raw echo reads them.
        match socket.recv_from(&mut inbox) {
            Ok((n, from)) => {
                ep.handle(
                    Instant::now(),
                    from,
                    bytes::Bytes::copy_from_slice(&inbox[..n]),
                );
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
        // Before the engine's timers run, what has arrived meanwhile is read (up to
        // CATCH_UP datagrams): timers run behind unread datagrams take the ACKs waiting in the
        // socket for losses and send again, and once the thread falls behind, those resends
        // (and the peers' ACKs of them) kept it behind: at 3,000 players on one core, about
        // one run in two ended with most echoes missing. Only when a timer is due, so that a
        // quiet thread reads as the raw echo does.
        if ep.poll_timeout().is_some_and(|t| t <= Instant::now()) {
            socket.set_nonblocking(true)?;
            for _ in 0..CATCH_UP {
                match socket.recv_from(&mut inbox) {
                    Ok((n, from)) => ep.handle(
                        Instant::now(),
                        from,
                        bytes::Bytes::copy_from_slice(&inbox[..n]),
                    ),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            socket.set_nonblocking(false)?;
        }
        let now = Instant::now();
        ep.handle_timeout(now);
        while let Some(event) = ep.poll_event() {
            if let Event::Message { conn, payload, .. } = event {
                let _ = ep.send(now, conn, payload, echo);
            }
        }
        while let Some(t) = ep.poll_transmit(now, &mut out) {
            let _ = socket.send_to(&out[..t.size], t.destination);
        }
    }
}

/// `--raw`: one blocking receive per datagram, the echo and an ACK-sized datagram sent back.
fn echo_raw(socket: &UdpSocket) -> std::io::Result<()> {
    const ACK: [u8; 7] = [0xC0, 0, 1, 1, 0, 0, 0];
    let mut inbox = vec![0u8; 2048];
    loop {
        let (n, from) = socket.recv_from(&mut inbox)?;
        if inbox.first() == Some(&0x86) {
            let _ = socket.send_to(&inbox[..n], from);
            let _ = socket.send_to(&ACK, from);
        }
    }
}
