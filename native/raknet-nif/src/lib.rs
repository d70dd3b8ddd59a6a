//! The Erlang NIF library behind `RakNet.Native`: UDP sockets and the `raknet-proto` engine on
//! Rust threads, delivering to BEAM processes. The interface is `docs/nif-contract.md`.
//!
//! Every NIF here runs on a scheduler thread (the two `*_info` calls on a dirty I/O scheduler,
//! since they wait for the endpoint thread's answer): it validates its arguments, enqueues a
//! command and returns at once. Sockets, timers and delivery live on the endpoint threads
//! (`driver/`), one per endpoint. A server may run several endpoints on one port, one per
//! thread (`endpoint_start_group`): `SO_REUSEPORT` sockets that the kernel picks by the peer's
//! address, sharing connection limits through a [`raknet_proto::EndpointGroup`].

mod alloc;
mod atoms;
mod bans;
mod convert;
mod driver;
mod inbox;
mod nethernet;
mod resource;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raknet_proto::{Endpoint, EndpointGroup, GuidTable, SendError, SendOptions, ORDERING_CHANNELS};
use rustler::{Atom, Binary, Encoder, Env, LocalPid, NifResult, ResourceArc, Term};

use crate::resource::{Command, ConnResource, EndpointResource};

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// Socket buffers requested for every endpoint (the kernel may cap them at rmem_max).
const SOCKET_BUFFER: usize = 8 << 20;

/// Return a map describing this build of the library.
///
/// `%{version: "0.1.0", nif_version: "2.15", protocol_versions: [6, 10, 11]}`: the crate version,
/// the NIF API version the library was compiled against (the lowest BEAM NIF version that can load
/// it), and the RakNet protocol versions it speaks.
#[rustler::nif]
fn build_info(env: Env<'_>) -> NifResult<Term<'_>> {
    let nif_version = format!(
        "{}.{}",
        rustler::sys::NIF_MAJOR_VERSION,
        rustler::sys::NIF_MINOR_VERSION
    );
    // The versions the engine accepts by default, in ascending order.
    let mut protocol_versions = raknet_proto::EndpointConfig::default().protocol_versions;
    protocol_versions.sort_unstable();
    let pairs = [
        (
            atoms::version().encode(env),
            env!("CARGO_PKG_VERSION").encode(env),
        ),
        (atoms::nif_version().encode(env), nif_version.encode(env)),
        (
            atoms::protocol_versions().encode(env),
            protocol_versions.encode(env),
        ),
    ];
    // Fails only on duplicate keys, which the fixed atoms above rule out.
    Term::map_from_pairs(env, &pairs)
}

/// Bytes the library's Rust code holds right now: engines, queues, buffers, for every
/// endpoint. (Socket buffers live in the kernel and are not counted.)
#[rustler::nif]
fn native_memory() -> usize {
    alloc::live_bytes()
}

/// The defaults an `endpoint_start` option takes when left out (see `convert::defaults`): the
/// engine's, so that a layer restating one can be checked against them.
#[rustler::nif]
fn engine_defaults(env: Env<'_>) -> Term<'_> {
    convert::defaults(env)
}

fn error<'a>(env: Env<'a>, reason: impl Encoder) -> Term<'a> {
    (atoms::error(), reason).encode(env)
}

fn io_error(e: &std::io::Error) -> Atom {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => atoms::eaddrinuse(),
        std::io::ErrorKind::PermissionDenied => atoms::eacces(),
        std::io::ErrorKind::AddrNotAvailable => atoms::eaddrnotavail(),
        _ => atoms::einval(),
    }
}

/// A bound socket, the buffer sizes the kernel granted, and whether it reports each datagram's
/// local address (`udp::enable_pktinfo`).
type Bound = (StdUdpSocket, (usize, usize), bool);

/// Bind a UDP socket the way the endpoint wants it: large buffers, non-blocking, for IPv6
/// either IPv6-only (IPv4 gets its own socket) or dual-stack, and when bound to every address,
/// reporting which one each datagram was sent to. With `reuse_port`, `SO_REUSEPORT` is set
/// before binding, so that the other sockets of an endpoint group can bind the same port.
fn bind(addr: SocketAddr, dual_stack: bool, reuse_port: bool) -> std::io::Result<Bound> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(!dual_stack)?;
    }
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    #[cfg(unix)]
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    #[cfg(not(unix))]
    let _ = reuse_port;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    let buffers = (
        socket.recv_buffer_size().unwrap_or(0),
        socket.send_buffer_size().unwrap_or(0),
    );
    let pktinfo = raknet_udp::enable_pktinfo(&socket, addr, dual_stack);
    Ok((socket.into(), buffers, pktinfo))
}

