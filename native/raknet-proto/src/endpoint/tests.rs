//! Unit tests of the endpoint: admission, timers and the connection table.

use super::*;
use crate::{Reliability, SendOptions};

/// Hands every datagram `from` has to send to the endpoint it is addressed to; returns
/// whether there was one.
fn deliver(now: Instant, from: &mut Endpoint, peers: &mut [&mut Endpoint]) -> bool {
    let mut buf = Vec::new();
    let mut moved = false;
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        if let Some(to) = peers.iter_mut().find(|p| p.local_addr == t.destination) {
            to.handle(now, from.local_addr, Bytes::copy_from_slice(&buf[..t.size]));
        }
        moved = true;
    }
    moved
}

/// Runs every due timer and exchange between the server and its clients at `now`;
/// returns the messages the server received.
fn step(now: Instant, server: &mut Endpoint, clients: &mut [Endpoint]) -> usize {
    loop {
        let mut moved = false;
        for c in clients.iter_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
            moved |= deliver(now, c, &mut [&mut *server]);
        }
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
        }
        let mut peers: Vec<&mut Endpoint> = clients.iter_mut().collect();
        moved |= deliver(now, server, &mut peers);
        if !moved {
            break;
        }
    }
    std::iter::from_fn(|| server.poll_event())
        .filter(|e| matches!(e, Event::Message { .. }))
        .count()
}

/// The server's timer set holds exactly one entry per connection with a deadline, at
/// that deadline, however often traffic moves it (each message's ACK deadline moves it
/// earlier, the ACK moves it back).
fn assert_one_timer_each(server: &Endpoint) {
    let armed = server
        .slots
        .iter()
        .filter(|s| s.conn.is_some() && s.scheduled.is_some())
        .count();
    assert_eq!(server.timers.len(), armed);
    for &(t, index) in &server.timers {
        assert_eq!(server.slots[index as usize].scheduled, Some(t));
    }
}

#[test]
fn a_connection_keeps_one_timer_entry_under_game_traffic() {
    let start = Instant::now();
    let server_addr: SocketAddr = "127.0.0.1:19132".parse().unwrap();
    let mut server = Endpoint::new(EndpointConfig::default(), server_addr, start);
    let mut clients: Vec<Endpoint> = (0..3u8)
        .map(|i| {
            let addr = SocketAddr::from(([127, 0, 0, 2 + i], 40_000));
            // Each its own GUID (a GUID already connected is refused).
            let config = EndpointConfig {
                rng_seed: u64::from(i) + 1,
                ..EndpointConfig::default()
            };
            Endpoint::new(config, addr, start)
        })
        .collect();
    let mut ids: Vec<ConnId> = clients
        .iter_mut()
        .map(|c| c.connect(start, server_addr).unwrap())
        .collect();
    let (mut now, mut received) = (start, 0);
    // 20 messages a second from each client for 10 s (virtual), in 5 ms steps. Client 0
    // closes at 5 s and connects again at 5.5 s: the server frees its slot (and its timer
    // entry) and gives the slot to the new connection.
    for tick in 0..2_000u32 {
        now += Duration::from_millis(5);
        if tick == 1_000 {
            clients[0].close(now, ids[0]);
        }
        if tick == 1_100 {
            assert_eq!(server.live, 2, "the closed connection's slot is free");
            ids[0] = clients[0].connect(now, server_addr).unwrap();
        }
        if tick % 10 == 0 && tick > 20 {
            for (i, (c, &id)) in clients.iter_mut().zip(&ids).enumerate() {
                if i == 0 && (1_000..1_150).contains(&tick) {
                    continue;
                }
                let opts = SendOptions::new(Reliability::UnreliableSequenced);
                c.send(now, id, Bytes::from_static(&[0x86; 40]), opts)
                    .unwrap();
            }
        }
        received += step(now, &mut server, &mut clients);
        assert_one_timer_each(&server);
    }
    assert_eq!(server.live, 3);
    assert_eq!(
        server.slots.len(),
        3,
        "the new connection reused the freed slot"
    );
    // Every message arrived (no loss here): clients 1 and 2 at ticks 30 to 1990 (197
    // each), client 0 at 30 to 990 and 1150 to 1990 (97 + 85).
    assert_eq!(received, 2 * 197 + 97 + 85);
}

#[test]
fn external_ids_never_name_an_engine_connection() {
    let ids: Vec<ConnId> = [0, 1, (1 << 31) - 1, 1 << 31, u64::MAX]
        .into_iter()
        .map(ConnId::external)
        .collect();
    for (i, a) in ids.iter().enumerate() {
        assert!(a.is_external());
        for b in &ids[i + 1..] {
            assert_ne!(a, b);
        }
    }
    let now = Instant::now();
    let mut server = Endpoint::new(
        EndpointConfig::default(),
        "127.0.0.1:19132".parse().unwrap(),
        now,
    );
    let id = ids[0];
    // The engine finds nothing by an external id, and does nothing with one.
    assert!(server.send_gate(id).is_none());
    assert!(server
        .send(
            now,
            id,
            Bytes::from_static(b"x"),
            SendOptions::new(Reliability::Reliable)
        )
        .is_err());
    server.close(now, id);
    server.set_receive_paused(now, id, true);
    assert!(server.poll_event().is_none());
}
