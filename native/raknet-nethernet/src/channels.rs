//! The two data channels a Minecraft client opens, as either side of a NetherNet session
//! sees them: which is which, NetherNet's framing on what goes out, and what comes in
//! joined back into messages.
//!
//! Frames wait in a queue of ours and are handed to SCTP while it holds less than
//! [`SCTP_HELD`] bytes of the session's (sent and not yet acknowledged, or not yet sent):
//! the SCTP stack's cost per operation grows with what it holds (measured: 20,000 64 B
//! messages took its sender 0.4 s of CPU with 4 KiB held, 2.0 s with 64 KiB, 4.8 s with
//! 1 MiB), and a queue is all that many messages need.

use std::collections::VecDeque;

use str0m::channel::{ChannelData, ChannelId};
use str0m::Rtc;

use crate::framing::{self, FrameError, Reassembler, FRAGMENT_PAYLOAD};
use crate::host::{SendError, RELIABLE_LABEL, UNRELIABLE_LABEL};

/// What SCTP holds of one session's frames at most (see the module's doc): 16 KiB in flight
/// or waiting, or two frames when they are larger (a large message's 10,000-byte segments
/// go two per round trip); enough for a game's messages, while bulk transfers over long
/// round trips would want more.
pub(crate) const SCTP_HELD: usize = 16 * 1024;

/// One session's channels.
#[derive(Debug)]
pub(crate) struct Channels {
    pub(crate) reliable: Option<ChannelId>,
    pub(crate) unreliable: Option<ChannelId>,
    reassembler: Reassembler,
    /// Frames not yet handed to SCTP, in sending order, with their channel.
    queue: VecDeque<(ChannelId, Vec<u8>)>,
    queued_bytes: usize,
}

impl Channels {
    pub(crate) fn new(max_message: usize) -> Self {
        Self {
            reliable: None,
            unreliable: None,
            reassembler: Reassembler::new(max_message),
            queue: VecDeque::new(),
            queued_bytes: 0,
        }
    }

    /// Hand queued frames to SCTP while it holds less than [`SCTP_HELD`] of them; whether
    /// any went.
    pub(crate) fn feed(&mut self, rtc: &mut Rtc) -> bool {
        let mut moved = false;
        while let Some((id, frame)) = self.queue.front() {
            let Some(mut channel) = rtc.channel(*id) else {
                // The channel closed: what waited for it goes nowhere.
                self.queued_bytes -= frame.len();
                self.queue.pop_front();
                continue;
            };
            if channel.buffered_amount() + frame.len() > SCTP_HELD.max(2 * frame.len()) {
                break;
            }
            if !channel.write(true, frame).unwrap_or(false) {
                break;
            }
            self.queued_bytes -= frame.len();
            self.queue.pop_front();
            moved = true;
        }
        moved
    }

    /// A channel opened with `label`; the first of each kind is kept, others ignored.
    pub(crate) fn opened(&mut self, id: ChannelId, label: &str) {
        match label {
            RELIABLE_LABEL if self.reliable.is_none() => self.reliable = Some(id),
            UNRELIABLE_LABEL if self.unreliable.is_none() => self.unreliable = Some(id),
            _ => {}
        }
    }

    /// A message in: `Some((payload, reliable))` when it completes one.
    pub(crate) fn receive(
        &mut self,
        data: &ChannelData,
    ) -> Result<Option<(Vec<u8>, bool)>, FrameError> {
        if Some(data.id) == self.reliable {
            Ok(self.reassembler.push(&data.data)?.map(|m| (m, true)))
        } else if Some(data.id) == self.unreliable {
            framing::unfragmented(&data.data).map(|p| Some((p.to_vec(), false)))
        } else {
            // A channel other than the two: not NetherNet's.
            Err(FrameError::Empty)
        }
    }

    /// Frame `data` onto the reliable channel (fragmented as needed) or the unreliable one
    /// (one fragment at most; the reliable one until the unreliable one opens), unless more
    /// than `max_buffered` bytes would then wait in our queue.
    pub(crate) fn write(
        &mut self,
        rtc: &mut Rtc,
        reliable: bool,
        data: &[u8],
        max_buffered: usize,
    ) -> Result<(), SendError> {
        let channel = if reliable {
            self.reliable
        } else {
            self.unreliable.or(self.reliable)
        };
        let channel = channel.ok_or(SendError::Closed)?;
        if Some(channel) == self.unreliable && !reliable && data.len() > FRAGMENT_PAYLOAD {
            return Err(SendError::TooLarge);
        }
        let frames = framing::fragments(data, FRAGMENT_PAYLOAD).ok_or(SendError::TooLarge)?;
        if rtc.channel(channel).is_none() {
            return Err(SendError::Closed);
        }
        let framed = data.len() + data.len().div_ceil(FRAGMENT_PAYLOAD).max(1);
        if self.queued_bytes + framed > max_buffered {
            return Err(SendError::Full);
        }
        for frame in frames {
            self.queued_bytes += frame.len();
            self.queue.push_back((channel, frame));
        }
        self.feed(rtc);
        Ok(())
    }
}
