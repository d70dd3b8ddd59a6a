//! Byte-level helpers shared by every message codec.
//!
//! Decoding reads from a [`Bytes`] so that payloads come out as zero-copy slices of the
//! datagram; every read checks the remaining length first and fails with
//! [`DecodeError::UnexpectedEnd`]. Encoding writes into any caller-owned [`BufMut`].
//!
//! Byte order (protocol reference §1): every multi-byte integer is big-endian, except the
//! 24-bit indices (datagram sequence number, reliable message, sequencing and ordering
//! indices), which are little-endian.

use bytes::{Buf, BufMut, Bytes};

use crate::error::DecodeError;

/// A wire message that can be written into a caller-owned buffer.
pub trait Encode {
    /// Append the message's wire bytes to `buf`.
    fn encode<B: BufMut>(&self, buf: &mut B);

    /// The exact number of bytes [`Encode::encode`] writes.
    fn encoded_len(&self) -> usize;

    /// Encode into a fresh `Vec` (convenience for tests and cold paths).
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }
}

/// A wire message that can be read from the front of a byte buffer.
pub trait Decode: Sized {
    /// Read one message from the front of `buf`, advancing it past the bytes consumed.
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError>;
}

/// Checked reads over [`Bytes`]; every method fails instead of panicking on short input.
pub(crate) trait Reader {
    fn need(&self, n: usize) -> Result<(), DecodeError>;
    fn read_u8(&mut self) -> Result<u8, DecodeError>;
    fn read_u16(&mut self) -> Result<u16, DecodeError>;
    fn read_u24_le(&mut self) -> Result<u32, DecodeError>;
    fn read_u32(&mut self) -> Result<u32, DecodeError>;
    fn read_u64(&mut self) -> Result<u64, DecodeError>;
    fn read_f32(&mut self) -> Result<f32, DecodeError>;
    fn read_bytes(&mut self, n: usize) -> Result<Bytes, DecodeError>;
    fn skip(&mut self, n: usize) -> Result<(), DecodeError>;
}

impl Reader for Bytes {
    #[inline]
    fn need(&self, n: usize) -> Result<(), DecodeError> {
        if self.len() < n {
            Err(DecodeError::UnexpectedEnd {
                needed: n,
                remaining: self.len(),
            })
        } else {
            Ok(())
        }
    }

    #[inline]
    fn read_u8(&mut self) -> Result<u8, DecodeError> {
        self.need(1)?;
        Ok(self.get_u8())
    }

    #[inline]
    fn read_u16(&mut self) -> Result<u16, DecodeError> {
        self.need(2)?;
        Ok(self.get_u16())
    }

    #[inline]
    fn read_u24_le(&mut self) -> Result<u32, DecodeError> {
        self.need(3)?;
        Ok(self.get_uint_le(3) as u32)
    }

    #[inline]
    fn read_u32(&mut self) -> Result<u32, DecodeError> {
        self.need(4)?;
        Ok(self.get_u32())
    }

    #[inline]
    fn read_u64(&mut self) -> Result<u64, DecodeError> {
        self.need(8)?;
        Ok(self.get_u64())
    }

    #[inline]
    fn read_f32(&mut self) -> Result<f32, DecodeError> {
        self.need(4)?;
        Ok(self.get_f32())
    }

    #[inline]
    fn read_bytes(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        self.need(n)?;
        Ok(self.split_to(n))
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.need(n)?;
        self.advance(n);
        Ok(())
    }
}

/// Write the low 24 bits of `v`, little-endian.
#[inline]
pub(crate) fn put_u24_le<B: BufMut>(buf: &mut B, v: u32) {
    buf.put_uint_le(u64::from(v & 0x00ff_ffff), 3);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u24_is_little_endian() {
        let mut out = Vec::new();
        put_u24_le(&mut out, 0x0c_0000 | 0x12);
        assert_eq!(out, [0x12, 0x00, 0x0c]);
        let mut b = Bytes::from(out);
        assert_eq!(b.read_u24_le().unwrap(), 0x0c_0012);
    }

    #[test]
    fn short_reads_fail_without_consuming() {
        let mut b = Bytes::from_static(&[1, 2]);
        assert_eq!(
            b.read_u24_le(),
            Err(DecodeError::UnexpectedEnd {
                needed: 3,
                remaining: 2
            })
        );
        assert_eq!(b.len(), 2);
        assert_eq!(b.read_u16().unwrap(), 0x0102);
        assert!(b.read_u8().is_err());
    }
}
