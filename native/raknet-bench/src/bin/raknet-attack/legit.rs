//! Legitimate clients (raknet_proto's client engine), on their own thread

use crate::*;

pub(crate) struct ProbeRec {
    pub(crate) started: Instant,
    pub(crate) protocol: u8,
    pub(crate) done: bool,
    pub(crate) connect: Option<Duration>,
    pub(crate) echo_rtts: Vec<Duration>,
    pub(crate) echo_failures: u32,
}

pub(crate) struct EchoRec {
    pub(crate) sent: Instant,
    pub(crate) rtt: Option<Duration>,
}

#[derive(Default)]
pub(crate) struct Log {
    pub(crate) probes: Vec<ProbeRec>,
    pub(crate) echoes: Vec<EchoRec>,
    pub(crate) steady_connected: bool,
    /// The GUID of the long-lived client's current connection (the takeover's target).
    pub(crate) steady_guid: Option<u64>,
    /// The long-lived client's address and port (the spoof attack's target).
    pub(crate) steady_addr: Option<SocketAddr>,
    /// Times the long-lived client's connection ended under it.
    pub(crate) steady_lost: u32,
    /// Echoes of [`INJECT_SEQ`] the long-lived client received.
    pub(crate) injected_seen: u32,
    /// Non-zero: the long-lived client drops one in this many datagrams it receives.
    pub(crate) steady_drop_every: u32,
}

pub(crate) type SharedLog = Arc<Mutex<Log>>;

pub(crate) fn with_log<T>(log: &SharedLog, f: impl FnOnce(&mut Log) -> T) -> T {
    let mut guard = match log.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    f(&mut guard)
}

/// One client endpoint on its own socket.
pub(crate) struct Client {
    pub(crate) ep: Endpoint,
    pub(crate) sock: UdpSocket,
    pub(crate) conn: ConnId,
    pub(crate) rx: Vec<u8>,
    pub(crate) tx: Vec<u8>,
    /// Non-zero: drop one in this many datagrams received (a lossy link).
    pub(crate) drop_every: u32,
    pub(crate) received: u32,
}

impl Client {
    pub(crate) async fn start(server: SocketAddr, protocol: u8, seed: u64) -> Option<Self> {
        let sock = UdpSocket::bind("127.0.0.1:0").await.ok()?;
        let local = sock.local_addr().ok()?;
        let config = EndpointConfig {
            rng_seed: seed,
            protocol_versions: vec![protocol],
            accept_incoming: false,
            ..EndpointConfig::default()
        };
        let mut ep = Endpoint::new(config, local, Instant::now());
        let conn = ep.connect(Instant::now(), server).ok()?;
        Some(Self {
            ep,
            sock,
            conn,
            rx: vec![0; 2048],
            tx: Vec::with_capacity(2048),
            drop_every: 0,
            received: 0,
        })
    }

    pub(crate) async fn flush(&mut self) {
        let now = Instant::now();
        while let Some(t) = self.ep.poll_transmit(now, &mut self.tx) {
            let _ = self.sock.send_to(&self.tx[..t.size], t.destination).await;
        }
    }

    /// Run I/O and timers once (waking at `until` at the latest); append events.
    pub(crate) async fn turn(&mut self, until: Instant, events: &mut Vec<Event>) {
        self.flush().await;
        let wake = self.ep.poll_timeout().map_or(until, |t| t.min(until));
        tokio::select! {
            r = self.sock.readable() => {
                if r.is_ok() {
                    for _ in 0..256 {
                        match self.sock.try_recv_from(&mut self.rx) {
                            Ok(_) if self.lose() => {}
                            Ok((n, from)) => self.ep.handle(
                                Instant::now(),
                                from,
                                Bytes::copy_from_slice(&self.rx[..n]),
                            ),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(_) => continue,
                        }
                    }
                }
            }
            () = sleep_until(wake.into()) => {}
        }
        self.ep.handle_timeout(Instant::now());
        while let Some(e) = self.ep.poll_event() {
            events.push(e);
        }
        self.flush().await;
    }

    /// Whether the datagram just received is lost (see [`Self::drop_every`]).
    pub(crate) fn lose(&mut self) -> bool {
        self.received = self.received.wrapping_add(1);
        self.drop_every > 0 && self.received % self.drop_every == 0
    }