/// Tell an endpoint's owner that its thread or task panicked: a log line for Logger, then
/// `:stopped` so that nothing waits forever.
fn report_panic(me: ResourceArc<EndpointResource>, owner: LocalPid, local: SocketAddr, what: &str) {
    let text = format!(
        "endpoint on port {} panicked: {what}; the endpoint is closed",
        local.port()
    );
    let mut env = rustler::OwnedEnv::new();
    let m = me.clone();
    let _ = env.send_and_clear(&owner, |env| {
        (
            atoms::raknet_endpoint(),
            m,
            atoms::log(),
            atoms::error(),
            text,
        )
            .encode(env)
    });
    let _ = env.send_and_clear(&owner, |env| {
        (atoms::raknet_endpoint(), me, atoms::stopped()).encode(env)
    });
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "?".to_owned())
}

type DriverFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>>;

/// A server endpoint: a thread of its own running a current-thread runtime.
fn spawn_own_thread(
    driver: impl std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    me: ResourceArc<EndpointResource>,
    owner: LocalPid,
    local: SocketAddr,
    name: String,
) -> std::io::Result<()> {
    std::thread::Builder::new().name(name).spawn(move || {
        let run = std::panic::AssertUnwindSafe(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()?;
            runtime.block_on(driver)
        });
        // A panic ends this endpoint only: the BEAM and every other endpoint live on.
        if let Err(panic) = std::panic::catch_unwind(run) {
            report_panic(me, owner, local, &panic_text(panic.as_ref()));
        }
    })?;
    Ok(())
}

/// The most shared client threads (`shared_thread: k` takes `k` modulo this).
const MAX_SHARED_THREADS: usize = 64;

/// The node's shared client threads: client endpoints run there as tasks, so thousands of
/// outgoing connections (one socket each) cost a few threads, not thousands. Thread `k`
/// (`raknet-clients-k`) is started the first time an endpoint asks for it.
fn shared_runtime(k: usize) -> std::io::Result<tokio::runtime::Handle> {
    static SHARED: std::sync::Mutex<Vec<Option<tokio::runtime::Handle>>> =
        std::sync::Mutex::new(Vec::new());
    let k = k % MAX_SHARED_THREADS;
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if shared.len() <= k {
        shared.resize(k + 1, None);
    }
    if let Some(Some(handle)) = shared.get(k) {
        return Ok(handle.clone());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(format!("raknet-clients-{k}"))
        .spawn(move || {
            // Tasks that panic are caught by tokio; this thread runs for the life of the VM.
            runtime.block_on(std::future::pending::<()>());
        })?;
    if let Some(slot) = shared.get_mut(k) {
        *slot = Some(handle.clone());
    }
    Ok(handle)
}

fn spawn_shared(
    driver: impl std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    thread: usize,
    me: ResourceArc<EndpointResource>,
    owner: LocalPid,
    local: SocketAddr,
) -> std::io::Result<()> {
    let handle = shared_runtime(thread)?;
    let driver: DriverFuture = Box::pin(driver);
    let task = handle.spawn(driver);
    handle.spawn(async move {
        if let Err(e) = task.await {
            if e.is_panic() {
                report_panic(me, owner, local, &panic_text(e.into_panic().as_ref()));
            }
        }
    });
    Ok(())
}

#[rustler::nif]
fn endpoint_start<'a>(env: Env<'a>, opts: Term<'a>, owner: LocalPid) -> Term<'a> {
    match start_endpoints(env, opts, owner, 1) {
        Ok(mut started) => match started.pop() {
            Some(me) => (atoms::ok(), me).encode(env),
            None => error(env, atoms::einval()),
        },
        Err(reason) => reason,
    }
}

/// Values the endpoints that name one key share, each kept for as long as one of them holds
/// it.
type Shared<T> = Mutex<Vec<(u64, Weak<T>)>>;

/// The value of `key` in `registry`, or a new one from `make` if none is held.
fn shared<T>(registry: &Shared<T>, key: u64, make: impl FnOnce() -> T) -> Arc<T> {
    let mut values = registry.lock().unwrap_or_else(|p| p.into_inner());
    values.retain(|(_, v)| v.strong_count() > 0);
    if let Some(value) = values
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.upgrade())
    {
        return value;
    }
    let value = Arc::new(make());
    values.push((key, Arc::downgrade(&value)));
    value
}

