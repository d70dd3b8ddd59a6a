//! Unit tests of the proxy header parsers and the proxy layer.

use super::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn v2_ipv4_dgram_vector() {
    // 203.0.113.7:50000 -> 192.0.2.1:19132, then the payload 0x01.
    let wire = [
        0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, // signature
        0x21, 0x12, 0x00, 0x0C, // v2 PROXY, INET DGRAM, 12 bytes
        203, 0, 113, 7, 192, 0, 2, 1, 0xC3, 0x50, 0x4A, 0xBC, 0x01,
    ];
    let h = parse_v2(&wire).unwrap();
    assert_eq!(h.source, Some(sa("203.0.113.7:50000")));
    assert_eq!(h.destination, Some(sa("192.0.2.1:19132")));
    assert_eq!(h.len, 28);
    let mut out = Vec::new();
    write_v2(sa("203.0.113.7:50000"), sa("192.0.2.1:19132"), &mut out);
    assert_eq!(out[..], wire[..28]);
}

#[test]
fn v2_ipv6_stream_with_tlvs() {
    let mut wire = Vec::new();
    write_v2(
        sa("[2001:db8::7]:4000"),
        sa("[2001:db8::1]:19132"),
        &mut wire,
    );
    // STREAM instead of DGRAM, and two TLVs (a NOOP of 2 bytes, an empty one).
    wire[13] = 0x21;
    wire[15] += 5 + 3;
    wire.extend_from_slice(&[0x04, 0x00, 0x02, 0xAA, 0xBB, 0x20, 0x00, 0x00]);
    wire.push(0x84);
    let h = parse_v2(&wire).unwrap();
    assert_eq!(h.source, Some(sa("[2001:db8::7]:4000")));
    assert_eq!(h.len, wire.len() - 1);
}

#[test]
fn v2_refusals() {
    let mut good = Vec::new();
    write_v2(sa("203.0.113.7:50000"), sa("192.0.2.1:19132"), &mut good);
    let with = |at: usize, byte: u8| {
        let mut w = good.clone();
        w[at] = byte;
        parse_v2(&w)
    };
    assert_eq!(parse_v2(b"PROXY UDP4 1.2.3.4"), Err(HeaderError::V1));
    assert_eq!(parse_v2(&good[..10]), Err(HeaderError::Truncated));
    assert_eq!(parse_v2(&good[..20]), Err(HeaderError::Truncated));
    assert_eq!(parse_v2(b"\x84\x00\x00\x00"), Err(HeaderError::Missing));
    assert_eq!(with(12, 0x11), Err(HeaderError::Version));
    assert_eq!(with(12, 0x22), Err(HeaderError::Command));
    assert_eq!(with(13, 0x32), Err(HeaderError::Family)); // UNIX
    assert_eq!(with(13, 0x52), Err(HeaderError::Family));
    assert_eq!(with(13, 0x13), Err(HeaderError::Family));
    assert_eq!(with(15, 8), Err(HeaderError::Length));
    assert_eq!(with(15, 200), Err(HeaderError::Truncated));
    // A TLV that claims more than the header holds.
    let mut w = good.clone();
    w[15] += 3;
    w.extend_from_slice(&[0x04, 0x00, 0x09]);
    assert_eq!(parse_v2(&w), Err(HeaderError::Tlv));
    // Unspecified and multicast clients, port 0.
    let mut w = Vec::new();
    write_v2(sa("0.0.0.0:5"), sa("192.0.2.1:1"), &mut w);
    assert_eq!(parse_v2(&w), Err(HeaderError::Address));
    w.clear();
    write_v2(sa("224.0.0.1:5"), sa("192.0.2.1:1"), &mut w);
    assert_eq!(parse_v2(&w), Err(HeaderError::Address));
    w.clear();
    write_v2(sa("203.0.113.7:0"), sa("192.0.2.1:1"), &mut w);
    assert_eq!(parse_v2(&w), Err(HeaderError::Address));
}

#[test]
fn v2_local_and_unspec_have_no_source() {
    let mut w = Vec::new();
    write_v2(sa("203.0.113.7:50000"), sa("192.0.2.1:19132"), &mut w);
    w[12] = 0x20; // LOCAL
    assert_eq!(parse_v2(&w).unwrap().source, None);
    let unspec = [&V2_SIGNATURE[..], &[0x21, 0x00, 0x00, 0x00]].concat();
    let h = parse_v2(&unspec).unwrap();
    assert_eq!((h.source, h.len), (None, 16));
}

