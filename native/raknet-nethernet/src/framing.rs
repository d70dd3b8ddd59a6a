//! NetherNet's message framing: one header byte in front of every data-channel message.
//!
//! `0` marks a whole message or the last fragment of one; `N > 0` a fragment with `N` more to
//! follow. Only the reliable (ordered) channel fragments: its fragments arrive in order, so a
//! reassembler is a buffer and a countdown. The unreliable channel's header is always `0`.

use std::fmt;

/// Payload bytes per fragment we send: 10,000, as Minecraft's own NetherNet segments (and
/// the other implementations: go-nethernet's `maxMessageSize`), well under the 16 KiB
/// every WebRTC stack accepts (RFC 8831 §6.6). The unreliable channel, which does not
/// fragment, takes messages of at most this size. Fragments received may be of any size.
pub const FRAGMENT_PAYLOAD: usize = 10_000;

/// Fragments in one message at most: the header counts down from 255.
pub const MAX_FRAGMENTS: usize = 256;

/// The largest message [`fragments`] can frame: 256 fragments of [`FRAGMENT_PAYLOAD`].
pub const MAX_MESSAGE: usize = MAX_FRAGMENTS * FRAGMENT_PAYLOAD;

/// The largest message a session joins again by default: 4 MiB (a peer's fragments may be
/// larger than ours).
pub const MAX_RECEIVED: usize = 4 * 1024 * 1024;

/// Why a frame was refused. The reassembler starts over after any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A data-channel message without even the header byte.
    Empty,
    /// A fragment whose countdown does not follow the previous one's.
    OutOfSequence {
        /// The header the reassembler waited for.
        expected: u8,
        /// The header that came.
        got: u8,
    },
    /// The message grew past the reassembler's limit.
    TooLarge {
        /// The limit.
        max: usize,
    },
    /// A fragment on a channel that does not fragment (header other than `0`).
    Fragmented,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty data-channel message (no header byte)"),
            Self::OutOfSequence { expected, got } => {
                write!(f, "fragment header {got} where {expected} was due")
            }
            Self::TooLarge { max } => write!(f, "reassembled message over {max} bytes"),
            Self::Fragmented => f.write_str("fragment on the unreliable channel"),
        }
    }
}

impl std::error::Error for FrameError {}

/// The frames carrying `payload`, in sending order, each at most `max_payload + 1` bytes;
/// `None` if that takes more than [`MAX_FRAGMENTS`]. An empty payload is one frame (`[0]`).
pub fn fragments(payload: &[u8], max_payload: usize) -> Option<impl Iterator<Item = Vec<u8>> + '_> {
    let max_payload = max_payload.max(1);
    let count = payload.len().div_ceil(max_payload).max(1);
    if count > MAX_FRAGMENTS {
        return None;
    }
    Some((0..count).map(move |i| {
        let chunk = payload
            .get(i * max_payload..((i + 1) * max_payload).min(payload.len()))
            .unwrap_or(&[]);
        let mut frame = Vec::with_capacity(chunk.len() + 1);
        // count <= 256, so what remains after fragment i fits a byte.
        frame.push((count - 1 - i) as u8);
        frame.extend_from_slice(chunk);
        frame
    }))
}

/// A whole message from the unreliable channel (header `0`), without its header.
pub fn unfragmented(frame: &[u8]) -> Result<&[u8], FrameError> {
    match frame.split_first() {
        None => Err(FrameError::Empty),
        Some((0, payload)) => Ok(payload),
        Some(_) => Err(FrameError::Fragmented),
    }
}

/// Joins the reliable channel's fragments back into messages, up to a size limit.
#[derive(Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    /// The header due next, while a message is under way.
    due: Option<u8>,
    max_message: usize,
}

