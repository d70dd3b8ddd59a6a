//! A RakNet offline responder over a blocking `std::net::UdpSocket`: the smallest real
//! server the codec supports on its own.
//!
//! It answers unconnected pings (0x01, 0x02) with a Minecraft Bedrock MOTD pong, checks the
//! protocol version of Open Connection Request 1 (0x19 for anything but 6, 10 and 11, a
//! Reply1 with the negotiated MTU otherwise), and refuses Open Connection Request 2 with
//! 0x14 "no free incoming connections", as official RakNet does while it accepts no
//! connections (its default). Connections come with the engine.
//!
//! ```text
//! cargo run -p raknet-proto --example offline_server -- [ADDRESS]   # default 127.0.0.1:19132
//! ```

use std::net::{SocketAddr, UdpSocket};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use raknet_proto::{
    BedrockMotd, Encode, IncompatibleProtocolVersion, NoFreeIncomingConnections, OfflineMessage,
    OpenConnectionReply1, UnconnectedPong,
};

const PROTOCOLS: [u8; 3] = [6, 10, 11];
const MAX_MTU: u16 = 1492;
const MIN_MTU: u16 = 400;

fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:19132")
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let socket = UdpSocket::bind(addr)?;
    let local = socket.local_addr()?;
    // A GUID that differs per run; the engine will take it from a seeded RNG.
    let guid = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let motd = BedrockMotd {
        edition: "MCPE".into(),
        motd: "raknet offline responder".into(),
        protocol_version: 527,
        version_name: "1.19.1".into(),
        players_online: 0,
        max_players: 0,
        server_guid: guid,
        sub_motd: "raknet".into(),
        game_mode: "Survival".into(),
        game_mode_numeric: 1,
        port_v4: local.port(),
        port_v6: local.port().wrapping_add(1),
    };
    let pong_data = motd.to_pong_data();
    eprintln!("raknet offline responder on udp://{local} (guid {guid:#018x}); Ctrl-C to stop");

    let started = Instant::now();
    let mut recv = vec![0u8; 2048];
    let mut send = Vec::with_capacity(2048);
    let mut dropped = 0u64;
    loop {
        let (len, from) = socket.recv_from(&mut recv)?;
        let datagram = &recv[..len];
        if !OfflineMessage::is_offline(datagram) {
            dropped += 1;
            continue;
        }
        let reply = match OfflineMessage::decode(&mut Bytes::copy_from_slice(datagram), false) {
            Ok(OfflineMessage::UnconnectedPing(ping)) => {
                OfflineMessage::UnconnectedPong(UnconnectedPong {
                    time: ping.time,
                    server_guid: guid,
                    data: pong_data.clone(),
                })
            }
            Ok(OfflineMessage::OpenConnectionRequest1(req))
                if !PROTOCOLS.contains(&req.protocol) =>
            {
                OfflineMessage::IncompatibleProtocolVersion(IncompatibleProtocolVersion {
                    protocol: 11,
                    server_guid: guid,
                })
            }
            Ok(OfflineMessage::OpenConnectionRequest1(req)) => {
                OfflineMessage::OpenConnectionReply1(OpenConnectionReply1 {
                    server_guid: guid,
                    cookie: None,
                    server_public_key: None,
                    mtu: req.mtu.clamp(MIN_MTU, MAX_MTU),
                })
            }
            Ok(OfflineMessage::OpenConnectionRequest2(_)) => {
                OfflineMessage::NoFreeIncomingConnections(NoFreeIncomingConnections {
                    server_guid: guid,
                })
            }
            Ok(_) | Err(_) => {
                dropped += 1;
                continue;
            }
        };
        send.clear();
        reply.encode(&mut send);
        socket.send_to(&send, from)?;
        eprintln!(
            "[{:>8.3}s] {from}: 0x{:02x} -> 0x{:02x} ({} bytes); {dropped} dropped so far",
            started.elapsed().as_secs_f64(),
            datagram[0],
            send[0],
            send.len()
        );
    }
}
