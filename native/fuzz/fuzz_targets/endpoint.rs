//! Fuzz target: a server and a client endpoint driven by a script (the body lives in
//! `raknet_proto::fuzzing::endpoint` so stable tests run it too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    raknet_proto::fuzzing::endpoint(data);
});