    pub(crate) fn send_echo(&mut self, seq: u64) -> bool {
        let mut payload = vec![ECHO_ID];
        payload.extend_from_slice(&seq.to_be_bytes());
        // A player's message larger than one datagram: split, as a Bedrock login is.
        payload.resize(ECHO_SIZE, 0x55);
        let opts = SendOptions {
            reliability: Reliability::ReliableOrdered,
            channel: 0,
            priority: Priority::High,
        };
        self.ep
            .send(Instant::now(), self.conn, Bytes::from(payload), opts)
            .is_ok()
    }

    /// Close and give the 0x15 a moment to leave (bounded).
    pub(crate) async fn close(mut self) {
        self.ep.close(Instant::now(), self.conn);
        let until = Instant::now() + Duration::from_millis(300);
        let mut events = Vec::new();
        while Instant::now() < until {
            self.turn(until, &mut events).await;
            if events
                .iter()
                .any(|e| matches!(e, Event::Disconnected { .. }))
            {
                break;
            }
        }
    }
}

pub(crate) fn echo_seq(payload: &[u8]) -> Option<u64> {
    if payload.first() != Some(&ECHO_ID) {
        return None;
    }
    Some(u64::from_be_bytes(payload.get(1..9)?.try_into().ok()?))
}

/// A fresh client: connect (time it), echo [`PROBE_ECHOES`] messages, close.
pub(crate) async fn probe(server: SocketAddr, protocol: u8, seed: u64, log: SharedLog, idx: usize) {
    let started = with_log(&log, |l| l.probes[idx].started);
    let deadline = started + PROBE_CONNECT_TIMEOUT;
    let Some(mut c) = Client::start(server, protocol, seed).await else {
        with_log(&log, |l| l.probes[idx].done = true);
        return;
    };
    let mut events = Vec::new();
    let mut connected = None;
    let mut failed = false;
    while connected.is_none() && !failed && Instant::now() < deadline {
        c.turn(deadline, &mut events).await;
        for e in events.drain(..) {
            match e {
                Event::Connected { .. } => connected = Some(started.elapsed()),
                Event::Disconnected { .. } => failed = true,
                _ => {}
            }
        }
    }
    let Some(connect) = connected.filter(|_| !failed) else {
        with_log(&log, |l| l.probes[idx].done = true);
        return;
    };
    let mut sent_at = Vec::new();
    for k in 0..PROBE_ECHOES {
        if c.send_echo(k) {
            sent_at.push((k, Instant::now()));
        }
    }
    let mut rtts = Vec::new();
    let until = Instant::now() + ECHO_TIMEOUT;
    let mut lost = false;
    while rtts.len() < sent_at.len() && !lost && Instant::now() < until {
        c.turn(until, &mut events).await;
        for e in events.drain(..) {
            match e {
                Event::Message { payload, .. } => {
                    if let Some(&(_, t)) =
                        echo_seq(&payload).and_then(|s| sent_at.iter().find(|(k, _)| *k == s))
                    {
                        rtts.push(t.elapsed());
                    }
                }
                Event::Disconnected { .. } => lost = true,
                _ => {}
            }
        }
    }
    let failures = (PROBE_ECHOES as usize - rtts.len()) as u32;
    with_log(&log, |l| {
        let p = &mut l.probes[idx];
        p.done = true;
        p.connect = Some(connect);
        p.echo_rtts = rtts;
        p.echo_failures = failures;
    });
    if !lost {
        c.close().await;
    }
}

