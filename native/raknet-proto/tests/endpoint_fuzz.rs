//! The endpoint fuzz body (`raknet_proto::fuzzing::endpoint`, also a cargo-fuzz target) over
//! generated scripts: a server and a client endpoint fed arbitrary and altered datagrams
//! among genuine traffic, clock steps and application calls must never panic.

use proptest::prelude::*;

/// One script step: an op byte and its argument, then up to 64 bytes that the step may
/// consume as payload (the body reads lengths from the stream itself).
fn step() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u8>(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(op, arg, rest)| {
            let mut v = vec![op, arg];
            v.extend(rest);
            v
        })
}

/// The handshake every generated "after a handshake" script begins with: genuine traffic, a
/// clock step, twice over, then traffic.
const HANDSHAKE: [u8; 10] = [0x07, 0xff, 0x0a, 0x20, 0x07, 0xff, 0x0a, 0x20, 0x07, 0xff];

#[test]
fn the_handshake_prefix_connects_in_every_configuration() {
    // Every configuration the first byte picks: the scripts below do reach connected state,
    // and a message each way gets through.
    for flags in 0..16u8 {
        let mut data = vec![flags];
        data.extend(HANDSHAKE);
        // The server sends on its connection, the client on its own, then traffic.
        data.extend([0x0c, 3, 1, 0, 0x1c, 3, 1, 0, 0x07, 0xff]);
        let reach = raknet_proto::fuzzing::endpoint(&data);
        assert_eq!(reach.connections, 1, "flags {flags:#x}: {reach:?}");
        assert_eq!(reach.messages, 2, "flags {flags:#x}: {reach:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_scripts_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        raknet_proto::fuzzing::endpoint(&data);
    }

    /// Scripts that begin with a completed handshake (genuine traffic, then a clock step and
    /// more traffic), so that the steps after it reach connected state.
    #[test]
    fn scripts_after_a_handshake_never_panic(
        flags in any::<u8>(),
        steps in proptest::collection::vec(step(), 0..48),
    ) {
        let mut data = vec![flags];
        data.extend(HANDSHAKE);
        for s in steps {
            data.extend(s);
        }
        raknet_proto::fuzzing::endpoint(&data);
    }
}
