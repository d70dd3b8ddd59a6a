//! A RakNet echo server over a blocking `std::net::UdpSocket`: the engine's whole driving
//! loop in one screen, and a real server official RakNet and Bedrock clients can connect to.
//!
//! It answers unconnected pings with a Minecraft Bedrock MOTD, accepts connections at
//! protocols 6, 10 and 11, and echoes every message back (reliable ordered, channel 0).
//!
//! ```text
//! cargo run -p raknet-proto --example echo_server -- [ADDRESS]   # default 127.0.0.1:19132
//! ```

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{
    AdmissionLimits, BedrockMotd, Endpoint, EndpointConfig, Event, Reliability, SendOptions,
};

fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:19132")
        .parse()
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    let socket = UdpSocket::bind(addr)?;
    let local = socket.local_addr()?;
    // The GUID and the handshake keys derive from the seed and the secret: take both from the
    // standard hasher's keys (the operating system's randomness), never from the clock.
    let random = || RandomState::new().build_hasher().finish();
    let mut endpoint = Endpoint::new(
        EndpointConfig {
            rng_seed: random(),
            secret: random(),
            // A Bedrock MOTD makes pongs 4-6 times the ping (see `pong_amplification`).
            admission: AdmissionLimits {
                pong_amplification: 6,
                ..AdmissionLimits::default()
            },
            ..EndpointConfig::default()
        },
        local,
        Instant::now(),
    );
    let motd = BedrockMotd {
        edition: "MCPE".into(),
        motd: "raknet echo server".into(),
        protocol_version: 527,
        version_name: "1.19.1".into(),
        players_online: 0,
        max_players: endpoint.config().limits.max_connections as u32,
        server_guid: endpoint.guid(),
        sub_motd: "raknet".into(),
        game_mode: "Survival".into(),
        game_mode_numeric: 1,
        port_v4: local.port(),
        port_v6: local.port().wrapping_add(1),
    };
    endpoint
        .set_offline_ping_response(motd.to_pong_data())
        .expect("the MOTD fits one datagram");
    eprintln!(
        "raknet echo server on udp://{local} (guid {:#018x}); Ctrl-C to stop",
        endpoint.guid()
    );

    let mut recv = vec![0u8; 2048];
    let mut send = Vec::with_capacity(2048);
    let mut players = 0u32;
    loop {
        // 1. Wait for a datagram or the engine's next deadline.
        let now = Instant::now();
        let wait = endpoint
            .poll_timeout()
            .map_or(Duration::from_secs(1), |t| t.saturating_duration_since(now));
        socket.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        match socket.recv_from(&mut recv) {
            Ok((len, from)) => {
                endpoint.handle(Instant::now(), from, Bytes::copy_from_slice(&recv[..len]))
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
        // 2. Timers.
        let now = Instant::now();
        endpoint.handle_timeout(now);
        // 3. Events: echo messages, keep the MOTD's player count current.
        while let Some(event) = endpoint.poll_event() {
            match event {
                Event::Connected {
                    conn,
                    addr,
                    protocol,
                    mtu,
                    ..
                } => {
                    players += 1;
                    eprintln!(
                        "{addr} connected (conn {}, protocol {protocol}, MTU {mtu})",
                        conn.as_u64()
                    );
                    let _ = endpoint.set_offline_ping_response(
                        BedrockMotd {
                            players_online: players,
                            ..motd.clone()
                        }
                        .to_pong_data(),
                    );
                }
                Event::Message { conn, payload, .. } => {
                    let _ = endpoint.send(
                        now,
                        conn,
                        payload,
                        SendOptions::new(Reliability::ReliableOrdered),
                    );
                }
                Event::Disconnected { conn, reason } => {
                    players = players.saturating_sub(1);
                    eprintln!("conn {} disconnected: {reason}", conn.as_u64());
                    let _ = endpoint.set_offline_ping_response(
                        BedrockMotd {
                            players_online: players,
                            ..motd.clone()
                        }
                        .to_pong_data(),
                    );
                }
                _ => {}
            }
        }
        // 4. Send everything the engine wrote.
        while let Some(t) = endpoint.poll_transmit(now, &mut send) {
            socket.send_to(&send[..t.size], t.destination)?;
        }
    }
}