/// The client GUID table of each server of this VM, by the server's GUID (see
/// [`raknet_proto::GuidTable`]).
static GUID_TABLES: Shared<GuidTable> = Mutex::new(Vec::new());

/// The group of each server of this VM that listens on more than one socket, by the key its
/// listener gives every socket (`server_group`).
static SERVER_GROUPS: Shared<EndpointGroup> = Mutex::new(Vec::new());

fn guid_table(server_guid: u64) -> Arc<GuidTable> {
    shared(&GUID_TABLES, server_guid, GuidTable::default)
}

/// The group of the server `key`, or a new one (with `guid`'s GUID table) for its first
/// socket. (Locks are taken in this order only: groups, then tables.)
fn server_group(key: u64, guid: u64) -> Arc<EndpointGroup> {
    shared(&SERVER_GROUPS, key, || {
        EndpointGroup::sharing_guids(guid_table(guid))
    })
}

/// The most endpoint threads one group may have.
const MAX_GROUP: usize = 1024;

/// `count` endpoints on one port, each on its own thread with its own `SO_REUSEPORT` socket,
/// one GUID and shared connection limits (`raknet_proto::EndpointGroup`): `{:ok, [endpoint]}`.
/// The kernel sends each peer address's datagrams to one of the sockets (a hash of the
/// addresses), so a handshake stays on one endpoint. Where `SO_REUSEPORT` does not exist
/// (not Unix), one endpoint is started whatever `count` says.
#[rustler::nif]
fn endpoint_start_group<'a>(
    env: Env<'a>,
    opts: Term<'a>,
    owner: LocalPid,
    count: usize,
) -> Term<'a> {
    if count == 0 || count > MAX_GROUP {
        return error(env, (atoms::invalid_option(), atoms::threads()));
    }
    let count = if cfg!(unix) { count } else { 1 };
    match start_endpoints(env, opts, owner, count) {
        Ok(started) => (atoms::ok(), started).encode(env),
        Err(reason) => reason,
    }
}

/// Bind `count` sockets for `bind` (one without `SO_REUSEPORT` when `count` is 1).
///
/// For a group, a socket without `SO_REUSEPORT` is bound first and closed at once: that fails
/// with `eaddrinuse` when anything holds the port, a group of `SO_REUSEPORT` sockets included,
/// which the group's own sockets would otherwise join (Linux lets sockets of one effective
/// user share a port that way). It also picks the port when `bind` says 0.
fn bind_all(bind: SocketAddr, dual_stack: bool, count: usize) -> std::io::Result<Vec<Bound>> {
    if count == 1 {
        return Ok(vec![self::bind(bind, dual_stack, false)?]);
    }
    let port = {
        let (probe, _, _) = self::bind(bind, dual_stack, false)?;
        probe.local_addr()?.port()
    };
    let addr = SocketAddr::new(bind.ip(), port);
    (0..count)
        .map(|_| self::bind(addr, dual_stack, true))
        .collect()
}

