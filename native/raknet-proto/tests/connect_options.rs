//! Settings of one outgoing connection (`Endpoint::connect_with`): a client endpoint's
//! connections can each choose their congestion controller.

mod common;

use std::time::Duration;

use common::pair::Pair;
use raknet_netsim::LinkConfig;
use raknet_proto::*;

const ONE_WAY: Duration = Duration::from_millis(10);

/// Virtual seconds to deliver one `size`-byte reliable_ordered message from the client over a
/// link losing `loss` of datagrams each way, both endpoints configured for Reno, the
/// connection made with `opts`; and the controller each side's connection reports.
fn bulk(
    opts: ConnectOptions,
    size: usize,
    loss: f64,
) -> (f64, CongestionControl, CongestionControl) {
    let config = EndpointConfig {
        congestion: CongestionControl::Reno,
        ..EndpointConfig::default()
    };
    let link = LinkConfig::lossy(loss).with_delay(ONE_WAY);
    let mut p = Pair::new(11, config.clone(), config, link);
    let (c, s) = p.connect_with(opts);
    let mine = p.client.connection_info(c).map(|i| i.congestion);
    let theirs = p.server.connection_info(s).map(|i| i.congestion);
    let start = p.now;
    let done = p.deliver_one(c, size, Duration::from_secs(120));
    assert!(done, "{opts:?} at {loss}: transfer did not complete");
    (
        (p.now - start).as_secs_f64(),
        mine.expect("client connection"),
        theirs.expect("server connection"),
    )
}

#[test]
fn a_connection_can_choose_bbr_on_a_reno_endpoint() {
    let size = 1 << 20;
    let (reno, mine, theirs) = bulk(ConnectOptions::default(), size, 0.05);
    assert_eq!(
        (mine, theirs),
        (CongestionControl::Reno, CongestionControl::Reno)
    );

    let bbr_opts = ConnectOptions {
        congestion: Some(CongestionControl::Bbr),
        ..ConnectOptions::default()
    };
    let (bbr, mine, theirs) = bulk(bbr_opts, size, 0.05);
    // Only the connection that asked changes; the server keeps its endpoint's choice.
    assert_eq!(
        (mine, theirs),
        (CongestionControl::Bbr, CongestionControl::Reno)
    );
    eprintln!("1 MiB at 5 % loss, 20 ms RTT: reno {reno:.2} s, bbr {bbr:.2} s");
    // Random loss does not slow BBR down the way it does Reno (see tests/congestion.rs).
    assert!(bbr * 5.0 < reno, "bbr {bbr:.2} s vs reno {reno:.2} s");
}
