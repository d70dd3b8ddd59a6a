//! What NIF calls ask of an endpoint's thread. Sent over an unbounded channel whose memory is
//! bounded by the per-connection send budget checked before enqueueing.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use raknet_proto::SendOptions;
use rustler::env::SavedTerm;
use rustler::{LocalPid, OwnedEnv, ResourceArc};
use tokio::sync::mpsc::UnboundedSender;

use crate::driver::Shared;
use crate::resource::ConnResource;

/// The endpoint's thread is gone: the command was not taken.
#[derive(Debug)]
pub(crate) struct Closed;

/// How long an endpoint whose owner died waits for its peers' acknowledgements.
pub(crate) const OWNER_DOWN_LINGER: Duration = Duration::from_secs(2);

/// How the NIFs reach an endpoint's thread: its command channel, and for sends the way
/// around it while the thread waits (see [`Shared`]).
#[derive(Clone)]
pub(crate) struct CommandTx {
    tx: UnboundedSender<Command>,
    shared: Arc<Shared>,
}

impl CommandTx {
    pub(crate) fn new(tx: UnboundedSender<Command>, shared: Arc<Shared>) -> Self {
        Self { tx, shared }
    }

    /// Enqueue a command for the thread.
    pub(crate) fn send(&self, cmd: Command) -> Result<(), Closed> {
        self.shared.enqueued();
        self.tx.send(cmd).map_err(|_| {
            self.shared.not_enqueued();
            Closed
        })
    }

    /// Send a message on `conn`: on this thread when the endpoint's thread waits, nothing is
    /// queued ahead of it and the connection is not in a burst, through the channel otherwise.
    pub(crate) fn send_message(
        &self,
        conn: &ConnResource,
        data: Bytes,
        opts: SendOptions,
        receipt: Option<u32>,
    ) -> Result<(), Closed> {
        let key = conn.key;
        match self
            .shared
            .try_send_inline(key, &conn.last_send, data, opts, receipt)
        {
            Ok(()) => Ok(()),
            Err(data) => self.send(Command::Send {
                key,
                data,
                opts,
                receipt,
            }),
        }
    }

    /// The thread has stopped taking commands.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Both lead to the same endpoint.
    pub(crate) fn same_channel(&self, other: &Self) -> bool {
        self.tx.same_channel(&other.tx)
    }
}

pub(crate) enum Command {
    Send {
        key: u64,
        data: Bytes,
        opts: SendOptions,
        receipt: Option<u32>,
    },
    /// One message for several connections of this endpoint: one shared copy of the data.
    Broadcast {
        keys: Vec<u64>,
        data: Bytes,
        opts: SendOptions,
    },
    Close {
        key: u64,
        /// The application's reason, in the external term format (`None`: `:local_close`).
        reason: Option<Vec<u8>>,
    },
    OwnerDown {
        key: u64,
    },
    /// The owner caught up with its deliveries: take the peer's messages again.
    Resume {
        key: u64,
    },
    SetOwner {
        key: u64,
        pid: LocalPid,
    },
    Connect {
        conn: ResourceArc<ConnResource>,
        addr: SocketAddr,
        owner: LocalPid,
        opts: raknet_proto::ConnectOptions,
    },
    SetPong(Bytes),
    /// Stop or resume accepting new connections.
    SetSuspended(bool),
    SetMaxConnections(usize),
    Ping {
        addr: SocketAddr,
        owner: LocalPid,
    },
    /// Answer with a term built in the given env (for the dirty `*_info` NIFs).
    Info {
        key: Option<u64>,
        reply: SyncSender<Option<(OwnedEnv, SavedTerm)>>,
    },
    /// Ban an IP, or the network of its first `prefix` bits, for a while (`None`: until
    /// unbanned).
    Ban {
        ip: IpAddr,
        prefix: Option<u8>,
        duration: Option<Duration>,
    },
    Unban {
        ip: IpAddr,
        prefix: Option<u8>,
    },
    /// Answer with the list of bans, built in the given env (for the dirty NIF).
    Banned {
        reply: SyncSender<Option<(OwnedEnv, SavedTerm)>>,
    },
    /// Close every connection and stop, waiting at most this long for the peers to
    /// acknowledge their disconnection notices.
    Stop(Duration),
    /// Tests only: panic on the endpoint's thread (if the endpoint allows it).
    InjectPanic,
}
