//! One endpoint's thread: a current-thread tokio runtime running one loop that receives a
//! batch of datagrams, applies NIF commands, runs the engine's timers, then sends what the
//! engine wrote and delivers its events to BEAM processes.
//!
//! The loop holds the endpoint's state (the [`Driver`]) for each turn and lets go of it while it
//! waits. A send asked for while the thread waits, with nothing queued ahead of it, is carried
//! out on the caller's scheduler thread instead ([`Shared::try_send_inline`]).

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::hash::OwnKeyMap;
use raknet_proto::{ConnId, DisconnectReason, Endpoint, Event, ReceiptId, Role, SendOptions};
use rustler::{Encoder, LocalPid, OwnedEnv, ResourceArc, Term};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Notify;

use crate::atoms;
use crate::command::Command;
use crate::convert::{self, Reason};
use crate::resource::{send_cost, ConnResource, EndpointResource};
use crate::udp::{Outbox, Received, Udp};
use raknet_proto::rates::{self, ConnRates, EndpointRates};

/// Datagrams read per wake-up before the engine's output is flushed (bounds latency); read
/// up to `udp::BATCH` per system call.
const RECV_BATCH: usize = 64;
/// Messages held for a connection until its owner is set before the peer is held back.
const HOLD_BACK_AT: usize = 512;
/// Messages held for a connection until its owner is set, at most; more are dropped. Only a
/// safety net: the peer is held back at [`HOLD_BACK_AT`]; what comes before that takes
/// effect is what one receive batch releases (64 datagrams, and the messages the engine held
/// for ordering that they let through: 4096 per channel at most).
const MAX_HELD: usize = 65_536;
/// Pings awaiting a pong, all addresses together, before they are forgotten.
const MAX_PINGERS: usize = 1024;
/// A ping unanswered for this long is forgotten first (`RakNet.Ping` waits 3 s by default).
const PINGER_EXPIRY: Duration = Duration::from_secs(60);
/// Messages of one connection delivered in one `{:raknet_batch, ...}` at most.
const MAX_BATCH: usize = 256;
/// How often paused connections are checked for an owner that stopped making progress.
const STALL_CHECK: Duration = Duration::from_secs(1);
/// Log lines an endpoint sends its owner per second at most; the rest are counted and
/// reported with the next line (hostile traffic must not flood the logs).
const LOG_LINES_PER_SECOND: u32 = 10;
/// Sends on one connection closer together than this are a burst: they go through the thread,
/// which packs them into a datagram (or a few), instead of one datagram each on the caller's
/// thread.
const INLINE_GAP: Duration = Duration::from_micros(50);
/// Local addresses remembered for peers without a connection, per generation (two are kept).
/// At least `RECV_BATCH`, so that a datagram's replies always find the address it came to.
const LOCAL_ADDRS_PER_GENERATION: usize = 4096;

enum Held {
    Message(Bytes, Duration),
    Disconnect(Reason),
}

struct Slot {
    res: ResourceArc<ConnResource>,
    owner: Option<LocalPid>,
    role: Role,
    connected: bool,
    /// Messages (and a final disconnect) waiting for an owner.
    held: VecDeque<Held>,
    /// The application was already told the connection ended.
    reported: bool,
    dropped: u64,
    /// Set while receiving is paused for back-pressure: when the owner last made progress,
    /// and how many messages it had outstanding then.
    stall: Option<(Instant, usize)>,
    /// The local address the peer last sent to (sockets bound to every address).
    local: Option<IpAddr>,
    /// Bytes, messages and resends per second over the last sampled second.
    rates: ConnRates,
    /// The application's reason for closing (`conn_close/2`), reported instead of
    /// `:local_close`.
    close_reason: Option<Vec<u8>>,
    /// Messages for the owner's next `{:raknet_batch, ...}` (batch delivery only).
    batch: Vec<(Bytes, Duration)>,
    /// The server of an outgoing connection, claimed in `EndpointResource::servers` until
    /// the connection ends.
    server: Option<SocketAddr>,
    /// Bytes of sends handed to the engine and not yet taken off `res.pending_bytes` (see
    /// [`Driver::settle`]).
    unsettled: usize,
    /// Closed as overloaded (its owner, if any, was told so).
    overloaded: bool,
}

/// The local address each peer without a connection (pings, handshakes) last sent to, for a
/// socket bound to every address: replies leave from it. Connections keep theirs in their
/// `Slot`, for as long as they live. Spoofed sources cannot grow this past two generations:
/// when the current one is full it becomes the previous one, and the previous one is dropped.
#[derive(Default)]
struct LocalAddrs {
    current: HashMap<SocketAddr, IpAddr>,
    previous: HashMap<SocketAddr, IpAddr>,
}

impl LocalAddrs {
    /// `peer` as the engine names it (IPv4 peers of a dual-stack socket unmapped).
    fn insert(&mut self, peer: SocketAddr, local: IpAddr) {
        if self.current.len() >= LOCAL_ADDRS_PER_GENERATION && !self.current.contains_key(&peer) {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
        }
        self.current.insert(peer, local);
    }

    fn get(&self, peer: &SocketAddr) -> Option<IpAddr> {
        self.current
            .get(peer)
            .or_else(|| self.previous.get(peer))
            .copied()
    }
}

/// What an endpoint's thread shares with the NIFs that talk to it.
///
/// The thread holds `driver` for each turn of its loop and lets go of it while it waits. A
/// `conn_send` on a scheduler thread that finds it free (`try_lock`: a scheduler never waits),
/// with no command queued ahead of it and no burst of sends on that connection, hands the message to
/// the engine and the datagram to the socket itself: the reply to a peer then crosses one
/// thread less, and the endpoint's thread is not woken for it. Anything else goes through the
/// channel, in order.
pub(crate) struct Shared {
    driver: Mutex<Option<Driver>>,
    /// Commands sent and not yet applied. An inline send waits for (goes behind) them, so
    /// that it never overtakes an earlier send or close of the same process.
    queued: AtomicUsize,
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
    pub(crate) fn new(inline: bool) -> Self {
        Self {
            driver: Mutex::new(None),
            queued: AtomicUsize::new(0),
            wake: Notify::new(),
            inline,
            epoch: Instant::now(),
            stopped: Mutex::new(None),
        }
    }