fn start_endpoints<'a>(
    env: Env<'a>,
    opts: Term<'a>,
    owner: LocalPid,
    count: usize,
) -> Result<Vec<ResourceArc<EndpointResource>>, Term<'a>> {
    let options = convert::endpoint_options(opts).map_err(|key| {
        error(
            env,
            (
                atoms::invalid_option(),
                Atom::from_str(env, key).map_or(atoms::einval(), |a| a),
            ),
        )
    })?;
    let sockets =
        bind_all(options.bind, options.dual_stack, count).map_err(|e| error(env, io_error(&e)))?;
    let mut config = options.config.clone();
    // The caller gives the server's limits; each endpoint thread enforces its share.
    config.admission = config.admission.endpoint_share(count);
    if let Some(raw) = config.raw.as_mut() {
        *raw = raw.endpoint_share(count);
    }
    // A server's IPv4 and IPv6 sockets have one GUID (the Elixir side passes it to both) and
    // one group: one connection limit and one table of their clients' GUIDs.
    let guid = *config.guid.get_or_insert_with(convert::seed);
    let group = match options.server_group {
        Some(key) => server_group(key, guid),
        None => Arc::new(EndpointGroup::sharing_guids(guid_table(guid))),
    };
    let mut started: Vec<ResourceArc<EndpointResource>> = Vec::with_capacity(count);
    let serves_nethernet = options.nethernet.is_some();
    // Datagrams the group's other endpoints handed to the hosting one, not yet taken.
    let forwarded = Arc::new(AtomicUsize::new(0));
    let mut nethernet = options.nethernet;
    for (i, (socket, buffers, pktinfo)) in sockets.into_iter().enumerate() {
        let local = socket.local_addr().map_err(|e| error(env, io_error(&e)))?;
        if i > 0 {
            // Each engine its own randomness; one GUID and (through the group) one set of
            // handshake keys for the whole server.
            config.rng_seed = convert::seed();
            config.secret = convert::seed();
        }
        let endpoint = Endpoint::new_in_group(config.clone(), local, Instant::now(), group.clone());
        let inbox = Arc::new(inbox::Inbox::new());
        let shared = Arc::new(driver::Shared::new(inbox.clone(), options.inline_sends));
        let me = ResourceArc::new(EndpointResource {
            tx: resource::CommandTx::new(inbox.clone(), shared.clone()),
            local,
            guid: endpoint.guid(),
            dual_stack: options.dual_stack,
            buffers,
            budget: options.budget,
            fault_injection: options.fault_injection,
            batch_delivery: options.batch_delivery,
            load: AtomicUsize::new(0),
            servers: std::sync::Mutex::default(),
        });
        env.monitor(&me, &owner);
        // The group's first endpoint hosts NetherNet; the others hand it their datagrams.
        let nethernet = match (nethernet.take(), started.first()) {
            (Some(n), _) => {
                let mut config = n.config;
                if !local.ip().is_unspecified() {
                    config.candidates = vec![local];
                }
                let host = raknet_nethernet::host::Host::new(config, n.key)
                    .map_err(|e| error(env, e.as_str()))?;
                Some(driver::NetherNet::hosted(
                    host,
                    n.batch_header,
                    forwarded.clone(),
                ))
            }
            (None, Some(first)) if serves_nethernet => Some(driver::NetherNet::forward(
                first.tx.clone(),
                forwarded.clone(),
            )),
            (None, _) => None,
        };
        let thread_me = me.clone();
        let batched_io = options.batched_io;
        let gso = options.gso;
        let send_full_fault = options.send_full_fault;
        let closer = inbox::CloseOnDrop(inbox.clone());
        let driver = async move {
            // However the thread ends (also before its loop runs), its inbox refuses the
            // commands sent after, and drops the ones still waiting, on this thread.
            let _closer = closer;
            let mut socket =
                raknet_udp::Udp::new(raknet_udp::Sock::new(socket)?, pktinfo, batched_io, gso);
            if send_full_fault {
                socket.fake_full_buffer();
            }
            let mut driver = driver::Driver::new(endpoint, socket, thread_me, owner);
            if let Some(nethernet) = nethernet {
                driver = driver.with_nethernet(nethernet);
            }
            driver::run(shared, driver).await;
            Ok::<(), std::io::Error>(())
        };
        let name = if count == 1 {
            format!("raknet-{}", local.port())
        } else {
            format!("raknet-{}-{i}", local.port())
        };
        let spawned = if let Some(thread) = options.shared_thread {
            spawn_shared(driver, thread, me.clone(), owner, local)
        } else {
            spawn_own_thread(driver, me.clone(), owner, local, name)
        };
        if let Err(e) = spawned {
            // The endpoints already running stop with their sockets.
            for other in &started {
                let _ = other.tx.send(Command::Stop(Duration::ZERO));
            }
            return Err(error(env, io_error(&e)));
        }
        started.push(me);
    }
    Ok(started)
}

/// Ask the endpoint thread for a term (waits up to a second; dirty scheduler).
fn ask<'a>(env: Env<'a>, tx: &resource::CommandTx, key: Option<u64>) -> Option<Term<'a>> {
    let (reply, answer) = sync_channel(1);
    tx.send(Command::Info { key, reply }).ok()?;
    let (owned, saved) = answer.recv_timeout(Duration::from_secs(1)).ok()??;
    Some(owned.run(|e| saved.load(e).in_env(env)))
}

