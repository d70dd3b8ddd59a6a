//! Terms to Rust and back: options, reliabilities, priorities, addresses, reasons, stats.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use raknet_proto::{
    AdmissionLimits, CongestionControl, ConnectError, ConnectionStats, CookieMode,
    DisconnectReason, EndpointConfig, Limit, Limits, Priority, RawConfig, Reliability,
};
use rustler::{Atom, Encoder, Env, Term};

use crate::atoms;
use raknet_proto::proxy::{IpPrefix, ProxyConfig, ProxyMode};
use raknet_proto::rates::{EndpointRates, Rates, Worst};

/// Endpoint options decoded from the `endpoint_start` map.
pub(crate) struct EndpointOptions {
    pub(crate) bind: SocketAddr,
    /// One IPv6 socket that also carries IPv4 (host `::` only).
    pub(crate) dual_stack: bool,
    /// Run on the node's shared client thread `k` (`shared_thread: true` is thread 0)
    /// instead of a thread of its own.
    pub(crate) shared_thread: Option<usize>,
    pub(crate) fault_injection: bool,
    /// `{:raknet_batch, conn, messages}` instead of one `{:raknet, ...}` per message.
    pub(crate) batch_delivery: bool,
    /// `recvmmsg` / `sendmmsg` where the system has them; `false` (tests only) takes the
    /// portable one-datagram-per-call path.
    pub(crate) batched_io: bool,
    /// Runs of datagrams to one peer go as one `UDP_SEGMENT` send where the kernel has it;
    /// `gso: false` (tests and benchmarks) sends each as its own datagram, `gso_fault: true`
    /// (tests) makes the kernel refuse the first such send.
    pub(crate) gso: raknet_udp::Gso,
    /// Sends may be carried out on the caller's scheduler thread while the endpoint's thread
    /// waits (`driver::Shared`); `false` sends everything through the thread.
    pub(crate) inline_sends: bool,
    /// The endpoints started with one key (a server's IPv4 and IPv6 groups) share one
    /// `EndpointGroup`: one connection limit, one per-IP count, one pair of budgets.
    pub(crate) server_group: Option<u64>,
    /// Tests only: every other send finds the socket's buffer "full" (`Udp::fake_full_buffer`).
    pub(crate) send_full_fault: bool,
    pub(crate) config: EndpointConfig,
    pub(crate) budget: crate::resource::DeliveryBudget,
    /// NetherNet beside RakNet on this socket (a server's first group only).
    pub(crate) nethernet: Option<NetherNetOptions>,
}

fn get<'a, T: rustler::Decoder<'a>>(map: Term<'a>, key: &'static str) -> Result<T, &'static str> {
    let env = map.get_env();
    let k = Atom::from_str(env, key).map_err(|_| key)?;
    map.map_get(k).and_then(|v| v.decode()).map_err(|_| key)
}

/// The optional `use_cookies` key: `:auto` (also when absent), `true` or `false`.
fn cookie_mode(map: Term<'_>) -> Result<CookieMode, &'static str> {
    let Some(value) = opt::<Term<'_>>(map, "use_cookies")? else {
        return Ok(CookieMode::Auto);
    };
    if let Ok(on) = value.decode::<bool>() {
        return Ok(on.into());
    }
    match value.decode::<Atom>() {
        Ok(a) if a == atoms::auto() => Ok(CookieMode::Auto),
        _ => Err("use_cookies"),
    }
}

