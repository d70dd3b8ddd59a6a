//! The receive path: datagram window, duplicate filter, reassembly, ordering.

pub(crate) mod ordering;
pub(crate) mod rate;
pub(crate) mod reassembly;
pub(crate) mod reliable;
pub(crate) mod window;
