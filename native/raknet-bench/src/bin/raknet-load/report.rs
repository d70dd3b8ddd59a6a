//! What a run counts, and how it is reported: the totals, the progress line printed every
//! second, the summary at the end and `--verify`'s lines.

use std::time::{Duration, Instant};

use crate::{Args, Run};

/// What the players did, summed: connections, messages, round trips, failures, and what their
/// engines counted.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) connected: usize,
    pub(crate) failed: usize,
    pub(crate) disconnected: usize,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) bytes_sent: u64,
    pub(crate) bytes_received: u64,
    pub(crate) rtts_us: Vec<u32>,
    /// The round trips of the current second, for the progress line's p99.
    pub(crate) second_rtts_us: Vec<u32>,
    /// The current second's longest lateness of a player's timer: how long the load tester
    /// itself kept a send or a timer waiting (a round trip includes it).
    pub(crate) second_lag_us: u64,
    /// The current second's longest wait of a received datagram for the load tester to read
    /// it (not counted in round trips: they end when the kernel received the echo).
    pub(crate) second_read_lag_us: u64,
    pub(crate) failures: Vec<String>,
    /// Connections that ended before they closed themselves (closed by the server, or
    /// timed out).
    pub(crate) dropped: usize,
    /// Why the first few of them ended (distinct reasons).
    pub(crate) drop_reasons: Vec<String>,
    pub(crate) reliable: Check,
    pub(crate) sequenced: Check,
    /// What the players' engines counted, summed at their close: the server's datagrams
    /// received twice (its resends of what had arrived), the players' own resends, NAKs
    /// they sent (gaps in the server's datagrams) and their datagrams declared lost.
    pub(crate) duplicates: u64,
    pub(crate) resends: u64,
    pub(crate) naks_sent: u64,
    pub(crate) datagrams_lost: u64,
    /// Unreliable messages that waited too long in a player's queue, never sent.
    pub(crate) expired_unsent: u64,
    /// Players that closed with echoes still missing, and the echoes their engines held
    /// then behind a gap in the server's ordered stream.
    pub(crate) closed_waiting: u64,
    pub(crate) held_at_close: u64,
}

impl Totals {
    /// A player that never connected, and why (the first few distinct reasons are kept).
    pub(crate) fn failure(&mut self, reason: String) {
        self.failed += 1;
        if self.failures.len() < 5 && !self.failures.contains(&reason) {
            self.failures.push(reason);
        }
    }
}

/// What `--verify` found for one reliability, summed over the connections.
#[derive(Default)]
pub(crate) struct Check {
    pub(crate) sent: u64,
    /// Distinct messages echoed.
    pub(crate) echoed: u64,
    pub(crate) lost: u64,
    pub(crate) duplicated: u64,
    /// Echoes that did not come in sending order (reliable: not the next expected number;
    /// sequenced: a number not above the last one echoed).
    pub(crate) out_of_order: u64,
    pub(crate) rtts_us: Vec<u32>,
}

/// The progress line printed every second.
pub(crate) struct Progress {
    pub(crate) next: Instant,
    pub(crate) last: (u64, u64),
}

impl Progress {
    pub(crate) fn new(run: &Run) -> Self {
        Self {
            next: run.start + Duration::from_secs(1),
            last: (0, 0),
        }
    }

    pub(crate) fn print(&mut self, now: Instant, run: &Run, t: &mut Totals) {
        let mut second = std::mem::take(&mut t.second_rtts_us);
        second.sort_unstable();
        let p99 = if second.is_empty() {
            String::new()
        } else {
            format!(" p99 {:.1} ms", percentile(&second, 0.99))
        };
        let lag = std::mem::take(&mut t.second_lag_us) as f64 / 1000.0;
        let read_lag = std::mem::take(&mut t.second_read_lag_us) as f64 / 1000.0;
        println!(
            "  {:>5.1}s connected {}/{} failed {} | out {}/s in {}/s{p99}, own timers late by up to {lag:.1} ms, datagrams read {read_lag:.1} ms after they arrived",
            now.duration_since(run.start).as_secs_f64(),
            t.connected - t.disconnected.min(t.connected),
            run.args.connections,
            t.failed,
            t.sent - self.last.0,
            t.received - self.last.1
        );
        self.last = (t.sent, t.received);
        while self.next <= now {
            self.next += Duration::from_secs(1);
        }
    }
}

