//! What an endpoint takes from the network: datagrams demultiplexed by peer address to
//! their connections, and the offline messages of strangers (pings, the server's half of
//! the handshake, bans), answered within their budgets.

use super::*;

impl Endpoint {
    /// Process a datagram received from `from`.
    pub fn handle(&mut self, now: Instant, from: SocketAddr, datagram: Bytes) {
        let from = addr::unmap(from);
        let now_ms = self.ms(now);
        // Behind a trusted proxy, the client's address is the peer's from here on.
        let (from, datagram) = match self.proxy.as_mut() {
            None => (from, datagram),
            Some(proxy) => match proxy.inbound(now_ms, from, datagram) {
                Inbound::Datagram { from, payload } => (from, payload),
                Inbound::Nothing => return,
            },
        };
        // Speaking as a Spectrum proxy, we get replies with the header in front, which a
        // proxy takes off.
        let datagram = match self.sent_proxy_header(from) {
            Some((ProxyMode::Spectrum, _)) if proxy::has_spp_magic(&datagram) => {
                match proxy::parse_spp(&datagram) {
                    Ok(header) => datagram.slice(header.len..),
                    Err(_) => datagram,
                }
            }
            _ => datagram,
        };
        let Some(&first) = datagram.first() else {
            self.stats.malformed += 1;
            return;
        };
        if self.bans.is_banned(from.ip(), now_ms) {
            self.stats.banned += 1;
            // Only connection attempts learn why, and only those at least as long as the
            // answer (a bare 17-byte stub got the 25-byte 0x17).
            if OfflineMessage::is_offline(&datagram)
                && matches!(
                    first,
                    id::OPEN_CONNECTION_REQUEST_1 | id::OPEN_CONNECTION_REQUEST_2
                )
                && datagram.len() >= BANNED_REPLY_LEN
            {
                self.reply_banned(now_ms, from);
            }
            return;
        }
        if self.is_raw(from, &datagram) {
            self.offer_raw(now_ms, from, datagram);
            return;
        }
        if first & crate::flags::VALID != 0 {
            match self.by_addr.get(&from).copied() {
                Some(id) => {
                    if let Some(c) = self.conn_mut(id) {
                        c.handle_datagram(now, datagram);
                    }
                    self.touch(id);
                }
                None => self.on_half_open_datagram(now, from, datagram),
            }
            return;
        }
        if !OfflineMessage::is_offline(&datagram) {
            self.stats.malformed += 1;
            return;
        }
        self.stats.offline_in += 1;
        let decoded = if first == id::OPEN_CONNECTION_REQUEST_2 {
            ServerHandshake::decode_ocr2(&datagram).map(OfflineMessage::OpenConnectionRequest2)
        } else {
            OfflineMessage::decode(&mut datagram.clone(), false).ok()
        };
        let Some(msg) = decoded else {
            self.stats.malformed += 1;
            return;
        };
        if let Some(&id) = self.by_addr.get(&from) {
            if self.conn(id).is_some_and(Connection::takes_offline) {
                let taken = self
                    .conn_mut(id)
                    .is_some_and(|c| c.handle_offline(now, msg));
                if !taken {
                    self.stats.offline_ignored += 1;
                }
                self.touch(id);
                return;
            }
        }
        let len = datagram.len();
        match msg {
            OfflineMessage::UnconnectedPong(pong) => {
                let rtt = Duration::from_millis(now_ms.saturating_sub(pong.time));
                self.events.push_back(Event::Pong { from, pong, rtt });
            }
            // A client endpoint accepts no one, so it answers no stranger: it would only be
            // a reflector.
            OfflineMessage::UnconnectedPing(_)
            | OfflineMessage::OpenConnectionRequest1(_)
            | OfflineMessage::OpenConnectionRequest2(_)
                if !self.config.accept_incoming =>
            {
                self.stats.offline_ignored += 1;
            }
            OfflineMessage::UnconnectedPing(ping) => self.on_ping(now_ms, from, ping, len),
            OfflineMessage::OpenConnectionRequest1(req) => {
                let reply = self.handshake.on_ocr1(
                    &self.config,
                    now_ms,
                    from,
                    req,
                    len,
                    self.guid,
                    &mut self.stats,
                );
                if let Some(reply) = reply {
                    self.queue_offline_bytes(from, reply);
                }
            }
            OfflineMessage::OpenConnectionRequest2(req) => self.on_ocr2(now_ms, from, req, len),
            _ => self.stats.offline_ignored += 1,
        }
    }