#[rustler::nif(schedule = "DirtyIo")]
fn endpoint_info(env: Env<'_>, endpoint: ResourceArc<EndpointResource>) -> Term<'_> {
    ask(env, &endpoint.tx, None).unwrap_or_else(|| error(env, atoms::closed()))
}

/// How many connections the endpoint holds, connecting ones included (as of its thread's
/// last loop turn, or the outgoing ones asked for since; never blocks): what the node's
/// client endpoints are balanced by.
#[rustler::nif]
fn endpoint_load(endpoint: ResourceArc<EndpointResource>) -> usize {
    endpoint
        .load
        .load(Ordering::Relaxed)
        .max(endpoint.outgoing())
}

/// Whether the endpoint has a connection out to `host:port`, or is connecting to it (never
/// blocks on the thread): one that has cannot take another connection to that server.
#[rustler::nif]
fn endpoint_connected_to(endpoint: ResourceArc<EndpointResource>, host: String, port: u16) -> bool {
    parse_host(&host).is_some_and(|ip| endpoint.connected_to(SocketAddr::new(ip, port)))
}

#[rustler::nif]
fn endpoint_set_offline_ping_response<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    data: Binary<'a>,
) -> Term<'a> {
    if data.len() > raknet_proto::MAX_OFFLINE_PING_RESPONSE {
        return error(env, atoms::too_large());
    }
    let _ = endpoint
        .tx
        .send(Command::SetPong(Bytes::copy_from_slice(data.as_slice())));
    atoms::ok().encode(env)
}

/// Stop (`true`) or resume (`false`) accepting new connections; current ones carry on.
#[rustler::nif]
fn endpoint_set_suspended(endpoint: ResourceArc<EndpointResource>, suspended: bool) -> Atom {
    let _ = endpoint.tx.send(Command::SetSuspended(suspended));
    atoms::ok()
}

/// Change the endpoint's connection limit; a lower one closes nobody.
#[rustler::nif]
fn endpoint_set_max_connections(endpoint: ResourceArc<EndpointResource>, max: usize) -> Atom {
    let _ = endpoint.tx.send(Command::SetMaxConnections(max));
    atoms::ok()
}

/// Stop the endpoint: every connection is closed (its peer notified), and the thread waits
/// up to `linger_ms` (at most 60 s) for the notices to be acknowledged; then the socket is
/// closed and the owner gets `{:raknet_endpoint, endpoint, :stopped}` (the port is free).
#[rustler::nif]
fn endpoint_stop(endpoint: ResourceArc<EndpointResource>, linger_ms: u64) -> Atom {
    let linger = Duration::from_millis(linger_ms.min(MAX_STOP_LINGER_MS));
    let _ = endpoint.tx.send(Command::Stop(linger));
    atoms::ok()
}

/// The longest a stopping endpoint waits for its peers' acknowledgements.
const MAX_STOP_LINGER_MS: u64 = 60_000;

/// Tests only: make the endpoint's thread panic, as a bug would, to test recovery. Refused
/// (`{:error, :not_enabled}`) unless the endpoint was started with `fault_injection: true`.
#[rustler::nif]
fn endpoint_inject_fault(env: Env<'_>, endpoint: ResourceArc<EndpointResource>) -> Term<'_> {
    if !endpoint.fault_injection {
        return error(env, atoms::not_enabled());
    }
    let _ = endpoint.tx.send(Command::InjectPanic);
    atoms::ok().encode(env)
}

/// Resolve a host given as an IP literal or `localhost` (names are resolved in Elixir).
fn parse_host(host: &str) -> Option<IpAddr> {
    match host {
        "localhost" => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        other => other.parse().ok(),
    }
}

/// The address `host:port` if this endpoint can reach it.
fn target(endpoint: &EndpointResource, host: &str, port: u16) -> Result<SocketAddr, Atom> {
    // Names are resolved by the Elixir side (:inet.getaddr); nothing here blocks on DNS.
    let ip = parse_host(host).ok_or_else(atoms::nxdomain)?;
    if endpoint.reaches(ip) {
        Ok(SocketAddr::new(ip, port))
    } else {
        Err(atoms::einval())
    }
}

/// Reply to a datagram the endpoint offered its owner (`{:raknet_endpoint, endpoint, :raw,
/// {ip, port}, data}`) with `data`, sent from the endpoint's socket: once per offered
/// datagram, within 5 s, no larger than the amplification rule allows (`proven`: the
/// application checked a secret it gave that address). Refusals are counted in the stats
/// (`raw_replies_refused`); the call only queues the reply.
#[rustler::nif]
fn endpoint_send_raw<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    host: String,
    port: u16,
    data: rustler::Binary<'a>,
    proven: bool,
) -> Term<'a> {
    let Some(ip) = parse_host(&host) else {
        return error(env, atoms::nxdomain());
    };
    let cmd = Command::SendRaw {
        to: SocketAddr::new(ip, port),
        data: data.as_slice().to_vec(),
        proven,
    };
    match endpoint.tx.send(cmd) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

