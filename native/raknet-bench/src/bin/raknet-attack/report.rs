//! Measurement around each attack

use crate::*;

pub(crate) struct Row {
    pub(crate) name: &'static str,
    pub(crate) rate: f64,
    pub(crate) sent_pkts: u64,
    pub(crate) sent_bytes: u64,
    pub(crate) recv_pkts: u64,
    pub(crate) recv_bytes: u64,
    pub(crate) probes: usize,
    pub(crate) connect_ms: Vec<f64>,
    pub(crate) connect_failures: usize,
    pub(crate) echo_ms: Vec<f64>,
    pub(crate) echo_failures: usize,
    pub(crate) recovery: Option<f64>,
    pub(crate) cpu_pct: Option<f64>,
    pub(crate) rss_mb: Option<f64>,
    pub(crate) drops: Option<u64>,
    pub(crate) note: String,
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

/// Wait until every probe started before `t1` is done and a probe started at or after `t1`
/// has connected (or [`RECOVERY_LIMIT`] passed); returns the seconds from `t1` until that
/// probe connected.
pub(crate) async fn wait_settled(log: &SharedLog, t1: Instant) -> Option<f64> {
    loop {
        let (pending, recovered) = with_log(log, |l| {
            let pending = l.probes.iter().any(|p| p.started < t1 && !p.done);
            let recovered = l
                .probes
                .iter()
                .filter(|p| p.started >= t1)
                .find_map(|p| p.connect.map(|c| (p.started + c - t1).as_secs_f64()));
            (pending, recovered)
        });
        if !pending && recovered.is_some() {
            return recovered;
        }
        if t1.elapsed() > RECOVERY_LIMIT + PROBE_CONNECT_TIMEOUT + ECHO_TIMEOUT {
            return recovered;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn run_attack(
    ctx: &Rc<Ctx>,
    attack: Attack,
    duration: Duration,
    slow_duration: Duration,
    pid: Option<u32>,
    log: &SharedLog,
) -> Row {
    let traffic = Rc::new(Traffic::default());
    let cpu0 = pid.and_then(cpu_ticks);
    let drops0 = udp_socket(ctx.server.port()).map(|(_, d)| d);
    let rss_max = Rc::new(Cell::new(0u64));
    let t0 = Instant::now();
    let window = match attack {
        Attack::Slowloris | Attack::SlowlorisNoAck | Attack::SlowReader | Attack::SignalSlow => {
            slow_duration
        }
        _ => duration,
    };
    let end = t0 + window;
    let sampler = pid.map(|pid| {
        let rss_max = rss_max.clone();
        tokio::task::spawn_local(async move {
            while Instant::now() < end + DRAIN_GRACE {
                rss_max.set(rss_max.get().max(rss_kb(pid).unwrap_or(0)));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let note = match attack {
        Attack::Baseline => {
            sleep_until(end.into()).await;
            Ok("no attack".to_string())
        }
        Attack::Ocr2 => ocr2_flood(ctx, end, &traffic).await,
        Attack::Ocr2PlayersIp => ocr2_players_ip(ctx, end, &traffic).await,
        Attack::Ocr1 => ocr1_flood(ctx, end, &traffic, false).await,
        Attack::Ocr1Short => ocr1_flood(ctx, end, &traffic, true).await,
        Attack::Handshake => blind_handshake(ctx, end, &traffic).await,
        Attack::PingOne => ping_flood(ctx, end, &traffic, false).await,
        Attack::PingMany => ping_flood(ctx, end, &traffic, true).await,
        Attack::Slowloris => slowloris(ctx, end, &traffic, true).await,
        Attack::SlowlorisNoAck => slowloris(ctx, end, &traffic, false).await,
        Attack::Nak => nak_attack(ctx, end, &traffic).await,
        Attack::FarAhead => far_ahead(ctx, end, &traffic).await,
        Attack::Repeat09 => repeat_09(ctx, end, &traffic).await,
        Attack::GapHold => gap_hold(ctx, end, &traffic).await,
        Attack::GuidTakeover => guid_takeover(ctx, end, &traffic, log).await,
        Attack::SlotHold => slot_hold(ctx, end, &traffic).await,
        Attack::FrameFlood => frame_flood(ctx, end, &traffic).await,
        Attack::SlowReader => slow_reader(ctx, end, &traffic).await,
        Attack::Spoof => spoof(ctx, end, &traffic, log).await,
        Attack::SignalFlood => signal_flood(ctx, end, &traffic).await,
        Attack::SignalSlow => signal_slow(ctx, end, &traffic).await,
    };
    let mut note = note.unwrap_or_else(|e| format!("attack failed: {e}"));
    if traffic.send_errors.get() > 0 {
        note.push_str(&format!("; {} sends failed", traffic.send_errors.get()));
    }
    // Attacks end by `end` (plus the drain grace); the window is measured as it ran.
    sleep_until(end.into()).await;
    let t1 = Instant::now();
    let cpu1 = pid.and_then(cpu_ticks);
    let drops1 = udp_socket(ctx.server.port()).map(|(_, d)| d);
    if let Some(s) = sampler {
        let _ = s.await;
    }
    let secs = (t1 - t0).as_secs_f64();
    let recovery = wait_settled(log, t1).await;
    // Echoes sent just before the window closed are answered or timed out by then.
    sleep_until((t1 + ECHO_TIMEOUT + Duration::from_millis(200)).into()).await;
    release_held();
    let (probes, mut connect_ms, connect_failures, mut echo_ms, echo_failures, by_protocol) =
        with_log(log, |l| {
            let window: Vec<&ProbeRec> = l
                .probes
                .iter()
                .filter(|p| p.started >= t0 && p.started < t1)
                .collect();
            let connect: Vec<f64> = window
                .iter()
                .filter_map(|p| p.connect.map(|c| c.as_secs_f64() * 1e3))
                .collect();
            let failures = window.iter().filter(|p| p.connect.is_none()).count();
            let mut echo: Vec<f64> = window
                .iter()
                .flat_map(|p| p.echo_rtts.iter().map(|d| d.as_secs_f64() * 1e3))
                .collect();
            let mut echo_failures: usize = window.iter().map(|p| p.echo_failures as usize).sum();
            for e in l.echoes.iter().filter(|e| e.sent >= t0 && e.sent < t1) {
                match e.rtt {
                    Some(r) => echo.push(r.as_secs_f64() * 1e3),
                    None => echo_failures += 1,
                }
            }
            let by_protocol = [6u8, 11].map(|v| {
                let of = window.iter().filter(|p| p.protocol == v);
                (
                    v,
                    of.clone().filter(|p| p.connect.is_some()).count(),
                    of.count(),
                )
            });
            (
                window.len(),
                connect,
                failures,
                echo,
                echo_failures,
                by_protocol,
            )
        });
    if connect_failures > 0 {
        let split: Vec<String> = by_protocol
            .iter()
            .map(|(v, ok, all)| format!("protocol {v} {ok}/{all}"))
            .collect();
        note.push_str(&format!("; connected: {}", split.join(", ")));
    }
    connect_ms.sort_by(f64::total_cmp);
    echo_ms.sort_by(f64::total_cmp);
    Row {
        name: attack.name(),
        rate: traffic.rate(),
        sent_pkts: traffic.sent_pkts.get(),
        sent_bytes: traffic.sent_bytes.get(),
        recv_pkts: traffic.recv_pkts.get(),
        recv_bytes: traffic.recv_bytes.get(),
        probes,
        connect_ms,
        connect_failures,
        echo_ms,
        echo_failures,
        recovery,
        cpu_pct: cpu0
            .zip(cpu1)
            .map(|(a, b)| (b.saturating_sub(a)) as f64 / USER_HZ / secs * 100.0),
        rss_mb: pid.map(|_| rss_max.get() as f64 / 1024.0),
        drops: drops0.zip(drops1).map(|(a, b)| b.saturating_sub(a)),
        note,
    }
}

pub(crate) fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

pub(crate) fn header() -> String {
    format!(
        "{:<16} {:>7} {:>8} {:>9} {:>8} {:>9} {:>6} | {:>15} {:>6} {:>13} {:>6} {:>7} | {:>5} {:>6} {:>6} | note",
        "attack",
        "pkts/s",
        "sent",
        "sent KB",
        "recv",
        "recv KB",
        "ampl",
        "connect p50/max",
        "cfail",
        "echo p50/p99",
        "efail",
        "recover",
        "CPU%",
        "RSS MB",
        "drops",
    )
}

pub(crate) fn format_row(r: &Row) -> String {
    let ampl = if r.sent_bytes > 0 {
        format!("{:.2}", r.recv_bytes as f64 / r.sent_bytes as f64)
    } else {
        "-".into()
    };
    let connect = format!(
        "{}/{} ms",
        opt(percentile(&r.connect_ms, 0.5), 0),
        opt(percentile(&r.connect_ms, 1.0), 0)
    );
    format!(
        "{:<16} {:>7.0} {:>8} {:>9.1} {:>8} {:>9.1} {:>6} | {:>15} {:>6} {:>13} {:>6} {:>7} | {:>5} {:>6} {:>6} | {}",
        r.name,
        r.rate,
        r.sent_pkts,
        r.sent_bytes as f64 / 1024.0,
        r.recv_pkts,
        r.recv_bytes as f64 / 1024.0,
        ampl,
        connect,
        format!("{}/{}", r.connect_failures, r.probes),
        format!(
            "{}/{} ms",
            opt(percentile(&r.echo_ms, 0.5), 1),
            opt(percentile(&r.echo_ms, 0.99), 0)
        ),
        r.echo_failures,
        r.recovery.map_or(">20 s".into(), |s| format!("{s:.1} s")),
        opt(r.cpu_pct, 0),
        opt(r.rss_mb, 0),
        r.drops.map_or("-".into(), |d| d.to_string()),
        r.note
    )
}

/// Wait until the server answers an unconnected ping (it may still be compiling).
pub(crate) async fn wait_for_server(server: SocketAddr, wait: Duration) -> Result<(), String> {
    let sock = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let ping = encode(&UnconnectedPing {
        only_if_open: false,
        time: 0,
        client_guid: Some(1),
    });
    let deadline = Instant::now() + wait;
    let mut buf = vec![0u8; 2048];
    while Instant::now() < deadline {
        let _ = sock.send_to(&ping, server).await;
        let until = Instant::now() + Duration::from_millis(500);
        while let Ok(Ok((n, from))) =
            tokio::time::timeout_at(until.into(), sock.recv_from(&mut buf)).await
        {
            if from == server && n > 0 && buf[0] == id::UNCONNECTED_PONG {
                return Ok(());
            }
        }
    }
    Err(format!(
        "no server answered pings on {server} within {wait:?}"
    ))
}
