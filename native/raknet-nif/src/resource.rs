//! Handles given to Elixir, one per endpoint and one per connection, and how they reach the
//! endpoint's thread (what NIF calls ask of it: [`Command`]s through its inbox).
//!
//! Both handles are monitored on their owner process: an endpoint whose owner exits shuts
//! down, a connection whose owner exits closes gracefully. The inbox is unbounded; its
//! memory is bounded by the per-connection send budget checked before enqueueing.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use raknet_proto::{SendGate, SendOptions};
use rustler::env::SavedTerm;
use rustler::{Env, LocalPid, Monitor, OwnedEnv, Resource, ResourceArc};

use crate::inbox::Inbox;

/// How far a flow-controlled owner may fall behind: messages sent to its mailbox and not
/// yet confirmed with `conn_delivered`, and their bytes. Past either, the connection stops
/// taking the peer's messages (back-pressure) until the owner is below half of both.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeliveryBudget {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

impl Default for DeliveryBudget {
    /// 10,000 messages or 4 MiB behind.
    fn default() -> Self {
        Self {
            messages: 10_000,
            bytes: 4 << 20,
        }
    }
}

impl DeliveryBudget {
    /// Whether `messages` / `bytes` outstanding are over the budget.
    pub(crate) fn exceeded(&self, messages: usize, bytes: usize) -> bool {
        messages > self.messages || bytes > self.bytes
    }

    /// Whether an owner this far behind has caught up enough to resume.
    pub(crate) fn resumable(&self, messages: usize, bytes: usize) -> bool {
        messages <= self.messages / 2 && bytes <= self.bytes / 2
    }
}

/// An endpoint: how to reach its thread and what `endpoint_info` needs without asking.
pub(crate) struct EndpointResource {
    pub(crate) tx: CommandTx,
    pub(crate) local: SocketAddr,
    pub(crate) guid: u64,
    pub(crate) dual_stack: bool,
    /// Socket buffer sizes the kernel actually granted (it caps requests at
    /// net.core.rmem_max / wmem_max).
    pub(crate) buffers: (usize, usize),
    pub(crate) budget: DeliveryBudget,
    /// Whether `endpoint_inject_fault` may crash this endpoint (tests only).
    pub(crate) fault_injection: bool,
    /// Deliver the messages a connection yields at once as one `{:raknet_batch, ...}`.
    pub(crate) batch_delivery: bool,
    /// Connections the endpoint holds (connecting ones included), as of its thread's last
    /// loop turn: what `endpoint_load` reads without asking the thread.
    pub(crate) load: AtomicUsize,
    /// The servers this endpoint has an outgoing connection to, or is connecting to (one
    /// each: the socket tells connections apart by the peer's address). Taken by
    /// `endpoint_connect` before the thread sees the connect, given back by the thread when
    /// that connection ends; read by `endpoint_connected_to`, so the node's pool of client
    /// endpoints knows which ones can take a connection to a server, for as long as each
    /// connection lives.
    pub(crate) servers: Mutex<HashSet<SocketAddr>>,
}

impl EndpointResource {
    /// A handle for a new connection of this endpoint (accepted or connecting out).
    pub(crate) fn new_conn(&self) -> ConnResource {
        ConnResource::new(self.tx.clone(), self.budget)
    }

    /// A handle for a NetherNet session of this endpoint, whose messages go without
    /// `header` on the wire: no RakNet send gate (the NetherNet host bounds what waits to be
    /// sent, and refuses the rest as counted drops).
    pub(crate) fn new_nethernet_conn(&self, header: crate::driver::BatchHeader) -> ConnResource {
        ConnResource {
            nethernet: Some(header),
            ..ConnResource::new(self.tx.clone(), self.budget)
        }
    }

    /// Take `server` for a new outgoing connection: `false` if one to it exists already.
    pub(crate) fn claim_server(&self, server: SocketAddr) -> bool {
        self.lock_servers()
            .insert(raknet_proto::addr::unmap(server))
    }

    /// An outgoing connection to `server` ended (or never started).
    pub(crate) fn release_server(&self, server: SocketAddr) {
        self.lock_servers()
            .remove(&raknet_proto::addr::unmap(server));
    }

    /// Outgoing connections (connecting ones included).
    pub(crate) fn outgoing(&self) -> usize {
        self.lock_servers().len()
    }

