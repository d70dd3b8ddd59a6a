//! What an endpoint's thread shares with the NIFs that talk to it, and the thread's loop.

use super::*;

/// What an endpoint's thread shares with the NIFs that talk to it.
///
/// The thread holds `driver` for each turn of its loop and lets go of it while it waits. A
/// `conn_send` on a scheduler thread that finds it free (`try_lock`: a scheduler never waits),
/// with no command queued ahead of it and no burst of sends on that connection, hands the message to
/// the engine and the datagram to the socket itself: the reply to a peer then crosses one
/// thread less, and the endpoint's thread is not woken for it. Anything else goes through the
/// inbox, in order.
pub(crate) struct Shared {
    driver: Mutex<Option<Driver>>,
    /// The thread's commands. An inline send waits for (goes behind) those not yet applied,
    /// so that it never overtakes an earlier send or close of the same process.
    inbox: Arc<Inbox>,
    /// Tells the waiting thread to take a turn: an inline send left it work (events to
    /// deliver, datagrams that did not fit in the socket buffer, an earlier timer).
    wake: Notify,
    /// Sends may be carried out on the caller's thread (the `inline_sends` option).
    inline: bool,
    /// What connections' `last_send` times count from.
    epoch: Instant,
    /// Set when the endpoint has stopped: whom to tell, once the socket is closed.
    stopped: Mutex<Option<(LocalPid, ResourceArc<EndpointResource>)>>,
}

impl Shared {
    pub(crate) fn new(inbox: Arc<Inbox>, inline: bool) -> Self {
        Self {
            driver: Mutex::new(None),
            inbox,
            wake: Notify::new(),
            inline,
            epoch: Instant::now(),
            stopped: Mutex::new(None),
        }
    }

    /// The thread's hold on the driver. A panic while it was held (on this thread, or in an
    /// inline send on a scheduler) ends the endpoint the way a panic on its thread does.
    fn lock(&self) -> MutexGuard<'_, Option<Driver>> {
        match self.driver.lock() {
            Ok(guard) => guard,
            Err(_) => std::panic::resume_unwind(Box::new("a panic while sending on a scheduler")),
        }
    }

    /// One turn of the loop: apply the commands, receive what waits, run the timers, send what
    /// the engine wrote, deliver its events. `None`: the endpoint has stopped.
    ///
    /// The turn's message batches are delivered after it lets go of the driver (with the
    /// thread's own `env`, into `mail`'s reused buffer): a handler woken by one answers while
    /// the thread delivers the rest, and finds the driver free for an inline send. Events
    /// other than messages are sent during the turn; a batch is sent at once when an event
    /// about its connection follows it (see [`Driver::deliver_batch`]).
    fn turn(
        &self,
        cmds: &mut Vec<Command>,
        writable: bool,
        env: &mut OwnedEnv,
        mail: &mut Vec<Mail>,
    ) -> Option<Wait> {
        let mut guard = self.lock();
        let driver = guard.as_mut()?;
        driver.send_waits += u64::from(writable);
        // Everything enqueued up to now, in order, before any datagram: a new MOTD before a
        // ping, a send before the peer's ACK. And again after each read from the socket,
        // before its datagrams: a command enqueued before a datagram was sent (a limit set
        // before a client connected) is visible by the time the datagram is read.
        //
        // The shared counters are brought up to date once per batch rather than per command
        // (the connections' send budgets in `settle`): the BEAM processes sending meanwhile
        // write the same cache lines, which moved between cores on every command otherwise.
        // Inline sends cannot tell the difference: they need the driver, held here until the
        // turn ends.
        let mut applied = 0;
        let mut apply = |driver: &mut Driver| {
            self.inbox.take(cmds);
            if cmds.is_empty() {
                return;
            }
            let now = Instant::now();
            let batch = cmds.len();
            for cmd in cmds.drain(..) {
                driver.command(now, cmd);
            }
            driver.settle();
            applied += batch as u64;
        };
        apply(driver);
        driver.receive(&mut apply);
        driver.commands += applied;
        driver.command_turns += u64::from(applied > 0);
        let now = Instant::now();
        driver.endpoint.handle_timeout(now);
        driver.nethernet_timeout(now);
        if driver.next_stall_check.is_some_and(|t| now >= t) {
            driver.check_stalls(now);
        }
        if now >= rates::next_due(driver.last_sample) {
            driver.sample_rates(now);
        }
        let sent_all = driver.flush();
        driver.release_drained();
        driver.me.load.store(driver.conns.len(), Ordering::Relaxed);
        if let Some(stop) = driver.stop_deadline {
            if driver.endpoint.stats().connections == 0 || Instant::now() >= stop {
                // The messages before the news of the end.
                for mail in std::mem::take(&mut driver.mail) {
                    send_batch(&mut driver.env, mail);
                }
                driver.finish_stop();
                *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((driver.owner, driver.me.clone()));
                // Dropped here, on the endpoint's thread (it talks to the BEAM).
                let driver = guard.take();
                drop(guard);
                drop(driver);
                return None;
            }
        }
        let deadline = driver.deadline();
        driver.armed = deadline;
        std::mem::swap(mail, &mut driver.mail);
        drop(guard);
        for mail in mail.drain(..) {
            send_batch(env, mail);
        }
        Some(Wait {
            deadline,
            blocked: !sent_all,
        })
    }
}