/// The optional `congestion_control` key: `:reno` or `:bbr`.
fn congestion_option(map: Term<'_>) -> Result<Option<CongestionControl>, &'static str> {
    match opt::<Atom>(map, "congestion_control")? {
        None => Ok(None),
        Some(a) if a == atoms::reno() => Ok(Some(CongestionControl::Reno)),
        Some(a) if a == atoms::bbr() => Ok(Some(CongestionControl::Bbr)),
        Some(_) => Err("congestion_control"),
    }
}

/// `endpoint_connect` options: a map, every key optional; an error names the bad key.
pub(crate) struct ConnectOptions {
    /// What the engine takes.
    pub(crate) engine: raknet_proto::ConnectOptions,
    /// `{:raknet_batch, ...}` delivery for this connection.
    pub(crate) batch_delivery: bool,
}

pub(crate) fn connect_options(map: Term<'_>) -> Result<ConnectOptions, &'static str> {
    if !map.is_map() {
        return Err("options");
    }
    Ok(ConnectOptions {
        engine: raknet_proto::ConnectOptions {
            congestion: congestion_option(map)?,
            proxy_header: send_proxy_header(map)?,
        },
        batch_delivery: opt::<bool>(map, "batch_delivery")?.unwrap_or(false),
    })
}

/// The atom naming a congestion controller.
pub(crate) fn congestion(c: CongestionControl) -> Atom {
    match c {
        CongestionControl::Reno => atoms::reno(),
        CongestionControl::Bbr => atoms::bbr(),
    }
}

/// `shared_thread`: absent or `false` for a thread of the endpoint's own, `true` or an index
/// for one of the node's shared client threads.
fn shared_thread(map: Term<'_>) -> Result<Option<usize>, &'static str> {
    match get::<bool>(map, "shared_thread") {
        Ok(true) => Ok(Some(0)),
        Ok(false) => Ok(None),
        Err(_) => match opt::<usize>(map, "shared_thread")? {
            Some(k) => Ok(Some(k)),
            None => Ok(None),
        },
    }
}

/// An optional key: absent (or `nil`) is `None`, so the engine default applies; present
/// with the wrong type is an error naming the key.
/// An optional key whose `nil` means something (off): `None` when absent, `Some(None)` for
/// `nil`.
fn nullable<'a, T: rustler::Decoder<'a>>(
    map: Term<'a>,
    key: &'static str,
) -> Result<Option<Option<T>>, &'static str> {
    let env = map.get_env();
    let k = Atom::from_str(env, key).map_err(|_| key)?;
    match map.map_get(k) {
        Err(_) => Ok(None),
        Ok(_) => opt(map, key).map(Some),
    }
}

fn opt<'a, T: rustler::Decoder<'a>>(
    map: Term<'a>,
    key: &'static str,
) -> Result<Option<T>, &'static str> {
    let env = map.get_env();
    let k = Atom::from_str(env, key).map_err(|_| key)?;
    match map.map_get(k) {
        Err(_) => Ok(None),
        Ok(v) if v.is_atom() && v.decode::<Atom>().is_ok_and(|a| a == atoms::nil()) => Ok(None),
        Ok(v) => v.decode().map(Some).map_err(|_| key),
    }
}

fn proxy_mode(value: Atom, key: &'static str) -> Result<ProxyMode, &'static str> {
    if value == atoms::v2_first() {
        Ok(ProxyMode::V2First)
    } else if value == atoms::v2_every() {
        Ok(ProxyMode::V2Every)
    } else if value == atoms::spectrum() {
        Ok(ProxyMode::Spectrum)
    } else {
        Err(key)
    }
}

/// The optional `proxy_protocol` key: `%{mode: :v2_first | :v2_every | :spectrum, trusted:
/// ["10.0.0.0/8", ...], required: boolean, max_flows: integer}` (`required` and `max_flows`
/// optional).
fn proxy_protocol(map: Term<'_>) -> Result<Option<ProxyConfig>, &'static str> {
    const KEY: &str = "proxy_protocol";
    let Some(p) = opt::<Term<'_>>(map, KEY)? else {
        return Ok(None);
    };
    let mode = proxy_mode(get(p, "mode").map_err(|_| KEY)?, KEY)?;
    let trusted = get::<Vec<String>>(p, "trusted")
        .map_err(|_| KEY)?
        .iter()
        .map(|t| t.parse::<IpPrefix>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| KEY)?;
    let mut config = ProxyConfig::new(mode, trusted);
    config.required = opt(p, "required")?.unwrap_or(config.required);
    config.max_flows = opt(p, "max_flows")?.unwrap_or(config.max_flows);
    Ok(Some(config))
}

/// A client session's options: `%{identity: nil | map, batch_header: nil | byte}` (both
/// optional); the error names the bad key.
pub(crate) fn nethernet_connect(
    map: Term<'_>,
) -> Result<
    (
        Option<raknet_nethernet::client::PlayerIdentity>,
        crate::driver::BatchHeader,
    ),
    Atom,
> {
    let env = map.get_env();
    let bad = |key: &'static str| Atom::from_str(env, key).unwrap_or_else(|_| atoms::einval());
    // `nil` (no identity) decodes as a term too.
    let identity = match opt::<Term<'_>>(map, "identity").map_err(bad)? {
        Some(t) if !t.is_atom() => Some(player_identity(t)?),
        _ => None,
    };
    let header = opt::<Option<u8>>(map, "batch_header").map_err(bad)?;
    Ok((identity, crate::driver::BatchHeader(header.flatten())))
}

/// A client session's player identity: `%{token: binary, key_pem: binary, domain: binary}`
/// (`domain` optional); the error names the bad key.
fn player_identity(map: Term<'_>) -> Result<raknet_nethernet::client::PlayerIdentity, Atom> {
    let text = |key: &'static str| -> Result<Option<String>, Atom> {
        let atom = Atom::from_str(map.get_env(), key).map_err(|_| atoms::einval())?;
        match map.map_get(atom) {
            Err(_) => Ok(None),
            Ok(v) => v
                .decode::<rustler::Binary<'_>>()
                .ok()
                .and_then(|b| std::str::from_utf8(b.as_slice()).ok().map(str::to_owned))
                .map(Some)
                .ok_or(atom),
        }
    };
    let token = text("token")?.ok_or(atoms::token())?;
    let pem = text("key_pem")?.ok_or(atoms::key_pem())?;
    let key =
        raknet_nethernet::identity::OperatorKey::from_pem(&pem).map_err(|_| atoms::key_pem())?;
    let domain = text("domain")?.unwrap_or_else(|| "raknet".to_owned());
    Ok(raknet_nethernet::client::PlayerIdentity { token, key, domain })
}

