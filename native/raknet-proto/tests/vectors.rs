//! Byte-exact tests against the vectors of the protocol reference §15: captures of official
//! RakNet 4.081 on loopback (sets A-D) and of X-Plane's client (set E).

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::{hex, unassigned};
use raknet_proto::*;

const SERVER_GUID: u64 = 0x0006_60db_22f1_b6b3;
const MAGIC: &str = "00ffff00fefefefefdfdfdfd12345678";

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Decode `wire` as `T`, check the value, and check that encoding it gives `wire` back.
fn exact<T: Decode + Encode + PartialEq + std::fmt::Debug>(wire: &Bytes, expected: &T) {
    let decoded = T::decode(&mut wire.clone()).expect("decodes");
    assert_eq!(&decoded, expected);
    assert_eq!(expected.encoded_len(), wire.len());
    assert_eq!(Bytes::from(expected.to_vec()), *wire);
}

fn single_frame(datagram: &str) -> (DataHeader, Frame) {
    let d = Datagram::decode(hex(datagram), false).unwrap();
    let Datagram::Data { header, .. } = &d else {
        panic!("not data")
    };
    let frames: Vec<_> = d.frames().collect::<Result<_, _>>().unwrap();
    assert_eq!(frames.len(), 1);
    (*header, frames.into_iter().next().unwrap())
}

/// Re-encode a data datagram from its header and frames.
fn reencode(header: &DataHeader, frames: &[Frame]) -> Bytes {
    let mut out = Vec::new();
    header.encode(&mut out);
    for f in frames {
        f.encode(&mut out);
    }
    out.into()
}

// ---- A. offline exchange ---------------------------------------------------------------

#[test]
fn a1_unconnected_ping() {
    let wire = hex(&format!("01 0000000000001234 {MAGIC} 0102030405060708"));
    exact(
        &wire,
        &UnconnectedPing {
            only_if_open: false,
            time: 0x1234,
            client_guid: Some(0x0102030405060708),
        },
    );
    assert!(OfflineMessage::is_offline(&wire));
}

#[test]
fn a2_unconnected_pong_raw_payload() {
    let wire = hex(&format!(
        "1c 0000000000001234 000660db22f1b6b3 {MAGIC} 6f6666696369616c2d6d6f7464"
    ));
    let pong = UnconnectedPong {
        time: 0x1234,
        server_guid: SERVER_GUID,
        data: Bytes::from_static(b"official-motd"),
    };
    exact(&wire, &pong);
    assert!(BedrockMotd::parse(&pong.data).is_none());
}

#[test]
fn a3_a4_incompatible_protocol_version() {
    let ocr1 = hex(&format!("05 {MAGIC} 0b {}", "00".repeat(600)));
    assert_eq!(ocr1.len(), 618);
    exact(
        &ocr1,
        &OpenConnectionRequest1 {
            protocol: 11,
            mtu: 646,
        },
    );
    let wire = hex(&format!("19 06 {MAGIC} 000660db22f1b6b3"));
    exact(
        &wire,
        &IncompatibleProtocolVersion {
            protocol: 6,
            server_guid: SERVER_GUID,
        },
    );
}

#[test]
fn a5_a6_ocr1_and_reply1() {
    let ocr1 = hex(&format!("05 {MAGIC} 06 {}", "00".repeat(530)));
    exact(
        &ocr1,
        &OpenConnectionRequest1 {
            protocol: 6,
            mtu: 576,
        },
    );
    let reply = hex(&format!("06 {MAGIC} 000660db22f1b6b3 00 0240"));
    exact(
        &reply,
        &OpenConnectionReply1 {
            server_guid: SERVER_GUID,
            cookie: None,
            server_public_key: None,
            mtu: 576,
        },
    );
}

