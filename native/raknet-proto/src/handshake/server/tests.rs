//! Unit tests of the server half of the handshake.

use super::*;
use crate::Endpoint;
use std::time::Instant;

/// SplitMix64, which drew the GUID and then the handshake keys from the seed before
/// (issue: the GUID gave the keys away).
fn splitmix_next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The state SplitMix64 was in when it returned `out`: its output function undone.
fn splitmix_state(out: u64) -> u64 {
    fn unshift(y: u64, k: u32) -> u64 {
        let mut x = y;
        let mut shift = k;
        while shift < 64 {
            x ^= y >> shift;
            shift += k;
        }
        x
    }
    fn inverse(c: u64) -> u64 {
        // Newton's iteration: each step doubles the correct low bits (c is odd).
        let mut inv = c;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(inv)));
        }
        inv
    }
    let mut z = unshift(out, 31);
    z = unshift(z.wrapping_mul(inverse(0x94d0_49bb_1331_11eb)), 27);
    unshift(z.wrapping_mul(inverse(0xbf58_476d_1ce4_e5b9)), 30)
}

fn ocr2(server: SocketAddr, cookie: u32) -> Bytes {
    crate::message::OpenConnectionRequest2 {
        cookie: Some(cookie),
        client_challenge: None,
        server_address: server,
        mtu: 1400,
        client_guid: 99,
    }
    .to_vec()
    .into()
}

/// Every pong and handshake reply carries the server's GUID. When the GUID and then the
/// cookie key were consecutive SplitMix64 outputs, anyone who pinged the server could run
/// the generator on from the GUID, forge a cookie for any address and open connections
/// from spoofed addresses. The attacker's computation, against a server that derives its
/// values with a keyed hash: the forged cookie is dropped, a real one is taken.
#[test]
fn the_guid_gives_no_key_away() {
    let config = EndpointConfig {
        rng_seed: 0x0123_4567_89ab_cdef,
        secret: 0x0fed_cba9_8765_4321,
        ..EndpointConfig::default()
    };
    let server: SocketAddr = "127.0.0.1:19132".parse().unwrap();
    let mut ep = Endpoint::new(config.clone(), server, Instant::now());
    let mut state = splitmix_state(ep.guid());
    let mut forger = ServerHandshake::new(&config, Arc::default());
    forger.cookie_key = (splitmix_next(&mut state), splitmix_next(&mut state));
    let victim: SocketAddr = "127.0.0.9:5000".parse().unwrap();
    ep.handle(
        Instant::now(),
        victim,
        ocr2(server, forger.cookie(victim, 0, 11)),
    );
    assert_eq!((ep.stats().bad_cookies, ep.stats().half_open), (1, 0));

    // The attacker's arithmetic is right: it finds the state behind any output.
    let mut s = 0x5eed;
    let first = splitmix_next(&mut s);
    assert_eq!(splitmix_state(first), s);
    // And a cookie made with the server's own keys (the same config derives them) is taken.
    let player: SocketAddr = "127.0.0.10:5000".parse().unwrap();
    let real = ServerHandshake::new(&config, Arc::default()).cookie(player, 0, 11);
    ep.handle(Instant::now(), player, ocr2(server, real));
    assert_eq!((ep.stats().bad_cookies, ep.stats().half_open), (1, 1));
}