/// What the `nethernet` key asks for: the host's settings and the operator key.
pub(crate) struct NetherNetOptions {
    pub(crate) config: raknet_nethernet::host::HostConfig,
    pub(crate) key: raknet_nethernet::identity::OperatorKey,
    pub(crate) batch_header: crate::driver::BatchHeader,
}

/// The optional `nethernet` key: `%{key_pem: binary, domain: string, client_auth: :open |
/// {:jwks, json}, max_sessions, max_negotiating, max_negotiating_per_ip,
/// negotiation_timeout_ms, idle_timeout_ms, batch_header: nil | byte}`
/// (all but `key_pem` optional). NetherNet sessions then share the socket with RakNet.
fn nethernet(map: Term<'_>) -> Result<Option<NetherNetOptions>, &'static str> {
    use raknet_nethernet::host::{ClientAuth, HostConfig};
    use raknet_nethernet::identity::{OperatorKey, PublicKey, Trust};
    const KEY: &str = "nethernet";
    let Some(n) = opt::<Term<'_>>(map, KEY)? else {
        return Ok(None);
    };
    let pem: rustler::Binary<'_> = get(n, "key_pem").map_err(|_| KEY)?;
    let pem = std::str::from_utf8(pem.as_slice()).map_err(|_| KEY)?;
    let key = OperatorKey::from_pem(pem).map_err(|_| KEY)?;
    let d = HostConfig::default();
    let client_auth = match opt::<Term<'_>>(n, "client_auth")? {
        None => d.client_auth,
        Some(t) if t.decode::<Atom>().is_ok_and(|a| a == atoms::open()) => ClientAuth::Open,
        Some(t) => {
            let (tag, jwks): (Atom, String) = t.decode().map_err(|_| KEY)?;
            if tag != atoms::jwks() {
                return Err(KEY);
            }
            let keys = PublicKey::from_jwks(&jwks).map_err(|_| KEY)?;
            if keys.is_empty() {
                return Err(KEY);
            }
            ClientAuth::Required(Trust::Keys(keys))
        }
    };
    let ms = |key: &'static str, default: Duration| -> Result<Duration, &'static str> {
        Ok(opt::<u64>(n, key)?.map_or(default, |ms| Duration::from_millis(ms.max(100))))
    };
    let config = HostConfig {
        candidates: Vec::new(),
        max_sessions: opt(n, "max_sessions")?.unwrap_or(d.max_sessions),
        max_negotiating: opt(n, "max_negotiating")?.unwrap_or(d.max_negotiating),
        max_negotiating_per_ip: opt(n, "max_negotiating_per_ip")?
            .unwrap_or(d.max_negotiating_per_ip),
        negotiation_timeout: ms("negotiation_timeout_ms", d.negotiation_timeout)?,
        idle_timeout: ms("idle_timeout_ms", d.idle_timeout)?,
        domain: opt(n, "domain")?.unwrap_or(d.domain),
        client_auth,
        ..d
    };
    let batch_header = crate::driver::BatchHeader(opt::<Option<u8>>(n, "batch_header")?.flatten());
    Ok(Some(NetherNetOptions {
        config,
        key,
        batch_header,
    }))
}

/// The optional `send_proxy_header` key: `%{mode: ..., ip: "203.0.113.7", port: 5000}`.
fn send_proxy_header(map: Term<'_>) -> Result<Option<(ProxyMode, SocketAddr)>, &'static str> {
    const KEY: &str = "send_proxy_header";
    let Some(p) = opt::<Term<'_>>(map, KEY)? else {
        return Ok(None);
    };
    let mode = proxy_mode(get(p, "mode").map_err(|_| KEY)?, KEY)?;
    let ip: IpAddr = get::<String>(p, "ip")
        .map_err(|_| KEY)?
        .parse()
        .map_err(|_| KEY)?;
    let port: u16 = get(p, "port").map_err(|_| KEY)?;
    Ok(Some((mode, SocketAddr::new(ip, port))))
}

/// The optional `raw_prefixes` key: datagrams starting with one of these binaries are offered
/// to the endpoint's owner (GameSpy4 Query: `<<0xFE, 0xFD>>`).
fn raw(map: Term<'_>) -> Result<Option<RawConfig>, &'static str> {
    let Some(prefixes) = opt::<Vec<rustler::Binary<'_>>>(map, "raw_prefixes")? else {
        return Ok(None);
    };
    if prefixes.is_empty() || prefixes.iter().any(|p| p.is_empty()) {
        return Err("raw_prefixes");
    }
    Ok(Some(RawConfig::new(
        prefixes.iter().map(|p| p.as_slice().to_vec()).collect(),
    )))
}

