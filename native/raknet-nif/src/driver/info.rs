//! What `*_info` and the rates report: the endpoint's and each connection's state as terms.

use super::*;

impl Driver {
    pub(super) fn endpoint_info_term<'a>(&self, env: &'a OwnedEnv) -> Term<'a> {
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
                    ("half_open_newcomers_waited", s.half_open_newcomers_waited),
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
                    ("raw_offered", s.raw_offered),
                    ("raw_rate_limited", s.raw_rate_limited),
                    ("raw_replies", s.raw_replies),
                    ("raw_replies_refused", s.raw_replies_refused),
                    ("proxied", s.proxy.proxied),
                    ("proxy_untrusted_header", s.proxy.untrusted_header),
                    ("proxy_malformed_header", s.proxy.malformed_header),
                    ("proxy_missing_header", s.proxy.missing_header),
                    ("proxy_flows_full", s.proxy.flows_full),
                    ("proxy_replies_dropped", s.proxy.replies_dropped),
                    ("proxy_flows", s.proxy.flows as u64),
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
                atoms::nethernet(),
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
                self.nethernet_info_term(env),
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        })
    }

    /// Heap bytes this endpoint's thread holds, by structure: the engine's
    /// ([`Endpoint::heap_usage`]) and the driver's own (see `RakNet.Server.info/1`'s
    /// `:heap`). O(connections).
    pub(super) fn heap_usage(&self) -> Vec<(&'static str, usize)> {
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
        delivery += vec(&self.batched) + vec(&self.lost);
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

    pub(super) fn conn_info_term<'a>(&self, env: &'a OwnedEnv, id: ConnId) -> Option<Term<'a>> {
        if id.is_external() {
            return env.run(|env| self.nethernet_conn_info(env, id));
        }
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
                atoms::transport(),
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
                atoms::raknet().encode(env),
            ];
            Term::map_from_arrays(env, &keys, &values)
                .unwrap_or_else(|_| atoms::error().encode(env))
        }))
    }

    /// Turns the counters since the last sample into per-second rates, per connection and
    /// for the endpoint.
    pub(super) fn sample_rates(&mut self, now: Instant) {
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
}
