//! Codec micro-benchmark: decoding a 1,400-byte data datagram holding 20 frames.
//!
//! Reports the median of several timed runs, in ns per datagram and per frame. This is a
//! benchmark, not a test: it asserts nothing about speed.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use raknet_proto::{
    DataHeader, Datagram, DatagramSeq, Encode, Frame, MessageIndex, OrderIndex, Reliability,
};

const FRAMES: usize = 20;
const DATAGRAM_LEN: usize = 1400;
const RUNS: usize = 9;
const ITERS: usize = 200_000;

/// A data datagram of exactly `DATAGRAM_LEN` bytes with `FRAMES` RELIABLE_ORDERED frames.
fn build_datagram() -> Bytes {
    let header = DataHeader::new(DatagramSeq::new(0x01_02_03));
    let frame_header = Frame::header_len(Reliability::ReliableOrdered, false);
    let body = DATAGRAM_LEN - header.encoded_len();
    let mut out = Vec::with_capacity(DATAGRAM_LEN);
    header.encode(&mut out);
    for i in 0..FRAMES {
        // Spread the body evenly; the first frames take the remainder.
        let share = body / FRAMES + usize::from(i < body % FRAMES);
        let mut f = Frame::new(
            Reliability::ReliableOrdered,
            Bytes::from(vec![0x86; share - frame_header]),
        );
        f.message_index = MessageIndex::new(i as u32);
        f.order_index = OrderIndex::new(i as u32);
        f.order_channel = (i % 4) as u8;
        f.encode(&mut out);
    }
    assert_eq!(out.len(), DATAGRAM_LEN);
    Bytes::from(out)
}

fn decode_all(datagram: &Bytes) -> usize {
    let d = Datagram::decode(datagram.clone(), false).expect("valid datagram");
    let mut total = 0;
    for frame in d.frames() {
        let frame = frame.expect("valid frame");
        total += frame.payload.len() + frame.order_channel as usize;
    }
    total
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let datagram = build_datagram();
    let expected = decode_all(&datagram);
    // Warm up caches and branch predictors.
    for _ in 0..ITERS / 10 {
        black_box(decode_all(black_box(&datagram)));
    }
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..ITERS {
            assert_eq!(black_box(decode_all(black_box(&datagram))), expected);
        }
        samples.push(start.elapsed().as_nanos() as f64 / ITERS as f64);
    }
    let ns = median(samples.clone());
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    println!("codec: decode {DATAGRAM_LEN}-byte datagram with {FRAMES} frames");
    println!(
        "  median {ns:.1} ns/datagram ({:.1} ns/frame), best {min:.1} ns; {RUNS} runs x {ITERS}",
        ns / FRAMES as f64
    );
    println!(
        "  {:.2} M datagrams/s, {:.2} GB/s",
        1e3 / ns,
        DATAGRAM_LEN as f64 / ns
    );
}