/// The admission limits: each key optional, defaults from [`AdmissionLimits::default`].
fn admission(map: Term<'_>) -> Result<AdmissionLimits, &'static str> {
    let d = AdmissionLimits::default();
    Ok(AdmissionLimits {
        max_half_open: opt(map, "max_half_open")?.unwrap_or(d.max_half_open),
        max_half_open_per_ip: opt(map, "max_half_open_per_ip")?.unwrap_or(d.max_half_open_per_ip),
        max_connections_per_ip: opt(map, "max_connections_per_ip")?
            .unwrap_or(d.max_connections_per_ip),
        new_connections_per_ip_per_sec: opt(map, "new_connections_per_ip_per_sec")?
            .unwrap_or(d.new_connections_per_ip_per_sec),
        pongs_per_ip_per_sec: opt(map, "pongs_per_ip_per_sec")?.unwrap_or(d.pongs_per_ip_per_sec),
        pong_amplification: opt(map, "pong_amplification")?.unwrap_or(d.pong_amplification),
        pong_bytes_per_sec: opt(map, "pong_bytes_per_sec")?.unwrap_or(d.pong_bytes_per_sec),
        max_amplification: opt(map, "max_amplification")?.unwrap_or(d.max_amplification),
        max_tracked_ips: opt(map, "max_tracked_ips")?.unwrap_or(d.max_tracked_ips),
        strict_half_open: opt(map, "strict_half_open")?.unwrap_or(d.strict_half_open),
        strict_handshakes_per_sec: opt(map, "strict_handshakes_per_sec")?
            .unwrap_or(d.strict_handshakes_per_sec),
        max_unproven: opt(map, "max_unproven")?.unwrap_or(d.max_unproven),
        max_unproven_per_ip: opt(map, "max_unproven_per_ip")?.unwrap_or(d.max_unproven_per_ip),
    })
}

/// Decode the option map; the error names the offending key. Every key is optional: an
/// absent one (or `nil`, where `nil` means nothing else) takes the engine's default
/// (`EndpointConfig::default()`), or for the runtime's own options the default named here,
/// so a default is written once (docs/nif-contract.md).
pub(crate) fn endpoint_options(map: Term<'_>) -> Result<EndpointOptions, &'static str> {
    let d = EndpointConfig::default();
    let ip: IpAddr = match opt::<String>(map, "host")? {
        Some(host) => host.parse().map_err(|_| "host")?,
        None => IpAddr::from([0, 0, 0, 0]),
    };
    let port: u16 = opt(map, "port")?.unwrap_or(0);
    let protocol_versions: Vec<u8> = opt(map, "protocol_versions")?.unwrap_or(d.protocol_versions);
    if protocol_versions.is_empty() {
        return Err("protocol_versions");
    }
    let min_mtu: u16 = opt(map, "min_mtu")?.unwrap_or(d.min_mtu);
    let max_mtu: u16 = opt(map, "max_mtu")?.unwrap_or(d.max_mtu);
    if !(400..=max_mtu).contains(&min_mtu) || max_mtu > 1500 {
        return Err("max_mtu");
    }
    let advertised_ip = match opt::<String>(map, "advertised_ip")? {
        Some(text) => Some(text.parse::<IpAddr>().map_err(|_| "advertised_ip")?),
        None => None,
    };
    let ms = |key| -> Result<Option<Duration>, &'static str> {
        Ok(opt::<u64>(map, key)?.map(|ms| Duration::from_millis(ms.max(100))))
    };
    // Tests and benchmarks only: fewer frames in flight towards a peer with a small receive
    // buffer (whichever the congestion controller).
    let in_flight = opt::<usize>(map, "max_reliable_in_flight")?.map(|n| n.max(1));
    let l = Limits::default();
    let config = EndpointConfig {
        rng_seed: seed(),
        secret: seed(),
        guid: opt(map, "guid")?,
        protocol_versions,
        accept_incoming: opt(map, "accept_incoming")?.unwrap_or(d.accept_incoming),
        max_mtu,
        min_mtu,
        mtu_probes: d.mtu_probes.iter().map(|&m| m.min(max_mtu)).collect(),
        use_cookies: cookie_mode(map)?,
        internal_addresses: opt(map, "max_number_of_internal_ids")?.unwrap_or(d.internal_addresses),
        datagram_timestamps: opt(map, "include_timestamp_with_datagrams")?
            .unwrap_or(d.datagram_timestamps),
        advertised_ip,
        strip_timestamps: opt(map, "strip_timestamps")?.unwrap_or(d.strip_timestamps),
        congestion: congestion_option(map)?.unwrap_or(d.congestion),
        timeout: ms("timeout_ms")?.unwrap_or(d.timeout),
        handshake_timeout: ms("handshake_timeout_ms")?.unwrap_or(d.handshake_timeout),
        send_delay: opt::<u64>(map, "send_delay_ms")?
            .map_or(d.send_delay, |ms| Duration::from_millis(ms.min(1_000))),
        offline_ping_response: match opt::<rustler::Binary>(map, "offline_ping_response")? {
            Some(b) => bytes::Bytes::copy_from_slice(b.as_slice()),
            None => d.offline_ping_response.clone(),
        },
        limits: Limits {
            max_connections: opt(map, "max_connections")?.unwrap_or(l.max_connections),
            max_endpoint_buffered_bytes: opt(map, "max_buffered_bytes")?
                .unwrap_or(l.max_endpoint_buffered_bytes),
            max_endpoint_send_bytes: opt(map, "max_send_bytes")?
                .unwrap_or(l.max_endpoint_send_bytes),
            max_message_bytes: opt(map, "max_message_bytes")?.unwrap_or(l.max_message_bytes),
            max_reliable_in_flight: in_flight.unwrap_or(l.max_reliable_in_flight),
            max_bbr_reliable_in_flight: in_flight.unwrap_or(l.max_bbr_reliable_in_flight),
            // nil (or 0) is no limit.
            max_messages_per_sec: nullable::<u32>(map, "max_messages_per_sec")?
                .map_or(l.max_messages_per_sec, |n| n.filter(|&n| n > 0)),
            ..l
        },
        admission: admission(map)?,
        proxy: proxy_protocol(map)?,
        send_proxy_header: send_proxy_header(map)?,
        raw: raw(map)?,
        ..d
    };
    // One socket per address family unless asked.
    let dual_stack = opt(map, "dual_stack")?.unwrap_or(false);
    if dual_stack && !ip.is_ipv6() {
        return Err("dual_stack");
    }
    let budget = crate::resource::DeliveryBudget::default();
    Ok(EndpointOptions {
        bind: SocketAddr::new(ip, port),
        dual_stack,
        shared_thread: shared_thread(map)?,
        // Tests only: lets `endpoint_inject_fault` crash this endpoint's thread.
        fault_injection: opt(map, "fault_injection")?.unwrap_or(false),
        batch_delivery: opt(map, "batch_delivery")?.unwrap_or(false),
        batched_io: opt(map, "batched_io")?.unwrap_or(true),
        gso: match (
            opt(map, "gso")?.unwrap_or(true),
            opt(map, "gso_fault")?.unwrap_or(false),
        ) {
            (false, _) => raknet_udp::Gso::Off,
            (true, false) => raknet_udp::Gso::On,
            (true, true) => raknet_udp::Gso::RefuseFirst,
        },
        inline_sends: opt(map, "inline_sends")?.unwrap_or(true),
        server_group: opt(map, "server_group")?,
        send_full_fault: opt(map, "send_full_fault")?.unwrap_or(false),
        nethernet: nethernet(map)?,
        config,
        budget: crate::resource::DeliveryBudget {
            messages: opt::<usize>(map, "max_pending_deliveries")?
                .unwrap_or(budget.messages)
                .max(16),
            bytes: opt::<usize>(map, "max_pending_bytes")?
                .unwrap_or(budget.bytes)
                .max(64 << 10),
        },
    })
}

/// The default of every `endpoint_start` option a caller may restate, by option name, as
/// [`endpoint_options`] fills them in.
pub(crate) fn defaults(env: Env<'_>) -> Term<'_> {
    let d = EndpointConfig::default();
    let (l, a) = (&d.limits, &d.admission);
    let budget = crate::resource::DeliveryBudget::default();
    let ms = |t: Duration| t.as_millis() as u64;
    let numbers: [(&str, u64); 24] = [
        ("min_mtu", u64::from(d.min_mtu)),
        ("send_delay_ms", ms(d.send_delay)),
        ("max_mtu", u64::from(d.max_mtu)),
        ("timeout_ms", ms(d.timeout)),
        ("handshake_timeout_ms", ms(d.handshake_timeout)),
        ("max_number_of_internal_ids", d.internal_addresses as u64),
        ("max_connections", l.max_connections as u64),
        ("max_buffered_bytes", l.max_endpoint_buffered_bytes as u64),
        ("max_send_bytes", l.max_endpoint_send_bytes as u64),
        ("max_message_bytes", l.max_message_bytes as u64),
        (
            "max_messages_per_sec",
            l.max_messages_per_sec.map_or(0, u64::from),
        ),
        ("max_half_open", a.max_half_open as u64),
        ("max_half_open_per_ip", a.max_half_open_per_ip as u64),
        ("max_connections_per_ip", a.max_connections_per_ip as u64),
        (
            "new_connections_per_ip_per_sec",
            u64::from(a.new_connections_per_ip_per_sec),
        ),
        ("pongs_per_ip_per_sec", u64::from(a.pongs_per_ip_per_sec)),
        ("pong_bytes_per_sec", a.pong_bytes_per_sec),
        ("pong_amplification", a.pong_amplification as u64),
        ("strict_half_open", a.strict_half_open as u64),
        (
            "strict_handshakes_per_sec",
            u64::from(a.strict_handshakes_per_sec),
        ),
        ("max_unproven", a.max_unproven as u64),
        ("max_unproven_per_ip", a.max_unproven_per_ip as u64),
        ("max_pending_deliveries", budget.messages as u64),
        ("max_pending_bytes", budget.bytes as u64),
    ];
    let mut keys = Vec::with_capacity(numbers.len() + 4);
    let mut values = Vec::with_capacity(numbers.len() + 4);
    for (name, value) in numbers {
        if let Ok(k) = Atom::from_str(env, name) {
            keys.push(k.encode(env));
            values.push(value.encode(env));
        }
    }
    let congestion = match d.congestion {
        CongestionControl::Bbr => atoms::bbr(),
        _ => atoms::reno(),
    };
    let cookies = match d.use_cookies {
        CookieMode::Always => true.encode(env),
        CookieMode::Never => false.encode(env),
        CookieMode::Auto => atoms::auto().encode(env),
    };
    for (name, value) in [
        ("protocol_versions", d.protocol_versions.encode(env)),
        ("congestion_control", congestion.encode(env)),
        ("use_cookies", cookies),
        ("strip_timestamps", d.strip_timestamps.encode(env)),
    ] {
        if let Ok(k) = Atom::from_str(env, name) {
            keys.push(k.encode(env));
            values.push(value);
        }
    }
    Term::map_from_arrays(env, &keys, &values).unwrap_or_else(|_| atoms::error().encode(env))
}

/// 64 unpredictable bits, for an endpoint's seed and secret (its GUID and handshake keys): the
/// engine takes randomness from its config, so the runtime supplies some from the standard
/// library's hasher, whose keys come from the operating system's randomness (each new one
/// differs), over the time.
pub(crate) fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

pub(crate) fn reliability(a: Atom) -> Option<Reliability> {
    Some(match a {
        a if a == atoms::unreliable() => Reliability::Unreliable,
        a if a == atoms::unreliable_sequenced() => Reliability::UnreliableSequenced,
        a if a == atoms::reliable() => Reliability::Reliable,
        a if a == atoms::reliable_ordered() => Reliability::ReliableOrdered,
        a if a == atoms::reliable_sequenced() => Reliability::ReliableSequenced,
        a if a == atoms::unreliable_ack_receipt() => Reliability::UnreliableWithAckReceipt,
        a if a == atoms::reliable_ack_receipt() => Reliability::ReliableWithAckReceipt,
        a if a == atoms::reliable_ordered_ack_receipt() => {
            Reliability::ReliableOrderedWithAckReceipt
        }
        _ => return None,
    })
}

pub(crate) fn priority(a: Atom) -> Option<Priority> {
    Some(match a {
        a if a == atoms::immediate() => Priority::Immediate,
        a if a == atoms::high() => Priority::High,
        a if a == atoms::medium() => Priority::Medium,
        a if a == atoms::low() => Priority::Low,
        _ => return None,
    })
}

/// `{ip_tuple, port}` as `:inet` writes addresses.
pub(crate) fn address<'a>(env: Env<'a>, addr: SocketAddr) -> Term<'a> {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            (a, b, c, d).encode(env)
        }
        IpAddr::V6(v6) => {
            let segments: Vec<Term<'a>> = v6.segments().iter().map(|s| s.encode(env)).collect();
            rustler::types::tuple::make_tuple(env, &segments)
        }
    };
    (ip, addr.port()).encode(env)
}

