//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use bytes::Bytes;

/// Parse hex with optional whitespace (and `|` field separators, as in the protocol
/// reference's vectors).
pub fn hex(s: &str) -> Bytes {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    assert!(s.len() % 2 == 0, "odd hex length");
    Bytes::from(
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<_>>(),
    )
}

/// `"04ffffffff0000"` repeated `n` times: the unassigned internal-address padding.
pub fn unassigned(n: usize) -> String {
    "04ffffffff0000".repeat(n)
}

pub mod counting;
pub mod pair;

use raknet_proto::{DataHeader, DatagramSeq, Encode, Frame};

/// A data datagram numbered `seq` holding `frames`, as a (possibly hostile) peer builds it.
pub fn datagram(seq: u32, frames: &[Frame]) -> Bytes {
    let mut out = Vec::new();
    DataHeader::new(DatagramSeq::new(seq)).encode(&mut out);
    for f in frames {
        f.encode(&mut out);
    }
    out.into()
}