pub(crate) fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// The `--verify` lines of the summary.
pub(crate) fn verify_summary(t: &mut Totals) {
    let r = &mut t.reliable;
    r.rtts_us.sort_unstable();
    println!(
        "  reliable      sent {}, echoed {}, lost {}, duplicated {}, out of order {}, p99 {:.3} ms",
        r.sent,
        r.echoed,
        r.lost,
        r.duplicated,
        r.out_of_order,
        percentile(&r.rtts_us, 0.99)
    );
    let q = &mut t.sequenced;
    q.rtts_us.sort_unstable();
    q.lost = q.sent.saturating_sub(q.echoed);
    println!(
        "  sequenced     sent {}, echoed {}, lost {} ({:.2} %), out of sequence {}, p99 {:.3} ms",
        q.sent,
        q.echoed,
        q.lost,
        q.lost as f64 * 100.0 / q.sent.max(1) as f64,
        q.out_of_order,
        percentile(&q.rtts_us, 0.99)
    );
    if t.drop_reasons.is_empty() {
        println!("  dropped       {} connections ended early", t.dropped);
    } else {
        println!(
            "  dropped       {} connections ended early ({})",
            t.dropped,
            t.drop_reasons.join("; ")
        );
    }
    let ok = t.failed == 0
        && t.dropped == 0
        && r.lost == 0
        && r.duplicated == 0
        && r.out_of_order == 0
        && r.echoed == r.sent
        && q.out_of_order == 0;
    println!("  verify        {}", if ok { "ok" } else { "FAILED" });
}

/// The summary printed at the end of the run.
pub(crate) fn summary(args: &Args, t: &mut Totals) {
    t.rtts_us.sort_unstable();
    let secs = args.duration.as_secs_f64();
    println!("summary:");
    // `ok`: connections that came up; of those, the ones that ended before the player closed
    // them are counted apart (a server that accepts a handshake and then refuses the
    // connection, as one at its connection limit does, is not holding those players).
    println!(
        "  connections   {} ok, {} failed{}, {} closed before the end{}",
        t.connected,
        t.failed,
        if t.failures.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.failures.join("; "))
        },
        t.dropped,
        if t.drop_reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.drop_reasons.join("; "))
        }
    );
    println!(
        "  sent          {} messages ({:.0}/s, {:.2} MB/s)",
        t.sent,
        t.sent as f64 / secs,
        t.bytes_sent as f64 / secs / 1e6
    );
    println!(
        "  received      {} messages ({:.0}/s, {:.2} MB/s)",
        t.received,
        t.received as f64 / secs,
        t.bytes_received as f64 / secs / 1e6
    );
    if !t.rtts_us.is_empty() {
        println!(
            "  round trip    p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} echoes{})",
            percentile(&t.rtts_us, 0.5),
            percentile(&t.rtts_us, 0.99),
            percentile(&t.rtts_us, 1.0),
            t.rtts_us.len(),
            if args.warmup.is_zero() {
                String::new()
            } else {
                format!(" sent after a {:?} warm-up", args.warmup)
            }
        );
        let lost = t.sent.saturating_sub(t.received);
        println!(
            "  unanswered    {lost} ({:.2} %)",
            lost as f64 * 100.0 / t.sent.max(1) as f64
        );
    }
    if !args.raw {
        println!(
            "  protocol      {} of the server's datagrams received twice, {} NAKs sent; {} resends, {} datagrams lost, {} unreliable messages expired unsent (players' own); {} players closed with echoes missing, {} echoes held behind a gap then",
            t.duplicates,
            t.naks_sent,
            t.resends,
            t.datagrams_lost,
            t.expired_unsent,
            t.closed_waiting,
            t.held_at_close
        );
    }
    if args.verify {
        verify_summary(t);
    }
}