#[rustler::nif]
fn endpoint_ping<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    host: String,
    port: u16,
    owner: LocalPid,
) -> Term<'a> {
    let addr = match target(&endpoint, &host, port) {
        Ok(addr) => addr,
        Err(reason) => return error(env, reason),
    };
    match endpoint.tx.send(Command::Ping { addr, owner }) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

/// Connect out with `opts` (`%{congestion_control: :reno | :bbr, batch_delivery: boolean}`,
/// keys optional).
#[rustler::nif]
fn endpoint_connect<'a>(
    env: Env<'a>,
    endpoint: ResourceArc<EndpointResource>,
    host: String,
    port: u16,
    owner: LocalPid,
    opts: Term<'a>,
) -> Term<'a> {
    let opts = match convert::connect_options(opts) {
        Ok(opts) => opts,
        Err(key) => {
            let key = Atom::from_str(env, key).map_or(atoms::einval(), |a| a);
            return error(env, (atoms::invalid_option(), key));
        }
    };
    let addr = match target(&endpoint, &host, port) {
        Ok(addr) => addr,
        Err(reason) => return error(env, reason),
    };
    // One connection per server and socket: said at once, without a round trip to the
    // thread (which would refuse it too, as `{:raknet_connect_failed, ...}`).
    if !endpoint.claim_server(addr) {
        return error(env, atoms::address_in_use());
    }
    let conn = ResourceArc::new(endpoint.new_conn());
    conn.batch_delivery
        .store(opts.batch_delivery, Ordering::Relaxed);
    *conn.monitor.lock().unwrap_or_else(|p| p.into_inner()) = env.monitor(&conn, &owner);
    if endpoint
        .tx
        .send(Command::Connect {
            conn: conn.clone(),
            addr,
            owner,
            opts: opts.engine,
        })
        .is_err()
    {
        endpoint.release_server(addr);
        return error(env, atoms::closed());
    }
    (atoms::ok(), conn).encode(env)
}

#[rustler::nif]
fn conn_set_owner(env: Env<'_>, conn: ResourceArc<ConnResource>, pid: LocalPid) -> Term<'_> {
    if conn.closed.load(Ordering::Relaxed) && conn.tx.is_closed() {
        return error(env, atoms::closed());
    }
    conn.flow_controlled.store(true, Ordering::Relaxed);
    let mut monitor = conn.monitor.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(old) = monitor.take() {
        env.demonitor(&conn, &old);
    }
    *monitor = env.monitor(&conn, &pid);
    drop(monitor);
    match conn.tx.send(Command::SetOwner { key: conn.key, pid }) {
        Ok(()) => atoms::ok().encode(env),
        Err(_) => error(env, atoms::closed()),
    }
}

#[rustler::nif]
fn conn_send<'a>(
    env: Env<'a>,
    conn: ResourceArc<ConnResource>,
    reliability: Atom,
    channel: i64,
    priority: Atom,
    data: Binary<'a>,
) -> Term<'a> {
    send_message(env, conn, reliability, channel, priority, data)
}

/// `conn_send` on a dirty scheduler, for a large message: its copy takes longer than a
/// normal scheduler should be held (about 0.1 ms a MiB). `RakNet.Connection.send/4` picks it
/// above 1 MiB.
#[rustler::nif(schedule = "DirtyCpu")]
fn conn_send_dirty<'a>(
    env: Env<'a>,
    conn: ResourceArc<ConnResource>,
    reliability: Atom,
    channel: i64,
    priority: Atom,
    data: Binary<'a>,
) -> Term<'a> {
    send_message(env, conn, reliability, channel, priority, data)
}

