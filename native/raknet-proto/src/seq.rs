//! Wrap-aware 24-bit counters.
//!
//! RakNet's datagram sequence numbers and its reliable-message, sequencing and ordering
//! indices are 24-bit values that wrap from `0xFFFFFF` to `0`. Plain integer comparison breaks
//! after 2^24 messages (about 46 hours at 100 datagrams/s), which is exactly what several
//! third-party implementations get wrong (protocol reference §5.1). These types only offer
//! comparisons by the half-range rule: `a` is after `b` iff `(a − b) mod 2^24` lies in
//! `1 ..= 2^23 − 1`.

use std::cmp::Ordering;
use std::fmt;

/// The modulus of every 24-bit counter.
pub const U24_MODULUS: u32 = 1 << 24;
const MASK: u32 = U24_MODULUS - 1;
const HALF: u32 = U24_MODULUS / 2;

macro_rules! u24_counter {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// The counter's first value.
            pub const ZERO: Self = Self(0);
            /// The largest value before the counter wraps to zero.
            pub const MAX: Self = Self(MASK);

            /// Make a counter from the low 24 bits of `value`.
            #[inline]
            pub const fn new(value: u32) -> Self {
                Self(value & MASK)
            }

            /// The counter as an integer in `0 ..= 0xFFFFFF`.
            #[inline]
            pub const fn get(self) -> u32 {
                self.0
            }

            /// The value after this one, wrapping to zero after `0xFFFFFF`.
            #[inline]
            #[must_use]
            pub const fn next(self) -> Self {
                Self((self.0 + 1) & MASK)
            }

            /// Add `n` modulo 2^24.
            #[inline]
            #[must_use]
            pub const fn wrapping_add(self, n: u32) -> Self {
                Self(self.0.wrapping_add(n) & MASK)
            }

            /// Subtract `n` modulo 2^24.
            #[inline]
            #[must_use]
            pub const fn wrapping_sub(self, n: u32) -> Self {
                Self(self.0.wrapping_sub(n) & MASK)
            }

            /// How far this value is ahead of `earlier`, modulo 2^24.
            #[inline]
            pub const fn distance_from(self, earlier: Self) -> u32 {
                self.0.wrapping_sub(earlier.0) & MASK
            }

            /// Whether this value comes after `other` under the half-range rule.
            #[inline]
            pub const fn is_after(self, other: Self) -> bool {
                let d = self.distance_from(other);
                d != 0 && d < HALF
            }

            /// Compare under the half-range rule. Not a total order: only meaningful for
            /// values less than 2^23 apart.
            #[inline]
            pub fn cmp_wrapping(self, other: Self) -> Ordering {
                if self == other {
                    Ordering::Equal
                } else if self.is_after(other) {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }
    };
}

u24_counter!(
    /// The number of a connected data datagram; ACKs and NAKs refer to it.
    DatagramSeq
);
u24_counter!(
    /// The reliable message index of a frame, used for duplicate detection.
    MessageIndex
);
u24_counter!(
    /// The ordering index of an ordered or sequenced frame on its channel.
    OrderIndex
);
u24_counter!(
    /// The sequencing index of a sequenced frame on its channel.
    SequenceIndex
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_wraps_at_2_pow_24() {
        assert_eq!(DatagramSeq::MAX.next(), DatagramSeq::ZERO);
        assert_eq!(DatagramSeq::new(0x0100_0005), DatagramSeq::new(5));
    }

    #[test]
    fn comparison_is_wrap_aware() {
        let last = MessageIndex::MAX;
        let first = MessageIndex::ZERO;
        assert!(first.is_after(last));
        assert!(!last.is_after(first));
        assert_eq!(first.cmp_wrapping(last), Ordering::Greater);
        assert_eq!(first.distance_from(last), 1);
        assert_eq!(last.distance_from(first), MASK);
        assert_eq!(
            OrderIndex::new(10).cmp_wrapping(OrderIndex::new(10)),
            Ordering::Equal
        );
        assert!(OrderIndex::new(HALF - 1).is_after(OrderIndex::ZERO));
        assert!(!OrderIndex::new(HALF).is_after(OrderIndex::ZERO));
    }

    #[test]
    fn arithmetic_wraps() {
        assert_eq!(SequenceIndex::new(2).wrapping_sub(3), SequenceIndex::MAX);
        assert_eq!(SequenceIndex::MAX.wrapping_add(3), SequenceIndex::new(2));
    }
}
