//! NetherNet, Minecraft Bedrock's WebRTC transport, sans-IO.
//!
//! - [`sdp`]: what signaling needs from an SDP (fingerprints, the `a=identity` line);
//! - [`identity`]: the server's assertion (the operator's P-384 key) and checks on a client's;
//! - [`framing`]: the one-byte fragment header of every data-channel message;
//! - [`host`]: many peers on one UDP socket, each a WebRTC session (`str0m`) with the two
//!   channels a Minecraft client opens, driven with time passed in, as `raknet-proto` is.
//!
//! The guide this follows is Mojang's `NetherNetOnboardingGuide.md`
//! (`Mojang/bedrock-protocol-docs`).

pub mod framing;
pub mod fuzzing;
#[cfg(feature = "host")]
pub mod host;
pub mod identity;
pub mod sdp;