    /// Whether an outgoing connection to `server` exists (or is being set up).
    pub(crate) fn connected_to(&self, server: SocketAddr) -> bool {
        self.lock_servers()
            .contains(&raknet_proto::addr::unmap(server))
    }

    fn lock_servers(&self) -> std::sync::MutexGuard<'_, HashSet<SocketAddr>> {
        // A set of addresses is consistent after any step: a poisoned lock is still usable.
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this endpoint's socket can send to `ip`.
    pub(crate) fn reaches(&self, ip: std::net::IpAddr) -> bool {
        self.dual_stack || ip.is_ipv4() == self.local.is_ipv4()
    }
}

#[rustler::resource_impl]
impl Resource for EndpointResource {
    const IMPLEMENTS_DOWN: bool = true;

    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, _monitor: Monitor) {
        let _ = self.tx.send(Command::Stop(OWNER_DOWN_LINGER));
    }
}

/// Identifies connections across the NIF boundary (the engine's ids are per endpoint).
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// A connection, shared by the BEAM (the handle) and the endpoint's thread.
pub(crate) struct ConnResource {
    pub(crate) key: u64,
    pub(crate) tx: CommandTx,
    /// Set by the endpoint thread when the connection ended: sends fail fast.
    pub(crate) closed: AtomicBool,
    pub(crate) next_receipt: AtomicU32,
    /// When the last `conn_send` was made (see `driver::Shared::try_send_inline`).
    pub(crate) last_send: AtomicU64,
    /// The engine's send rules for this connection, checked by `conn_send` on the caller's
    /// thread; set by the endpoint thread once the engine has the connection.
    pub(crate) gate: OnceLock<Arc<SendGate>>,
    /// Messages sent to the owner and not yet confirmed with `conn_delivered`.
    pub(crate) undelivered: AtomicUsize,
    /// Their bytes (type byte included).
    pub(crate) undelivered_bytes: AtomicUsize,
    /// Receiving is paused because the owner is over its budget. Whoever clears it (the
    /// endpoint thread, or `conn_delivered` on a scheduler) resumes the connection.
    pub(crate) paused: AtomicBool,
    pub(crate) budget: DeliveryBudget,
    /// Whether the owner takes part in flow control (it called `conn_set_owner` or
    /// `conn_delivered`); only then is the delivery budget enforced.
    pub(crate) flow_controlled: AtomicBool,
    /// Deliver this connection's messages as `{:raknet_batch, ...}` whatever the endpoint
    /// says (set at `endpoint_connect` for an owner that understands the batch form).
    pub(crate) batch_delivery: AtomicBool,
    pub(crate) monitor: Mutex<Option<Monitor>>,
    /// A NetherNet session (WebRTC data channels) rather than a RakNet connection, and the
    /// byte its messages go without on the wire (see [`crate::driver::BatchHeader`]).
    pub(crate) nethernet: Option<crate::driver::BatchHeader>,
}

impl ConnResource {
    fn new(tx: CommandTx, budget: DeliveryBudget) -> Self {
        Self {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            tx,
            closed: AtomicBool::new(false),
            next_receipt: AtomicU32::new(1),
            last_send: AtomicU64::new(0),
            gate: OnceLock::new(),
            undelivered: AtomicUsize::new(0),
            undelivered_bytes: AtomicUsize::new(0),
            paused: AtomicBool::new(false),
            budget,
            flow_controlled: AtomicBool::new(false),
            batch_delivery: AtomicBool::new(false),
            monitor: Mutex::new(None),
            nethernet: None,
        }
    }

    /// The next receipt id: counts from 1 and skips 0, like official RakNet.
    pub(crate) fn receipt_id(&self) -> u32 {
        loop {
            let id = self.next_receipt.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }
}

#[rustler::resource_impl]
impl Resource for ConnResource {
    const IMPLEMENTS_DOWN: bool = true;

    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, _monitor: Monitor) {
        self.closed.store(true, Ordering::Relaxed);
        let _ = self.tx.send(Command::OwnerDown { key: self.key });
    }
}

// ---------------------------------------------------------------------------------------
// Commands to the endpoint's thread

/// The endpoint's thread is gone: the command was not taken.
#[derive(Debug)]
pub(crate) struct Closed;

/// How long an endpoint whose owner died waits for its peers' acknowledgements.
pub(crate) const OWNER_DOWN_LINGER: Duration = Duration::from_secs(2);

