//! The eight RakNet reliabilities (protocol reference §5.3).

use std::fmt;

/// How a message is delivered.
///
/// The three `*WithAckReceipt` kinds are local: they travel on the wire as their base type
/// (0, 2, 3) and only make the sender report the message's fate (§12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Reliability {
    /// May be lost, duplicated by the network, or arrive out of order.
    Unreliable = 0,
    /// May be lost; never delivered older than one already delivered on its channel.
    UnreliableSequenced = 1,
    /// Delivered exactly once, in any order.
    Reliable = 2,
    /// Delivered exactly once, in send order on its channel.
    ReliableOrdered = 3,
    /// Reliable, but only the newest message on its channel is delivered.
    ReliableSequenced = 4,
    /// Unreliable; the sender learns whether it was acknowledged or lost.
    UnreliableWithAckReceipt = 5,
    /// Reliable; the sender learns when it was acknowledged.
    ReliableWithAckReceipt = 6,
    /// Reliable ordered; the sender learns when it was acknowledged.
    ReliableOrderedWithAckReceipt = 7,
}

impl Reliability {
    /// All eight reliabilities, in numeric order.
    pub const ALL: [Self; 8] = [
        Self::Unreliable,
        Self::UnreliableSequenced,
        Self::Reliable,
        Self::ReliableOrdered,
        Self::ReliableSequenced,
        Self::UnreliableWithAckReceipt,
        Self::ReliableWithAckReceipt,
        Self::ReliableOrderedWithAckReceipt,
    ];

    /// The reliability with numeric value `v`, if it is one of the eight.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Unreliable),
            1 => Some(Self::UnreliableSequenced),
            2 => Some(Self::Reliable),
            3 => Some(Self::ReliableOrdered),
            4 => Some(Self::ReliableSequenced),
            5 => Some(Self::UnreliableWithAckReceipt),
            6 => Some(Self::ReliableWithAckReceipt),
            7 => Some(Self::ReliableOrderedWithAckReceipt),
            _ => None,
        }
    }

    /// The type that goes on the wire: receipt kinds map to their base type.
    pub const fn on_wire(self) -> Self {
        match self {
            Self::UnreliableWithAckReceipt => Self::Unreliable,
            Self::ReliableWithAckReceipt => Self::Reliable,
            Self::ReliableOrderedWithAckReceipt => Self::ReliableOrdered,
            other => other,
        }
    }

    /// Whether frames carry a reliable message index and are resent until acknowledged.
    pub const fn is_reliable(self) -> bool {
        matches!(
            self.on_wire(),
            Self::Reliable | Self::ReliableOrdered | Self::ReliableSequenced
        )
    }

    /// Whether delivery waits for earlier messages on the channel.
    pub const fn is_ordered(self) -> bool {
        matches!(self.on_wire(), Self::ReliableOrdered)
    }

    /// Whether older messages on the channel are dropped.
    pub const fn is_sequenced(self) -> bool {
        matches!(
            self.on_wire(),
            Self::UnreliableSequenced | Self::ReliableSequenced
        )
    }

    /// Whether frames carry an ordering index and channel (ordered or sequenced).
    pub const fn uses_channel(self) -> bool {
        self.is_ordered() || self.is_sequenced()
    }

    /// Whether the sender reports the message's fate.
    pub const fn has_receipt(self) -> bool {
        matches!(
            self,
            Self::UnreliableWithAckReceipt
                | Self::ReliableWithAckReceipt
                | Self::ReliableOrderedWithAckReceipt
        )
    }

    /// The reliability a message is sent with once it has to be split: official RakNet
    /// makes every split message reliable, since one lost fragment would strand the rest.
    pub const fn for_split(self) -> Self {
        match self {
            Self::Unreliable => Self::Reliable,
            Self::UnreliableSequenced => Self::ReliableSequenced,
            Self::UnreliableWithAckReceipt => Self::ReliableWithAckReceipt,
            other => other,
        }
    }
}

impl fmt::Display for Reliability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_values_round_trip() {
        for (i, r) in Reliability::ALL.iter().enumerate() {
            assert_eq!(Reliability::from_u8(i as u8), Some(*r));
            assert_eq!(*r as u8, i as u8);
        }
        assert_eq!(Reliability::from_u8(8), None);
    }

    #[test]
    fn receipt_kinds_go_on_the_wire_as_base_types() {
        use Reliability::*;
        assert_eq!(UnreliableWithAckReceipt.on_wire(), Unreliable);
        assert_eq!(ReliableWithAckReceipt.on_wire(), Reliable);
        assert_eq!(ReliableOrderedWithAckReceipt.on_wire(), ReliableOrdered);
        assert!(ReliableOrderedWithAckReceipt.is_ordered());
        assert!(!UnreliableWithAckReceipt.is_reliable());
        assert!(UnreliableSequenced.uses_channel() && !Reliable.uses_channel());
        assert_eq!(UnreliableSequenced.for_split(), ReliableSequenced);
    }
}