    /// A connected datagram from an address without a connection: a handshake between
    /// OCR2 and 0x13, or nothing we know.
    pub(super) fn on_half_open_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: Bytes,
    ) {
        let mut out = Vec::new();
        let step = self.handshake.on_datagram(
            &self.config,
            !self.suspended,
            self.ms(now),
            now.saturating_duration_since(self.epoch).as_micros() as u32,
            from,
            self.local_addr,
            &datagram,
            &mut self.stats,
            &mut out,
        );
        for d in out {
            self.queue_offline_bytes(from, d);
        }
        let acc = match step {
            Step::Establish(acc) => acc,
            Step::Full => {
                // Validated by its cookie: a 25-byte answer to a 0x09 of at least that much.
                self.stats.refused_full_late += 1;
                let guid = self.guid;
                return self.queue_offline(from, &NoFreeIncomingConnections { server_guid: guid });
            }
            Step::Drop | Step::Answered => return,
        };
        // A slot taken at 0x09 stays the client's even if the server was suspended since.
        let reserved = self.handshake.establish(from);
        // Claimed now, given back below if refused: two endpoints of the group never both
        // accept one GUID.
        // A GUID banned since its OCR2 (or one the 0x09 changed to) is refused as a duplicate.
        let duplicate = self.guid_bans.is_banned(acc.guid, self.ms(now))
            || self.by_guid.contains_key(&acc.guid)
            || !self.group.claim_guid(acc.guid, from);
        let unproven = !(acc.proven || acc.echoed);
        let admission = &self.config.admission;
        let unproven_full = unproven
            && (self.unproven.total() >= admission.max_unproven
                || self.unproven.full(from.ip(), admission.max_unproven_per_ip));
        // A handshake without a cookie counts against its IP's new connections only now that
        // its address is proven (see `new_conn_rates`).
        let rate = u64::from(self.config.admission.new_connections_per_ip_per_sec);
        let rate_limited = !duplicate
            && !acc.proven
            && !self
                .new_conn_rates
                .take(from.ip(), self.ms(now), rate, rate);
        let refused = duplicate
            || rate_limited
            || unproven_full
            || (!reserved
                && (self.suspended
                    || !self.group.take(
                        from.ip(),
                        self.config.limits.max_connections,
                        self.config.admission.max_connections_per_ip,
                    )));
        if refused {
            if reserved {
                self.group.release(from.ip());
            }
            if !duplicate {
                self.group.release_guid(acc.guid, from);
            }
            // The client was told "accepted" by 0x10; its verified 0x13 proves the address,
            // so it may be told otherwise rather than left to time out (0x1A, an offline
            // reply, has no place this late: a rate-limited one gets the 0x15 too).
            if rate_limited {
                self.stats.refused_recently_connected += 1;
            } else if unproven_full {
                self.stats.refused_unproven += 1;
            } else {
                self.stats.refused_full_late += 1;
            }
            let us = now.saturating_duration_since(self.epoch).as_micros() as u32;
            let refusal = ServerHandshake::late_refusal(&self.config, us);
            return self.queue_offline_bytes(from, refusal);
        }
        let peer = Peer {
            role: Role::Server,
            addr: from,
            local_addr: self.local_addr,
            our_guid: self.guid,
            peer_guid: acc.guid,
            protocol: acc.protocol,
            mtu: acc.mtu,
        };
        // Every handshake that gets this far proved its address (a cookie, or the echoed
        // time of 0x10).
        let (seed, secret) = (self.config.rng_seed, self.config.secret);
        self.group.known.insert(from.ip(), || {
            (
                derive(seed, secret, b"known ips key 0"),
                derive(seed, secret, b"known ips key 1"),
            )
        });
        if unproven {
            self.unproven.add(from.ip());
        }
        let conn = Connection::accepted(self.config.clone(), peer, self.epoch, now, acc);
        let id = self.insert(conn);
        self.by_guid.insert(acc.guid, id);
        if let Some(c) = self.conn_mut(id) {
            c.handle_datagram(now, datagram);
        }
        self.touch(id);
    }

    pub(super) fn has_free_slot(&self) -> bool {
        self.config.accept_incoming
            && !self.suspended
            && self.group.connections() < self.config.limits.max_connections
    }

    pub(super) fn on_ping(
        &mut self,
        now_ms: u64,
        from: SocketAddr,
        ping: UnconnectedPing,
        len: usize,
    ) {
        if ping.only_if_open && !self.has_free_slot() {
            self.stats.offline_ignored += 1;
            return;
        }
        let pong = UnconnectedPong {
            time: ping.time,
            server_guid: self.guid,
            data: self.config.offline_ping_response.clone(),
        };
        let size = pong.encoded_len();
        // A pong is a reply to an address nobody validated: at most 3× the ping, a few a
        // second per IP, and a global byte budget (§14 item 9).
        if size > len.saturating_mul(self.config.admission.pong_amplification as usize) {
            self.stats.pongs_too_large += 1;
            return;
        }
        let per_ip = u64::from(self.config.admission.pongs_per_ip_per_sec);
        if !self.pong_rates.take(from.ip(), now_ms, per_ip, per_ip) {
            self.stats.pongs_rate_limited += 1;
            return;
        }
        let global = self.config.admission.pong_bytes_per_sec;
        let known = self.group.known.contains(from.ip());
        let budget = if known {
            &mut self.known_pong_budget
        } else {
            &mut self.pong_budget
        };
        if !budget.take(now_ms, size as u64, global, global) {
            self.stats.pongs_budget_exhausted += 1;
            return;
        }
        if known {
            self.stats.pongs_to_known_ips += 1;
        }
        self.stats.pongs_sent += 1;
        self.queue_offline(from, &pong);
    }

    pub(super) fn on_ocr2(
        &mut self,
        now_ms: u64,
        from: SocketAddr,
        req: OpenConnectionRequest2,
        len: usize,
    ) {
        let guid = self.guid;
        if self.guid_bans.is_banned(req.client_guid, now_ms) {
            self.stats.banned += 1;
            return self.reply_banned(now_ms, from);
        }
        if self.by_addr.contains_key(&from)
            || self.by_guid.contains_key(&req.client_guid)
            || self.group.guid_taken(req.client_guid, from)
            || self.handshake.guid_elsewhere(req.client_guid, from)
        {
            // The address or GUID is connected already (§4.9). A lost Reply2 of a half-open
            // handshake is resent by the handshake itself.
            self.stats.refused_already_connected += 1;
            return self.queue_offline(from, &AlreadyConnected { server_guid: guid });
        }
        let ip = from.ip();
        // Slots of handshakes that timed out go back before the count is read.
        self.handshake.expire(&self.config, now_ms);
        // Read only once the request passed its checks (the cookie among them): the count is
        // shared by the server's endpoint threads behind a lock that spoofed requests must
        // not reach.
        let group = &self.group;
        let full = !self.has_free_slot();
        let admission = self.config.admission.clone();
        let rates = &mut self.new_conn_rates;
        let half_open_here = self.handshake.is_half_open(from);
        let refusal = |stats: &mut EndpointStats, proven: bool| -> Option<Vec<u8>> {
            if full {
                stats.refused_full += 1;
                return Some(NoFreeIncomingConnections { server_guid: guid }.to_vec());
            }
            if group.network_full(ip, admission.max_connections_per_ip) {
                stats.refused_ip_connections += 1;
                return Some(NoFreeIncomingConnections { server_guid: guid }.to_vec());
            }
            let rate = u64::from(admission.new_connections_per_ip_per_sec);
            // An unproven OCR2 is counted at its 0x13, if it gets there.
            if proven && !half_open_here && !rates.take(ip, now_ms, rate, rate) {
                stats.refused_recently_connected += 1;
                return Some(IpRecentlyConnected { server_guid: guid }.to_vec());
            }
            None
        };
        let reply = self.handshake.on_ocr2(
            &self.config,
            now_ms,
            from,
            req,
            len,
            guid,
            &mut self.stats,
            refusal,
        );
        if let Some(reply) = reply {
            self.queue_offline_bytes(from, reply);
        }
    }
}