fn send_message<'a>(
    env: Env<'a>,
    conn: ResourceArc<ConnResource>,
    reliability: Atom,
    channel: i64,
    priority: Atom,
    data: Binary<'a>,
) -> Term<'a> {
    let Some(reliability) = convert::reliability(reliability) else {
        return error(env, atoms::bad_reliability());
    };
    let Some(priority) = convert::priority(priority) else {
        return error(env, atoms::bad_priority());
    };
    let Ok(channel) = u8::try_from(channel).map_err(|_| ()).and_then(|c| {
        if c < ORDERING_CHANNELS {
            Ok(c)
        } else {
            Err(())
        }
    }) else {
        return error(env, atoms::bad_channel());
    };
    if conn.closed.load(Ordering::Relaxed) {
        return error(env, atoms::closed());
    }
    if let Some(header) = conn.nethernet {
        // WebRTC data channels acknowledge nothing per message: no receipts. What waits to
        // be sent is bounded by the NetherNet host, which refuses (and counts) the rest.
        if reliability.has_receipt() {
            return error(env, atoms::unsupported());
        }
        if !nethernet_fits(header, reliability, data.as_slice()) {
            return error(env, atoms::too_large());
        }
    } else {
        // The engine's rules, on this thread: open, size, budget (see
        // `raknet_proto::SendGate`).
        let Some(gate) = conn.gate.get() else {
            return error(env, atoms::not_connected());
        };
        if let Err(e) = gate.admit(data.len()) {
            return error(env, send_error(e));
        }
    }
    let receipt = reliability.has_receipt().then(|| conn.receipt_id());
    let opts = SendOptions {
        reliability,
        channel,
        priority,
    };
    let data = Bytes::copy_from_slice(data.as_slice());
    let msg = resource::Message {
        key: conn.key,
        data,
        opts,
        receipt,
    };
    if conn.tx.send_message(&conn, msg).is_err() {
        return error(env, atoms::closed());
    }
    match receipt {
        Some(id) => (atoms::ok(), id).encode(env),
        None => (atoms::ok(), atoms::nil()).encode(env),
    }
}

/// One message to many connections: validated once, copied once (every recipient's queue
/// shares the bytes), and one command per endpoint thread. Connections that are closed or
/// over their send budget are skipped; returns `{:ok, queued_for}`. Receipt reliabilities are
/// refused (`:bad_reliability`): a receipt belongs to one send to one connection.
#[rustler::nif]
fn broadcast<'a>(
    env: Env<'a>,
    conns: Vec<ResourceArc<ConnResource>>,
    reliability: Atom,
    channel: i64,
    priority: Atom,
    data: Binary<'a>,
) -> Term<'a> {
    let Some(reliability) = convert::reliability(reliability).filter(|r| !r.has_receipt()) else {
        return error(env, atoms::bad_reliability());
    };
    let Some(priority) = convert::priority(priority) else {
        return error(env, atoms::bad_priority());
    };
    let Some(channel) = u8::try_from(channel)
        .ok()
        .filter(|c| *c < ORDERING_CHANNELS)
    else {
        return error(env, atoms::bad_channel());
    };
    let len = data.len();
    if len == 0 {
        return error(env, atoms::empty());
    }
    let opts = SendOptions {
        reliability,
        channel,
        priority,
    };
    // Few endpoints per call (a server has one or two): a linear search groups them.
    let mut groups: Vec<(&resource::CommandTx, Vec<u64>)> = Vec::new();
    let mut queued = 0usize;
    let (mut open, mut too_large) = (0usize, 0usize);
    for conn in &conns {
        if conn.closed.load(Ordering::Relaxed) {
            continue;
        }
        if let Some(header) = conn.nethernet {
            // A NetherNet session: no gate (its host bounds what waits), the size rule of
            // `conn_send`.
            open += 1;
            if !nethernet_fits(header, reliability, data.as_slice()) {
                too_large += 1;
                continue;
            }
        } else {
            let Some(gate) = conn.gate.get() else {
                continue;
            };
            match gate.admit(len) {
                Ok(_) => open += 1,
                Err(SendError::TooLarge) => {
                    open += 1;
                    too_large += 1;
                    continue;
                }
                Err(SendError::QueueFull) => {
                    open += 1;
                    continue;
                }
                Err(_) => continue,
            }
        }
        match groups.iter_mut().find(|(tx, _)| tx.same_endpoint(&conn.tx)) {
            Some((_, keys)) => keys.push(conn.key),
            None => groups.push((&conn.tx, vec![conn.key])),
        }
        queued += 1;
    }
    let data = Bytes::copy_from_slice(data.as_slice());
    for (tx, keys) in groups {
        let count = keys.len();
        let cmd = Command::Broadcast {
            keys,
            data: data.clone(),
            opts,
        };
        if tx.send(cmd).is_err() {
            // The endpoint is gone: those connections are closed.
            queued -= count;
        }
    }
    if open > 0 && too_large == open {
        // Too large for every open connection it was for: an error, as a send says.
        return error(env, atoms::too_large());
    }
    (atoms::ok(), queued).encode(env)
}