/// The long-lived client: echoes every [`STEADY_INTERVAL`]; reconnects when it loses the
/// connection. Every tick without a connection counts as a failed echo.
pub(crate) async fn steady(
    server: SocketAddr,
    log: SharedLog,
    stop: Arc<AtomicBool>,
    hard_end: Instant,
) {
    let mut seed = 0x57ead_u64;
    let mut outage_since = Instant::now();
    while !stop.load(Ordering::Relaxed) && Instant::now() < hard_end {
        seed += 1;
        let Some(mut c) = Client::start(server, 11, seed).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut events = Vec::new();
        let deadline = Instant::now() + PROBE_CONNECT_TIMEOUT;
        let mut connected = false;
        let mut failed = false;
        while !connected && !failed && Instant::now() < deadline {
            c.turn(deadline, &mut events).await;
            for e in events.drain(..) {
                match e {
                    Event::Connected { .. } => connected = true,
                    Event::Disconnected { .. } => failed = true,
                    _ => {}
                }
            }
        }
        // Ticks missed while not connected.
        let now = Instant::now();
        with_log(&log, |l| {
            let mut t = outage_since + STEADY_INTERVAL;
            while t < now {
                l.echoes.push(EchoRec { sent: t, rtt: None });
                t += STEADY_INTERVAL;
            }
            l.steady_connected = connected && !failed;
            l.steady_guid = Some(c.ep.guid());
            l.steady_addr = c.sock.local_addr().ok();
        });
        outage_since = now;
        if !connected || failed {
            continue;
        }
        let mut outstanding: VecDeque<(u64, Instant)> = VecDeque::new();
        let mut seq = 0u64;
        let mut next = Instant::now();
        let mut lost = false;
        while !lost && !stop.load(Ordering::Relaxed) && Instant::now() < hard_end {
            c.drop_every = with_log(&log, |l| l.steady_drop_every);
            c.turn(next, &mut events).await;
            let now = Instant::now();
            let mut done = Vec::new();
            let mut injected = 0;
            for e in events.drain(..) {
                match e {
                    Event::Message { payload, .. } if echo_seq(&payload) == Some(INJECT_SEQ) => {
                        injected += 1;
                    }
                    Event::Message { payload, .. } => {
                        if let Some(s) = echo_seq(&payload) {
                            if let Some(pos) = outstanding.iter().position(|(k, _)| *k == s) {
                                if let Some((_, t)) = outstanding.remove(pos) {
                                    done.push(EchoRec {
                                        sent: t,
                                        rtt: Some(now - t),
                                    });
                                }
                            }
                        }
                    }
                    Event::Disconnected { .. } => lost = true,
                    _ => {}
                }
            }
            while outstanding
                .front()
                .is_some_and(|(_, t)| lost || now - *t > ECHO_TIMEOUT || outstanding.len() > 200)
            {
                if let Some((_, t)) = outstanding.pop_front() {
                    done.push(EchoRec { sent: t, rtt: None });
                }
            }
            if now >= next && !lost {
                if c.send_echo(seq) {
                    outstanding.push_back((seq, now));
                } else {
                    done.push(EchoRec {
                        sent: now,
                        rtt: None,
                    });
                }
                seq += 1;
                next += STEADY_INTERVAL;
                if next < now {
                    next = now + STEADY_INTERVAL;
                }
            }
            if !done.is_empty() || injected > 0 || lost {
                with_log(&log, |l| {
                    l.echoes.append(&mut done);
                    l.injected_seen += injected;
                    l.steady_lost += u32::from(lost);
                });
            }
        }
        with_log(&log, |l| l.steady_connected = false);
        outage_since = Instant::now();
        if !lost {
            c.close().await;
        }
    }
}

pub(crate) fn legit_thread(
    server: SocketAddr,
    log: SharedLog,
    stop: Arc<AtomicBool>,
    hard_end: Instant,
) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        tokio::task::spawn_local(steady(server, log.clone(), stop.clone(), hard_end));
        let mut n = 0u64;
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) && Instant::now() < hard_end {
            sleep_until(next.into()).await;
            next += PROBE_INTERVAL;
            let in_flight = with_log(&log, |l| l.probes.iter().filter(|p| !p.done).count());
            if in_flight >= MAX_PROBES_IN_FLIGHT {
                continue;
            }
            let protocol = if n % 2 == 0 { 6 } else { 11 };
            n += 1;
            let idx = with_log(&log, |l| {
                l.probes.push(ProbeRec {
                    started: Instant::now(),
                    protocol,
                    done: false,
                    connect: None,
                    echo_rtts: Vec::new(),
                    echo_failures: 0,
                });
                l.probes.len() - 1
            });
            tokio::task::spawn_local(probe(server, protocol, n ^ 0xa77ac, log.clone(), idx));
        }
    });
}
