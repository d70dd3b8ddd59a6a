//! The send path: queueing with index assignment and splitting, and in-flight tracking.

pub(crate) mod flight;
pub(crate) mod gate;
pub(crate) mod queue;
