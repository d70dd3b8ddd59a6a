//! Datagrams that are not RakNet on the game port (GameSpy4 Query's `FE FD`, say), offered to
//! the application, and its replies: within a rate budget like pongs', and never bigger than
//! the amplification rule allows an address that proved nothing.

use super::*;

/// How long an offered datagram may be answered.
const OFFER_LIFETIME_MS: u64 = 5_000;
/// Offers remembered at most (the oldest go first).
const MAX_OFFERS: usize = 1_024;

/// Why [`Endpoint::send_raw`] sent nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawReplyError {
    /// No datagram from that address was offered in the last 5 s (or its one reply was
    /// sent already).
    NotOffered,
    /// Bigger than the address may be sent: `max_amplification` times what it sent unless
    /// the application proved the address, [`RawConfig::max_proven_reply`] if it did.
    TooLarge,
    /// The offline reply queue is full.
    QueueFull,
}

impl std::fmt::Display for RawReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotOffered => "no datagram from that address awaits a reply",
            Self::TooLarge => "reply larger than the amplification rule allows",
            Self::QueueFull => "offline reply queue full",
        })
    }
}

impl std::error::Error for RawReplyError {}

/// An offered datagram awaiting its reply: when it came, and its size.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offer {
    at_ms: u64,
    len: usize,
}

/// What [`EndpointConfig::raw`] offers and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawConfig {
    /// A datagram starting with one of these, from an address without a connection, is
    /// offered ([`Event::Raw`]) instead of being read as RakNet. GameSpy4 Query: `FE FD`.
    pub prefixes: Vec<Vec<u8>>,
    /// Datagrams offered per source IP (IPv6: per /64) and second, at most. Default 10.
    pub per_ip_per_sec: u32,
    /// Datagrams offered per second, all sources together, at most. Default 1,000.
    pub per_sec: u32,
    /// The largest reply to an address the application proved (a Query challenge token
    /// came back). Default 4,096 bytes.
    pub max_proven_reply: usize,
}

impl RawConfig {
    /// Offer datagrams starting with one of `prefixes`, with the default rates.
    pub fn new(prefixes: Vec<Vec<u8>>) -> Self {
        Self {
            prefixes,
            per_ip_per_sec: 10,
            per_sec: 1_000,
            max_proven_reply: 4_096,
        }
    }

    /// The rates one of `endpoints` endpoints serving one port enforces, as
    /// [`crate::AdmissionLimits::endpoint_share`] shares the admission limits: the rate over
    /// all sources divided (rounded up), the per-IP rate whole (a source's datagrams reach
    /// the endpoints by their port, unevenly: one port reaches one endpoint only).
    pub fn endpoint_share(&self, endpoints: usize) -> Self {
        let n = u32::try_from(endpoints.max(1)).unwrap_or(u32::MAX);
        Self {
            per_sec: self.per_sec.div_ceil(n),
            ..self.clone()
        }
    }
}

impl Endpoint {
    /// Whether `datagram` from `from` is for the application rather than RakNet.
    pub(super) fn is_raw(&self, from: SocketAddr, datagram: &[u8]) -> bool {
        self.config
            .raw
            .as_ref()
            .is_some_and(|raw| raw.prefixes.iter().any(|p| datagram.starts_with(p)))
            && !self.by_addr.contains_key(&from)
    }

    /// Offer `datagram` to the application, within the budgets.
    pub(super) fn offer_raw(&mut self, now_ms: u64, from: SocketAddr, datagram: Bytes) {
        let Some(raw) = self.config.raw.as_ref() else {
            return;
        };
        let (per_ip, per_sec) = (u64::from(raw.per_ip_per_sec), u64::from(raw.per_sec));
        if !self.raw_rates.take(from.ip(), now_ms, per_ip, per_ip)
            || !self.raw_budget.take(now_ms, 1, per_sec, per_sec)
        {
            self.stats.raw_rate_limited += 1;
            return;
        }
        self.stats.raw_offered += 1;
        let offer = Offer {
            at_ms: now_ms,
            len: datagram.len(),
        };
        self.raw_offers.insert(from, offer);
        self.events.push_back(Event::Raw { from, datagram });
    }

    /// Reply to a datagram offered from `to` ([`Event::Raw`]) with `data`, from this
    /// endpoint's socket. One reply per offered datagram, within 5 s, no bigger than
    /// `max_amplification` times the offered datagram, or, when the application `proven`
    /// the address (it echoed a secret the application gave it), than
    /// [`RawConfig::max_proven_reply`].
    pub fn send_raw(
        &mut self,
        now: Instant,
        to: SocketAddr,
        data: &[u8],
        proven: bool,
    ) -> Result<(), RawReplyError> {
        let to = addr::unmap(to);
        let now_ms = self.ms(now);
        let offer = match self.raw_offers.remove(&to) {
            Some(o) if now_ms.saturating_sub(o.at_ms) <= OFFER_LIFETIME_MS => o,
            _ => {
                self.stats.raw_replies_refused += 1;
                return Err(RawReplyError::NotOffered);
            }
        };
        let limit = match (&self.config.raw, proven) {
            (Some(raw), true) => raw.max_proven_reply,
            _ => offer
                .len
                .saturating_mul(self.config.admission.max_amplification as usize),
        };
        if data.len() > limit {
            self.stats.raw_replies_refused += 1;
            self.stats.amplification_limited += 1;
            return Err(RawReplyError::TooLarge);
        }
        if self.offline_out.len() >= MAX_OFFLINE_QUEUE {
            self.stats.offline_queue_full += 1;
            return Err(RawReplyError::QueueFull);
        }
        self.stats.raw_replies += 1;
        self.offline_out.push_back((to, data.to_vec()));
        Ok(())
    }
}

/// The table of offers, bounded.
pub(super) fn offers() -> BoundedMap<SocketAddr, Offer> {
    BoundedMap::new(MAX_OFFERS)
}
