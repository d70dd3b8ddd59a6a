//! The ban NIFs: by address or network (`endpoint_ban`, `endpoint_unban`, `ban_key`), by
//! client GUID (`endpoint_ban_guid`), and the list (`endpoint_banned`). Each enqueues a
//! command for the endpoint's thread, whose engine keeps the bans.

use std::net::IpAddr;
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use rustler::{Atom, Encoder, Env, ResourceArc, Term};

use crate::resource::{Command, EndpointResource};
use crate::{atoms, error};

/// Parse an IP literal, or a network as `address/prefix-length` (no names: bans are by
/// address).
fn parse_ip(ip: &str) -> Result<(IpAddr, Option<u8>), Atom> {
    let (addr, len) = match ip.split_once('/') {
        Some((addr, len)) => (addr, Some(len.parse::<u8>().map_err(|_| atoms::einval())?)),
        None => (ip, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| atoms::einval())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len.is_some_and(|l| l > max) {
        return Err(atoms::einval());
    }
    Ok((addr, len))
}

/// How a ban is written back (`endpoint_banned`, `ban_key`): a host's as its address, a
/// network's as `address/len`.
pub(crate) fn ban_text(ip: IpAddr, len: u8) -> String {
    if len == raknet_proto::host_prefix_len(ip) {
        ip.to_string()
    } else {
        format!("{ip}/{len}")
    }
}

/// The engine's key of a ban of `ip` (an address or `address/len`), written as
/// `endpoint_banned` writes it: two ways of writing one ban (an IPv6 address and another of
/// its /64, an IPv4-mapped address and its IPv4 one) give one key.
#[rustler::nif]
fn ban_key<'a>(env: Env<'a>, ip: String) -> Term<'a> {
    match parse_ip(&ip) {
        Ok((ip, len)) => {
            let (net, len) = raknet_proto::ban_network(ip, len);
            (atoms::ok(), ban_text(net, len)).encode(env)
        }
        Err(e) => error(env, e),
    }
}

#[rustler::nif]
fn endpoint_ban<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    ip: String,
    duration_ms: Option<u64>,
) -> Term<'a> {
    let (ip, prefix) = match parse_ip(&ip) {
        Ok(ip) => ip,
        Err(e) => return error(env, e),
    };
    let duration = duration_ms.map(Duration::from_millis);
    match endpoint.tx.send(Command::Ban {
        ip,
        prefix,
        duration,
    }) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

#[rustler::nif]
fn endpoint_unban<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    ip: String,
) -> Term<'a> {
    let (ip, prefix) = match parse_ip(&ip) {
        Ok(ip) => ip,
        Err(e) => return error(env, e),
    };
    match endpoint.tx.send(Command::Unban { ip, prefix }) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

/// Ban (`duration_ms` nil: until lifted) or, with `ban: false`, unban a client GUID.
#[rustler::nif]
fn endpoint_ban_guid<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    guid: u64,
    ban: bool,
    duration_ms: Option<u64>,
) -> Term<'a> {
    let command = if ban {
        Command::BanGuid {
            guid,
            duration: duration_ms.map(Duration::from_millis),
        }
    } else {
        Command::UnbanGuid(guid)
    };
    match endpoint.tx.send(command) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

/// Waits (at most a second) for the endpoint thread's answer, hence the dirty scheduler.
#[rustler::nif(schedule = "DirtyIo")]
fn endpoint_banned(env: Env<'_>, endpoint: ResourceArc<EndpointResource>) -> Term<'_> {
    let (reply, answer) = sync_channel(1);
    if endpoint.tx.send(Command::Banned { reply }).is_err() {
        return error(env, atoms::closed());
    }
    match answer.recv_timeout(Duration::from_secs(1)) {
        Ok(Some((owned, saved))) => owned.run(|e| saved.load(e).in_env(env)),
        _ => error(env, atoms::closed()),
    }
}
