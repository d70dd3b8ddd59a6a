//! Fuzz target: the body lives in `raknet_proto::fuzzing::proxy_header` so stable tests run it
//! too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = raknet_proto::fuzzing::proxy_header(data);
});
