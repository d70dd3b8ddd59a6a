//! Runs every fuzz target's body over its seed corpus (`native/fuzz/seeds/<target>/`), so
//! stable CI exercises exactly the code the fuzzer runs. Every seed is a valid input: it
//! must still decode (or, for the endpoint, still connect), or the fuzzer would start from
//! nothing but rejects and these tests would check nothing.

use std::fs;
use std::path::Path;

/// The seeds of `target`, by file name.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut seeds: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&path).unwrap())
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds for {target}");
    seeds
}

/// Each seed decodes; every prefix of it is run too (truncated input is the most common
/// malformation) and may decode or not, but never panics.
fn run_seeds(target: &str, body: fn(&[u8]) -> bool) {
    for (name, data) in seeds(target) {
        assert!(body(&data), "{target} seed {name} no longer decodes");
        for end in 0..data.len() {
            body(&data[..end]);
        }
    }
}

#[test]
fn proxy_header_seeds() {
    run_seeds("proxy_header", raknet_proto::fuzzing::proxy_header);
}

#[test]
fn datagram_seeds() {
    run_seeds("datagram", raknet_proto::fuzzing::datagram);
}

#[test]
fn frame_seeds() {
    run_seeds("frame", raknet_proto::fuzzing::frame);
}

#[test]
fn ack_seeds() {
    run_seeds("ack", raknet_proto::fuzzing::ack);
}

#[test]
fn offline_seeds() {
    run_seeds("offline", raknet_proto::fuzzing::offline);
}

#[test]
fn connected_message_seeds() {
    run_seeds(
        "connected_message",
        raknet_proto::fuzzing::connected_message,
    );
}

#[test]
fn address_seeds() {
    run_seeds("address", raknet_proto::fuzzing::address);
}

/// Every endpoint script connects a client (so the fuzzer starts from scripts that get past
/// the handshake); its prefixes are run too.
#[test]
fn endpoint_seeds() {
    for (name, data) in seeds("endpoint") {
        let reach = raknet_proto::fuzzing::endpoint(&data);
        assert!(reach.connections > 0, "endpoint seed {name}: {reach:?}");
        for end in 0..data.len() {
            raknet_proto::fuzzing::endpoint(&data[..end]);
        }
    }
}