#[test]
fn spp_vector() {
    let mut wire = Vec::new();
    write_spp(sa("203.0.113.7:50000"), sa("198.51.100.2:19132"), &mut wire);
    assert_eq!(wire.len(), SPP_LEN);
    assert_eq!(&wire[..2], &[0x56, 0xEC]);
    assert_eq!(
        &wire[2..18],
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 203, 0, 113, 7]
    );
    assert_eq!(&wire[34..], &[0xC3, 0x50, 0x4A, 0xBC]);
    let h = parse_spp(&wire).unwrap();
    assert_eq!(h.source, Some(sa("203.0.113.7:50000")));
    assert_eq!(h.destination, Some(sa("198.51.100.2:19132")));
    assert_eq!(parse_spp(&wire[..37]), Err(HeaderError::Truncated));
}

#[test]
fn prefixes() {
    let p: IpPrefix = "10.0.0.0/8".parse().unwrap();
    assert!(p.contains("10.200.3.4".parse().unwrap()));
    assert!(p.contains("::ffff:10.1.1.1".parse().unwrap()));
    assert!(!p.contains("11.0.0.1".parse().unwrap()));
    let p: IpPrefix = "2001:db8::/32".parse().unwrap();
    assert!(p.contains("2001:db8:ffff::1".parse().unwrap()));
    assert!(!p.contains("2001:db9::1".parse().unwrap()));
    let one: IpPrefix = "127.0.0.1".parse().unwrap();
    assert!(one.contains("127.0.0.1".parse().unwrap()));
    assert!(!one.contains("127.0.0.2".parse().unwrap()));
    let all: IpPrefix = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains("8.8.8.8".parse().unwrap()));
    assert!("10.0.0.0/33".parse::<IpPrefix>().is_err());
    assert!("ten/8".parse::<IpPrefix>().is_err());
    assert_eq!(
        "10.1.2.3/8".parse::<IpPrefix>().unwrap().to_string(),
        "10.1.2.3/8"
    );
}

fn layer(mode: ProxyMode, required: bool) -> ProxyLayer {
    let mut config = ProxyConfig::new(mode, vec!["10.0.0.0/8".parse().unwrap()]);
    config.required = required;
    config.max_flows = 4;
    ProxyLayer::new(config, 10_000)
}

fn v2(client: &str, payload: &[u8]) -> Bytes {
    let mut w = Vec::new();
    write_v2(sa(client), sa("192.0.2.1:19132"), &mut w);
    w.extend_from_slice(payload);
    Bytes::from(w)
}

#[test]
fn first_datagram_mode_maps_the_flow() {
    let mut l = layer(ProxyMode::V2First, false);
    let proxy = sa("10.0.0.5:40000");
    // The header alone opens the flow.
    assert_eq!(
        l.inbound(0, proxy, v2("203.0.113.7:50000", b"")),
        Inbound::Nothing
    );
    let got = l.inbound(1, proxy, Bytes::from_static(b"\x05data"));
    assert_eq!(
        got,
        Inbound::Datagram {
            from: sa("203.0.113.7:50000"),
            payload: Bytes::from_static(b"\x05data")
        }
    );
    assert_eq!(
        l.outbound(1, sa("203.0.113.7:50000")),
        Outbound::Via(proxy, None)
    );
    // A direct client is its own address.
    assert_eq!(l.outbound(1, sa("198.51.100.9:1")), Outbound::Direct);
    // A flow idle past its time no longer names anyone, even before a sweep: a bare
    // datagram from that port is the proxy's own, and replies to the client that was
    // there are dropped rather than sent around the proxy.
    assert_eq!(
        l.inbound(20_000, proxy, Bytes::from_static(b"\x05")),
        Inbound::Datagram {
            from: proxy,
            payload: Bytes::from_static(b"\x05")
        }
    );
    assert_eq!(l.outbound(20_000, sa("203.0.113.7:50000")), Outbound::Drop);
    assert_eq!(l.stats().replies_dropped, 1);
    l.sweep(20_000);
    assert_eq!(l.stats().flows, 0);
    // The orphan is forgotten after another idle time.
    l.sweep(40_000);
    assert_eq!(
        l.outbound(40_000, sa("203.0.113.7:50000")),
        Outbound::Direct
    );
}

#[test]
fn a_port_given_to_another_client_leaves_the_first_an_orphan() {
    let mut l = layer(ProxyMode::V2First, false);
    let port = sa("10.0.0.5:40000");
    l.inbound(0, port, v2("203.0.113.7:50000", b"\x05"));
    l.inbound(5, port, v2("203.0.113.8:1", b"\x05"));
    // The second client has the port; the first is not sent to directly.
    assert_eq!(
        l.outbound(5, sa("203.0.113.8:1")),
        Outbound::Via(port, None)
    );
    assert_eq!(l.outbound(5, sa("203.0.113.7:50000")), Outbound::Drop);
    let bare = l.inbound(6, port, Bytes::from_static(b"\x05"));
    assert!(matches!(bare, Inbound::Datagram { from, .. } if from == sa("203.0.113.8:1")));
    // Back through another port: routed again.
    l.inbound(7, sa("10.0.0.5:40001"), v2("203.0.113.7:50000", b"\x05"));
    assert_eq!(
        l.outbound(7, sa("203.0.113.7:50000")),
        Outbound::Via(sa("10.0.0.5:40001"), None)
    );
}

