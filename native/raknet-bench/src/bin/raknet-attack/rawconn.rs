//! A hand-driven client connection (the attacker's own): every datagram number, ACK and
//! frame is under the attacker's control.

use crate::*;

pub(crate) struct RawConn {
    pub(crate) sock: Rc<UdpSocket>,
    pub(crate) server: SocketAddr,
    pub(crate) protocol: u8,
    pub(crate) guid: u64,
    pub(crate) next_seq: u32,
    pub(crate) next_ri: u32,
    pub(crate) next_oi: u32,
    /// Data datagram numbers received and not yet acknowledged (bounded).
    pub(crate) to_ack: Vec<u32>,
    /// The server sent 0x15.
    pub(crate) closed: bool,
    /// Last time the server acknowledged one of our datagrams.
    pub(crate) last_ack: Option<Instant>,
    /// Lowest and highest data datagram number seen from the server.
    pub(crate) server_seqs: Option<(u32, u32)>,
    /// Payload IDs of frames received, counted by ID.
    pub(crate) frame_ids: [u32; 256],
}

pub(crate) enum Incoming {
    Data,
    Ack(Vec<AckRange>),
    Other,
}

impl RawConn {
    pub(crate) fn frame(&mut self, reliability: Reliability, payload: Vec<u8>) -> Frame {
        let mut f = Frame::new(reliability, Bytes::from(payload));
        if reliability.is_reliable() {
            f.message_index = MessageIndex::new(self.next_ri);
            self.next_ri += 1;
        }
        if reliability == Reliability::ReliableOrdered {
            f.order_index = OrderIndex::new(self.next_oi);
            self.next_oi += 1;
        }
        f
    }

    pub(crate) fn datagram_at(seq: u32, frames: &[Frame]) -> Vec<u8> {
        let mut v = encode(&DataHeader::new(DatagramSeq::new(seq)));
        for f in frames {
            f.encode(&mut v);
        }
        v
    }

    pub(crate) fn datagram(&mut self, frames: &[Frame]) -> Vec<u8> {
        let v = Self::datagram_at(self.next_seq, frames);
        self.next_seq += 1;
        v
    }

    pub(crate) async fn send(&self, pkt: &[u8], traffic: &Traffic) {
        if self.sock.send_to(pkt, self.server).await.is_ok() {
            traffic.sent(pkt.len());
        } else {
            traffic.send_errors.set(traffic.send_errors.get() + 1);
        }
    }

    /// Note what one datagram from the server says.
    pub(crate) fn absorb(&mut self, pkt: &[u8]) -> Incoming {
        let Ok(d) = Datagram::decode(Bytes::copy_from_slice(pkt), false) else {
            return Incoming::Other;
        };
        match d {
            Datagram::Data { header, body } => {
                let s = header.seq.get();
                if self.to_ack.len() < 4096 {
                    self.to_ack.push(s);
                }
                self.server_seqs = Some(match self.server_seqs {
                    Some((lo, hi)) => (lo.min(s), hi.max(s)),
                    None => (s, s),
                });
                for f in Frames::new(body).flatten() {
                    if let Some(&b) = f.payload.first() {
                        self.frame_ids[usize::from(b)] += 1;
                        if b == id::DISCONNECTION_NOTIFICATION {
                            self.closed = true;
                        }
                    }
                }
                Incoming::Data
            }
            Datagram::Ack(a) => {
                self.last_ack = Some(Instant::now());
                Incoming::Ack(a.ranges)
            }
            Datagram::Nak(_) => Incoming::Other,
        }
    }

    /// An ACK of everything received since the last one.
    pub(crate) fn take_ack(&mut self) -> Option<Vec<u8>> {
        if self.to_ack.is_empty() {
            return None;
        }
        self.to_ack.sort_unstable();
        self.to_ack.dedup();
        let mut ranges: Vec<AckRange> = Vec::new();
        for &s in &self.to_ack {
            match ranges.last_mut() {
                Some(r) if r.end.get() + 1 == s => r.end = DatagramSeq::new(s),
                _ => ranges.push(AckRange::single(DatagramSeq::new(s))),
            }
        }
        self.to_ack.clear();
        Some(encode(&Ack {
            timestamp: None,
            arrival_rate: None,
            ranges,
        }))
    }

    /// Receive what is there (waiting until `until` for the first datagram); returns how
    /// many datagrams were read.
    pub(crate) async fn pump(
        &mut self,
        until: Instant,
        traffic: &Traffic,
        buf: &mut [u8],
    ) -> usize {
        let mut n = 0;
        if let Ok(Ok((len, from))) =
            tokio::time::timeout_at(until.into(), self.sock.recv_from(buf)).await
        {
            if from == self.server {
                traffic.received(len);
                self.absorb(&buf[..len]);
                n += 1;
            }
        } else {
            return 0;
        }
        while let Ok((len, from)) = self.sock.try_recv_from(buf) {
            if from == self.server {
                traffic.received(len);
                self.absorb(&buf[..len]);
                n += 1;
            }
            if n > 4096 {
                break;
            }
        }
        n
    }
}

/// Send `pkt`, wait up to 500 ms for an offline reply with ID `want`; 4 attempts.
pub(crate) async fn offline_exchange(
    sock: &UdpSocket,
    server: SocketAddr,
    pkt: &[u8],
    want: u8,
    traffic: &Traffic,
) -> Result<Bytes, String> {
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 {
        if sock.send_to(pkt, server).await.is_ok() {
            traffic.sent(pkt.len());
        }
        let until = Instant::now() + Duration::from_millis(500);
        while let Ok(Ok((n, from))) =
            tokio::time::timeout_at(until.into(), sock.recv_from(&mut buf)).await
        {
            if from != server {
                continue;
            }
            traffic.received(n);
            match buf.first() {
                Some(&b) if b == want => return Ok(Bytes::copy_from_slice(&buf[..n])),
                Some(&b)
                    if b != id::OPEN_CONNECTION_REPLY_1 && b != id::OPEN_CONNECTION_REPLY_2 =>
                {
                    return Err(format!("refused with 0x{b:02x}"));
                }
                _ => {}
            }
        }
    }
    Err(format!("no 0x{want:02x} reply"))
}

