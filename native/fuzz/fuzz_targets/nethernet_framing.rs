//! Fuzz target: the body lives in `raknet_nethernet::fuzzing::framing` so stable tests run it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    raknet_nethernet::fuzzing::framing(data);
});