#[test]
fn a7_ocr2_without_cookie() {
    let wire = hex(&format!("07 {MAGIC} 0480fffffe7149 0240 1122334455667788"));
    let m = OpenConnectionRequest2 {
        cookie: None,
        client_challenge: None,
        server_address: sock("127.0.0.1:29001"),
        mtu: 576,
        client_guid: 0x1122334455667788,
    };
    assert_eq!(
        OpenConnectionRequest2::decode_with_cookie(&mut wire.clone(), false).unwrap(),
        m
    );
    assert_eq!(Bytes::from(m.to_vec()), wire);
    assert_eq!(m.encoded_len(), 34);
}

#[test]
fn a8_reply2() {
    let wire = hex(&format!(
        "08 {MAGIC} 000660db22f1b6b3 0480fffffe717a 0240 00"
    ));
    exact(
        &wire,
        &OpenConnectionReply2 {
            server_guid: SERVER_GUID,
            client_address: sock("127.0.0.1:29050"),
            mtu: 576,
            security_answer: None,
        },
    );
}

#[test]
fn a9_a10_refusals() {
    exact(
        &hex(&format!("12 {MAGIC} 000660db22f1b6b3")),
        &AlreadyConnected {
            server_guid: SERVER_GUID,
        },
    );
    exact(
        &hex(&format!("14 {MAGIC} 000660db22f1b6b3")),
        &NoFreeIncomingConnections {
            server_guid: SERVER_GUID,
        },
    );
}

// ---- B. connected handshake ------------------------------------------------------------

#[test]
fn b1_connection_request() {
    let dg = "84 000000 | 40 0090 000000 | 09 1122334455667788 0000000000000064 00";
    let (header, frame) = single_frame(dg);
    assert_eq!(
        header,
        DataHeader {
            needs_b_and_as: true,
            ..DataHeader::new(DatagramSeq::ZERO)
        }
    );
    assert_eq!(frame.reliability, Reliability::Reliable);
    assert_eq!(frame.message_index, MessageIndex::ZERO);
    let req = ConnectionRequest {
        client_guid: 0x1122334455667788,
        time: 100,
        use_security: false,
        password: Bytes::new(),
    };
    exact(&frame.payload, &req);
    assert_eq!(reencode(&header, &[frame]), hex(dg));
}

#[test]
fn b2_ack_of_datagram_0() {
    let wire = hex("c0 0001 01 000000");
    let d = Datagram::decode(wire.clone(), false).unwrap();
    let ack = Ack {
        timestamp: None,
        arrival_rate: None,
        ranges: vec![AckRange::single(DatagramSeq::ZERO)],
    };
    assert_eq!(d, Datagram::Ack(ack.clone()));
    assert_eq!(Bytes::from(ack.to_vec()), wire);
}

#[test]
fn b3_connection_request_accepted_with_10_addresses() {
    let dg = format!(
        "84 000000 | 60 0300 000000 000000 00 | 10 0480fffffe717a 0000 0480fffffe7149 {} 0000000000000064 00000000000001f6",
        unassigned(9)
    );
    let (header, frame) = single_frame(&dg);
    assert_eq!(frame.reliability, Reliability::ReliableOrdered);
    assert_eq!(frame.payload.len(), 96);
    let mut internal = vec![sock("127.0.0.1:29001")];
    internal.extend(std::iter::repeat_n(addr::UNASSIGNED, 9));
    let m = ConnectionRequestAccepted {
        client_address: sock("127.0.0.1:29050"),
        system_index: 0,
        internal_addresses: internal,
        request_time: 100,
        accepted_time: 502,
    };
    exact(&frame.payload, &m);
    assert_eq!(reencode(&header, &[frame]), hex(&dg));
}

#[test]
fn b4_connected_ping() {
    let dg = "84 010000 | 00 0048 | 00 00000000000006b2";
    let (header, frame) = single_frame(dg);
    assert_eq!(header.seq, DatagramSeq::new(1));
    assert_eq!(frame.reliability, Reliability::Unreliable);
    exact(&frame.payload, &ConnectedPing { time: 1714 });
    assert_eq!(
        ConnectedMessage::decode(frame.payload.clone()).unwrap(),
        ConnectedMessage::ConnectedPing(ConnectedPing { time: 1714 })
    );
}

