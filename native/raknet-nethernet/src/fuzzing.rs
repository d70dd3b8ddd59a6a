//! Bodies of the fuzz targets (`native/fuzz`), here so that stable tests run them too.

use crate::framing::{self, Reassembler};
use crate::identity::{Assertion, Trust};
use crate::sdp::{self, Offer};

/// An offer as signaling gets it: parsed, its assertion taken apart and checked (the token
/// unchecked, so that the fingerprint signature is reached), an identity put back.
pub fn signaling(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(offer) = Offer::parse(&text) {
        let _ = sdp::canonical_fingerprints(&offer.fingerprints);
        let back = sdp::with_identity(&offer.sdp, "x");
        assert!(back.contains("a=identity:x\r\n"));
        if let Some(value) = &offer.identity {
            if let Ok(assertion) = Assertion::parse(value) {
                let _ = assertion.verify(&offer.fingerprints, &Trust::Unchecked, 0);
            }
        }
    }
    // The assertion parser on its own, too.
    if let Ok(assertion) = Assertion::parse(&text) {
        let _ = assertion.verify(&[], &Trust::SelfSigned, 0);
    }
}

/// Data-channel messages (each a length byte and that many bytes) through a reassembler and
/// the unreliable channel's check: no panic, memory within the limit.
pub fn framing(data: &[u8]) {
    const LIMIT: usize = 1024;
    let mut reassembler = Reassembler::new(LIMIT);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let frame = tail.get(..usize::from(len)).unwrap_or(tail);
        rest = tail.get(frame.len()..).unwrap_or(&[]);
        if let Ok(Some(message)) = reassembler.push(frame) {
            assert!(message.len() <= LIMIT);
        }
        assert!(reassembler.held() <= LIMIT);
        let _ = framing::unfragmented(frame);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn signaling_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            super::signaling(&data);
        }

        #[test]
        fn framing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            super::framing(&data);
        }
    }
}