/// The way around the inbox for sends, which the endpoint's thread provides
/// (`driver::Shared`): a send may be carried out on the calling thread while the endpoint's
/// thread waits and nothing waits in the inbox ahead of it.
pub(crate) trait Gate: Send + Sync {
    /// Carry out the send here, or hand it back to go through the inbox.
    fn try_send_inline(&self, last_send: &AtomicU64, msg: Message) -> Result<(), Message>;
}

/// One message for one connection, admitted by `conn_send` (see `raknet_proto::SendGate`),
/// on its way to the engine by either path.
pub(crate) struct Message {
    pub(crate) key: u64,
    pub(crate) data: Bytes,
    pub(crate) opts: SendOptions,
    /// The receipt id `conn_send` returned, for the receipt reliabilities.
    pub(crate) receipt: Option<u32>,
}

/// How the NIFs reach an endpoint's thread: its command inbox, and for sends the way
/// around it while the thread waits (see [`Gate`]). The thread stops on `Command::Stop` (its
/// driver holds the endpoint's handle, so handles alone never leave it without one).
#[derive(Clone)]
pub(crate) struct CommandTx {
    inbox: Arc<Inbox>,
    shared: Arc<dyn Gate>,
}

impl CommandTx {
    pub(crate) fn new(inbox: Arc<Inbox>, shared: Arc<dyn Gate>) -> Self {
        Self { inbox, shared }
    }

    /// Queue a command for the thread.
    pub(crate) fn send(&self, cmd: Command) -> Result<(), Closed> {
        self.inbox.send(cmd).map_err(|_| Closed)
    }

    /// Send a message on `conn`: on this thread when the endpoint's thread waits, nothing is
    /// queued ahead of it and the connection is not in a burst, through the inbox otherwise.
    pub(crate) fn send_message(&self, conn: &ConnResource, msg: Message) -> Result<(), Closed> {
        match self.shared.try_send_inline(&conn.last_send, msg) {
            Ok(()) => Ok(()),
            Err(msg) => self.send(Command::Send(msg)),
        }
    }

    /// The thread has stopped taking commands.
    pub(crate) fn is_closed(&self) -> bool {
        self.inbox.is_closed()
    }

    /// Both lead to the same endpoint.
    pub(crate) fn same_endpoint(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inbox, &other.inbox)
    }
}

pub(crate) enum Command {
    Send(Message),
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
    /// The application's reply to a datagram offered as `{:raknet_endpoint, _, :raw, ...}`.
    SendRaw {
        to: SocketAddr,
        data: Vec<u8>,
        proven: bool,
    },
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
    /// Ban a client GUID for a while (`None`: until unbanned).
    BanGuid {
        guid: u64,
        duration: Option<Duration>,
    },
    UnbanGuid(u64),
    /// Answer with the list of bans, built in the given env (for the dirty NIF).
    Banned {
        reply: SyncSender<Option<(OwnedEnv, SavedTerm)>>,
    },
    /// Close every connection and stop, waiting at most this long for the peers to
    /// acknowledge their disconnection notices.
    Stop(Duration),
    /// Tests only: panic on the endpoint's thread (if the endpoint allows it).
    InjectPanic,
    /// A NetherNet offer (`POST /v1/join/{id}`) to answer: `{:raknet_nethernet_answer, tag,
    /// {:ok, sdp} | {:error, reason}}` goes to `reply_to`. `candidate`: the address the
    /// answer names (with the socket's port), else the host's own.
    NetherNetOffer {
        sdp: String,
        candidate: Option<IpAddr>,
        peer: Option<IpAddr>,
        reply_to: LocalPid,
        tag: u64,
    },
    /// A NetherNet datagram another socket of the server's group received, for the socket
    /// whose thread hosts the sessions.
    NetherNetDatagram {
        from: SocketAddr,
        data: Bytes,
    },
    /// A NetherNet session opened as a client (`endpoint_nethernet_connect`): its offer went
    /// back to the caller, who takes it to the server's signaling.
    NetherNetConnect {
        conn: ResourceArc<ConnResource>,
        client: Box<raknet_nethernet::client::Client>,
        server: SocketAddr,
        owner: LocalPid,
    },
    /// The server's answer to a client session's offer.
    NetherNetAnswer {
        key: u64,
        answer: String,
    },
}