pub(crate) fn disconnect_reason<'a>(env: Env<'a>, reason: &Reason) -> Term<'a> {
    match reason {
        Reason::Engine(r) => match r {
            DisconnectReason::PeerClosed => atoms::peer_closed().encode(env),
            DisconnectReason::Timeout => atoms::timeout().encode(env),
            DisconnectReason::LocalClose => atoms::local_close().encode(env),
            DisconnectReason::Shutdown => atoms::shutdown().encode(env),
            DisconnectReason::LimitExceeded(Limit::SplitParts) => {
                (atoms::limit_exceeded(), atoms::split_parts()).encode(env)
            }
            DisconnectReason::LimitExceeded(Limit::MessageBytes) => {
                (atoms::limit_exceeded(), atoms::message_bytes()).encode(env)
            }
            DisconnectReason::LimitExceeded(Limit::Stalled) => {
                (atoms::limit_exceeded(), atoms::stalled()).encode(env)
            }
            DisconnectReason::LimitExceeded(Limit::SendBacklog) => {
                (atoms::limit_exceeded(), atoms::send_backlog()).encode(env)
            }
            DisconnectReason::LimitExceeded(Limit::MessageRate) => {
                (atoms::limit_exceeded(), atoms::message_rate()).encode(env)
            }
            DisconnectReason::ProtocolViolation(text) => {
                (atoms::protocol_violation(), *text).encode(env)
            }
            DisconnectReason::ConnectFailed(e) => connect_error(env, *e),
            _ => atoms::internal_error().encode(env),
        },
        Reason::Closed(term) => env
            .binary_to_term(term)
            .map_or_else(|| atoms::local_close().encode(env), |(t, _)| t),
        Reason::Overloaded => atoms::overloaded().encode(env),
        Reason::EndpointDown => atoms::endpoint_down().encode(env),
    }
}