#[test]
fn b5_nak_then_ack() {
    let nak = Nak {
        ranges: vec![AckRange::single(DatagramSeq::new(2))],
    };
    assert_eq!(
        Datagram::decode(hex("a0 0001 01 020000"), false).unwrap(),
        Datagram::Nak(nak.clone())
    );
    assert_eq!(Bytes::from(nak.to_vec()), hex("a0 0001 01 020000"));
    let Datagram::Ack(ack) = Datagram::decode(hex("c0 0001 01 030000"), false).unwrap() else {
        panic!()
    };
    assert_eq!(ack.ranges, vec![AckRange::single(DatagramSeq::new(3))]);
}

// ---- C. official client <-> official server --------------------------------------------

#[test]
fn c1_c2_official_client_request_and_accept() {
    let (_, f) =
        single_frame("84 000000 | 40 0090 000000 | 09 000660db2347eb49 0000000000001626 00");
    let req = ConnectionRequest::decode(&mut f.payload.clone()).unwrap();
    assert_eq!((req.client_guid, req.time), (0x000660db2347eb49, 5670));
    let dg = format!(
        "84 000000 | 60 0300 000000 000000 00 | 10 0480fffffe7184 0000 0480fffffe7149 {} 0000000000001626 0000000000001626",
        unassigned(9)
    );
    let (_, f) = single_frame(&dg);
    let acc = ConnectionRequestAccepted::decode(&mut f.payload.clone()).unwrap();
    assert_eq!(acc.client_address, sock("127.0.0.1:29060"));
    assert_eq!((acc.request_time, acc.accepted_time), (5670, 5670));
}

#[test]
fn c3_new_incoming_connection_and_ping_in_one_datagram() {
    let dg = format!(
        "84 010000 | 60 02f0 010000 000000 00 | 13 0480fffffe7149 0480fffffe7184 {} 0000000000001626 0000000000001630 | 00 0048 | 00 0000000000001630",
        unassigned(9)
    );
    assert_eq!(hex(&dg).len(), 120);
    let d = Datagram::decode(hex(&dg), false).unwrap();
    let frames: Vec<Frame> = d.frames().collect::<Result<_, _>>().unwrap();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].message_index, MessageIndex::new(1));
    let mut internal = vec![sock("127.0.0.1:29060")];
    internal.extend(std::iter::repeat_n(addr::UNASSIGNED, 9));
    exact(
        &frames[0].payload,
        &NewIncomingConnection {
            server_address: sock("127.0.0.1:29001"),
            internal_addresses: internal,
            ping_time: 5670,
            pong_time: 5680,
        },
    );
    exact(&frames[1].payload, &ConnectedPing { time: 5680 });
    let Datagram::Data { header, .. } = d else {
        panic!()
    };
    assert_eq!(reencode(&header, &frames), hex(&dg));
}

#[test]
fn c4_ping_and_pong_in_one_datagram() {
    let dg = "84 010000 | 00 0048 | 00 000000000000163a | 00 0088 | 03 0000000000001630 000000000000163a";
    let d = Datagram::decode(hex(dg), false).unwrap();
    let frames: Vec<Frame> = d.frames().collect::<Result<_, _>>().unwrap();
    exact(
        &frames[1].payload,
        &ConnectedPong {
            ping_time: 5680,
            pong_time: 5690,
        },
    );
}

#[test]
fn c5_ack_with_a_range() {
    let wire = hex("c0 0001 00 010000 020000");
    let ack = Ack {
        timestamp: None,
        arrival_rate: None,
        ranges: vec![AckRange {
            start: DatagramSeq::new(1),
            end: DatagramSeq::new(2),
        }],
    };
    assert_eq!(
        Datagram::decode(wire.clone(), false).unwrap(),
        Datagram::Ack(ack.clone())
    );
    assert_eq!(Bytes::from(ack.to_vec()), wire);
}

