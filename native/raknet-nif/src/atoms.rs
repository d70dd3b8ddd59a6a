//! Every atom the NIF library creates, in one place.

rustler::atoms! {
    version,
    nif_version,
    protocol_versions,
}