impl Gate for Shared {
    /// Carry out a send on the calling (scheduler) thread if the endpoint's thread is waiting,
    /// nothing is queued ahead of it and the connection's previous send (`last_send`: when it
    /// was asked for, by either path, in nanoseconds since `epoch`) was not a moment ago.
    /// Never waits: `Err` hands the message back for the inbox.
    fn try_send_inline(&self, last_send: &AtomicU64, msg: Message) -> Result<(), Message> {
        let now = Instant::now();
        // Counted from one gap in: a connection's first send (`last_send` 0) is sparse.
        let at = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(INLINE_GAP.as_nanos() as u64);
        let last = last_send.swap(at, Ordering::Relaxed);
        let sparse = at.saturating_sub(last) >= INLINE_GAP.as_nanos() as u64;
        if !self.inline || !sparse || self.inbox.pending() {
            return Err(msg);
        }
        let Ok(mut guard) = self.driver.try_lock() else {
            return Err(msg);
        };
        let Some(driver) = guard.as_mut() else {
            return Err(msg);
        };
        // Again, now that the thread cannot be applying commands.
        if self.inbox.pending() || !driver.can_send_inline() {
            return Err(msg);
        }
        let wake = driver.send_inline(now, msg);
        drop(guard);
        if wake {
            self.wake.notify_one();
        }
        Ok(())
    }
}

/// What the thread waits for between turns (besides commands, datagrams and a wake-up).
struct Wait {
    deadline: Option<Instant>,
    /// Datagrams wait for room in the socket buffer.
    blocked: bool,
}

/// Takes the driver out of [`Shared`] and drops it when the thread's loop ends, however it
/// ends (a panic unwinds through here too): on the endpoint's thread, and without leaving the
/// handles (which keep `Shared` alive) holding the driver, which holds them.
struct Release<'a>(&'a Shared);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let driver = self
            .0
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(driver);
    }
}

/// Install `driver` in `shared` and run the endpoint's loop until it stops.
pub(crate) async fn run(shared: Arc<Shared>, driver: Driver) {
    // Declared first, dropped last: after the socket below.
    let _release = Release(&shared);
    let io: Arc<raknet_udp::Sock> = driver.socket.io();
    *shared.lock() = Some(driver);
    let mut cmds = Vec::new();
    let (mut env, mut mail) = (OwnedEnv::new(), Vec::new());
    let mut wait = Wait {
        deadline: None,
        blocked: false,
    };
    let mut write_wait = None;
    loop {
        if !wait.blocked {
            write_wait = None;
        } else if write_wait.is_none() {
            write_wait = io.write_wait().ok();
        }
        let sleep = async {
            match wait.deadline {
                Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                None => std::future::pending().await,
            }
        };
        let writable = async {
            match &write_wait {
                Some(w) => {
                    let _ = w.ready().await;
                }
                // No registration (no descriptor to spare): try again in a millisecond
                // rather than spin on a full buffer.
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        };
        let mut room = false;
        tokio::select! {
            biased;
            () = shared.inbox.ready() => {}
            _ = io.readable() => {}
            () = writable, if wait.blocked => room = true,
            () = shared.wake.notified() => {}
            () = sleep => {}
        }
        match shared.turn(&mut cmds, room, &mut env, &mut mail) {
            Some(next) => wait = next,
            None => break,
        }
    }
    // Stopped: the driver is gone; once the socket is closed too (this was its last
    // handle), the owner hears of it, and may bind the port again at once.
    drop(write_wait);
    drop(io);
    let stopped = shared
        .stopped
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some((owner, me)) = stopped {
        let _ = env.send_and_clear(&owner, |env| {
            (atoms::raknet_endpoint(), me, atoms::stopped()).encode(env)
        });
    }
}