#[test]
fn c6_one_message_per_reliability() {
    use Reliability::*;
    // (datagram, reliability as sent, wire reliability, ri, si, oi, channel)
    let cases: [(&str, Reliability, Reliability, u32, u32, u32, u8); 8] = [
        ("84 030000 00 0010 8655", Unreliable, Unreliable, 0, 0, 0, 0),
        (
            "84 040000 20 0018 000000 000000 05 865553",
            UnreliableSequenced,
            UnreliableSequenced,
            0,
            0,
            0,
            5,
        ),
        (
            "84 050000 40 0010 020000 8652",
            Reliable,
            Reliable,
            2,
            0,
            0,
            0,
        ),
        (
            "84 060000 60 0018 030000 000000 05 86524f",
            ReliableOrdered,
            ReliableOrdered,
            3,
            0,
            0,
            5,
        ),
        (
            "84 070000 80 0018 040000 000000 010000 05 865253",
            ReliableSequenced,
            ReliableSequenced,
            4,
            0,
            1,
            5,
        ),
        (
            "84 080000 00 0018 865541",
            UnreliableWithAckReceipt,
            Unreliable,
            0,
            0,
            0,
            0,
        ),
        (
            "84 090000 40 0018 050000 865241",
            ReliableWithAckReceipt,
            Reliable,
            5,
            0,
            0,
            0,
        ),
        (
            "84 0a0000 60 0020 060000 010000 05 86524f41",
            ReliableOrderedWithAckReceipt,
            ReliableOrdered,
            6,
            0,
            1,
            5,
        ),
    ];
    for (dg, sent_as, wire_rel, ri, si, oi, ch) in cases {
        let (header, frame) = single_frame(dg);
        assert_eq!(frame.reliability, wire_rel, "{dg}");
        assert_eq!(frame.message_index.get(), ri, "{dg}");
        assert_eq!(frame.sequence_index.get(), si, "{dg}");
        assert_eq!(frame.order_index.get(), oi, "{dg}");
        assert_eq!(frame.order_channel, ch, "{dg}");
        assert_eq!(frame.payload[0], 0x86);
        // Encoding the message with its receipt reliability gives the captured bytes.
        let sent = Frame {
            reliability: sent_as,
            ..frame
        };
        assert_eq!(reencode(&header, &[sent]), hex(dg), "{dg}");
    }
}

#[test]
fn c6_timestamped_message() {
    let (_, frame) = single_frame("84 0b0000 60 0058 070000 010000 00 1b 0000000000001388 8754");
    let ts = Timestamped::split(&frame.payload).unwrap();
    assert_eq!(ts.time, 5000);
    assert_eq!(&ts.message[..], &[0x87, 0x54]);
    assert_eq!(Bytes::from(ts.to_vec()), frame.payload);
    match ConnectedMessage::decode(frame.payload.clone()).unwrap() {
        ConnectedMessage::User(p) => assert_eq!(p, frame.payload),
        other => panic!("{other:?}"),
    }
}

#[test]
fn c7_split_message_fragments() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (0x88 + i) as u8).collect();
    let chunk = max_unsplit_payload(1492);
    assert_eq!(chunk, 1432);
    let headers = [
        (
            "84 0c0000",
            "70 2cc0 080000 000000 01 00000003 0000 00000000",
            0..1432,
        ),
        (
            "8c 0d0000",
            "70 2cc0 090000 000000 01 00000003 0000 00000001",
            1432..2864,
        ),
        (
            "8c 0e0000",
            "70 0440 0a0000 000000 01 00000003 0000 00000002",
            2864..3000,
        ),
    ];
    for (i, (dh, fh, range)) in headers.into_iter().enumerate() {
        let mut wire = hex(&format!("{dh} {fh}")).to_vec();
        wire.extend_from_slice(&payload[range.clone()]);
        let (header, frame) =
            single_frame(&wire.iter().map(|b| format!("{b:02x}")).collect::<String>());
        assert_eq!(header.continuous_send, i > 0);
        assert_eq!(
            frame.split,
            Some(SplitHeader {
                count: 3,
                id: 0,
                index: i as u32
            })
        );
        assert_eq!(frame.message_index.get(), 8 + i as u32);
        assert_eq!(frame.order_channel, 1);
        assert_eq!(&frame.payload[..], &payload[range]);
        assert_eq!(reencode(&header, &[frame]), Bytes::from(wire));
    }
    let Datagram::Ack(a) = Datagram::decode(hex("c0 0001 00 0c0000 0d0000"), false).unwrap() else {
        panic!()
    };
    assert_eq!(a.ranges[0].len(), 2);
}