pub(crate) fn connect_error<'a>(env: Env<'a>, e: ConnectError) -> Term<'a> {
    match e {
        ConnectError::IncompatibleProtocol { server_protocol } => {
            (atoms::incompatible_protocol(), server_protocol).encode(env)
        }
        ConnectError::NoFreeIncomingConnections => {
            atoms::no_free_incoming_connections().encode(env)
        }
        ConnectError::Banned => atoms::banned().encode(env),
        ConnectError::AlreadyConnected => atoms::already_connected().encode(env),
        ConnectError::IpRecentlyConnected => atoms::ip_recently_connected().encode(env),
        ConnectError::SecurityRequired => atoms::security_required().encode(env),
        ConnectError::InvalidPassword => atoms::invalid_password().encode(env),
        ConnectError::Timeout => atoms::timeout().encode(env),
        ConnectError::AddressInUse => atoms::address_in_use().encode(env),
        ConnectError::TooManyConnections => atoms::too_many_connections().encode(env),
        _ => atoms::internal_error().encode(env),
    }
}

/// `%{address: {ip, port}, guid:, protocol:, mtu:}`, sent when a connection is established.
pub(crate) fn connection_info<'a>(
    env: Env<'a>,
    addr: SocketAddr,
    guid: u64,
    protocol: u8,
    mtu: u16,
) -> Term<'a> {
    let (guid, protocol, mtu) = (guid.encode(env), protocol.encode(env), mtu.encode(env));
    info_map(env, addr, [guid, protocol, mtu], atoms::raknet())
}

