//! Fuzz target bodies, shared by the cargo-fuzz targets in `native/fuzz` and by the
//! seed-corpus tests, so that stable CI exercises exactly what the fuzzer runs.
//!
//! Each body decodes arbitrary bytes; when decoding succeeds it re-encodes the value and
//! checks that decoding the encoding gives the same value back (decoding is idempotent).

use bytes::Bytes;

use crate::{addr, ConnectedMessage, Datagram, Decode, Encode, Frame, OfflineMessage, Timestamped};

fn check<T: PartialEq + std::fmt::Debug>(first: &T, second: &T, what: &str) {
    assert_eq!(
        first, second,
        "{what}: decode(encode(decode(x))) != decode(x)"
    );
}

/// Decode a connected datagram in both layouts, and every frame it holds.
pub fn datagram(data: &[u8]) {
    for timestamps in [false, true] {
        let Ok(d) = Datagram::decode(Bytes::copy_from_slice(data), timestamps) else {
            continue;
        };
        match &d {
            Datagram::Ack(ack) => {
                // Compare encodings: the arrival-rate float may be NaN, which never
                // equals itself.
                let wire = ack.to_vec();
                let again = match Datagram::decode(Bytes::from(wire.clone()), timestamps) {
                    Ok(Datagram::Ack(again)) => again.to_vec(),
                    other => panic!("re-encoded ACK decodes as {other:?}"),
                };
                check(&wire, &again, "ack");
            }
            Datagram::Nak(nak) => {
                let again = Datagram::decode(Bytes::from(nak.to_vec()), timestamps);
                check(&Ok(d.clone()), &again, "nak");
            }
            Datagram::Data { .. } => {
                for f in d.frames().flatten() {
                    frame_round_trip(&f);
                }
            }
        }
    }
}

fn frame_round_trip(f: &Frame) {
    let mut again = Frame::decode(&mut Bytes::from(f.to_vec())).expect("re-encoded frame decodes");
    // Receipt kinds go on the wire as their base type.
    again.reliability = f.reliability;
    check(f, &again, "frame");
}

/// Decode one frame.
pub fn frame(data: &[u8]) {
    if let Ok(f) = Frame::decode(&mut Bytes::copy_from_slice(data)) {
        frame_round_trip(&f);
    }
}

/// Decode an ACK or NAK (forcing the ACK/NAK flag bits onto the first byte).
pub fn ack(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let flag = if first & 1 == 0 { 0xc0 } else { 0xa0 };
    let mut v = Vec::with_capacity(data.len());
    v.push(flag);
    v.extend_from_slice(rest);
    datagram(&v);
}

/// Decode an offline message, with and without an OCR2 cookie.
pub fn offline(data: &[u8]) {
    let _ = OfflineMessage::is_offline(data);
    for cookie in [false, true] {
        if let Ok(m) = OfflineMessage::decode(&mut Bytes::copy_from_slice(data), cookie) {
            let again = OfflineMessage::decode(&mut Bytes::from(m.to_vec()), cookie);
            check(&Ok(m), &again, "offline message");
        }
    }
}

/// Decode a connected control message (and the timestamp prefix).
pub fn connected_message(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    let _ = Timestamped::split(&payload);
    if let Ok(m) = ConnectedMessage::decode(payload) {
        let encoded = match &m {
            ConnectedMessage::ConnectedPing(x) => x.to_vec(),
            ConnectedMessage::ConnectedPong(x) => x.to_vec(),
            ConnectedMessage::ConnectionRequest(x) => x.to_vec(),
            ConnectedMessage::ConnectionRequestAccepted(x) => x.to_vec(),
            ConnectedMessage::NewIncomingConnection(x) => x.to_vec(),
            _ => return,
        };
        check(
            &Ok(m),
            &ConnectedMessage::decode(Bytes::from(encoded)),
            "connected message",
        );
    }
}

/// Decode a system address.
pub fn address(data: &[u8]) {
    if let Ok(a) = addr::decode(&mut Bytes::copy_from_slice(data)) {
        let mut out = Vec::new();
        addr::encode(&a, &mut out);
        check(&Ok(a), &addr::decode(&mut Bytes::from(out)), "address");
    }
}