#[test]
fn c8_disconnection_notification() {
    let (_, frame) = single_frame("84 0f0000 | 60 0008 0b0000 020000 00 | 15");
    assert_eq!(
        ConnectedMessage::decode(frame.payload).unwrap(),
        ConnectedMessage::DisconnectionNotification
    );
}

// ---- D. Minecraft-style build (protocol 11, 20 internal addresses) ---------------------

#[test]
fn d1_ocr1_probing_1492() {
    let wire = hex(&format!("05 {MAGIC} 0b {}", "00".repeat(1446)));
    assert_eq!(wire.len(), 1464);
    exact(
        &wire,
        &OpenConnectionRequest1 {
            protocol: 11,
            mtu: 1492,
        },
    );
}

#[test]
fn d2_accepted_with_20_internal_addresses() {
    let dg = "8400000060053000000000000000100480fffffe718500000480fffffe714a04ffffffff000004ffffffff000004ffffffff0000
04ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff
000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffff
ffff0000000000000000225f000000000000225f";
    let (header, frame) = single_frame(dg);
    assert_eq!(frame.payload.len(), 166);
    let acc = ConnectionRequestAccepted::decode(&mut frame.payload.clone()).unwrap();
    assert_eq!(acc.internal_addresses.len(), 20);
    assert_eq!(acc.internal_addresses[0], sock("127.0.0.1:29002"));
    assert_eq!((acc.request_time, acc.accepted_time), (0x225f, 0x225f));
    exact(&frame.payload, &acc);
    assert_eq!(reencode(&header, &[frame]), hex(dg));
}

/// A peer may send any number of internal addresses (official 10, Minecraft 20, X-Plane 30):
/// all are read, at most 64 kept, so a 0x13 split over megabytes cannot decode into a
/// vector of a million addresses; the times after them are still read right.
#[test]
fn internal_addresses_beyond_64_are_read_and_not_kept() {
    for count in [30, 64, 65, 10_000] {
        let addresses: Vec<SocketAddr> = (0..count)
            .map(|i| SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 7000)))
            .collect();
        let nic = NewIncomingConnection {
            server_address: sock("127.0.0.1:19132"),
            internal_addresses: addresses.clone(),
            ping_time: 0x1234,
            pong_time: 0x5678,
        };
        let decoded = NewIncomingConnection::decode(&mut Bytes::from(nic.to_vec())).unwrap();
        let kept = count.min(64);
        assert_eq!(decoded.internal_addresses, addresses[..kept], "{count}");
        assert_eq!((decoded.ping_time, decoded.pong_time), (0x1234, 0x5678));
        let acc = ConnectionRequestAccepted {
            client_address: sock("127.0.0.1:40000"),
            system_index: 0,
            internal_addresses: addresses.clone(),
            request_time: 1,
            accepted_time: 2,
        };
        let decoded = ConnectionRequestAccepted::decode(&mut Bytes::from(acc.to_vec())).unwrap();
        assert_eq!(decoded.internal_addresses.len(), kept, "{count}");
        assert_eq!((decoded.request_time, decoded.accepted_time), (1, 2));
    }
}

#[test]
fn d3_new_incoming_with_20_internal_addresses_and_ping() {
    let dg = "8401000060052001000000000000130480fffffe714a0480fffffe718504ffffffff000004ffffffff000004ffffffff000004ffffff
ff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ff
ffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff0000
000000000000225f0000000000002269000048000000000000002269";
    let d = Datagram::decode(hex(dg), false).unwrap();
    let frames: Vec<Frame> = d.frames().collect::<Result<_, _>>().unwrap();
    let nic = NewIncomingConnection::decode(&mut frames[0].payload.clone()).unwrap();
    assert_eq!(frames[0].payload.len(), 164);
    assert_eq!(nic.internal_addresses.len(), 20);
    assert_eq!((nic.ping_time, nic.pong_time), (0x225f, 0x2269));
    exact(&frames[1].payload, &ConnectedPing { time: 0x2269 });
}