/// `%{address, guid, protocol, mtu, transport}`, what every connection's info has.
fn info_map<'a>(
    env: Env<'a>,
    addr: SocketAddr,
    [guid, protocol, mtu]: [Term<'a>; 3],
    transport: Atom,
) -> Term<'a> {
    let keys = [
        atoms::address(),
        atoms::guid(),
        atoms::protocol(),
        atoms::mtu(),
        atoms::transport(),
    ]
    .map(|a| a.encode(env));
    let values = [
        address(env, addr),
        guid,
        protocol,
        mtu,
        transport.encode(env),
    ];
    Term::map_from_arrays(env, &keys, &values).unwrap_or_else(|_| atoms::error().encode(env))
}

/// A NetherNet session's info: `%{address, transport: :nethernet, guid: nil, protocol: nil,
/// mtu: nil, identity: nil | %{claims: map, verified: boolean}}`. `verified`: the token's
/// signature matched a configured key (`client_auth: {:jwks, _}`); otherwise the claims are
/// the client's word, its fingerprint signature checked against its own key only.
pub(crate) fn nethernet_info<'a>(
    env: Env<'a>,
    addr: SocketAddr,
    identity: Option<&raknet_nethernet::identity::Identity>,
) -> Term<'a> {
    let identity = match identity {
        None => atoms::nil().encode(env),
        Some(id) => {
            let keys = [atoms::claims(), atoms::verified()].map(|a| a.encode(env));
            let values = [
                json(env, &serde_json::Value::Object(id.claims.clone())),
                id.token_verified.encode(env),
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        }
    };
    let nil = atoms::nil().encode(env);
    let map = info_map(env, addr, [nil; 3], atoms::nethernet());
    map.map_put(atoms::identity().encode(env), identity)
        .unwrap_or(map)
}

/// JSON as Elixir terms: objects as maps with binary keys, arrays as lists, strings as
/// binaries, numbers, booleans, `nil`. Depth is bounded by the parser (serde_json: 128).
fn json<'a>(env: Env<'a>, value: &serde_json::Value) -> Term<'a> {
    use serde_json::Value;
    match value {
        Value::Null => atoms::nil().encode(env),
        Value::Bool(b) => b.encode(env),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.encode(env),
            (_, Some(u), _) => u.encode(env),
            (_, _, Some(f)) => f.encode(env),
            _ => atoms::nil().encode(env),
        },
        Value::String(text) => text.encode(env),
        Value::Array(items) => items
            .iter()
            .map(|v| json(env, v))
            .collect::<Vec<_>>()
            .encode(env),
        Value::Object(map) => {
            let keys: Vec<Term<'a>> = map.keys().map(|k| k.encode(env)).collect();
            let values: Vec<Term<'a>> = map.values().map(|v| json(env, v)).collect();
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        }
    }
}

/// Why a connection ended, as the runtime reports it.
#[derive(Debug, Clone)]
pub(crate) enum Reason {
    Engine(DisconnectReason),
    /// Closed locally with the application's own reason (`conn_close/2`), kept in the
    /// external term format until the owner is told.
    Closed(Vec<u8>),
    Overloaded,
    /// The endpoint's thread ended without closing the connection (it panicked).
    EndpointDown,
}