/// The handshake by hand up to the server's 0x10: OCR1, OCR2, 0x09 in datagram #0.
pub(crate) async fn raw_accept(
    ip: Ipv4Addr,
    server: SocketAddr,
    protocol: u8,
    mtu: u16,
    guid: u64,
    epoch: Instant,
    traffic: &Traffic,
) -> Result<(RawConn, ConnectionRequestAccepted), String> {
    let sock = Rc::new(
        UdpSocket::bind((ip, 0))
            .await
            .map_err(|e| format!("bind {ip}: {e}"))?,
    );
    hold(&sock);
    raw_accept_on(sock, server, protocol, mtu, guid, epoch, traffic).await
}

/// [`raw_accept`] from a socket of the caller's.
pub(crate) async fn raw_accept_on(
    sock: Rc<UdpSocket>,
    server: SocketAddr,
    protocol: u8,
    mtu: u16,
    guid: u64,
    epoch: Instant,
    traffic: &Traffic,
) -> Result<(RawConn, ConnectionRequestAccepted), String> {
    let ocr1 = encode(&OpenConnectionRequest1 { protocol, mtu });
    let mut r1 =
        offline_exchange(&sock, server, &ocr1, id::OPEN_CONNECTION_REPLY_1, traffic).await?;
    let reply1 = OpenConnectionReply1::decode(&mut r1).map_err(|e| format!("Reply1: {e}"))?;
    let ocr2 = encode(&OpenConnectionRequest2 {
        cookie: reply1.cookie,
        client_challenge: None,
        server_address: server,
        mtu: reply1.mtu,
        client_guid: guid,
    });
    offline_exchange(&sock, server, &ocr2, id::OPEN_CONNECTION_REPLY_2, traffic).await?;
    let mut c = RawConn {
        sock,
        server,
        protocol,
        guid,
        next_seq: 0,
        next_ri: 0,
        next_oi: 0,
        to_ack: Vec::new(),
        closed: false,
        last_ack: None,
        server_seqs: None,
        frame_ids: [0; 256],
    };
    let request = encode(&ConnectionRequest {
        client_guid: guid,
        time: now_ms(epoch),
        use_security: false,
        password: Bytes::new(),
    });
    let mut buf = vec![0u8; 2048];
    let mut accepted = None;
    // A resend is a new datagram carrying the same reliable message.
    let f = c.frame(Reliability::Reliable, request);
    for _ in 0..4 {
        let d = c.datagram(std::slice::from_ref(&f));
        c.send(&d, traffic).await;
        let until = Instant::now() + Duration::from_millis(500);
        while accepted.is_none() {
            let Ok(Ok((n, from))) =
                tokio::time::timeout_at(until.into(), c.sock.recv_from(&mut buf)).await
            else {
                break;
            };
            if from != server {
                continue;
            }
            traffic.received(n);
            let pkt = Bytes::copy_from_slice(&buf[..n]);
            c.absorb(&pkt);
            if let Ok(Datagram::Data { body, .. }) = Datagram::decode(pkt, false) {
                for f in Frames::new(body).flatten() {
                    if f.payload.first() == Some(&id::CONNECTION_REQUEST_ACCEPTED) {
                        let mut p = f.payload.clone();
                        accepted = ConnectionRequestAccepted::decode(&mut p).ok();
                    }
                }
            }
        }
        if accepted.is_some() {
            break;
        }
    }
    let accepted = accepted.ok_or("no 0x10")?;
    Ok((c, accepted))
}

/// Connect properly by hand: OCR1, OCR2, 0x09 in datagram #0, ACK the 0x10, 0x13.
pub(crate) async fn raw_connect(
    ip: Ipv4Addr,
    server: SocketAddr,
    protocol: u8,
    mtu: u16,
    guid: u64,
    epoch: Instant,
    traffic: &Traffic,
) -> Result<RawConn, String> {
    let (mut c, accepted) = raw_accept(ip, server, protocol, mtu, guid, epoch, traffic).await?;
    let mut buf = vec![0u8; 2048];
    if let Some(ack) = c.take_ack() {
        c.send(&ack, traffic).await;
    }
    let internal = if protocol >= 10 { 20 } else { 10 };
    let nic = encode(&NewIncomingConnection {
        server_address: server,
        internal_addresses: vec![addr::UNASSIGNED; internal],
        ping_time: accepted.accepted_time,
        pong_time: now_ms(epoch),
    });
    let f = c.frame(Reliability::ReliableOrdered, nic);
    for _ in 0..3 {
        let seq = c.next_seq;
        let d = c.datagram(std::slice::from_ref(&f));
        c.send(&d, traffic).await;
        let until = Instant::now() + Duration::from_millis(500);
        loop {
            let Ok(Ok((n, from))) =
                tokio::time::timeout_at(until.into(), c.sock.recv_from(&mut buf)).await
            else {
                break;
            };
            if from != server {
                continue;
            }
            traffic.received(n);
            if let Incoming::Ack(ranges) = c.absorb(&buf[..n]) {
                if ranges
                    .iter()
                    .any(|r| (r.start.get()..=r.end.get()).contains(&seq))
                {
                    return Ok(c);
                }
            }
        }
    }
    Err("0x13 never acknowledged".into())
}