// ---- E. X-Plane captures ---------------------------------------------------------------

#[test]
fn e1_connection_request_with_password() {
    let (_, f) = single_frame("84 000000 | 40 0108 000000 | 09 00059bb98e0d2f4a 0000000000000016 00 52756d70656c7374696c74736b696e");
    exact(
        &f.payload,
        &ConnectionRequest {
            client_guid: 0x00059bb98e0d2f4a,
            time: 22,
            use_security: false,
            password: Bytes::from_static(b"Rumpelstiltskin"),
        },
    );
}

#[test]
fn e2_accepted_from_sample_server() {
    let dg = "8400000060030000000000000000100480fffffebfcc0000043f57fe32bfcd04ffffffff000004ffffffff000004ffffffff0000
04ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000004ffffffff000000000000000000160000
000000004345";
    let (_, f) = single_frame(dg);
    let acc = ConnectionRequestAccepted::decode(&mut f.payload.clone()).unwrap();
    assert_eq!(acc.internal_addresses[0], sock("192.168.1.205:49101"));
    assert_eq!((acc.request_time, acc.accepted_time), (22, 0x4345));
}

#[test]
fn e3_business_message() {
    let (_, f) = single_frame("841a00006000280800000200000061686f7900");
    assert_eq!(f.message_index.get(), 8);
    assert_eq!(f.order_index.get(), 2);
    assert_eq!(&f.payload[..], b"ahoy\0");
}

#[test]
fn e4_timestamp_variant() {
    let d = Datagram::decode(
        hex("84 0001703f 000000 | 40 0090 000000 | 09 22a2c5fd8af0cf58 000000000000005d 00"),
        true,
    )
    .unwrap();
    let f = d.frames().next().unwrap().unwrap();
    let req = ConnectionRequest::decode(&mut f.payload.clone()).unwrap();
    assert_eq!((req.client_guid, req.time), (0x22a2c5fd8af0cf58, 0x5d));
    let Datagram::Data { header, .. } = d else {
        panic!()
    };
    let mut out = Vec::new();
    header.encode(&mut out);
    assert_eq!(out, hex("84 0001703f 000000").to_vec());
}

#[test]
fn e5_ocr2_from_xplane_client() {
    let wire = hex(&format!("07 {MAGIC} 043f57fe07bb80 05d4 22a2c5fd8af0cf58"));
    let m = OpenConnectionRequest2::decode_with_cookie(&mut wire.clone(), false).unwrap();
    assert_eq!(m.server_address, sock("192.168.1.248:48000"));
    assert_eq!((m.mtu, m.client_guid), (1492, 0x22a2c5fd8af0cf58));
    assert_eq!(Bytes::from(m.to_vec()), wire);
}

#[test]
fn e6_xplane_new_incoming_with_30_mixed_addresses() {
    // The first IPv6 entry of E6 (macOS sockaddr_in6 layout), followed by 29 IPv4
    // placeholders and the two times 0 and 112: 30 internal addresses, parsed until 16
    // bytes remain.
    let v6 = "06 1c 1e bf68 00000000 fe80000000000000c2a53efffe188d77 1f000000";
    let payload = hex(&format!(
        "13 043f57fe07bb80 {v6} {} 0000000000000000 0000000000000070",
        unassigned(29)
    ));
    let nic = NewIncomingConnection::decode(&mut payload.clone()).unwrap();
    assert_eq!(nic.server_address, sock("192.168.1.248:48000"));
    assert_eq!(nic.internal_addresses.len(), 30);
    assert!(nic.internal_addresses[0].is_ipv6());
    assert_eq!((nic.ping_time, nic.pong_time), (0, 112));
}

// ---- F / G. constructed layouts --------------------------------------------------------

