defmodule RakNet.Server do
  @moduledoc """
  A RakNet server: a drop-in for X-Plane's `RakNet.Server`, with the protocol in Rust.

      children = [
        {RakNet.Server, [MyGame.Player, 19132, host: {127, 0, 0, 1}, client_timeout_ms: 20_000]}
      ]

      Supervisor.start_link(children, strategy: :one_for_one)

  Each client that completes the RakNet handshake gets a `RakNet.Connection` process running
  your `RakNet.Client` implementation for `MyGame.Player` (see that protocol for the
  lifecycle). Options are listed in `RakNet.Server.Config`; they are validated at start and a
  bad one raises `ArgumentError`.

  Under the hood a server is a supervisor (`:rest_for_one`) of a `DynamicSupervisor` for the
  connection processes and a listener process that owns the sockets: one IPv4 socket and,
  with `open_ipv6_socket: true`, one IPv6 socket. Each socket's port is served by
  `:endpoint_threads` Rust threads (default: one per scheduler), each with its own
  `SO_REUSEPORT` socket and protocol engine; the kernel sends a client's datagrams to one of
  them by a hash of its address, and the connection limits are shared between them. Stopping
  the server (or its supervisor) sends every client a disconnection notification first.

  ## While the server stops

  A `RakNet.Handler`'s optional `c:RakNet.Handler.handle_shutdown/2` runs first, while every
  connection is still open (a goodbye sent there goes out); then the connections close and
  their disconnect callbacks run. Meanwhile the functions that ask the server's listener
  (`info/1`, `ban/3`, `unban/2`, `banned/1`, `set_offline_ping_response/2`, `suspend/1`,
  `resume/1`, `set_max_connections/2`) return `{:error, :stopping}`, also when called from
  those callbacks, and `stop/2` returns `:ok`; `connections/1`, `lookup/3`, `count/1` and
  `broadcast/4` read the registry and go on working.
  """
  use Supervisor

  # The largest values the runtime takes (larger ones are clamped, so that no argument
  # can crash the listener, and with it every connection).
  @max_u32 0xFFFF_FFFF
  @max_u64 0xFFFF_FFFF_FFFF_FFFF

  alias RakNet.Server.{Config, Listener}

  @doc """
  A child spec for `{RakNet.Server, [client_module, port | opts]}`.

  Its id is the `:name` option when there is one, else `:"Elixir.RakNet.Server:<port>"`: two
  servers of one supervisor need different names or ports. Servers on port 0 without a name
  each get an id of their own (a reference), so several can share a supervisor; give one a
  `:name` to find it with `Supervisor.terminate_child/2`.

      iex> RakNet.Server.child_spec([MyGame.Player, 19132]).id
      :"Elixir.RakNet.Server:19132"
      iex> RakNet.Server.child_spec([MyGame.Player, 0, name: MyGame.Server]).id
      MyGame.Server
  """
  @spec child_spec([term()]) :: Supervisor.child_spec()
  def child_spec([client_module, port | opts]) do
    id =
      case Keyword.keyword?(opts) && Keyword.get(opts, :name) do
        name when name not in [nil, false] -> name
        _ when port == 0 -> {__MODULE__, make_ref()}
        _ -> :"#{__MODULE__}:#{port}"
      end

    %{
      id: id,
      start: {__MODULE__, :start_link, [client_module, port, opts]},
      type: :supervisor,
      restart: :permanent
    }
  end

  @doc """
  Starts a server for `client_module` on `port` (0 picks a free port; see `info/1`).

  `client_module` either `use`s `RakNet.Handler`, or defines a struct and implements
  `RakNet.Client` (X-Plane's protocol; each connection's client then starts from
  `struct(client_module)`, so `@enforce_keys` does not get in the way).

  Raises `ArgumentError` for invalid options (see `RakNet.Server.Config`) or a module that is
  neither; returns `{:error, reason}` when a socket cannot be opened
  (`:eaddrinuse`, `:eacces`, `:eaddrnotavail`), and `{:error, {:already_started, pid}}` when
  its `:name` is taken.

      {:ok, server} = RakNet.Server.start_link(MyGame.Player, 0, ip: "127.0.0.1")
      %{ipv4_port: port} = RakNet.Server.info(server)

  With `name: MyGame.Server` every function of this module also takes that name.
  """
  @spec start_link(module(), :inet.port_number(), [Config.option()]) :: Supervisor.on_start()
  def start_link(client_module, port, opts \\ []) do
    config = Config.new(client_module, port, opts)
    RakNet.Handler.spec!(client_module)

    case Supervisor.start_link(__MODULE__, config, name_option(config)) do
      # The listener opens the sockets: its reason is the socket's, as documented.
      {:error, {:shutdown, {:failed_to_start_child, RakNet.Server.Listener, reason}}} ->
        {:error, reason}

      other ->
        other
    end
  end

  defp name_option(%Config{name: nil}), do: []
  defp name_option(%Config{name: name}), do: [name: name]

  @typedoc """
  What `info/1` returns:

    * `:ipv4_port` / `:ipv6_port` - the bound ports (the real ones when started with port 0),
      `nil` for a socket that is not open;
    * `:connections` - the number of connection processes;
    * `:endpoints` - per socket (address family), the runtime's `%{port:, address:, guid:,
      connections:, stats:, rates:, threads:}`, where `stats` holds the socket's counters
      (`offline_in`, `pongs_sent`, `refused_full`, `incompatible_protocol`, `malformed`,
      `bad_cookies`, ...), its datagrams and system calls (`udp_datagrams_in`,
      `udp_recv_calls`, `udp_datagrams_out`, `udp_send_calls`: on Linux up to 32 datagrams
      per call; `udp_recv_trailing_empty`: receive calls that found nothing right after one
      of the same turn that read, which only a batch that came back exactly full leads to;
      `udp_gso_sends`, `udp_gso_datagrams`: the send calls that carried runs of datagrams to
      one peer as UDP GSO segments, Linux 4.18+, and their datagrams;
      `udp_gso_refused`: 1 if the kernel refused that and the socket stopped trying;
      `udp_send_full`: sends that found the socket's send buffer full, whose datagrams then
      waited for room, and `udp_send_waits`: the thread's wake-ups for that room), the
      commands its thread applied (`commands`: sends, closes, ...) and the
      loop turns that applied any (`command_turns`; commands sent while the thread is busy
      are applied together), and the buffer sizes the kernel granted (`recv_buffer_bytes`,
      `send_buffer_bytes`, per thread's socket), summed over its endpoint threads, and
      `threads` lists each thread's `%{connections:, stats:}` (see `:endpoint_threads` in
      `RakNet.Server.Config`).
      Per-connection counters (datagrams, bytes, resends, `deliveries_dropped`) come from
      `RakNet.Connection.info/1`.
  """
  @type info :: %{
          ipv4_port: :inet.port_number() | nil,
          ipv6_port: :inet.port_number() | nil,
          connections: non_neg_integer(),
          endpoints: [map()]
        }

  @doc """
  The bound ports, the number of connections and the engines' counters; see `t:info/0`.

      RakNet.Server.info(server)
      #=> %{ipv4_port: 19132, ipv6_port: 19132, connections: 12, endpoints: [%{port: 19132, ...}, ...]}
  """
  @spec info(Supervisor.supervisor()) :: info() | {:error, :stopping}
  def info(server), do: call(server, :info)

  @typedoc """
  A connection as `connections/1` and `lookup/3` describe it: its process (`:pid`, what
  `RakNet.Connection.send/3` takes), its handle (`:conn`), the peer's `:address` and `:guid`,
  the RakNet `:protocol`, the `:mtu`, `:connected_at` (Unix ms), the application `:id` it
  registered with `RakNet.Connection.register_id/1` (or `nil`) and its `:assigns`
  (`RakNet.Connection.assign/1`).
  """
  @type connection :: %{
          pid: pid(),
          conn: reference(),
          address: {:inet.ip_address(), :inet.port_number()},
          guid: non_neg_integer(),
          protocol: non_neg_integer(),
          mtu: pos_integer(),
          connected_at: integer(),
          id: term(),
          assigns: map()
        }

  @doc """
  The server's connections (see `t:connection/0`). It reads a table (ETS): no process is
  asked, so it is cheap enough to call every tick.

  A connection is listed once its process has started, which follows the client's last
  handshake message: a client's `RakNet.connect/3` returns as soon as the server accepted it,
  a moment (about half a round trip) before the server lists it.

      for %{pid: pid, id: player_id} <- RakNet.Server.connections(server), do: ...
  """
  @spec connections(Supervisor.supervisor()) :: [connection()]
  def connections(server) do
    with_server(server, :connections, [], &RakNet.Connection.Registry.connections/1)
  end

  @doc """
  How many connections the server has, from the registry (ETS) without asking anyone: cheap
  enough for a server list's player count. As `connections/1`, a connection counts once its
  process has started.

      RakNet.Server.count(server)
      #=> 42
  """
  @spec count(Supervisor.supervisor()) :: non_neg_integer()
  def count(server), do: with_server(server, :count, [], &RakNet.Connection.Registry.count/1)

  @doc """
  Finds one of the server's connections by the peer's `:address` (`{ip, port}`), its `:guid`
  or the application `:id` its handler registered (`RakNet.Connection.register_id/1`).

      {:ok, %{pid: pid}} = RakNet.Server.lookup(server, :id, player_id)
      :error = RakNet.Server.lookup(server, :address, {{127, 0, 0, 1}, 1})
  """
  @spec lookup(Supervisor.supervisor(), :address | :guid | :id, term()) ::
          {:ok, connection()} | :error
  def lookup(server, kind, key) when kind in [:address, :guid, :id] do
    with_server(server, :lookup, [kind, key], &RakNet.Connection.Registry.find(&1, kind, key))
  end

  @doc """
  Sends `message` to every connection of the server, except the connections (pids or
  handles; a list, or one) in the `:except` option; otherwise as `RakNet.broadcast/4`.

      {:ok, count} = RakNet.Server.broadcast(server, :reliable_ordered, <<0x86, "tick">>)
      {:ok, _} = RakNet.Server.broadcast(server, :reliable, chat_line, except: [sender_pid])
  """
  @spec broadcast(Supervisor.supervisor(), atom(), binary(), keyword()) ::
          {:ok, non_neg_integer()} | {:error, atom() | {:unknown_option, term()}}
  def broadcast(server, reliability, message, opts \\ [])

  def broadcast(server, reliability, message, opts) when is_list(opts) do
    with_server(server, :broadcast, [reliability, message, opts], fn pid ->
      broadcast_here(pid, reliability, message, opts)
    end)
  end

  def broadcast(_server, _reliability, _message, opts), do: {:error, {:unknown_option, opts}}

  defp broadcast_here(server, reliability, message, opts) do
    # Options that are no keyword list are named by RakNet.broadcast/4's error (without
    # :except, the one it does not know).
    {except, opts} =
      if Keyword.keyword?(opts),
        do: Keyword.pop(opts, :except, []),
        else: {[], Enum.reject(opts, &match?({:except, _}, &1))}

    handles = RakNet.Connection.Registry.handles(server)

    conns =
      case except do
        [] ->
          Enum.map(handles, &elem(&1, 1))

        _ ->
          skip = except |> List.wrap() |> MapSet.new()

          for {pid, conn} <- handles,
              not MapSet.member?(skip, pid) and not MapSet.member?(skip, conn),
              do: conn
      end

    RakNet.broadcast(conns, reliability, message, opts)
  end

  # `local` with the server's pid on its own node: here, or through a relay there (the
  # registry it reads is that node's). `:nodedown` and `:timeout` of a relay exit as a call
  # to a server that is gone does.
  defp with_server(server, fun, args, local) do
    case GenServer.whereis(server) do
      pid when is_pid(pid) and node(pid) == node() ->
        local.(pid)

      pid when is_pid(pid) ->
        case RakNet.Relay.call(node(pid), {:server, fun, [pid | args]}) do
          {:error, reason} when reason in [:nodedown, :timeout] ->
            exit({reason, {__MODULE__, fun, [server | args]}})

          result ->
            result
        end

      _ ->
        exit({:noproc, {__MODULE__, fun, [server | args]}})
    end
  end

  @doc """
  Bans an IP address or a network for `duration_ms` milliseconds, or `:infinity`: its
  connection attempts are refused with "connection banned" and everything else it sends is
  dropped and counted (`banned` in `info/1`), and its current connections are closed.
  Banning again replaces the duration.

  An address is a tuple or a string. An IPv6 address bans its /64, the network one
  subscriber gets (a host has 2^64 addresses to move to), as every per-IP limit counts IPv6
  addresses. A network is `{address, prefix_length}` or a string `"address/prefix_length"`:
  a provider's IPv6 /48 or /56 (a free tunnel broker hands out a /48: 65,536 /64s), an IPv4
  /24. An IPv6 prefix longer than 64 bits bans its /64.

  `{:guid, guid}` bans a client by the 64-bit GUID it sends in its handshake, from any
  address: it is refused with "connection banned" and its connection is closed. A GUID is
  the client's own choice: this keeps out a known client (a player who moved to another
  address), not an attacker, who draws another.

      :ok = RakNet.Server.ban(server, {203, 0, 113, 7}, 60_000)
      :ok = RakNet.Server.ban(server, "2001:db8::1")
      :ok = RakNet.Server.ban(server, "2001:db8:42::/48")
      :ok = RakNet.Server.ban(server, {{198, 51, 100, 0}, 24}, 600_000)
      :ok = RakNet.Server.ban(server, {:guid, 0x1234_5678_9ABC_DEF0}, 3_600_000)
  """
  @spec ban(Supervisor.supervisor(), ban_target(), timeout()) ::
          :ok | {:error, :einval | :stopping}
  def ban(server, target, duration_ms \\ :infinity)
      when duration_ms == :infinity or (is_integer(duration_ms) and duration_ms > 0) do
    with {:ok, ban} <- ban_spec(target) do
      # Beyond what the runtime takes (u64 ms) is as good as forever.
      duration = if duration_ms == :infinity, do: nil, else: min(duration_ms, @max_u64)

      # Each endpoint closes the connections the ban covers itself.
      call(server, {:ban, ban, duration})
    end
  end

  @typedoc """
  What `ban/3` and `unban/2` take: an address, a network and its prefix length, or a client
  GUID.
  """
  @type ban_target ::
          :inet.ip_address()
          | String.t()
          | {:inet.ip_address() | String.t(), 0..128}
          | {:guid, non_neg_integer()}

  # What the listener is given: a network's text (`"203.0.113.0/24"`) or `{:guid, guid}`.
  @doc false
  def ban_spec({:guid, guid}) when is_integer(guid) and guid >= 0 and guid <= @max_u64,
    do: {:ok, {:guid, guid}}

  def ban_spec({:guid, _}), do: {:error, :einval}

  def ban_spec(target) do
    with {:ok, ip, len} <- ban_target(target), do: {:ok, ban_text(ip, len)}
  end

  @doc false
  # The address and prefix length (nil: the host's) of what `ban/3` takes.
  def ban_target({ip, len}) when is_integer(len) and len >= 0 do
    with {:ok, ip} <- ip_address(ip),
         true <- len <= if(tuple_size(ip) == 4, do: 32, else: 128) do
      {:ok, ip, len}
    else
      _ -> {:error, :einval}
    end
  end

  def ban_target(text) when is_binary(text) do
    case String.split(text, "/") do
      [ip] ->
        with {:ok, ip} <- ip_address(ip), do: {:ok, ip, nil}

      [ip, len] ->
        case Integer.parse(len) do
          {len, ""} -> ban_target({ip, len})
          _ -> {:error, :einval}
        end

      _ ->
        {:error, :einval}
    end
  end

  def ban_target(ip), do: with({:ok, ip} <- ip_address(ip), do: {:ok, ip, nil})

  defp ban_text(ip, nil), do: ip |> :inet.ntoa() |> to_string()
  defp ban_text(ip, len), do: ban_text(ip, nil) <> "/#{len}"

  @doc """
  Lifts a ban of `ban/3`, given as it was banned (an address, whose /64 for IPv6, a
  network, or `{:guid, guid}`); unbanning what is not banned is `:ok`.

      :ok = RakNet.Server.unban(server, {203, 0, 113, 7})
      :ok = RakNet.Server.unban(server, "2001:db8:42::/48")
  """
  @spec unban(Supervisor.supervisor(), ban_target()) :: :ok | {:error, :einval | :stopping}
  def unban(server, target) do
    with {:ok, ban} <- ban_spec(target), do: call(server, {:unban, ban})
  end

  @doc """
  The bans, with the milliseconds left (or `:infinity`): an address (an IPv6 /64 as its
  first address) for a ban of an address, `{network, prefix_length}` for a network's,
  `{:guid, guid}` for a client GUID's.

      [{{203, 0, 113, 7}, 59_874}, {{{8193, 3512, 66, 0, 0, 0, 0, 0}, 48}, :infinity}] =
        RakNet.Server.banned(server)
  """
  @spec banned(Supervisor.supervisor()) ::
          [{:inet.ip_address() | {:inet.ip_address(), 0..128}, non_neg_integer() | :infinity}]
          | {:error, :stopping}
  def banned(server), do: call(server, :banned)

  defp ip_address(ip) do
    case Config.parse_ip(ip) do
      {:ok, ip} -> {:ok, ip}
      :error -> {:error, :einval}
    end
  end

  @doc """
  Replaces the unconnected-pong payload at once, e.g. a Bedrock MOTD with a new player count.
  It must fit in one datagram (1,431 bytes); `{:error, :too_large}` otherwise. A payload
  whose pong is larger than `:pong_amplification` times a ping is set, with a warning (see
  `RakNet.Server.Config`).

      motd = %RakNet.Bedrock.Motd{motd: "My server", max_players: 10}
      pong = RakNet.Bedrock.Motd.encode(%{motd | players: RakNet.Server.count(server)})
      :ok = RakNet.Server.set_offline_ping_response(server, pong)
  """
  @spec set_offline_ping_response(Supervisor.supervisor(), binary()) ::
          :ok | {:error, :too_large | :stopping}
  def set_offline_ping_response(server, data) when is_binary(data),
    do: call(server, {:set_offline_ping_response, data})

  @doc """
  Replaces what the server answers GameSpy4 Query with (a server started with `query: true`;
  see `RakNet.Query` for the keys): the MOTD, the player list and counts, the map... Keys
  not given take their defaults; `:host_port` defaults to the server's port.

      :ok = RakNet.Server.set_query_info(server, %{motd: "My server", players: ["Steve"]})
  """
  @spec set_query_info(Supervisor.supervisor(), map()) :: :ok | {:error, :stopping}
  def set_query_info(server, info) when is_map(info), do: call(server, {:set_query_info, info})

  @doc """
  Replaces fields of the status NetherNet's `GET /v1/join` answers (the `:status` of the
  `:nethernet` option: `:name`, `:protocol`, `:version`, `:level`, `:game_type`,
  `:max_players`; `players` is always the server's connection count). `{:error,
  :no_nethernet}` for a server started without `:nethernet`.
  """
  @spec set_nethernet_status(Supervisor.supervisor(), map()) ::
          :ok | {:error, :no_nethernet | :stopping}
  def set_nethernet_status(server, status) when is_map(status),
    do: call(server, {:set_nethernet_status, status})

  @doc """
  The current Unix time in milliseconds, minus `offset`; X-Plane's `RakNet.Server.timestamp/1`.

      iex> RakNet.Server.timestamp() > 1_600_000_000_000
      true
      iex> base = RakNet.Server.timestamp()
      iex> RakNet.Server.timestamp(base) in 0..1_000
      true
  """
  @spec timestamp(integer()) :: integer()
  def timestamp(offset \\ 0), do: System.os_time(:millisecond) - offset

  @doc """
  A 64-bit unique id, as X-Plane's `RakNet.Server.make_unique_id/0` makes server identifiers:
  48 bits of `timestamp/0` and 16 random bits.

      iex> byte_size(RakNet.Server.make_unique_id())
      8
  """
  @spec make_unique_id() :: <<_::64>>
  def make_unique_id, do: <<timestamp()::size(48), :rand.uniform(65_536) - 1::size(16)>>

  @doc """
  Stops the server gracefully: it stops accepting, every connected client gets a
  disconnection notification after what was already queued for it, the server waits up to
  `timeout` ms (default 3 s, at most 60 s) for their acknowledgements, then closes its sockets
  (the port is free when this returns), and every connection's
  `RakNet.Client.disconnect/1` runs. A server under your own supervisor stops with it the same
  way (with the default wait). This function is for a server you started with `start_link/3`
  yourself: a supervisor restarts a (permanent) child that stops, so to stop one for good,
  use `Supervisor.terminate_child/2` on its supervisor (that waits as the default does).

      :ok = RakNet.Server.stop(server, 10_000)

  Called from one of the server's own connection processes (a handler), it returns at once
  and the server stops from another process (the caller's connection closes with the
  others, its disconnect callback told `:shutdown`).
  """
  @spec stop(Supervisor.supervisor(), timeout()) :: :ok
  def stop(server, timeout \\ 3_000) when is_integer(timeout) and timeout >= 0 do
    if own_connection?(server) do
      # Called by one of the server's own connections (an admin's command, say): the stop
      # ends this very process, which cannot wait for it (it was killed after 5 s, its
      # disconnect callback never run). Another process stops the server; this returns.
      {:ok, _} = Task.start(fn -> stop_now(server, timeout) end)
      :ok
    else
      stop_now(server, timeout)
    end
  end

  defp stop_now(server, timeout) do
    case call(server, {:stop_wait, timeout}) do
      # Another stop is under way.
      {:error, :stopping} -> :ok
      _ -> Supervisor.stop(server, :normal, :infinity)
    end
  end

  # The calling process is a connection process of `server` (it keeps its server in its
  # dictionary from init: its registry rows are gone while its disconnect callback runs).
  defp own_connection?(server) do
    pid = GenServer.whereis(server)
    is_pid(pid) and Process.get(:raknet_server) == pid
  end

  @doc """
  Stops accepting new connections and keeps the current players (maintenance, a full zone).
  Newcomers are refused with "no free incoming connections"; pings are still answered.

      :ok = RakNet.Server.suspend(server)
  """
  @spec suspend(Supervisor.supervisor()) :: :ok | {:error, :stopping}
  def suspend(server), do: call(server, {:suspended, true})

  @doc """
  Accepts new connections again after `suspend/1`.

      :ok = RakNet.Server.resume(server)
  """
  @spec resume(Supervisor.supervisor()) :: :ok | {:error, :stopping}
  def resume(server), do: call(server, {:suspended, false})

  @doc """
  Changes `:max_connections` (the whole server's, both sockets together) at once. A lower
  limit closes nobody: newcomers are
  refused until enough players have left.

      :ok = RakNet.Server.set_max_connections(server, 200)
  """
  @spec set_max_connections(Supervisor.supervisor(), pos_integer()) :: :ok | {:error, :stopping}
  def set_max_connections(server, max) when is_integer(max) and max > 0,
    do: call(server, {:max_connections, min(max, @max_u32)})

  # The server's listener, from the connection registry (ETS) for a server on this node:
  # asking the server's supervisor instead waited until the end of a stop, since a supervisor
  # stopping its children answers no calls (a handler's disconnect callback calling its
  # server while it stopped waited there until its connection process was killed, 5 s later).
  # A stopping server fails the call at once. A server of another node, or a node without the
  # registry, is asked as before.
  # A call to the server's listener; `{:error, :stopping}` while the server stops (from a
  # handler's handle_shutdown/2 or disconnect callback, say: the listener is busy closing
  # them, and a call would wait for it or exit).
  defp call(server, request) do
    case listener(server) do
      :stopping -> {:error, :stopping}
      listener -> GenServer.call(listener, request)
    end
  catch
    :exit, reason ->
      if stopping?(server), do: {:error, :stopping}, else: exit(reason)
  end

  defp stopping?(server) do
    pid = GenServer.whereis(server)

    is_pid(pid) and node(pid) == node() and
      RakNet.Connection.Registry.listener(pid) == {:ok, :stopping}
  end

  defp listener(server) do
    pid = GenServer.whereis(server)

    case is_pid(pid) and node(pid) == node() and RakNet.Connection.Registry.listener(pid) do
      {:ok, :stopping} ->
        :stopping

      # Its row outlives it until the registry hears of its end.
      {:ok, listener} when is_pid(listener) ->
        if Process.alive?(listener), do: listener, else: listener_of_children(server)

      # Between a listener that ended by itself and its restart: the supervisor answers once
      # it has started the new one.
      _ ->
        listener_of_children(server)
    end
  end

  defp listener_of_children(server) do
    Enum.find_value(Supervisor.which_children(server), fn
      {Listener, pid, _, _} when is_pid(pid) -> pid
      _ -> nil
    end) || exit({:noproc, {__MODULE__, :listener, [server]}})
  end

  @impl Supervisor
  def init(%Config{} = config) do
    children = [
      %{
        id: DynamicSupervisor,
        start: {__MODULE__, :start_connections, []},
        type: :supervisor,
        modules: [DynamicSupervisor]
      },
      %{
        id: Listener,
        start: {__MODULE__, :start_listener, [config]},
        shutdown: :infinity,
        modules: [Listener]
      }
    ]

    Supervisor.init(children, strategy: :rest_for_one)
  end

  # The start functions of the two children run in this supervisor's process, in order: the
  # connection supervisor's pid is kept here for the listener started after it (:rest_for_one
  # starts the listener again whenever the connection supervisor starts again). The listener
  # is given the pid rather than asking this supervisor for it: a supervisor that is stopping
  # its children waits for the listener and answers no calls, and a listener that asked then
  # (on a first connection announced just before the stop) deadlocked with it.
  @doc false
  @spec start_connections() :: Supervisor.on_start()
  def start_connections do
    with {:ok, pid} <- DynamicSupervisor.start_link(strategy: :one_for_one) do
      Process.put({__MODULE__, :connections}, pid)
      {:ok, pid}
    end
  end

  @doc false
  @spec start_listener(Config.t()) :: GenServer.on_start()
  def start_listener(config) do
    Listener.start_link({config, self(), Process.get({__MODULE__, :connections})})
  end
end
