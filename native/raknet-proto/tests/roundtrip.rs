//! Property tests: decode(encode(x)) == x for every wire type, and decoding arbitrary bytes
//! never panics (it returns a value or a typed error).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use raknet_proto::*;

fn any_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<u128>(), any::<u16>(), any::<u32>(), any::<u32>())
            .prop_filter("mapped addresses decode as IPv4", |(ip, ..)| {
                Ipv6Addr::from(*ip).to_ipv4_mapped().is_none()
            })
            .prop_map(|(ip, port, flow, scope)| {
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, flow, scope))
            }),
    ]
}

fn any_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn nonempty_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 1..max).prop_map(Bytes::from)
}

fn any_reliability() -> impl Strategy<Value = Reliability> {
    (0u8..8).prop_map(|v| Reliability::from_u8(v).unwrap())
}

/// A frame whose unused index fields are zero, as decoding leaves them.
fn any_frame() -> impl Strategy<Value = Frame> {
    (
        any_reliability(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        0u8..ORDERING_CHANNELS,
        proptest::option::of((1u32..=u32::MAX, any::<u16>(), any::<u32>())),
        nonempty_bytes(1500),
    )
        .prop_map(|(rel, mi, si, oi, ch, split, payload)| {
            let wire = rel.on_wire();
            let mut f = Frame::new(wire, payload);
            if wire.is_reliable() {
                f.message_index = MessageIndex::new(mi);
            }
            if wire.is_sequenced() {
                f.sequence_index = SequenceIndex::new(si);
            }
            if wire.uses_channel() {
                f.order_index = OrderIndex::new(oi);
                f.order_channel = ch;
            }
            f.split = split.map(|(count, id, index)| SplitHeader {
                count,
                id,
                index: index % count,
            });
            f
        })
}

fn any_ranges() -> impl Strategy<Value = Vec<AckRange>> {
    vec((0u32..1 << 24, 0u32..1000), 0..50).prop_map(|v| {
        v.into_iter()
            .map(|(start, len)| {
                let end = (start + len).min((1 << 24) - 1);
                AckRange {
                    start: DatagramSeq::new(start),
                    end: DatagramSeq::new(end),
                }
            })
            .collect()
    })
}

fn roundtrip<T: Decode + Encode + PartialEq + std::fmt::Debug>(value: &T) {
    let wire = value.to_vec();
    assert_eq!(wire.len(), value.encoded_len());
    let mut buf = Bytes::from(wire);
    assert_eq!(&T::decode(&mut buf).unwrap(), value);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn address_roundtrip(a in any_addr()) {
        let mut out = Vec::new();
        addr::encode(&a, &mut out);
        prop_assert_eq!(out.len(), addr::encoded_len(&a));
        prop_assert_eq!(addr::decode(&mut Bytes::from(out)).unwrap(), a);
    }

    #[test]
    fn frame_roundtrip(f in any_frame()) {
        roundtrip(&f);
    }

    #[test]
    fn data_datagram_roundtrip(
        seq in any::<u32>(),
        ts in proptest::option::of(any::<u32>()),
        cont in any::<bool>(),
        slow in any::<bool>(),
        frames in vec(any_frame(), 1..8),
    ) {
        let header = DataHeader {
            continuous_send: cont,
            needs_b_and_as: slow,
            packet_pair: false,
            timestamp: ts,
            seq: DatagramSeq::new(seq),
        };
        let mut wire = Vec::new();
        header.encode(&mut wire);
        for f in &frames {
            f.encode(&mut wire);
        }
        let d = Datagram::decode(Bytes::from(wire), ts.is_some()).unwrap();
        let decoded: Vec<Frame> = d.frames().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(decoded, frames);
        let Datagram::Data { header: h, .. } = d else { panic!("not data") };
        prop_assert_eq!(h, header);
    }

    #[test]
    fn ack_and_nak_roundtrip(
        ranges in any_ranges(),
        ts in proptest::option::of(any::<u32>()),
        rate in proptest::option::of(0f32..1e6),
    ) {
        let ack = Ack { timestamp: ts, arrival_rate: rate, ranges: ranges.clone() };
        let wire = ack.to_vec();
        prop_assert_eq!(wire.len(), ack.encoded_len());
        prop_assert_eq!(Datagram::decode(Bytes::from(wire), ts.is_some()).unwrap(), Datagram::Ack(ack));
        let nak = Nak { ranges };
        prop_assert_eq!(Datagram::decode(Bytes::from(nak.to_vec()), false).unwrap(), Datagram::Nak(nak));
    }

    #[test]
    fn offline_roundtrip(
        guid in any::<u64>(),
        time in any::<u64>(),
        client_guid in proptest::option::of(any::<u64>()),
        only_if_open in any::<bool>(),
        data in any_bytes(400),
        protocol in any::<u8>(),
        mtu in 46u16..=1500,
        cookie in proptest::option::of(any::<u32>()),
        with_key in any::<bool>(),
        with_challenge in any::<bool>(),
        with_answer in any::<bool>(),
        a in any_addr(),
    ) {
        roundtrip(&UnconnectedPing { only_if_open, time, client_guid });
        roundtrip(&UnconnectedPong { time, server_guid: guid, data });
        roundtrip(&OpenConnectionRequest1 { protocol, mtu });
        let key = (cookie.is_some() && with_key).then(|| Bytes::from(vec![7; 64]));
        roundtrip(&OpenConnectionReply1 { server_guid: guid, cookie, server_public_key: key, mtu });
        let challenge = (cookie.is_some() && with_challenge).then(|| Bytes::from(vec![9; 64]));
        let ocr2 = OpenConnectionRequest2 { cookie, client_challenge: challenge, server_address: a, mtu, client_guid: guid };
        let wire = ocr2.to_vec();
        prop_assert_eq!(wire.len(), ocr2.encoded_len());
        let decoded = OfflineMessage::decode(&mut Bytes::from(wire), cookie.is_some()).unwrap();
        prop_assert_eq!(decoded, OfflineMessage::OpenConnectionRequest2(ocr2));
        let answer = with_answer.then(|| Bytes::from(vec![3; 128]));
        roundtrip(&OpenConnectionReply2 { server_guid: guid, client_address: a, mtu, security_answer: answer });
        roundtrip(&IncompatibleProtocolVersion { protocol, server_guid: guid });
        roundtrip(&AlreadyConnected { server_guid: guid });
        roundtrip(&NoFreeIncomingConnections { server_guid: guid });
        roundtrip(&ConnectionBanned { server_guid: guid });
        roundtrip(&IpRecentlyConnected { server_guid: guid });
    }

    #[test]
    fn connected_roundtrip(
        guid in any::<u64>(),
        t1 in any::<u64>(),
        t2 in any::<u64>(),
        security in any::<bool>(),
        password in any_bytes(64),
        a in any_addr(),
        internal in vec(any_addr(), 0..31),
        index in any::<u16>(),
        message in nonempty_bytes(64),
    ) {
        roundtrip(&ConnectionRequest { client_guid: guid, time: t1, use_security: security, password });
        roundtrip(&ConnectionRequestAccepted {
            client_address: a,
            system_index: index,
            internal_addresses: internal.clone(),
            request_time: t1,
            accepted_time: t2,
        });
        roundtrip(&NewIncomingConnection { server_address: a, internal_addresses: internal, ping_time: t1, pong_time: t2 });
        roundtrip(&ConnectedPing { time: t1 });
        roundtrip(&ConnectedPong { ping_time: t1, pong_time: t2 });
        let ts = Timestamped { time: t1, message };
        prop_assert_eq!(Timestamped::split(&Bytes::from(ts.to_vec())), Some(ts));
    }

    #[test]
    fn motd_roundtrip(
        motd in "[^;]{0,40}",
        sub in "[^;]{0,40}",
        players in any::<u32>(),
        max in any::<u32>(),
        guid in any::<u64>(),
        p4 in any::<u16>(),
        p6 in any::<u16>(),
    ) {
        let m = BedrockMotd {
            edition: "MCPE".into(),
            motd,
            protocol_version: 527,
            version_name: "1.19.1".into(),
            players_online: players,
            max_players: max,
            server_guid: guid,
            sub_motd: sub,
            game_mode: "Survival".into(),
            game_mode_numeric: 1,
            port_v4: p4,
            port_v6: p6,
        };
        let parsed = BedrockMotd::parse(&m.to_pong_data());
        // An empty sub-MOTD or game mode reads back as empty: same value either way.
        prop_assert_eq!(parsed, Some(m));
    }

    /// The fuzz bodies (decode, re-encode, decode again) over arbitrary bytes.
    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..2048)) {
        raknet_proto::fuzzing::datagram(&data);
        raknet_proto::fuzzing::frame(&data);
        raknet_proto::fuzzing::ack(&data);
        raknet_proto::fuzzing::offline(&data);
        raknet_proto::fuzzing::connected_message(&data);
        raknet_proto::fuzzing::address(&data);
    }

    /// Arbitrary bytes behind a valid prefix reach deeper into each decoder.
    #[test]
    fn arbitrary_tails_never_panic(prefix in 0usize..6, tail in vec(any::<u8>(), 0..600)) {
        let heads: [&[u8]; 6] = [
            &[0x84, 0, 0, 0],
            &[0xc0],
            &[0xa0],
            &[0x07, 0x00, 0xff, 0xff, 0x00, 0xfe, 0xfe, 0xfe, 0xfe, 0xfd, 0xfd, 0xfd, 0xfd, 0x12, 0x34, 0x56, 0x78],
            &[0x10],
            &[0x13],
        ];
        let mut data = heads[prefix].to_vec();
        data.extend_from_slice(&tail);
        raknet_proto::fuzzing::datagram(&data);
        raknet_proto::fuzzing::offline(&data);
        raknet_proto::fuzzing::connected_message(&data);
    }
}
