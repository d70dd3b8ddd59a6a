//! Runs every fuzz target's body over its seed corpus (`native/fuzz/seeds/<target>/`), so
//! stable CI exercises exactly the code the fuzzer runs.

use std::fs;
use std::path::Path;

fn run_seeds(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut count = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = fs::read(entry.unwrap().path()).unwrap();
        body(&data);
        // Every prefix too: truncated input is the most common malformation.
        for end in 0..data.len() {
            body(&data[..end]);
        }
        count += 1;
    }
    assert!(count > 0, "no seeds for {target}");
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

#[test]
fn endpoint_seeds() {
    run_seeds("endpoint", |data| {
        raknet_proto::fuzzing::endpoint(data);
    });
}
