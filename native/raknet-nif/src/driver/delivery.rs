//! Delivery to BEAM processes: messages and disconnections to each connection's owner, held
//! until it has one, batched, and paused (back-pressure) when the owner falls behind.

use super::*;

impl Driver {
    pub(super) fn set_owner(&mut self, key: u64, pid: LocalPid) {
        let Some(&id) = self.keys.get(&key) else {
            return;
        };
        let Some(slot) = self.conns.get_mut(&id) else {
            return;
        };
        slot.owner = Some(pid);
        let held: Vec<Held> = slot.held.drain(..).collect();
        let res = slot.res.clone();
        let mut done = false;
        for h in held {
            match h {
                // Counted when held.
                Held::Message(payload, transit) => {
                    send_message(&mut self.env, &pid, &res, &payload, transit);
                }
                Held::Disconnect(reason) => {
                    send_disconnect(&mut self.env, &pid, &res, reason);
                    done = true;
                }
            }
        }
        if done {
            self.forget(id);
            return;
        }
        // Messages held before the owner was set count against its budget too. A peer held
        // back for want of an owner goes on at once if the owner has room for it.
        let messages = res.undelivered.load(Ordering::SeqCst);
        let bytes = res.undelivered_bytes.load(Ordering::SeqCst);
        if res.flow_controlled.load(Ordering::Relaxed) && res.budget.exceeded(messages, bytes) {
            self.pause(id);
        } else if res.budget.resumable(messages, bytes)
            && res
                .paused
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            let now = Instant::now();
            self.endpoint.set_receive_paused(now, id, false);
            if let Some(slot) = self.conns.get_mut(&id) {
                slot.stall = None;
            }
        } else if let Some(slot) = self.conns.get_mut(&id).filter(|s| s.stall.is_some()) {
            // Still paused until the owner catches up: its progress counts from now, not
            // from when the messages were held for it.
            slot.stall = Some((Instant::now(), messages));
        }
    }

    /// No owner yet, and [`HOLD_BACK_AT`] messages (or the delivery budget) wait for it:
    /// the connection stops taking the peer's messages until the owner is set (then as
    /// back-pressure does, until the owner has room). An owner not set within the timeout
    /// leaves the connection to be closed as overloaded.
    pub(super) fn hold_back(&mut self, conn: ConnId) {
        let Some(slot) = self.conns.get_mut(&conn) else {
            return;
        };
        slot.res.paused.store(true, Ordering::SeqCst);
        let now = Instant::now();
        slot.stall = Some((now, slot.res.undelivered.load(Ordering::SeqCst)));
        self.endpoint.set_receive_paused(now, conn, true);
        self.next_stall_check.get_or_insert(now + STALL_CHECK);
    }

    /// The messages waiting in `conn`'s batch, addressed to its owner.
    pub(super) fn take_batch(&mut self, conn: ConnId) -> Option<Mail> {
        let slot = self.conns.get_mut(&conn)?;
        let pid = slot.owner.filter(|_| !slot.batch.is_empty())?;
        Some((pid, slot.res.clone(), std::mem::take(&mut slot.batch)))
    }

    /// Put `conn`'s batch in the turn's mail.
    pub(super) fn post_batch(&mut self, conn: ConnId) {
        if let Some(mail) = self.take_batch(conn) {
            self.mail.push(mail);
        }
    }

    /// Send `conn`'s batch now (an event about to follow it, a receipt or the connection's
    /// end, must not overtake it).
    pub(super) fn deliver_batch(&mut self, conn: ConnId) {
        if let Some(mail) = self.take_batch(conn) {
            send_batch(&mut self.env, mail);
        }
    }

    /// Back-pressure: the owner of `conn` is over its delivery budget, so the connection
    /// stops taking the peer's messages until `conn_delivered` brings it below half.
    pub(super) fn pause(&mut self, conn: ConnId) {
        let Some(slot) = self.conns.get_mut(&conn) else {
            return;
        };
        let res = &slot.res;
        res.paused.store(true, Ordering::SeqCst);
        // Read the counts again after publishing `paused`: a `conn_delivered` that ran in
        // between did not see it, so the owner may have caught up already.
        let messages = res.undelivered.load(Ordering::SeqCst);
        let bytes = res.undelivered_bytes.load(Ordering::SeqCst);
        if res.budget.resumable(messages, bytes)
            && res
                .paused
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return;
        }
        let now = Instant::now();
        slot.stall = Some((now, messages));
        self.endpoint.set_receive_paused(now, conn, true);
        self.next_stall_check.get_or_insert(now + STALL_CHECK);
    }

    /// Close the paused connections whose owner made no progress for the timeout; the
    /// others keep waiting.
    pub(super) fn check_stalls(&mut self, now: Instant) {
        let timeout = self.endpoint.config().timeout;
        let mut stalled = Vec::new();
        let mut waiting = false;
        for (&id, slot) in &mut self.conns {
            let Some((since, seen)) = slot.stall else {
                continue;
            };
            let outstanding = slot.res.undelivered.load(Ordering::SeqCst);
            if outstanding < seen {
                slot.stall = Some((now, outstanding));
                waiting = true;
            } else if now.duration_since(since) >= timeout {
                stalled.push(id);
            } else {
                waiting = true;
            }
        }
        self.next_stall_check = waiting.then_some(now + STALL_CHECK);
        for id in stalled {
            self.overloaded(id, timeout);
        }
    }

    /// The owner of `conn` handled nothing for `timeout` while messages waited: close it.
    pub(super) fn overloaded(&mut self, conn: ConnId, timeout: Duration) {
        let Some(slot) = self.conns.get_mut(&conn) else {
            return;
        };
        slot.stall = None;
        if let (Some(pid), false) = (slot.owner, slot.reported) {
            slot.reported = true;
            send_disconnect(&mut self.env, &pid, &slot.res, Reason::Overloaded);
        }
        // An owner set later hears why (the engine's close would read as a local one).
        slot.overloaded = true;
        slot.res.closed.store(true, Ordering::Relaxed);
        self.close_conn(Instant::now(), conn);
        self.log(
            true,
            format!(
                "closed an overloaded connection: its owner handled none of its messages for {} ms",
                timeout.as_millis()
            ),
        );
    }
}