    /// A command is about to be enqueued (see `queued`).
    pub(crate) fn enqueued(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// An enqueued command was not sent after all (the channel is closed).
    pub(crate) fn not_enqueued(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// Carry out a send on the calling (scheduler) thread if the endpoint's thread is waiting,
    /// nothing is queued ahead of it and the connection's previous send (`last_send`: when it
    /// was asked for, by either path, in nanoseconds since `epoch`) was not a moment ago.
    /// Never waits: `Err` hands the data back for the channel.
    pub(crate) fn try_send_inline(
        &self,
        key: u64,
        last_send: &AtomicU64,
        data: Bytes,
        opts: SendOptions,
        receipt: Option<u32>,
    ) -> Result<(), Bytes> {
        let now = Instant::now();
        // Counted from one gap in: a connection's first send (`last_send` 0) is sparse.
        let at = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(INLINE_GAP.as_nanos() as u64);
        let last = last_send.swap(at, Ordering::Relaxed);
        let sparse = at.saturating_sub(last) >= INLINE_GAP.as_nanos() as u64;
        if !self.inline || !sparse || self.queued.load(Ordering::SeqCst) != 0 {
            return Err(data);
        }
        let Ok(mut guard) = self.driver.try_lock() else {
            return Err(data);
        };
        let Some(driver) = guard.as_mut() else {
            return Err(data);
        };
        // Again, now that the thread cannot be applying commands.
        if self.queued.load(Ordering::SeqCst) != 0 || !driver.can_send_inline() {
            return Err(data);
        }
        let wake = driver.send_inline(now, key, data, opts, receipt);
        drop(guard);
        if wake {
            self.wake.notify_one();
        }
        Ok(())
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
        rx: &mut UnboundedReceiver<Command>,
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
        // (`queued` here, the connections' send budgets in `settle`): the BEAM processes
        // sending meanwhile write the same cache lines, which moved between cores on every
        // command otherwise. Inline sends cannot tell the difference: they need the driver,
        // held here until the turn ends.
        let mut applied = 0;
        let mut apply = |driver: &mut Driver| {
            while let Ok(cmd) = rx.try_recv() {
                cmds.push(cmd);
            }
            if cmds.is_empty() {
                return;
            }
            let now = Instant::now();
            let batch = cmds.len();
            for cmd in cmds.drain(..) {
                driver.command(now, cmd);
            }
            driver.settle();
            self.queued.fetch_sub(batch, Ordering::SeqCst);
            applied += batch as u64;
        };
        apply(driver);
        driver.receive(&mut apply);
        driver.commands += applied;
        driver.command_turns += u64::from(applied > 0);
        let now = Instant::now();
        driver.endpoint.handle_timeout(now);
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
pub(crate) async fn run(shared: Arc<Shared>, driver: Driver, mut rx: UnboundedReceiver<Command>) {
    // Declared first, dropped last: after the socket below.
    let _release = Release(&shared);
    let io: Arc<crate::udp::Sock> = driver.socket.io();
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
            cmd = rx.recv() => match cmd {
                Some(cmd) => cmds.push(cmd),
                None => return,
            },
            _ = io.readable() => {}
            () = writable, if wait.blocked => room = true,
            () = shared.wake.notified() => {}
            () = sleep => {}
        }
        match shared.turn(&mut rx, &mut cmds, room, &mut env, &mut mail) {
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

pub(crate) struct Driver {
    pub(crate) endpoint: Endpoint,
    pub(crate) socket: Udp,
    pub(crate) me: ResourceArc<EndpointResource>,
    pub(crate) owner: LocalPid,
    pub(crate) env: OwnedEnv,
    /// Keyed by what this program assigned (the engine's ids, the handles' keys): hashed
    /// cheaply. Peer addresses keep SipHash.
    conns: OwnKeyMap<ConnId, Slot>,
    /// Who asked for a pong from an address (`endpoint_ping`); bounded.
    pingers: HashMap<SocketAddr, Vec<(LocalPid, Instant)>>,
    /// Pingers waiting in `pingers`, all addresses together.
    pinger_count: usize,
    keys: OwnKeyMap<u64, ConnId>,
    local_addrs: LocalAddrs,
    stop_deadline: Option<Instant>,
    buf: Vec<u8>,
    /// Datagrams received by one system call, handed to the engine in order.
    inbox: Vec<Received>,
    /// Datagrams the engine wrote, sent a batch per system call.
    outbox: Outbox,
    /// The first datagram of `outbox` not sent yet (all sent: `outbox.len()`).
    sent: usize,
    /// Events the engine produced during inline sends, for the thread to deliver.
    deferred: VecDeque<Event>,
    /// Receipts of inline sends the engine refused, for the thread to report as lost.
    lost: Vec<(LocalPid, ResourceArc<ConnResource>, u32)>,
    /// The deadline the thread sleeps until (`None`: none).
    armed: Option<Instant>,
    /// Sends carried out on a caller's thread, and those of them that woke the thread.
    inline_sends: u64,
    inline_wakeups: u64,
    /// Receive calls that found nothing right after calls of the same turn that read
    /// datagrams: a batch that came back short has emptied the socket and ends the reading,
    /// so only one that came back exactly full (more might have waited) is followed by one.
    recv_trailing_empty: u64,
    /// Outgoing connections reported ended whose engine state still holds the server's
    /// address (draining: acknowledging the peer's last datagrams). The address is given
    /// back to `EndpointResource::servers` once the engine forgot it: until then the socket
    /// cannot connect to that server again, and the node's pool offers another endpoint.
    draining: Vec<(ConnId, SocketAddr)>,
    /// Turns started because the socket had room again for datagrams that waited for it.
    send_waits: u64,
    /// Connections with messages in their `batch` (batch delivery only).
    batched: Vec<ConnId>,
    /// The batches of a turn, delivered once the turn lets go of the driver (see
    /// [`Shared::turn`]).
    mail: Vec<Mail>,
    /// Connections with `unsettled` send bytes (see [`Driver::settle`]).
    unsettled: Vec<ConnId>,
    log_window: Instant,
    log_lines: u32,
    log_suppressed: u64,
    /// When to look at paused connections next (none paused: `None`).
    next_stall_check: Option<Instant>,
    /// When the counters were last sampled for rates, and the endpoint's totals then.
    last_sample: Instant,
    rates: EndpointRates<SocketAddr>,
    /// Commands applied, and the loop turns that applied any: how well commands sent from
    /// the BEAM while this thread was busy or waking up coalesce into one turn.
    commands: u64,
    command_turns: u64,
}

impl Driver {
    pub(crate) fn new(
        endpoint: Endpoint,
        socket: Udp,
        me: ResourceArc<EndpointResource>,
        owner: LocalPid,
    ) -> Self {
        Self {
            endpoint,
            socket,
            me,
            owner,
            env: OwnedEnv::new(),
            conns: OwnKeyMap::default(),
            pingers: HashMap::new(),
            pinger_count: 0,
            keys: OwnKeyMap::default(),
            local_addrs: LocalAddrs::default(),
            stop_deadline: None,
            buf: Vec::with_capacity(2048),
            inbox: Vec::new(),
            outbox: Outbox::default(),
            sent: 0,
            deferred: VecDeque::new(),
            lost: Vec::new(),
            armed: None,
            inline_sends: 0,
            inline_wakeups: 0,
            recv_trailing_empty: 0,
            draining: Vec::new(),
            send_waits: 0,
            batched: Vec::new(),
            mail: Vec::new(),
            unsettled: Vec::new(),
            log_window: Instant::now(),
            log_lines: 0,
            log_suppressed: 0,
            next_stall_check: None,
            last_sample: Instant::now(),
            rates: EndpointRates::default(),
            commands: 0,
            command_turns: 0,
        }
    }

    /// When the thread must take its next turn without being asked: the engine's next timer,
    /// the next look at paused connections, the next rates sample (while there are
    /// connections; an idle endpoint sleeps).
    fn deadline(&mut self) -> Option<Instant> {
        let sample = (!self.conns.is_empty()).then(|| rates::next_due(self.last_sample));
        [self.endpoint.poll_timeout(), self.next_stall_check, sample]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether a send may be carried out on a caller's thread now.
    fn can_send_inline(&self) -> bool {
        self.stop_deadline.is_none() && self.sent == self.outbox.len()
    }

    /// A send on a caller's (scheduler) thread: hand it to the engine and the datagrams to the
    /// socket. Nothing here talks to the BEAM (a scheduler thread must not use an `OwnedEnv`):
    /// events and lost receipts wait for the thread. Returns whether the thread must take a
    /// turn for them, for datagrams left unsent, or for a timer earlier than the one it sleeps
    /// until.
    fn send_inline(
        &mut self,
        now: Instant,
        key: u64,
        data: Bytes,
        opts: SendOptions,
        receipt: Option<u32>,
    ) -> bool {
        self.inline_sends += 1;
        if let Some(lost) = self.apply_send(now, key, data, opts, receipt) {
            self.lost.push(lost);
        }
        self.settle();
        // One batch at most: a scheduler thread is not the place for another connection's
        // bulk transfer, which the endpoint thread sends (it is woken for it).
        let sent_all = self.transmit(now, 1);
        while let Some(event) = self.endpoint.poll_event() {
            self.deferred.push_back(event);
        }
        let earlier = match (self.endpoint.poll_timeout(), self.armed) {
            (Some(timer), Some(armed)) => timer < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let wake = !sent_all || earlier || !self.deferred.is_empty() || !self.lost.is_empty();
        self.inline_wakeups += u64::from(wake);
        wake
    }

    /// Read what waits on the socket (up to [`RECV_BATCH`] datagrams) and hand it to the
    /// engine; `before` runs after each read, before its datagrams are handled.
    fn receive(&mut self, before: &mut dyn FnMut(&mut Driver)) {
        let mut inbox = std::mem::take(&mut self.inbox);
        let (mut read, mut got_data) = (0, false);
        while read < RECV_BATCH {
            let drained = match self.socket.try_recv_batch(&mut inbox) {
                Ok(drained) => drained,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.recv_trailing_empty += u64::from(got_data);
                    break;
                }
                // ICMP port unreachable and the like surface here on Linux: not fatal.
                Err(_) => {
                    read += 1;
                    continue;
                }
            };
            read += inbox.len().max(1);
            got_data = true;
            before(self);
            for Received { data, from, local } in inbox.drain(..) {
                self.endpoint.handle(Instant::now(), from, data);
                self.received_from(from, local);
            }
            if drained {
                break;
            }
        }
        self.inbox = inbox;
    }

    /// After a datagram from `from`, sent to the local address `local` (when the socket says).
    fn received_from(&mut self, from: SocketAddr, local: Option<IpAddr>) {
        let id = self.endpoint.conn_by_addr(from);
        if let Some(id) = id {
            self.update_backlog(id);
        }
        let Some(local) = local else {
            return;
        };
        match id.and_then(|id| self.conns.get_mut(&id)) {
            Some(slot) => slot.local = Some(local),
            None => self
                .local_addrs
                .insert(raknet_proto::addr::unmap(from), local),
        }
    }

    /// The local address to send to `peer` from, if the socket lets replies choose.
    fn local_for(&self, peer: SocketAddr) -> Option<IpAddr> {
        if !self.socket.pktinfo() {
            return None;
        }
        self.endpoint
            .conn_by_addr(peer)
            .and_then(|id| self.conns.get(&id))
            .and_then(|slot| slot.local)
            .or_else(|| self.local_addrs.get(&peer))
    }

    fn update_backlog(&self, id: ConnId) {
        if let (Some(slot), Some(backlog)) = (self.conns.get(&id), self.endpoint.send_backlog(id)) {
            slot.res.backlog.store(backlog, Ordering::Relaxed);
        }
    }

    /// Hand a send to the engine. The NIF checked closed/size/budget already; a race can lose
    /// it still: such a message is counted, and one with a receipt is returned, for its owner
    /// to learn of its fate.
    fn apply_send(
        &mut self,
        now: Instant,
        key: u64,
        data: Bytes,
        opts: SendOptions,
        receipt: Option<u32>,
    ) -> Option<(LocalPid, ResourceArc<ConnResource>, u32)> {
        let &id = self.keys.get(&key)?;
        let slot = self.conns.get_mut(&id)?;
        if slot.owe(send_cost(data.len())) {
            self.unsettled.push(id);
        }
        // The id `conn_send` returned travels through the engine as the receipt's own.
        let sent = match receipt {
            Some(tag) => self
                .endpoint
                .send_tagged(now, id, data, opts, ReceiptId(tag)),
            None => self.endpoint.send(now, id, data, opts).map(|_| ()),
        };
        match sent {
            Ok(()) => None,
            Err(_) => {
                slot.dropped += 1;
                receipt
                    .zip(slot.owner)
                    .map(|(user_id, pid)| (pid, slot.res.clone(), user_id))
            }
        }
    }

    /// Take the bytes of the sends applied since the last call off their connections'
    /// `pending_bytes`, and publish those connections' backlogs: once per batch of commands
    /// (see `Shared::turn`). Until then `conn_send` counts those bytes as pending: a budget
    /// checked against a little more than is queued, for the moment the batch takes.
    ///
    /// The backlog (which now holds those bytes) is published first, and the bytes leave
    /// `pending_bytes` with `Release`, which `conn_send` reads with `Acquire` before the
    /// backlog: a check that sees them gone sees them in the backlog, so the two are never
    /// both short of them.
    fn settle(&mut self) {
        let mut ids = std::mem::take(&mut self.unsettled);
        for id in ids.drain(..) {
            let Some(slot) = self.conns.get_mut(&id) else {
                continue;
            };
            if let Some(backlog) = self.endpoint.send_backlog(id) {
                slot.res.backlog.store(backlog, Ordering::Relaxed);
            }
            let bytes = std::mem::take(&mut slot.unsettled);
            slot.res.pending_bytes.fetch_sub(bytes, Ordering::Release);
        }
        self.unsettled = ids;
    }

    fn command(&mut self, now: Instant, cmd: Command) {
        match cmd {
            Command::Send {
                key,
                data,
                opts,
                receipt,
            } => {
                if let Some((pid, res, user_id)) = self.apply_send(now, key, data, opts, receipt) {
                    receipt_lost(&mut self.env, &pid, res, user_id);
                }
            }
            Command::Broadcast { keys, data, opts } => {
                for key in keys {
                    let Some(&id) = self.keys.get(&key) else {
                        continue;
                    };
                    let Some(slot) = self.conns.get_mut(&id) else {
                        continue;
                    };
                    if slot.owe(send_cost(data.len())) {
                        self.unsettled.push(id);
                    }
                    if self.endpoint.send(now, id, data.clone(), opts).is_err() {
                        slot.dropped += 1;
                    }
                }
            }
            Command::Close { key, reason } => {
                if let Some(&id) = self.keys.get(&key) {
                    if let Some(slot) = self.conns.get_mut(&id) {
                        // The first reason given wins, as the first close does.
                        if slot.close_reason.is_none() {
                            slot.close_reason = reason;
                        }
                    }
                    self.endpoint.close(now, id);
                }
            }
            Command::OwnerDown { key } => {
                if let Some(&id) = self.keys.get(&key) {
                    if let Some(slot) = self.conns.get_mut(&id) {
                        slot.owner = None;
                        slot.reported = true;
                    }
                    self.endpoint.close(now, id);
                }
            }
            Command::SetOwner { key, pid } => self.set_owner(key, pid),
            Command::SetSuspended(suspended) => self.endpoint.set_suspended(suspended),
            Command::SetMaxConnections(max) => self.endpoint.set_max_connections(max),
            Command::Resume { key } => {
                if let Some(&id) = self.keys.get(&key) {
                    self.endpoint.set_receive_paused(now, id, false);
                    if let Some(slot) = self.conns.get_mut(&id) {
                        slot.stall = None;
                    }
                }
            }
            Command::Connect {
                conn,
                addr,
                owner,
                opts,
            } => match self.endpoint.connect_with(now, addr, opts) {
                Ok(id) => {
                    self.keys.insert(conn.key, id);
                    let mut slot = Slot::new(conn, Some(owner), Role::Client);
                    slot.server = Some(addr);
                    self.conns.insert(id, slot);
                }
                Err(e) => {
                    self.me.release_server(addr);
                    conn.closed.store(true, Ordering::Relaxed);
                    let _ = self.env.send_and_clear(&owner, |env| {
                        (
                            atoms::raknet_connect_failed(),
                            conn,
                            convert::connect_error(env, e),
                        )
                            .encode(env)
                    });
                }
            },
            Command::SetPong(data) => {
                // The NIF checked the size against MAX_OFFLINE_PING_RESPONSE already.
                let _ = self.endpoint.set_offline_ping_response(data);
            }
            Command::Ping { addr, owner } => {
                // Pingers whose server never answered are forgotten: those waiting longer
                // than any ping waits first, then (a flood of pings) all of them.
                if self.pinger_count >= MAX_PINGERS {
                    self.pingers.retain(|_, waiting| {
                        waiting.retain(|(_, sent)| now.duration_since(*sent) < PINGER_EXPIRY);
                        !waiting.is_empty()
                    });
                    self.pinger_count = self.pingers.values().map(Vec::len).sum();
                }
                if self.pinger_count >= MAX_PINGERS {
                    self.pingers.clear();
                    self.pinger_count = 0;
                }
                // Every process pinging an address gets the pong (one overwrote another).
                self.pingers.entry(addr).or_default().push((owner, now));
                self.pinger_count += 1;
                self.endpoint.ping(now, addr);
            }
            Command::Info { key, reply } => {
                let env = OwnedEnv::new();
                let saved = match key {
                    None => Some(env.save(self.endpoint_info_term(&env))),
                    Some(key) => self
                        .keys
                        .get(&key)
                        .and_then(|id| self.conn_info_term(&env, *id))
                        .map(|t| env.save(t)),
                };
                let _ = reply.try_send(saved.map(|s| (env, s)));
            }
            // Unwinds like a panic, through the same recovery, but without running the panic
            // hook: a deliberate fault prints no backtrace into the test output.
            Command::InjectPanic if self.me.fault_injection => {
                std::panic::resume_unwind(Box::new("fault injected by endpoint_inject_fault"))
            }
            Command::InjectPanic => {}
            Command::Ban {
                ip,
                prefix,
                duration,
            } => self.endpoint.ban_prefix(now, ip, prefix, duration),
            Command::Unban { ip, prefix } => self.endpoint.unban_prefix(ip, prefix),
            Command::Banned { reply } => {
                let env = OwnedEnv::new();
                let bans = self.endpoint.banned(now);
                let saved = env.save(env.run(|env| {
                    bans.iter()
                        .map(|(ip, len, left)| {
                            let left = left.map(|d| d.as_millis() as u64);
                            // A host's ban as its address; a network's as `address/len`.
                            let net = if *len == raknet_proto::host_prefix_len(*ip) {
                                ip.to_string()
                            } else {
                                format!("{ip}/{len}")
                            };
                            (net, left).encode(env)
                        })
                        .collect::<Vec<_>>()
                        .encode(env)
                }));
                let _ = reply.try_send(Some((env, saved)));
            }
            Command::Stop(linger) => {
                if self.stop_deadline.is_none() {
                    self.endpoint.shutdown(now);
                    self.stop_deadline = Some(now + linger);
                }
            }
        }
    }

    fn endpoint_info_term<'a>(&self, env: &'a OwnedEnv) -> Term<'a> {
        env.run(|env| {
            let s = self.endpoint.stats();
            let udp = self.socket.counters();
            let stats = convert::map(
                env,
                &[
                    ("connections", s.connections as u64),
                    ("offline_in", s.offline_in),
                    ("pongs_sent", s.pongs_sent),
                    ("incompatible_protocol", s.incompatible_protocol),
                    ("refused_full", s.refused_full),
                    ("refused_already_connected", s.refused_already_connected),
                    ("banned", s.banned),
                    ("bad_cookies", s.bad_cookies),
                    ("strict", u64::from(s.strict)),
                    ("strict_entered", s.strict_entered),
                    ("strict_left", s.strict_left),
                    ("unproven", s.unproven as u64),
                    ("refused_unproven", s.refused_unproven),
                    ("unknown_peer", s.unknown_peer),
                    ("malformed", s.malformed),
                    ("offline_queue_full", s.offline_queue_full),
                    ("buffered_bytes", s.buffered_bytes as u64),
                    ("send_backlog_bytes", s.send_backlog_bytes as u64),
                    ("half_open", s.half_open as u64),
                    ("half_open_reserved", s.half_open_reserved as u64),
                    ("reservations_lapsed", s.reservations_lapsed),
                    ("half_open_evicted", s.half_open_evicted),
                    ("half_open_per_ip_full", s.half_open_per_ip_full),
                    ("refused_ip_connections", s.refused_ip_connections),
                    ("refused_recently_connected", s.refused_recently_connected),
                    ("bad_echo", s.bad_echo),
                    ("handshake_dropped", s.handshake_dropped),
                    ("refused_full_late", s.refused_full_late),
                    ("amplification_limited", s.amplification_limited),
                    ("ocr1_too_small", s.ocr1_too_small),
                    ("offline_ignored", s.offline_ignored),
                    ("pongs_rate_limited", s.pongs_rate_limited),
                    ("pongs_budget_exhausted", s.pongs_budget_exhausted),
                    ("pongs_to_known_ips", s.pongs_to_known_ips),
                    ("pongs_too_large", s.pongs_too_large),
                    ("recv_buffer_bytes", self.me.buffers.0 as u64),
                    ("send_buffer_bytes", self.me.buffers.1 as u64),
                    ("udp_datagrams_in", udp.datagrams_in),
                    ("udp_recv_calls", udp.recv_calls),
                    ("udp_recv_trailing_empty", self.recv_trailing_empty),
                    ("udp_datagrams_out", udp.datagrams_out),
                    ("udp_send_calls", udp.send_calls),
                    ("udp_gso_sends", udp.gso_sends),
                    ("udp_gso_datagrams", udp.gso_datagrams),
                    ("udp_gso_refused", udp.gso_refused),
                    ("udp_send_full", udp.send_full),
                    ("udp_send_waits", self.send_waits),
                    ("commands", self.commands),
                    ("command_turns", self.command_turns),
                    ("inline_sends", self.inline_sends),
                    ("inline_wakeups", self.inline_wakeups),
                ],
            );
            let keys = [
                atoms::port(),
                atoms::address(),
                atoms::guid(),
                atoms::connections(),
                atoms::stats(),
                atoms::rates(),
                atoms::thread(),
                atoms::heap(),
            ]
            .map(|a| a.encode(env));
            let values = [
                self.me.local.port().encode(env),
                convert::address(env, self.me.local),
                self.me.guid.encode(env),
                s.connections.encode(env),
                stats,
                convert::endpoint_rates(env, &self.rates),
                std::thread::current().name().unwrap_or("").encode(env),
                convert::map(env, &self.heap_usage()),
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        })
    }

    /// Heap bytes this endpoint's thread holds, by structure: the engine's
    /// ([`Endpoint::heap_usage`]) and the driver's own (see `RakNet.Server.info/1`'s
    /// `:heap`). O(connections).
    fn heap_usage(&self) -> Vec<(&'static str, usize)> {
        use raknet_proto::memory::{deque, map, vec};
        let mut entries = self.endpoint.heap_usage().entries().to_vec();
        let mut delivery = map(&self.conns) + deque(&self.deferred) + vec(&self.mail);
        for slot in self.conns.values() {
            let held: usize = slot
                .held
                .iter()
                .map(|h| match h {
                    Held::Message(m, _) => m.len(),
                    Held::Disconnect(_) => 0,
                })
                .sum();
            let batch: usize = slot.batch.iter().map(|(m, _)| m.len()).sum();
            delivery += deque(&slot.held)
                + held
                + vec(&slot.batch)
                + batch
                + slot.close_reason.as_ref().map_or(0, Vec::capacity);
        }
        delivery += vec(&self.batched) + vec(&self.unsettled) + vec(&self.lost);
        delivery += vec(&self.draining);
        let pingers: usize = self.pingers.values().map(vec).sum();
        let tables = map(&self.keys)
            + map(&self.pingers)
            + pingers
            + map(&self.local_addrs.current)
            + map(&self.local_addrs.previous);
        let io = vec(&self.buf) + vec(&self.inbox) + self.outbox.heap_bytes();
        entries.extend([
            ("delivery", delivery),
            ("driver_tables", tables),
            ("socket_buffers", io),
        ]);
        entries
    }

    fn conn_info_term<'a>(&self, env: &'a OwnedEnv, id: ConnId) -> Option<Term<'a>> {
        let slot = self.conns.get(&id)?;
        let stats = self.endpoint.connection_stats(id)?;
        let addr = self.endpoint.remote_addr(id)?;
        let info = self.endpoint.connection_info(id)?;
        // The address the peer sends to, when the socket is bound to every address.
        let local = slot.local.map_or(self.me.local, |ip| {
            SocketAddr::new(ip, self.me.local.port())
        });
        Some(env.run(|env| {
            let keys = [
                atoms::address(),
                atoms::local_address(),
                atoms::guid(),
                atoms::protocol(),
                atoms::mtu(),
                atoms::rtt_ms(),
                atoms::stats(),
                atoms::rates(),
                atoms::congestion_control(),
            ]
            .map(|a| a.encode(env));
            let values = [
                convert::address(env, addr),
                convert::address(env, local),
                info.guid.encode(env),
                info.protocol.encode(env),
                info.mtu.encode(env),
                (stats.srtt.as_micros() as f64 / 1000.0).encode(env),
                convert::connection_stats(env, &stats, slot.dropped),
                convert::conn_rates(env, &slot.rates.rates, &stats),
                convert::congestion(info.congestion).encode(env),
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        }))
    }

    fn set_owner(&mut self, key: u64, pid: LocalPid) {
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
    fn hold_back(&mut self, conn: ConnId) {
        let Some(slot) = self.conns.get_mut(&conn) else {
            return;
        };
        slot.res.paused.store(true, Ordering::SeqCst);
        let now = Instant::now();
        slot.stall = Some((now, slot.res.undelivered.load(Ordering::SeqCst)));
        self.endpoint.set_receive_paused(now, conn, true);
        self.next_stall_check.get_or_insert(now + STALL_CHECK);
    }

    /// Turns the counters since the last sample into per-second rates, per connection and
    /// for the endpoint.
    fn sample_rates(&mut self, now: Instant) {
        let secs = now.duration_since(self.last_sample).as_secs_f64();
        self.last_sample = now;
        if secs <= 0.0 {
            return;
        }
        let mut pass = rates::Pass::default();
        for (&id, slot) in &mut self.conns {
            let (Some(stats), Some(addr)) = (
                self.endpoint.connection_stats(id),
                self.endpoint.remote_addr(id),
            ) else {
                continue;
            };
            let r = slot.rates.sample(rates::Counters::of(&stats), secs);
            pass.add(addr, &r, stats.srtt);
        }
        self.rates = pass.finish();
    }

    /// Give back the servers of ended outgoing connections the engine has forgotten.
    fn release_drained(&mut self) {
        if self.draining.is_empty() {
            return;
        }
        let (endpoint, me) = (&self.endpoint, &self.me);
        self.draining.retain(|&(id, server)| {
            let held = endpoint.conn_by_addr(server) == Some(id);
            if !held {
                me.release_server(server);
            }
            held
        });
    }

    fn forget(&mut self, id: ConnId) {
        if let Some(slot) = self.conns.remove(&id) {
            // Sends of the current batch not settled yet (see `settle`).
            slot.res
                .pending_bytes
                .fetch_sub(slot.unsettled, Ordering::Release);
            self.keys.remove(&slot.res.key);
        }
    }

    /// Send what the engine wrote, then deliver its events (those of inline sends first).
    /// Returns whether every datagram went: `false` when the socket buffer is full and some
    /// wait for room.
    fn flush(&mut self) -> bool {
        let sent_all = self.transmit(Instant::now(), usize::MAX);
        for (pid, res, user_id) in std::mem::take(&mut self.lost) {
            receipt_lost(&mut self.env, &pid, res, user_id);
        }
        while let Some(event) = self
            .deferred
            .pop_front()
            .or_else(|| self.endpoint.poll_event())
        {
            self.event(event);
        }
        for id in std::mem::take(&mut self.batched) {
            self.post_batch(id);
        }
        sent_all
    }

    /// Hand the engine's datagrams to the socket, a batch per system call, until the engine
    /// has none left (`true`), the socket buffer is full (`false`: the rest waits in the
    /// outbox for room), or `batches` batches went (`false`: the engine may have more).
    fn transmit(&mut self, now: Instant, batches: usize) -> bool {
        if !self.send_outbox() {
            return false;
        }
        for _ in 0..batches {
            while !self.outbox.is_full() {
                let Some(t) = self.endpoint.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                let source = self.local_for(t.destination);
                // The engine sees IPv4 peers of a dual-stack socket unmapped; the socket wants
                // them mapped.
                let destination = match t.destination {
                    SocketAddr::V4(v4) if self.me.dual_stack => {
                        SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port())
                    }
                    other => other,
                };
                self.outbox
                    .push(self.buf.get(..t.size).unwrap_or(&[]), destination, source);
            }
            // Not full: the engine had no more.
            let drained = !self.outbox.is_full();
            if !self.send_outbox() {
                return false;
            }
            if drained {
                return true;
            }
        }
        false
    }

    /// Send what the outbox holds (from the first datagram not sent yet) and empty it; `false`
    /// when the socket buffer is full and some wait for room.
    fn send_outbox(&mut self) -> bool {
        if self.sent < self.outbox.len() {
            self.sent = self.socket.send_batch(&self.outbox, self.sent);
            if self.sent < self.outbox.len() {
                return false;
            }
        }
        self.outbox.clear();
        self.sent = 0;
        true
    }

    /// The messages waiting in `conn`'s batch, addressed to its owner.
    fn take_batch(&mut self, conn: ConnId) -> Option<Mail> {
        let slot = self.conns.get_mut(&conn)?;
        let pid = slot.owner.filter(|_| !slot.batch.is_empty())?;
        Some((pid, slot.res.clone(), std::mem::take(&mut slot.batch)))
    }

    /// Put `conn`'s batch in the turn's mail.
    fn post_batch(&mut self, conn: ConnId) {
        if let Some(mail) = self.take_batch(conn) {
            self.mail.push(mail);
        }
    }

    /// Send `conn`'s batch now (an event about to follow it, a receipt or the connection's
    /// end, must not overtake it).
    fn deliver_batch(&mut self, conn: ConnId) {
        if let Some(mail) = self.take_batch(conn) {
            send_batch(&mut self.env, mail);
        }
    }

    /// Once the MTU is known: the longest message a send on `conn` may have.
    fn set_max_message_len(&self, conn: ConnId, res: &ConnResource) {
        if let Some(len) = self.endpoint.max_message_len(conn) {
            res.max_message_bytes.store(len, Ordering::Relaxed);
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Connected {
                conn,
                addr,
                guid,
                role,
                protocol,
                mtu,
            } => match role {
                Role::Server => {
                    let res = ResourceArc::new(self.me.new_conn());
                    self.set_max_message_len(conn, &res);
                    self.keys.insert(res.key, conn);
                    let mut slot = Slot::new(res.clone(), None, Role::Server);
                    slot.connected = true;
                    slot.local = self.local_addrs.get(&addr);
                    self.conns.insert(conn, slot);
                    let me = self.me.clone();
                    let _ = self.env.send_and_clear(&self.owner, |env| {
                        (
                            atoms::raknet_endpoint(),
                            me,
                            atoms::connected(),
                            res,
                            convert::connection_info(env, addr, guid, protocol, mtu),
                        )
                            .encode(env)
                    });
                }
                Role::Client => {
                    let Some(slot) = self.conns.get_mut(&conn) else {
                        return;
                    };
                    slot.connected = true;
                    let res = slot.res.clone();
                    let owner = slot.owner;
                    self.set_max_message_len(conn, &res);
                    if let Some(pid) = owner {
                        let _ = self.env.send_and_clear(&pid, |env| {
                            (
                                atoms::raknet_connected(),
                                res,
                                convert::connection_info(env, addr, guid, protocol, mtu),
                            )
                                .encode(env)
                        });
                    }
                }
            },
            Event::Message {
                conn,
                payload,
                transit,
            } => {
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                match slot.owner {
                    Some(pid) => {
                        let (messages, bytes) = count_delivery(&slot.res, payload.len());
                        if self.me.batch_delivery || slot.res.batch_delivery.load(Ordering::Relaxed)
                        {
                            if slot.batch.is_empty() {
                                self.batched.push(conn);
                            }
                            slot.batch.push((payload, transit));
                            if slot.batch.len() >= MAX_BATCH {
                                let batch = std::mem::take(&mut slot.batch);
                                send_batch(&mut self.env, (pid, slot.res.clone(), batch));
                            }
                        } else {
                            send_message(&mut self.env, &pid, &slot.res, &payload, transit);
                        }
                        let res = &slot.res;
                        if res.flow_controlled.load(Ordering::Relaxed)
                            && res.budget.exceeded(messages, bytes)
                            && !res.paused.load(Ordering::SeqCst)
                        {
                            self.pause(conn);
                        }
                    }
                    None => {
                        // Held until the owner is set, counted against its budget already;
                        // past HOLD_BACK_AT (or the budget) the peer is held back, so that
                        // what it sends meanwhile waits unacknowledged instead of being
                        // dropped.
                        if slot.held.len() >= MAX_HELD {
                            slot.dropped += 1;
                            return;
                        }
                        let (messages, bytes) = count_delivery(&slot.res, payload.len());
                        slot.held.push_back(Held::Message(payload, transit));
                        if (slot.held.len() >= HOLD_BACK_AT
                            || slot.res.budget.exceeded(messages, bytes))
                            && !slot.res.paused.load(Ordering::SeqCst)
                        {
                            self.hold_back(conn);
                        }
                    }
                }
            }
            Event::Receipt {
                conn,
                receipt,
                acked,
            } => {
                // Messages that arrived before stay before.
                self.deliver_batch(conn);
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                let Some(pid) = slot.owner else {
                    return;
                };
                let user_id = receipt.0;
                let res = slot.res.clone();
                let fate = if acked { atoms::acked() } else { atoms::lost() };
                let _ = self.env.send_and_clear(&pid, |env| {
                    (atoms::raknet_receipt(), res, user_id, fate).encode(env)
                });
            }
            Event::Disconnected { conn, reason } => {
                self.deliver_batch(conn);
                let Some(slot) = self.conns.get_mut(&conn) else {
                    return;
                };
                slot.res.closed.store(true, Ordering::Relaxed);
                if let Some(server) = slot.server.take() {
                    // Given back before the owner hears of the end, so that a connect made on
                    // that news may use this socket again; a connection the engine still
                    // holds (draining) gives it back once forgotten.
                    if self.endpoint.conn_by_addr(server) == Some(conn) {
                        self.draining.push((conn, server));
                    } else {
                        self.me.release_server(server);
                    }
                }
                let res = slot.res.clone();
                if slot.reported {
                    self.forget(conn);
                    return;
                }
                slot.reported = true;
                let why = match (reason, slot.close_reason.take()) {
                    (DisconnectReason::LocalClose, _) if slot.overloaded => Reason::Overloaded,
                    (DisconnectReason::LocalClose, Some(term)) => Reason::Closed(term),
                    (reason, _) => Reason::Engine(reason),
                };
                match (slot.owner, slot.role, slot.connected) {
                    (Some(pid), Role::Client, false) => {
                        let _ = self.env.send_and_clear(&pid, |env| {
                            let why = match reason {
                                DisconnectReason::ConnectFailed(e) => {
                                    convert::connect_error(env, e)
                                }
                                other => convert::disconnect_reason(env, &Reason::Engine(other)),
                            };
                            (atoms::raknet_connect_failed(), res, why).encode(env)
                        });
                    }
                    (Some(pid), _, _) => send_disconnect(&mut self.env, &pid, &res, why),
                    (None, _, _) => {
                        // Tell the owner once it is set.
                        slot.held.push_back(Held::Disconnect(why));
                        return;
                    }
                }
                self.forget(conn);
            }
            Event::Pong { from, pong, .. } => {
                // Timed here: the ping's own time field only has millisecond resolution.
                let Some(pingers) = self.pingers.remove(&from) else {
                    return;
                };
                self.pinger_count -= pingers.len();
                for (pid, sent) in pingers {
                    let rtt = sent.elapsed();
                    let me = self.me.clone();
                    let _ = self.env.send_and_clear(&pid, |env| {
                        let mut data = rustler::NewBinary::new(env, pong.data.len());
                        data.as_mut_slice().copy_from_slice(&pong.data);
                        let data: rustler::Binary = data.into();
                        (
                            atoms::raknet_pong(),
                            me,
                            convert::address(env, from),
                            pong.server_guid,
                            data,
                            rtt.as_micros() as u64,
                        )
                            .encode(env)
                    });
                }
            }
            _ => {}
        }
    }

    /// Back-pressure: the owner of `conn` is over its delivery budget, so the connection
    /// stops taking the peer's messages until `conn_delivered` brings it below half.
    fn pause(&mut self, conn: ConnId) {
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
    fn check_stalls(&mut self, now: Instant) {
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
    fn overloaded(&mut self, conn: ConnId, timeout: Duration) {
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
        self.endpoint.close(Instant::now(), conn);
        self.log(
            true,
            format!(
                "closed an overloaded connection: its owner handled none of its messages for {} ms",
                timeout.as_millis()
            ),
        );
    }

    /// Send the owner `{:raknet_endpoint, ref, :log, level, text}`, rate-limited.
    fn log(&mut self, warning: bool, text: String) {
        let now = Instant::now();
        if now.duration_since(self.log_window) >= Duration::from_secs(1) {
            self.log_window = now;
            self.log_lines = 0;
        }
        if self.log_lines >= LOG_LINES_PER_SECOND {
            self.log_suppressed += 1;
            return;
        }
        self.log_lines += 1;
        let text = match std::mem::take(&mut self.log_suppressed) {
            0 => text,
            n => format!("{text} ({n} similar lines suppressed)"),
        };
        let level = if warning {
            atoms::warning()
        } else {
            atoms::info()
        };
        let me = self.me.clone();
        let _ = self.env.send_and_clear(&self.owner, |env| {
            (atoms::raknet_endpoint(), me, atoms::log(), level, text).encode(env)
        });
    }

    fn finish_stop(&mut self) {
        for slot in self.conns.values() {
            slot.res.closed.store(true, Ordering::Relaxed);
            if let (Some(pid), false) = (slot.owner, slot.reported) {
                send_disconnect(
                    &mut self.env,
                    &pid,
                    &slot.res,
                    Reason::Engine(DisconnectReason::Shutdown),
                );
            }
        }
        self.conns.clear();
    }
}

/// However the endpoint's thread ends (a panic unwinds through here too), no connection is
/// left without word: every owner not yet told gets `{:raknet_disconnect, conn,
/// :endpoint_down}` and every handle fails fast from now on.
impl Drop for Driver {
    fn drop(&mut self) {
        let mut env = OwnedEnv::new();
        // A turn that ended in a panic may have left its messages in the mail: they come
        // before the news of the end.
        for mail in std::mem::take(&mut self.mail) {
            send_batch(&mut env, mail);
        }
        for slot in self.conns.values() {
            slot.res.closed.store(true, Ordering::Relaxed);
            let Some(pid) = slot.owner.filter(|_| !slot.reported) else {
                continue;
            };
            if slot.role == Role::Client && !slot.connected {
                let res = slot.res.clone();
                let _ = env.send_and_clear(&pid, |env| {
                    let why = convert::disconnect_reason(env, &Reason::EndpointDown);
                    (atoms::raknet_connect_failed(), res, why).encode(env)
                });
            } else {
                send_disconnect(&mut env, &pid, &slot.res, Reason::EndpointDown);
            }
        }
    }
}

impl Slot {
    /// Count `bytes` of a send just handed to the engine, for [`Driver::settle`]; `true` when
    /// they are the first since the last settle (the connection joins `Driver::unsettled`).
    fn owe(&mut self, bytes: usize) -> bool {
        let first = self.unsettled == 0;
        self.unsettled += bytes;
        first
    }

    fn new(res: ResourceArc<ConnResource>, owner: Option<LocalPid>, role: Role) -> Self {
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
            unsettled: 0,
            overloaded: false,
        }
    }
}

/// Count one more message of `size` bytes sent to the owner; returns the totals outstanding.
fn count_delivery(res: &ConnResource, size: usize) -> (usize, usize) {
    let messages = res.undelivered.fetch_add(1, Ordering::SeqCst) + 1;
    let bytes = res.undelivered_bytes.fetch_add(size, Ordering::SeqCst) + size;
    (messages, bytes)
}

/// `{:raknet, conn_ref, type, payload, transit_time}`: the first byte is the type.
fn send_message(
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
type Mail = (LocalPid, ResourceArc<ConnResource>, Vec<(Bytes, Duration)>);

/// `{:raknet_batch, conn_ref, [{type, payload, transit_time}, ...]}`: messages in the order
/// they arrived.
fn send_batch(env: &mut OwnedEnv, (pid, res, batch): Mail) {
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
fn receipt_lost(env: &mut OwnedEnv, pid: &LocalPid, res: ResourceArc<ConnResource>, id: u32) {
    let _ = env.send_and_clear(pid, |env| {
        (atoms::raknet_receipt(), res, id, atoms::lost()).encode(env)
    });
}

fn send_disconnect(
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
