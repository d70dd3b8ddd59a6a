//! An endpoint thread's command inbox: any number of senders (NIFs on the schedulers, other
//! endpoints' threads), one receiver (the endpoint's thread).
//!
//! A command is one push onto a vector under a mutex that the thread takes whole once per
//! turn; the thread is notified only when the queue goes from empty to not. A channel that
//! counted, linked and woke per command (tokio's unbounded one, before) wrote four or five
//! cache lines that the thread also writes, for every send of a burst. The mutex is held
//! for a push or a swap of two vectors, never across a call that can block; commands are
//! dropped outside it (a command's drop can drop a handle, which leaves the inbox).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::resource::Command;

/// The most commands' room a vector keeps between turns (about 100 KB).
const KEEP: usize = 1024;

pub(crate) struct Inbox {
    state: Mutex<State>,
    /// A permit when the queue went from empty to not.
    ready: Notify,
    /// Whether commands wait, readable without the lock (see [`Inbox::pending`]).
    pending: AtomicBool,
}

struct State {
    queue: Vec<Command>,
    /// The thread still takes commands.
    open: bool,
}

impl Inbox {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                queue: Vec::new(),
                open: true,
            }),
            ready: Notify::new(),
            pending: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while it is held; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `cmd` for the thread; `Err` gives it back once the thread has stopped.
    pub(crate) fn send(&self, cmd: Command) -> Result<(), Command> {
        let mut state = self.lock();
        if !state.open {
            return Err(cmd);
        }
        let first = state.queue.is_empty();
        state.queue.push(cmd);
        if first {
            self.pending.store(true, Ordering::Release);
        }
        drop(state);
        if first {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Whether commands wait for the thread. Exact for a caller holding the thread's driver
    /// (the thread takes and applies commands while it holds it): a send asked for earlier
    /// by the same process is seen here, so that a send carried out on the caller's thread
    /// cannot overtake it. Without the driver, a hint.
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Move every waiting command, in order, to the end of `into`.
    pub(crate) fn take(&self, into: &mut Vec<Command>) {
        let mut state = self.lock();
        if state.queue.is_empty() {
            return;
        }
        if into.is_empty() {
            // The thread's emptied vector goes back as the queue: no allocation per turn;
            // one that a burst grew past `KEEP` is let go rather than kept for good.
            if into.capacity() > KEEP {
                *into = Vec::new();
            }
            std::mem::swap(&mut state.queue, into);
        } else {
            into.append(&mut state.queue);
        }
        self.pending.store(false, Ordering::Release);
    }

    /// Wait until commands may be waiting.
    pub(crate) async fn ready(&self) {
        self.ready.notified().await;
    }

    /// The thread has stopped: refuse further commands and drop the waiting ones.
    pub(crate) fn close(&self) {
        let waiting = {
            let mut state = self.lock();
            state.open = false;
            std::mem::take(&mut state.queue)
        };
        self.pending.store(false, Ordering::Release);
        drop(waiting);
    }

    pub(crate) fn is_closed(&self) -> bool {
        !self.lock().open
    }
}

/// Closes the inbox when dropped (see [`Inbox::close`]).
pub(crate) struct CloseOnDrop(pub(crate) std::sync::Arc<Inbox>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}
