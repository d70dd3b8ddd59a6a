//! The two data channels a Minecraft client opens, as either side of a NetherNet session
//! sees them: which is which, NetherNet's framing on what goes out, and what comes in
//! joined back into messages.

use str0m::channel::{ChannelData, ChannelId};
use str0m::Rtc;

use crate::framing::{self, FrameError, Reassembler, FRAGMENT_PAYLOAD};
use crate::host::{SendError, RELIABLE_LABEL, UNRELIABLE_LABEL};

/// One session's channels.
#[derive(Debug)]
pub(crate) struct Channels {
    pub(crate) reliable: Option<ChannelId>,
    pub(crate) unreliable: Option<ChannelId>,
    reassembler: Reassembler,
}

impl Channels {
    pub(crate) fn new(max_message: usize) -> Self {
        Self {
            reliable: None,
            unreliable: None,
            reassembler: Reassembler::new(max_message),
        }
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
    /// than `max_buffered` bytes would then wait to be sent.
    pub(crate) fn write(
        &self,
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
        let mut channel = rtc.channel(channel).ok_or(SendError::Closed)?;
        let framed = data.len() + data.len().div_ceil(FRAGMENT_PAYLOAD).max(1);
        if channel.buffered_amount() + framed > max_buffered {
            return Err(SendError::Full);
        }
        for frame in frames {
            if !channel.write(true, &frame).map_err(|_| SendError::Closed)? {
                // Checked above: only a message cut in two would make this happen.
                return Err(SendError::Full);
            }
        }
        Ok(())
    }
}
