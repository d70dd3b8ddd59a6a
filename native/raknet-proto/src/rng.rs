//! Keyed derivation of an endpoint's GUID and secrets, and the keyed hash behind
//! anti-spoofing cookies.
//!
//! The engine never reads the system's entropy: the GUID and the handshake keys come from
//! [`EndpointConfig::rng_seed`](crate::EndpointConfig::rng_seed) and
//! [`EndpointConfig::secret`](crate::EndpointConfig::secret), so runs are reproducible. Each
//! is SipHash keyed by both, over its own label: a pseudo-random function, so the GUID, which
//! every pong and handshake reply carries, tells nothing about the keys derived beside it.

/// The endpoint value named `label`, derived from the seed and the secret.
pub(crate) fn derive(seed: u64, secret: u64, label: &[u8]) -> u64 {
    siphash24(seed, secret, label)
}

/// SipHash-2-4 with a 128-bit key: a PRF, so a cookie cannot be forged without the key.
pub(crate) fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    last[7] = data.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_reference_vectors() {
        // The reference implementation's vectors: key 00..0f, message 00..(n-1).
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(k0, k1, &msg[..1]), 0x74f8_39c5_93dc_67fd);
        assert_eq!(siphash24(k0, k1, &msg[..8]), 0x93f5_f579_9a93_2462);
        assert_eq!(siphash24(k0, k1, &msg[..15]), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn derived_values_depend_on_seed_secret_and_label() {
        let guid = derive(7, 9, b"guid");
        assert_eq!(guid, derive(7, 9, b"guid"));
        for other in [
            derive(8, 9, b"guid"),
            derive(7, 10, b"guid"),
            derive(7, 9, b"key"),
        ] {
            assert_ne!(guid, other);
        }
    }
}