/// The engine's connection counters as a map with atom keys.
pub(crate) fn connection_stats<'a>(env: Env<'a>, s: &ConnectionStats, dropped: u64) -> Term<'a> {
    let pairs: Vec<(&str, u64)> = vec![
        ("srtt_us", s.srtt.as_micros() as u64),
        ("rttvar_us", s.rttvar.as_micros() as u64),
        ("rto_ms", s.rto.as_millis() as u64),
        ("cwnd", s.cwnd as u64),
        ("bytes_out", s.bytes_out),
        ("bytes_in", s.bytes_in),
        ("datagrams_out", s.datagrams_out),
        ("datagrams_in", s.datagrams_in),
        ("messages_out", s.messages_out),
        ("messages_in", s.messages_in),
        ("resends", s.resends),
        ("naks_received", s.naks_received),
        ("naks_sent", s.naks_sent),
        ("datagrams_lost", s.datagrams_lost),
        ("datagrams_lost_by_order", s.datagrams_lost_by_order),
        ("datagrams_reordered", s.datagrams_reordered),
        ("tail_probes", s.tail_probes),
        ("duplicates", s.duplicates),
        ("stale_dropped", s.stale_dropped),
        ("expired_unsent", s.expired_unsent),
        ("malformed", s.malformed),
        ("refused_over_limit", s.refused_over_limit),
        ("refused_paused", s.refused_paused),
        ("dropped_paused", s.dropped_paused),
        ("garbage_datagrams", s.garbage_datagrams),
        ("reused_datagram_numbers", s.reused_datagram_numbers),
        ("far_behind_datagrams", s.far_behind_datagrams),
        ("provisional_datagrams", s.provisional_datagrams),
        ("untrusted_dropped", s.untrusted_dropped),
        ("ack_numbers_ignored", s.ack_numbers_ignored),
        ("forged_acks", s.forged_acks),
        ("naks_ignored", s.naks_ignored),
        ("unknown_internal", s.unknown_internal),
        ("send_queue_bytes", s.send_queue_bytes as u64),
        ("bytes_in_flight", s.bytes_in_flight as u64),
        ("datagram_records", s.datagram_records as u64),
        ("reassembly_bytes", s.reassembly_bytes as u64),
        ("held_for_ordering", s.held_for_ordering as u64),
        ("held_bytes", s.held_bytes as u64),
        ("splits_expired", s.splits_expired),
        ("stalled_gaps", s.stalled_gaps),
        ("send_stalled", s.send_stalled),
        ("pongs_dropped", s.pongs_dropped),
        ("backoff", s.backoff as u64),
        ("deliveries_dropped", dropped),
    ];
    map(env, &pairs)
}

/// A connection's network info (renet's `network_info`): rates over the last second, with
/// the round-trip time and congestion window they go with.
pub(crate) fn conn_rates<'a>(env: Env<'a>, r: &Rates, s: &ConnectionStats) -> Term<'a> {
    map(
        env,
        &[
            ("rtt_ms", s.srtt.as_micros() as f64 / 1000.0),
            ("packet_loss", r.packet_loss),
            ("bytes_in_per_sec", r.bytes_in),
            ("bytes_out_per_sec", r.bytes_out),
            ("messages_in_per_sec", r.messages_in),
            ("messages_out_per_sec", r.messages_out),
            ("resends_per_sec", r.resends),
            ("cwnd_bytes", s.cwnd as f64),
        ],
    )
}

/// An endpoint's totals over the last second and its connections' round-trip times.
pub(crate) fn endpoint_rates<'a>(env: Env<'a>, e: &EndpointRates<SocketAddr>) -> Term<'a> {
    let [p50, p90, p99, max] = e.rtt_ms;
    let worst = |list: &[Worst<SocketAddr>]| -> Term<'a> {
        let items: Vec<Term<'a>> = list
            .iter()
            .map(|w| {
                let keys = [atoms::address(), atoms::rtt_ms(), atoms::packet_loss()]
                    .map(|a| a.encode(env));
                let values = [
                    address(env, w.key),
                    w.rtt_ms.encode(env),
                    w.packet_loss.encode(env),
                ];
                Term::map_from_arrays(env, &keys, &values)
                    .unwrap_or_else(|_| atoms::error().encode(env))
            })
            .collect();
        items.encode(env)
    };
    let totals = map(
        env,
        &[
            ("bytes_in_per_sec", e.total.bytes_in),
            ("bytes_out_per_sec", e.total.bytes_out),
            ("messages_in_per_sec", e.total.messages_in),
            ("messages_out_per_sec", e.total.messages_out),
            ("resends_per_sec", e.total.resends),
            ("packet_loss", e.total.packet_loss),
            ("rtt_p50_ms", p50),
            ("rtt_p90_ms", p90),
            ("rtt_p99_ms", p99),
            ("rtt_max_ms", max),
        ],
    );
    totals
        .map_put(atoms::worst_rtt().encode(env), worst(&e.worst_rtt))
        .and_then(|t| t.map_put(atoms::worst_loss().encode(env), worst(&e.worst_loss)))
        .unwrap_or(totals)
}

pub(crate) fn map<'a, V: Encoder>(env: Env<'a>, pairs: &[(&str, V)]) -> Term<'a> {
    let keys: Vec<Term<'a>> = pairs
        .iter()
        .map(|(k, _)| Atom::from_str(env, k).map_or_else(|_| k.encode(env), |a| a.encode(env)))
        .collect();
    let values: Vec<Term<'a>> = pairs.iter().map(|(_, v)| v.encode(env)).collect();
    Term::map_from_arrays(env, &keys, &values).unwrap_or_else(|_| atoms::error().encode(env))
}