impl Slot {
    pub(super) fn new(res: ResourceArc<ConnResource>, owner: Option<LocalPid>, role: Role) -> Self {
        Self {
            res,
            owner,
            role,
            connected: false,
            held: VecDeque::new(),
            reported: false,
            dropped: 0,
            stall: None,
            local: None,
            rates: ConnRates::default(),
            close_reason: None,
            batch: Vec::new(),
            server: None,
            overloaded: false,
        }
    }
}

/// Count one more message of `size` bytes sent to the owner; returns the totals outstanding.
pub(super) fn count_delivery(res: &ConnResource, size: usize) -> (usize, usize) {
    let messages = res.undelivered.fetch_add(1, Ordering::SeqCst) + 1;
    let bytes = res.undelivered_bytes.fetch_add(size, Ordering::SeqCst) + size;
    (messages, bytes)
}

/// `{:raknet, conn_ref, type, payload, transit_time}`: the first byte is the type.
pub(super) fn send_message(
    env: &mut OwnedEnv,
    pid: &LocalPid,
    res: &ResourceArc<ConnResource>,
    payload: &Bytes,
    transit: Duration,
) {
    let res = res.clone();
    let _ = env.send_and_clear(pid, |env| {
        let kind = payload.first().copied().unwrap_or(0);
        let rest = payload.get(1..).unwrap_or(&[]);
        let mut bin = rustler::NewBinary::new(env, rest.len());
        bin.as_mut_slice().copy_from_slice(rest);
        let bin: rustler::Binary = bin.into();
        (atoms::raknet(), res, kind, bin, transit.as_millis() as u64).encode(env)
    });
}

/// A batch of messages for a connection's owner (see [`send_batch`]).
pub(super) type Mail = (LocalPid, ResourceArc<ConnResource>, Vec<(Bytes, Duration)>);

/// `{:raknet_batch, conn_ref, [{type, payload, transit_time}, ...]}`: messages in the order
/// they arrived.
pub(super) fn send_batch(env: &mut OwnedEnv, (pid, res, batch): Mail) {
    let _ = env.send_and_clear(&pid, |env| {
        let messages: Vec<Term<'_>> = batch
            .iter()
            .map(|(payload, transit)| {
                let kind = payload.first().copied().unwrap_or(0);
                let rest = payload.get(1..).unwrap_or(&[]);
                let mut bin = rustler::NewBinary::new(env, rest.len());
                bin.as_mut_slice().copy_from_slice(rest);
                let bin: rustler::Binary = bin.into();
                (kind, bin, transit.as_millis() as u64).encode(env)
            })
            .collect();
        (atoms::raknet_batch(), res, messages).encode(env)
    });
}

/// `{:raknet_receipt, conn, id, :lost}`: a message sent with a receipt that the engine refused.
pub(super) fn receipt_lost(
    env: &mut OwnedEnv,
    pid: &LocalPid,
    res: ResourceArc<ConnResource>,
    id: u32,
) {
    let _ = env.send_and_clear(pid, |env| {
        (atoms::raknet_receipt(), res, id, atoms::lost()).encode(env)
    });
}

pub(super) fn send_disconnect(
    env: &mut OwnedEnv,
    pid: &LocalPid,
    res: &ResourceArc<ConnResource>,
    reason: Reason,
) {
    let res = res.clone();
    let _ = env.send_and_clear(pid, |env| {
        (
            atoms::raknet_disconnect(),
            res,
            convert::disconnect_reason(env, &reason),
        )
            .encode(env)
    });
}
