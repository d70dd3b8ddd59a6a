//! NetherNet, Minecraft Bedrock's WebRTC transport, sans-IO.
//!
//! - [`sdp`]: what signaling needs from an SDP (fingerprints, the `a=identity` line);
//! - [`identity`]: the server's assertion (the operator's P-384 key) and checks on a client's;
//! - [`framing`]: the one-byte fragment header of every data-channel message;
//! - [`client`]: one session as a Minecraft client opens it (tools, tests, the client role);
//! - [`host`]: many peers on one UDP socket, each a WebRTC session (`str0m`) with the two
//!   channels a Minecraft client opens, driven with time passed in, as `raknet-proto` is.
//!
//! The guide this follows is Mojang's `NetherNetOnboardingGuide.md`
//! (`Mojang/bedrock-protocol-docs`).

#[cfg(feature = "host")]
mod channels;
#[cfg(feature = "host")]
pub mod client;
pub mod framing;
pub mod fuzzing;
#[cfg(feature = "host")]
pub mod host;
pub mod identity;
pub mod sdp;
