//! The NetherNet NIFs: a server's answer to an offer (`endpoint_nethernet_offer`), a client
//! session's offer and the server's answer (`endpoint_nethernet_connect`,
//! `conn_nethernet_answer`), and the operator key (`nethernet_generate_key`,
//! `nethernet_key_jwk`). The sessions themselves live on the endpoint threads
//! (`driver/nethernet.rs`).

use std::net::SocketAddr;
use std::time::Instant;

use rustler::{Binary, Encoder, Env, LocalPid, ResourceArc, Term};

use crate::resource::{Command, ConnResource, EndpointResource};
use crate::{atoms, convert, error, parse_host};

/// Answer a NetherNet offer (the body of `POST /v1/join/{id}`) on the endpoint hosting the
/// server's sessions: `:ok`, then `{:raknet_nethernet_answer, tag, {:ok, sdp} | {:error,
/// reason}}` to `reply_to`. `candidate`: the IP address the answer names (the one the client
/// reached signaling at, or the configured public one); `nil`: the socket's own. `peer`: who
/// sent the offer (signaling's peer), for its address's share of negotiations.
#[rustler::nif]
fn endpoint_nethernet_offer<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    sdp: Binary<'a>,
    candidate: Option<String>,
    peer: Option<String>,
    reply_to: LocalPid,
    tag: u64,
) -> Term<'a> {
    if sdp.len() > raknet_nethernet::sdp::MAX_SDP {
        return error(env, atoms::too_large());
    }
    let Ok(sdp) = std::str::from_utf8(sdp.as_slice()) else {
        return error(env, atoms::einval());
    };
    let candidate = match candidate.as_deref().map(parse_host) {
        None => None,
        Some(Some(ip)) => Some(ip),
        Some(None) => return error(env, atoms::einval()),
    };
    let cmd = Command::NetherNetOffer {
        sdp: sdp.to_owned(),
        candidate,
        peer: peer.as_deref().and_then(parse_host),
        reply_to,
        tag,
    };
    match endpoint.tx.send(cmd) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

/// Open a NetherNet session to a server as a client: `{:ok, conn, offer}`. `local_ip` is the
/// address the offer names for this endpoint's socket (the one this host reaches the server
/// from); the caller takes the offer to the server's signaling and hands its answer to
/// `conn_nethernet_answer/2`; `owner` then gets `{:raknet_connected, conn, info}` or
/// `{:raknet_connect_failed, conn, reason}`, as for `endpoint_connect`. `opts`: `%{identity:
/// nil | %{token: jwt, key_pem: pem, domain: binary}, batch_header: nil | byte}`: the
/// player's assertion the offer carries (the token names the key's public half as `cpk`),
/// and the byte put in front of messages received and taken off messages sent. Dirty: the
/// session's DTLS certificate is made here.
#[rustler::nif(schedule = "DirtyCpu")]
fn endpoint_nethernet_connect<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    local_ip: String,
    host: String,
    port: u16,
    owner: LocalPid,
    opts: Term<'a>,
) -> Term<'a> {
    let (Some(local_ip), Some(server_ip)) = (parse_host(&local_ip), parse_host(&host)) else {
        return error(env, atoms::einval());
    };
    let (identity, header) = match convert::nethernet_connect(opts) {
        Ok(opts) => opts,
        Err(key) => return error(env, (atoms::invalid_option(), key)),
    };
    if !endpoint.reaches(server_ip) || local_ip.is_ipv4() != server_ip.is_ipv4() {
        return error(env, atoms::einval());
    }
    let local = SocketAddr::new(local_ip, endpoint.local.port());
    let made = raknet_nethernet::client::Client::new(Instant::now(), local, identity.as_ref());
    let (client, offer) = match made {
        Ok(made) => made,
        Err(_) => return error(env, atoms::einval()),
    };
    let conn = ResourceArc::new(endpoint.new_nethernet_conn(header));
    let cmd = Command::NetherNetConnect {
        conn: conn.clone(),
        client: Box::new(client),
        server: SocketAddr::new(server_ip, port),
        owner,
    };
    if endpoint.tx.send(cmd).is_err() {
        return error(env, atoms::closed());
    }
    (atoms::ok(), conn, offer).encode(env)
}

/// The server's answer (the body of signaling's 200) to a session opened by
/// `endpoint_nethernet_connect`: `:ok`; the outcome comes as a message.
#[rustler::nif]
fn conn_nethernet_answer<'a>(
    env: Env<'a>,
    conn: ResourceArc<ConnResource>,
    answer: Binary<'a>,
) -> Term<'a> {
    if conn.nethernet.is_none() || answer.len() > raknet_nethernet::sdp::MAX_SDP {
        return error(env, atoms::einval());
    }
    let Ok(answer) = std::str::from_utf8(answer.as_slice()) else {
        return error(env, atoms::einval());
    };
    let cmd = Command::NetherNetAnswer {
        key: conn.key,
        answer: answer.to_owned(),
    };
    match conn.tx.send(cmd) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

/// A new NetherNet operator key (P-384), as PKCS#8 PEM: generated once and kept (the
/// clients pin it).
#[rustler::nif]
fn nethernet_generate_key(env: Env<'_>) -> Term<'_> {
    let pem = raknet_nethernet::identity::OperatorKey::generate().to_pem();
    let mut bin = rustler::NewBinary::new(env, pem.len());
    bin.as_mut_slice().copy_from_slice(pem.as_bytes());
    Binary::from(bin).encode(env)
}

/// The public half of an operator key as its JWK (JSON text): `{:ok, json}` or `{:error,
/// :invalid_key}`.
#[rustler::nif]
fn nethernet_key_jwk<'a>(env: Env<'a>, pem: Binary<'a>) -> Term<'a> {
    let key = std::str::from_utf8(pem.as_slice())
        .ok()
        .and_then(|pem| raknet_nethernet::identity::OperatorKey::from_pem(pem).ok());
    match key {
        Some(key) => (atoms::ok(), key.jwk().to_string()).encode(env),
        None => error(env, atoms::invalid_key()),
    }
}
