//! A connection's send admission, for threads that queue sends without holding its endpoint
//! (a driver's callers, on their own threads): the one place the send rules live.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::{Limits, SendBudget};
use crate::error::SendError;

/// The smallest frame payload of any connection, at the smallest MTU an endpoint takes (400):
/// what [`SendGate::cost`] splits by, so that it never counts fewer frames than the engine.
const SMALLEST_FRAGMENT: usize = crate::max_unsplit_payload(400);

/// What a send must pass before it is queued: the connection is open, the message is not
/// empty and not longer than the connection takes, and the bytes it holds for sending stay
/// within its budget and its share of its group's ([`SendBudget`]).
///
/// The engine publishes what the connection holds (queued and unacknowledged, each frame with
/// [`Limits::SEND_OVERHEAD`]) after every change, and keeps the group's total. A caller
/// [`admit`](Self::admit)s a send on its own thread, which reserves the send's
/// [`cost`](Self::cost) until the engine takes the send
/// ([`Endpoint::send_admitted`](crate::Endpoint::send_admitted)) and releases it: so a
/// burst of sends from another thread counts in full before the engine has seen any, and
/// the engine never refuses what the gate let through for want of room in its own budget
/// (other connections of the group can still fill the group's meanwhile: such a send is
/// refused and counted, as any the engine refuses).
#[derive(Debug)]
pub struct SendGate {
    budget: SendBudget,
    /// The group's bytes held for sending, all connections together.
    group: Arc<AtomicUsize>,
    /// This connection's, as the engine last published it.
    held: AtomicUsize,
    /// Admitted and not taken by the engine yet.
    pending: AtomicUsize,
    /// The longest message the connection takes ([`crate::Endpoint::max_message_len`]).
    max_message: AtomicUsize,
    closed: AtomicBool,
}

impl SendGate {
    pub(crate) fn new(limits: &Limits, group: Arc<AtomicUsize>) -> Self {
        Self {
            budget: limits.send_budget(),
            group,
            held: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            max_message: AtomicUsize::new(limits.max_message_bytes),
            closed: AtomicBool::new(false),
        }
    }

    /// What a send of `len` bytes counts against the budgets until the engine takes it: its
    /// payload and the overhead of the most frames it can take. Never less than the engine
    /// counts once queued, and a pure function of `len`, so what is reserved is what is
    /// released.
    pub fn cost(len: usize) -> usize {
        len + len.div_ceil(SMALLEST_FRAGMENT).max(1) * Limits::SEND_OVERHEAD
    }

    /// Check a send of `len` bytes and reserve its [`cost`](Self::cost), which the caller
    /// hands to [`Endpoint::send_admitted`](crate::Endpoint::send_admitted) with the send
    /// (or gives back with [`Self::withdraw`] if it does not send after all).
    pub fn admit(&self, len: usize) -> Result<usize, SendError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(SendError::Closed);
        }
        if len == 0 {
            return Err(SendError::Empty);
        }
        if len > self.max_message.load(Ordering::Relaxed) {
            return Err(SendError::TooLarge);
        }
        let cost = Self::cost(len);
        // Pending first, with Acquire: a release the engine made after publishing what it
        // holds is seen together with that (see `release`).
        let pending = self.pending.load(Ordering::Acquire);
        let held = self.held.load(Ordering::Relaxed);
        let mine = pending + held + cost;
        let others = self.group.load(Ordering::Relaxed).saturating_sub(held);
        if !self.budget.fits(mine, others + mine) {
            return Err(SendError::QueueFull);
        }
        self.pending.fetch_add(cost, Ordering::Relaxed);
        Ok(cost)
    }

    /// Give back what [`Self::admit`] reserved for a send that was not made.
    pub fn withdraw(&self, cost: usize) {
        self.release(cost);
    }

    /// Whether the connection has ended (sends are refused with [`SendError::Closed`]).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// The connection ended, or its owner went: every later [`Self::admit`] is refused.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// What the connection holds for sending, as last published.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Admitted and not yet taken by the engine.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// The engine took an admitted send (after publishing what it now holds).
    pub(crate) fn release(&self, cost: usize) {
        // Release: whoever sees the pending bytes gone sees them in `held` (see `admit`).
        let _ = self
            .pending
            .fetch_update(Ordering::Release, Ordering::Relaxed, |p| {
                Some(p.saturating_sub(cost))
            });
    }

    pub(crate) fn set_max_message(&self, len: usize) {
        self.max_message.store(len, Ordering::Relaxed);
    }
}

/// The engine's end of a connection's [`SendGate`]: what the connection holds for sending,
/// published in the gate and counted in its group's total when the engine is done with a
/// batch of sends or has taken a datagram (not on every send: the threads admitting sends
/// read those figures, and would share their cache lines with the engine on every send).
/// Until then the gate still counts the sends taken as admitted ones, so nothing is counted
/// twice or missed. When the connection goes, its group forgets what it held and the gate
/// refuses every later send (callers may keep the gate).
#[derive(Debug)]
pub(crate) struct GateOwner {
    pub(crate) gate: Arc<SendGate>,
    /// What the connection holds now.
    mine: usize,
    /// What the gate and the group's total say it holds.
    published: usize,
}

impl GateOwner {
    pub(crate) fn new(limits: &Limits, group: Arc<AtomicUsize>) -> Self {
        Self {
            gate: Arc::new(SendGate::new(limits, group)),
            mine: 0,
            published: 0,
        }
    }

    /// The connection now holds `bytes` for sending (published by [`Self::publish`]).
    pub(crate) fn account(&mut self, bytes: usize) {
        self.mine = bytes;
    }

    /// Publish what the connection holds, in the gate and in the group's total (before
    /// releasing reservations).
    pub(crate) fn publish(&mut self) {
        if self.mine == self.published {
            return;
        }
        let group = &self.gate.group;
        if self.mine > self.published {
            group.fetch_add(self.mine - self.published, Ordering::Relaxed);
        } else {
            group.fetch_sub(self.published - self.mine, Ordering::Relaxed);
        }
        self.gate.held.store(self.mine, Ordering::Relaxed);
        self.published = self.mine;
    }

    /// The group's total if this connection held `mine` bytes (the engine's own check).
    pub(crate) fn total_with(&self, mine: usize) -> usize {
        (self.gate.group.load(Ordering::Relaxed) + mine).saturating_sub(self.published)
    }
}

impl std::ops::Deref for GateOwner {
    type Target = SendGate;

    fn deref(&self) -> &SendGate {
        &self.gate
    }
}

impl Drop for GateOwner {
    fn drop(&mut self) {
        self.account(0);
        self.publish();
        self.gate.close();
    }
}