impl Reassembler {
    /// A reassembler refusing messages over `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Self {
            buf: Vec::new(),
            due: None,
            max_message,
        }
    }

    /// Take one frame: a whole message when it completes one. On an error the message under
    /// way is dropped; a frame that starts a new message may follow.
    pub fn push(&mut self, frame: &[u8]) -> Result<Option<Vec<u8>>, FrameError> {
        let Some((&header, payload)) = frame.split_first() else {
            self.reset();
            return Err(FrameError::Empty);
        };
        if let Some(expected) = self.due {
            if header != expected {
                self.reset();
                return Err(FrameError::OutOfSequence {
                    expected,
                    got: header,
                });
            }
        }
        if self.buf.len() + payload.len() > self.max_message {
            self.reset();
            return Err(FrameError::TooLarge {
                max: self.max_message,
            });
        }
        if header == 0 {
            self.due = None;
            if self.buf.is_empty() {
                return Ok(Some(payload.to_vec()));
            }
            self.buf.extend_from_slice(payload);
            return Ok(Some(std::mem::take(&mut self.buf)));
        }
        self.buf.extend_from_slice(payload);
        self.due = Some(header - 1);
        Ok(None)
    }

    /// Bytes held for the message under way.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    fn reset(&mut self) {
        self.buf = Vec::new();
        self.due = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn whole_message_is_one_frame_with_header_zero() {
        let frames: Vec<_> = fragments(b"hello", 100).unwrap().collect();
        assert_eq!(frames, vec![b"\0hello".to_vec()]);
        let empty: Vec<_> = fragments(b"", 100).unwrap().collect();
        assert_eq!(empty, vec![vec![0]]);
    }

    #[test]
    fn headers_count_down_as_the_guide_shows() {
        let frames: Vec<_> = fragments(b"abcdefg", 3).unwrap().collect();
        assert_eq!(
            frames,
            vec![b"\x02abc".to_vec(), b"\x01def".to_vec(), b"\x00g".to_vec()]
        );
    }

    #[test]
    fn more_than_256_fragments_is_refused() {
        assert!(fragments(&[0; 257], 1).is_none());
        assert_eq!(fragments(&[0; 256], 1).unwrap().count(), 256);
        assert_eq!(fragments(&[7; 256], 1).unwrap().next().unwrap()[0], 255);
    }

    #[test]
    fn reassembler_refuses_gaps_and_recovers() {
        let mut r = Reassembler::new(1 << 20);
        assert_eq!(r.push(b"\x02ab"), Ok(None));
        assert_eq!(
            r.push(b"\x00cd"),
            Err(FrameError::OutOfSequence {
                expected: 1,
                got: 0
            })
        );
        assert_eq!(r.held(), 0);
        assert_eq!(r.push(b"\x00xy"), Ok(Some(b"xy".to_vec())));
        assert_eq!(r.push(b""), Err(FrameError::Empty));
    }

    #[test]
    fn reassembler_bounds_memory() {
        let mut r = Reassembler::new(10);
        assert_eq!(r.push(b"\x05123456"), Ok(None));
        assert_eq!(r.push(b"\x04123456"), Err(FrameError::TooLarge { max: 10 }));
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn unreliable_frames_carry_header_zero() {
        assert_eq!(unfragmented(b"\0abc"), Ok(&b"abc"[..]));
        assert_eq!(unfragmented(b"\x01abc"), Err(FrameError::Fragmented));
        assert_eq!(unfragmented(b""), Err(FrameError::Empty));
    }

    proptest! {
        #[test]
        fn fragments_reassemble_to_the_message(
            msg in proptest::collection::vec(any::<u8>(), 0..5000),
            size in 1usize..600,
        ) {
            prop_assume!(msg.len().div_ceil(size) <= MAX_FRAGMENTS);
            let mut r = Reassembler::new(MAX_MESSAGE);
            let mut out = Vec::new();
            for frame in fragments(&msg, size).unwrap() {
                prop_assert!(frame.len() <= size + 1);
                if let Some(m) = r.push(&frame).unwrap() {
                    out.push(m);
                }
            }
            prop_assert_eq!(out, vec![msg]);
        }

        #[test]
        fn reassembler_never_panics_or_grows_past_its_limit(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..64),
        ) {
            let mut r = Reassembler::new(256);
            for f in &frames {
                let _ = r.push(f);
                prop_assert!(r.held() <= 256);
            }
        }
    }
}
