//! The Erlang NIF library behind `RakNet.Native`.
//!
//! The BEAM loads this `cdylib` from `priv/native/libraknet_nif.so` (see `lib/raknet/native.ex`
//! and the `compile.raknet_native` Mix compiler). Functions here run on scheduler threads, so each
//! one validates its arguments, does a small bounded amount of work and returns at once.
//!
//! For now the library exposes only [`build_info`]; sockets and the protocol engine come later.

mod atoms;

use rustler::{Encoder, Env, NifResult, Term};

/// Return a map describing this build of the library.
///
/// `%{version: "0.1.0", nif_version: "2.15", protocol_versions: [6, 10, 11]}`: the crate version,
/// the NIF API version the library was compiled against (the lowest BEAM NIF version that can load
/// it), and the RakNet protocol versions it speaks.
#[rustler::nif]
fn build_info(env: Env<'_>) -> NifResult<Term<'_>> {
    let nif_version = format!(
        "{}.{}",
        rustler::sys::NIF_MAJOR_VERSION,
        rustler::sys::NIF_MINOR_VERSION
    );
    // The versions the engine accepts by default, in ascending order.
    let mut protocol_versions = raknet_proto::EndpointConfig::default().protocol_versions;
    protocol_versions.sort_unstable();
    let pairs = [
        (
            atoms::version().encode(env),
            env!("CARGO_PKG_VERSION").encode(env),
        ),
        (atoms::nif_version().encode(env), nif_version.encode(env)),
        (
            atoms::protocol_versions().encode(env),
            protocol_versions.encode(env),
        ),
    ];
    // Fails only on duplicate keys, which the fixed atoms above rule out.
    Term::map_from_pairs(env, &pairs)
}

rustler::init!("Elixir.RakNet.Native");