/// Whether a message fits a NetherNet session: the unreliable channel does not fragment
/// (one segment at most), the reliable one takes [`raknet_nethernet::framing::MAX_MESSAGE`];
/// counted as it goes on the wire (without the session's batch header).
fn nethernet_fits(
    header: driver::BatchHeader,
    reliability: raknet_proto::Reliability,
    data: &[u8],
) -> bool {
    let max = if driver::reliable_channel(reliability) {
        raknet_nethernet::framing::MAX_MESSAGE
    } else {
        raknet_nethernet::framing::FRAGMENT_PAYLOAD
    };
    header.to_send(data).len() <= max
}

/// The atom of a send the engine's rules refused.
fn send_error(e: SendError) -> Atom {
    match e {
        SendError::Closed => atoms::closed(),
        SendError::NotConnected => atoms::not_connected(),
        SendError::TooLarge => atoms::too_large(),
        SendError::Empty => atoms::empty(),
        SendError::InvalidChannel => atoms::bad_channel(),
        SendError::QueueFull => atoms::over_budget(),
        _ => atoms::error(),
    }
}

#[rustler::nif]
fn conn_close(conn: ResourceArc<ConnResource>) -> Atom {
    close(&conn, None)
}

/// Like `conn_close/1`; the owner is told `reason` (a term in the external format, at most
/// [`MAX_CLOSE_REASON`] bytes) instead of `:local_close`.
#[rustler::nif]
fn conn_close_with(conn: ResourceArc<ConnResource>, reason: Binary<'_>) -> NifResult<Atom> {
    if reason.len() > MAX_CLOSE_REASON {
        return Err(rustler::Error::BadArg);
    }
    Ok(close(&conn, Some(reason.as_slice().to_vec())))
}

/// The largest close reason kept (its external term format): a reason is a word for the
/// owner, not a way to park data on the endpoint's thread.
const MAX_CLOSE_REASON: usize = 64 * 1024;

fn close(conn: &ConnResource, reason: Option<Vec<u8>>) -> Atom {
    // Closing starts now: later sends fail at once, while queued data still drains.
    conn.closed.store(true, Ordering::Relaxed);
    let _ = conn.tx.send(Command::Close {
        key: conn.key,
        reason,
    });
    atoms::ok()
}

#[rustler::nif(schedule = "DirtyIo")]
fn conn_info(env: Env<'_>, conn: ResourceArc<ConnResource>) -> Term<'_> {
    if conn.closed.load(Ordering::Relaxed) {
        return error(env, atoms::closed());
    }
    match ask(env, &conn.tx, Some(conn.key)) {
        Some(info) => (atoms::ok(), info).encode(env),
        None => error(env, atoms::closed()),
    }
}

/// The owner handled `count` more messages of `bytes` bytes in all (type bytes included).
/// When that brings a paused connection below half its budget, it resumes.
#[rustler::nif]
fn conn_delivered(conn: ResourceArc<ConnResource>, count: usize, bytes: usize) -> Atom {
    conn.flow_controlled.store(true, Ordering::Relaxed);
    let sub = |n: usize, by: usize| Some(n.saturating_sub(by));
    let messages = conn
        .undelivered
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| sub(n, count))
        .map_or(0, |before| before.saturating_sub(count));
    let bytes = conn
        .undelivered_bytes
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| sub(n, bytes))
        .map_or(0, |before| before.saturating_sub(bytes));
    // Paused is set before the endpoint thread re-reads the counts, and cleared by exactly
    // one side: either this call sees it and resumes, or that thread sees the new counts.
    if conn.budget.resumable(messages, bytes)
        && conn
            .paused
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        let _ = conn.tx.send(Command::Resume { key: conn.key });
    }
    atoms::ok()
}

rustler::init!("Elixir.RakNet.Native");