#[test]
fn f_minecraft_motd_pong() {
    let wire = hex(&format!(
        "1c 000000006b02c42d 000660daf5ddb173 {MAGIC} 0048
         4d4350453b72616b6e65742d7079206563686f20706565723b3339303b312e31342e36303b303b31303b303b706565723b
         537572766976616c3b313b31393730323b31393730333b"
    ));
    let pong = UnconnectedPong::decode(&mut wire.clone()).unwrap();
    let motd = BedrockMotd::parse(&pong.data).unwrap();
    assert_eq!(
        motd.to_motd_string(),
        "MCPE;raknet-py echo peer;390;1.14.60;0;10;0;peer;Survival;1;19702;19703;"
    );
    exact(&wire, &pong);
}

#[test]
fn g_constructed_refusals_and_cookie_variants() {
    exact(
        &hex(&format!("17 {MAGIC} 000660db22f1b6b3")),
        &ConnectionBanned {
            server_guid: SERVER_GUID,
        },
    );
    exact(
        &hex(&format!("1a {MAGIC} 000660db22f1b6b3")),
        &IpRecentlyConnected {
            server_guid: SERVER_GUID,
        },
    );
    let reply1 = hex(&format!("06 {MAGIC} 000660db22f1b6b3 01 deadbeef 05d4"));
    assert_eq!(reply1.len(), 32);
    exact(
        &reply1,
        &OpenConnectionReply1 {
            server_guid: SERVER_GUID,
            cookie: Some(0xdeadbeef),
            server_public_key: None,
            mtu: 1492,
        },
    );
    let ocr2 = hex(&format!(
        "07 {MAGIC} deadbeef 00 0480fffffe7149 05d4 1122334455667788"
    ));
    assert_eq!(ocr2.len(), 39);
    let m = OpenConnectionRequest2::decode_with_cookie(&mut ocr2.clone(), true).unwrap();
    assert_eq!((m.cookie, m.mtu), (Some(0xdeadbeef), 1492));
    assert_eq!(Bytes::from(m.to_vec()), ocr2);
    // Official's libcat Reply2: security bit set, 128-byte answer.
    let reply2 = hex(&format!(
        "08 {MAGIC} 000660db22f1b6b3 0480fffffe717a 05d4 80 {}",
        "11".repeat(128)
    ));
    let r = OpenConnectionReply2::decode(&mut reply2.clone()).unwrap();
    assert_eq!(r.security_answer.as_ref().map(Bytes::len), Some(128));
    assert_eq!(Bytes::from(r.to_vec()), reply2);
    // A third party's `01` reads as "no security", as in official.
    let reply2 = hex(&format!(
        "08 {MAGIC} 000660db22f1b6b3 0480fffffe717a 05d4 01"
    ));
    assert_eq!(
        OpenConnectionReply2::decode(&mut reply2.clone())
            .unwrap()
            .security_answer,
        None
    );
    // Reply1 of a libcat server: cookie plus a 64-byte public key.
    let reply1 = hex(&format!(
        "06 {MAGIC} 000660db22f1b6b3 01 deadbeef {} 05d4",
        "22".repeat(64)
    ));
    exact(
        &reply1,
        &OpenConnectionReply1 {
            server_guid: SERVER_GUID,
            cookie: Some(0xdeadbeef),
            server_public_key: Some(Bytes::from(vec![0x22; 64])),
            mtu: 1492,
        },
    );
}

#[test]
fn offline_classification_follows_the_magic_offsets() {
    assert!(OfflineMessage::is_offline(&hex(&format!(
        "19 06 {MAGIC} 000660db22f1b6b3"
    ))));
    assert!(!OfflineMessage::is_offline(&hex(&format!(
        "19 {MAGIC} 000660db22f1b6b3"
    ))));
    assert!(!OfflineMessage::is_offline(&hex("84 000000 00 0008 86")));
    assert!(!OfflineMessage::is_offline(&hex("05 00ff")));
    assert!(!OfflineMessage::is_offline(&[]));
}