#[test]
fn mapped_prefixes_are_ipv4_prefixes() {
    let p: IpPrefix = "::ffff:10.0.0.0/104".parse().unwrap();
    assert_eq!(p, "10.0.0.0/8".parse().unwrap());
    assert!(p.contains("10.1.2.3".parse().unwrap()));
    assert!(!p.contains("11.1.2.3".parse().unwrap()));
    let one: IpPrefix = "::ffff:10.0.0.1".parse().unwrap();
    assert!(one.contains("10.0.0.1".parse().unwrap()));
    assert!(!one.contains("10.0.0.2".parse().unwrap()));
    // Shorter than the mapped range: more than IPv4.
    assert!("::ffff:10.0.0.0/95".parse::<IpPrefix>().is_err());
}

#[test]
fn local_ignores_its_address_block() {
    let w = [&V2_SIGNATURE[..], &[0x20, 0x11, 0x00, 0x03, 1, 2, 3]].concat();
    let h = parse_v2(&w).unwrap();
    assert_eq!((h.source, h.len), (None, 19));
}

#[test]
fn untrusted_headers_are_dropped_and_plain_datagrams_pass() {
    let mut l = layer(ProxyMode::V2First, true);
    let stranger = sa("198.51.100.9:1234");
    assert_eq!(
        l.inbound(0, stranger, v2("203.0.113.7:50000", b"\x05")),
        Inbound::Nothing
    );
    assert_eq!(
        l.inbound(0, stranger, Bytes::from_static(b"PROXY UDP4")),
        Inbound::Nothing
    );
    assert_eq!(l.stats().untrusted_header, 2);
    assert_eq!(
        l.inbound(0, stranger, Bytes::from_static(b"\x05")),
        Inbound::Datagram {
            from: stranger,
            payload: Bytes::from_static(b"\x05")
        }
    );
    // Required: a trusted source without a header or flow is dropped.
    assert_eq!(
        l.inbound(0, sa("10.0.0.5:1"), Bytes::from_static(b"\x05")),
        Inbound::Nothing
    );
    assert_eq!(l.stats().missing_header, 1);
}

#[test]
fn table_is_bounded_and_clients_share_a_port() {
    let mut l = layer(ProxyMode::V2Every, false);
    for i in 0..4u16 {
        let via = SocketAddr::new("10.0.0.5".parse().unwrap(), 1000 + i);
        let client = format!("203.0.113.{}:5000", i + 1);
        assert!(matches!(
            l.inbound(0, via, v2(&client, b"\x05")),
            Inbound::Datagram { .. }
        ));
    }
    assert_eq!(
        l.inbound(0, sa("10.0.0.5:2000"), v2("203.0.113.99:1", b"\x05")),
        Inbound::Nothing
    );
    assert_eq!(l.stats().flows_full, 1);
    // Routes idle past their time make room.
    assert!(matches!(
        l.inbound(50_000, sa("10.0.0.5:2000"), v2("203.0.113.99:1", b"\x05")),
        Inbound::Datagram { .. }
    ));
    // Every datagram names its client: two clients over one port of the proxy each keep
    // their route.
    l.inbound(50_001, sa("10.0.0.5:1000"), v2("203.0.113.50:7", b"\x05"));
    l.inbound(50_001, sa("10.0.0.5:1000"), v2("203.0.113.51:7", b"\x05"));
    for client in ["203.0.113.50:7", "203.0.113.51:7"] {
        assert_eq!(
            l.outbound(50_001, sa(client)),
            Outbound::Via(sa("10.0.0.5:1000"), None)
        );
    }
}

#[test]
fn spectrum_replies_carry_the_header() {
    let mut l = layer(ProxyMode::Spectrum, false);
    let mut w = Vec::new();
    write_spp(sa("203.0.113.7:50000"), sa("198.51.100.2:19132"), &mut w);
    let header = w.clone();
    w.push(0x05);
    let got = l.inbound(0, sa("10.1.1.1:7000"), Bytes::from(w));
    assert_eq!(
        got,
        Inbound::Datagram {
            from: sa("203.0.113.7:50000"),
            payload: Bytes::from_static(b"\x05")
        }
    );
    let Outbound::Via(via, Some(h)) = l.outbound(0, sa("203.0.113.7:50000")) else {
        panic!("no route with a header");
    };
    assert_eq!(via, sa("10.1.1.1:7000"));
    assert_eq!(&h[..], &header[..]);
    // A malformed header from the trusted proxy is a counted drop.
    assert_eq!(
        l.inbound(0, sa("10.1.1.1:7000"), Bytes::from_static(&[0x56, 0xEC, 1])),
        Inbound::Nothing
    );
    assert_eq!(l.stats().malformed_header, 1);
}
