//! Bans: of addresses and networks (every datagram from them dropped), and of client GUIDs
//! (their connection attempts refused), with the 0x17 that tells a banned client why.

use super::*;

impl Endpoint {
    /// Refuse everything from `ip` for `duration` (`None`: until [`Endpoint::unban`]): an
    /// IPv4 address, or an IPv6 address's /64 (the network one subscriber gets).
    /// Its datagrams are dropped from now on, and its connections are closed (their peers
    /// are sent 0x15, whose acknowledgement is dropped with the rest). Its connection
    /// attempts are answered with 0x17 (at most [`BANNED_REPLIES_PER_SEC`] a second over all
    /// banned sources).
    pub fn ban(&mut self, now: Instant, ip: IpAddr, duration: Option<Duration>) {
        self.ban_prefix(now, ip, None, duration);
    }

    /// [`Endpoint::ban`] for the network of `ip` with a prefix of `len` bits (`None`: the
    /// host's, as `ban`): `2001:db8::/48` or `203.0.113.0/24`. An IPv6 prefix longer than 64
    /// bits bans its /64.
    pub fn ban_prefix(
        &mut self,
        now: Instant,
        ip: IpAddr,
        len: Option<u8>,
        duration: Option<Duration>,
    ) {
        let now_ms = self.ms(now);
        let until = duration.map(|d| now_ms.saturating_add(d.as_millis() as u64));
        self.bans.ban(ip, len, until);
        let conns: Vec<(SocketAddr, ConnId)> =
            self.by_addr.iter().map(|(a, id)| (*a, *id)).collect();
        for (addr, id) in conns {
            if self.bans.is_banned(addr.ip(), now_ms) {
                self.close(now, id);
            }
        }
    }

    /// Lift a ban of [`Endpoint::ban`].
    pub fn unban(&mut self, ip: IpAddr) {
        self.bans.unban(ip, None);
    }

    /// Lift a ban of [`Endpoint::ban_prefix`].
    pub fn unban_prefix(&mut self, ip: IpAddr, len: Option<u8>) {
        self.bans.unban(ip, len);
    }

    /// Refuse the client whose GUID is `guid` for `duration` (`None`: until
    /// [`Endpoint::unban_guid`]), from whatever address: its connection attempts are answered
    /// with 0x17 at its OCR2, and its connection, if it has one, is closed (its peer is sent
    /// 0x15). A GUID is the client's choice: this keeps a known client out, not an attacker.
    pub fn ban_guid(&mut self, now: Instant, guid: u64, duration: Option<Duration>) {
        let now_ms = self.ms(now);
        let until = duration.map(|d| now_ms.saturating_add(d.as_millis() as u64));
        self.guid_bans.ban(guid, until);
        if let Some(&id) = self.by_guid.get(&guid) {
            self.close(now, id);
        }
    }

    /// Lift a ban of [`Endpoint::ban_guid`].
    pub fn unban_guid(&mut self, guid: u64) {
        self.guid_bans.unban(guid);
    }

    /// Every active GUID ban with how long it has left (`None`: until lifted).
    pub fn banned_guids(&mut self, now: Instant) -> Vec<(u64, Option<Duration>)> {
        let now_ms = self.ms(now);
        self.guid_bans
            .list(now_ms)
            .into_iter()
            .map(|(guid, left)| (guid, left.map(Duration::from_millis)))
            .collect()
    }

    /// Every active ban: the network, its prefix length (32 for an IPv4 address, 64 for an
    /// IPv6 host's network) and how long it has left (`None`: until lifted).
    pub fn banned(&mut self, now: Instant) -> Vec<(IpAddr, u8, Option<Duration>)> {
        let now_ms = self.ms(now);
        self.bans
            .list(now_ms)
            .into_iter()
            .map(|(ip, len, left)| (ip, len, left.map(Duration::from_millis)))
            .collect()
    }

    /// Tell a banned source why with 0x17 ("connection banned"), within
    /// [`BANNED_REPLIES_PER_SEC`] replies a second over all banned sources: answering every
    /// attempt would make us a reflector (§14 item 12).
    pub(super) fn reply_banned(&mut self, now_ms: u64, to: SocketAddr) {
        if self
            .banned_reply_budget
            .take(now_ms, 1, BANNED_REPLIES_PER_SEC, BANNED_REPLIES_PER_SEC)
        {
            let server_guid = self.guid;
            self.queue_offline(to, &ConnectionBanned { server_guid });
        }
    }
}
