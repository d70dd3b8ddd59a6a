//! The offline handshake, both halves: the server's (stateless replies, cookies, half-open
//! records, address validation) and the client's (MTU probing with OCR1, then OCR2, until
//! the server's Reply2).

mod client;
mod server;

pub(crate) use client::{server_guid, ClientHandshake, ClientStep};
pub(crate) use server::*;
