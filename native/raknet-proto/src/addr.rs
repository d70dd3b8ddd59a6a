//! RakNet system addresses (protocol reference §1.1).
//!
//! IPv4: version `4`, the four address bytes each bit-inverted, port big-endian (7 bytes).
//! IPv6: version `6` followed by the sender OS's raw 28-byte `sockaddr_in6`: family (host
//! order, ignored on read), port big-endian, flow info, 16 address bytes, scope id (host
//! order; we write and read it little-endian, as x86 peers do) — 29 bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use bytes::{BufMut, Bytes};

use crate::codec::Reader;
use crate::error::DecodeError;

/// Encoded size of an IPv4 system address.
pub const IPV4_ADDRESS_LEN: usize = 7;
/// Encoded size of an IPv6 system address.
pub const IPV6_ADDRESS_LEN: usize = 29;
/// The placeholder official RakNet pads internal-address lists with (`04 FF FF FF FF 00 00`).
pub const UNASSIGNED: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// `AF_INET6` as Windows writes it; Minecraft implementations write this value too.
const AF_INET6_WINDOWS: u16 = 23;

/// Turn an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) into plain IPv4.
///
/// Echoing a mapped address back in Reply2 or 0x10 breaks console Bedrock clients
/// (go-raknet PR #33), so every address goes through this before it is encoded.
pub fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// [`unmap`] for an address without a port.
pub fn unmap_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The encoded size of `addr` (after unmapping).
pub fn encoded_len(addr: &SocketAddr) -> usize {
    match unmap(*addr) {
        SocketAddr::V4(_) => IPV4_ADDRESS_LEN,
        SocketAddr::V6(_) => IPV6_ADDRESS_LEN,
    }
}

/// Write `addr` as a RakNet system address; IPv4-mapped IPv6 is written as IPv4.
pub fn encode<B: BufMut>(addr: &SocketAddr, buf: &mut B) {
    match unmap(*addr) {
        SocketAddr::V4(v4) => {
            buf.put_u8(4);
            for b in v4.ip().octets() {
                buf.put_u8(!b);
            }
            buf.put_u16(v4.port());
        }
        SocketAddr::V6(v6) => {
            buf.put_u8(6);
            buf.put_u16_le(AF_INET6_WINDOWS);
            buf.put_u16(v6.port());
            buf.put_u32(v6.flowinfo());
            buf.put_slice(&v6.ip().octets());
            buf.put_u32_le(v6.scope_id());
        }
    }
}

/// Read a RakNet system address; an IPv4-mapped IPv6 address comes back as IPv4.
pub fn decode(buf: &mut Bytes) -> Result<SocketAddr, DecodeError> {
    match buf.read_u8()? {
        4 => {
            let raw = buf.read_u32()?;
            let port = buf.read_u16()?;
            Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(!raw)), port))
        }
        6 => {
            buf.need(IPV6_ADDRESS_LEN - 1)?;
            // The family field is in the sender's host order and differs per OS
            // (Linux 10, Windows 23, BSD/macOS sin6_len + 30): ignore it.
            buf.skip(2)?;
            let port = buf.read_u16()?;
            let flowinfo = buf.read_u32()?;
            let hi = buf.read_u64()?;
            let lo = buf.read_u64()?;
            let scope = buf.read_u32()?.swap_bytes();
            let ip = Ipv6Addr::from((u128::from(hi) << 64) | u128::from(lo));
            // Normalise IPv4-mapped addresses to IPv4, as they are written.
            Ok(unmap(SocketAddr::V6(SocketAddrV6::new(
                ip, port, flowinfo, scope,
            ))))
        }
        v => Err(DecodeError::InvalidAddressVersion(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    #[test]
    fn ipv4_octets_are_inverted() {
        let addr: SocketAddr = "127.0.0.1:29001".parse().unwrap();
        let mut out = Vec::new();
        encode(&addr, &mut out);
        assert_eq!(out, hex("04 80fffffe 7149"));
        assert_eq!(decode(&mut hex("04 80fffffe 7149")).unwrap(), addr);
    }

    #[test]
    fn unassigned_placeholder() {
        let mut out = Vec::new();
        encode(&UNASSIGNED, &mut out);
        assert_eq!(out, hex("04ffffffff0000"));
    }

    #[test]
    fn ipv6_windows_layout() {
        // §15 F: a Windows Bedrock client's address from a real 0x13.
        let mut b = hex("06 1700 cdb7 00000000 fe800000000000004f0e3cf91ffb6fec 18000000");
        let addr = decode(&mut b).unwrap();
        assert!(b.is_empty());
        let SocketAddr::V6(v6) = addr else {
            panic!("not v6")
        };
        assert_eq!(v6.port(), 52663);
        assert_eq!(
            *v6.ip(),
            "fe80::4f0e:3cf9:1ffb:6fec".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(v6.scope_id(), 24);
        let mut out = Vec::new();
        encode(&addr, &mut out);
        assert_eq!(
            out,
            hex("06 1700 cdb7 00000000 fe800000000000004f0e3cf91ffb6fec 18000000")
        );
    }

    #[test]
    fn ipv6_macos_layout_ignores_family() {
        // §15 E6: macOS sockaddr_in6 (sin6_len, family 30).
        let mut b = hex("06 1c 1e bf68 00000000 fe80000000000000c2a53efffe188d77 1f000000");
        let SocketAddr::V6(v6) = decode(&mut b).unwrap() else {
            panic!("not v6")
        };
        assert_eq!(v6.port(), 49000);
        assert_eq!(
            *v6.ip(),
            "fe80::c2a5:3eff:fe18:8d77".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(v6.scope_id(), 31);
    }

    #[test]
    fn mapped_ipv6_is_written_as_ipv4() {
        let addr: SocketAddr = "[::ffff:127.0.0.1]:29001".parse().unwrap();
        let mut out = Vec::new();
        encode(&addr, &mut out);
        assert_eq!(out, hex("04 80fffffe 7149"));
        assert_eq!(encoded_len(&addr), IPV4_ADDRESS_LEN);
    }

    #[test]
    fn bad_version_and_short_input_fail() {
        assert_eq!(
            decode(&mut hex("05 00")),
            Err(DecodeError::InvalidAddressVersion(5))
        );
        assert!(matches!(
            decode(&mut hex("06 1700 cdb7")),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
        assert!(decode(&mut hex("04 80ff")).is_err());
    }
}
