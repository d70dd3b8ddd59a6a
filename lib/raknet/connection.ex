defmodule RakNet.Connection do
  @moduledoc """
  One process per RakNet connection: it owns the connection, runs your `RakNet.Client`
  implementation, and is what `send/3` takes.

  Started for you: by `RakNet.Server` when a client completes its handshake, and by
  `RakNet.connect/3` with the `:client` option. It is `:temporary` (a closed connection is not
  restarted) and a crash in your callbacks ends only this connection.

  ## Sending

      {:ok, nil} = RakNet.Connection.send(connection, :reliable_ordered, <<0x86, "hello">>)
      {:ok, receipt} = RakNet.Connection.send(connection, :reliable_ack_receipt, <<0x86>>)
      {:ok, nil} = RakNet.Connection.send(connection, :unreliable_sequenced, data, channel: 3, priority: :low)

  `connection` is the pid given to `RakNet.Client.new/3`, or the connection handle from
  `conn_ref/1` (or `RakNet.connect/3` without `:client`). Both go straight to the runtime from
  any process: with a pid, `send/3` looks the handle up in a table (ETS) instead of asking the
  connection process, so it never waits on that process and never deadlocks, also when two
  connection processes send to each other or a zone process broadcasts to hundreds of
  players. Fetching the handle once with `conn_ref/1` saves that look-up:

      {:ok, conn} = RakNet.Connection.conn_ref(connection)
      RakNet.Connection.send(conn, :unreliable_sequenced, position_update)

  Either way the message is queued on the runtime's thread and `send/3` returns at once.

  ## Across the cluster

  A connection pid of another node works everywhere a pid does (`send/4`, `close/2`,
  `info/1`, `RakNet.broadcast/4`, `RakNet.Group`): the call is handed to a relay process on
  the connection's node, one per calling process, so everything one process sends to a node
  is done there in the order it was sent (`stop/1` is a `GenServer.stop/2` of the process,
  not ordered with them). `send/4` then waits for that
  node's answer (one message there and one back) and returns it; a node that is not
  connected or goes down first gives `{:error, :nodedown}`, one that does not answer in 5 s
  `{:error, :timeout}`. A handle (`conn_ref/1`) is only usable on its own node.

  Errors: `{:error, :closed}` (the connection ended, or the process is gone), `:too_large`
  (over the server's `:max_message_bytes`, 32 MiB by default, or over the 16,384 fragments a
  peer reassembles: about 22 MiB at MTU 1492),
  `:over_budget` (64 MiB queued or unacknowledged), `:bad_reliability`,
  `:bad_channel` (not 0..31), `:bad_priority`, `{:unknown_option, key}` (an option other than
  `:channel` and `:priority`), `:empty`, `:not_binary`; for another node's connection also
  `:nodedown` and `:timeout` (see above).

  ## Lifecycle

  The process owns its connection (the runtime monitors it: if the process dies, the
  connection is closed with a disconnection notification to the peer). It traps exits, so a
  supervisor shutdown runs `RakNet.Client.disconnect/1` and closes the connection cleanly; a
  linked process that exits normally is ignored, one that crashes takes the connection down.

  When the connection ends, the process exits with `{:shutdown, reason}` (`reason` as in
  `RakNet.Client`'s optional `disconnect/2`: `:peer_closed`, `:timeout`, `:local_close`, ...),
  after your `disconnect` callback ran. Processes your `new/3` linked to it (a per-player
  GenServer started with `start_link`, say) therefore end with it, as in X-Plane's library,
  and a process that traps exits sees the reason in its `{:EXIT, pid, {:shutdown, reason}}`.
  `stop/1` ends it with `:shutdown`.

  Flow control: it confirms the messages it handled (and their bytes) to the runtime in
  batches (when its mailbox is empty, at least every 256 messages). A handler that falls
  behind a fast peer is not disconnected: past `:max_pending_deliveries` messages or
  `:max_pending_bytes` bytes the connection stops taking the peer's messages (the peer's
  reliable data waits, unacknowledged, and its congestion control slows it down) until the
  handler has caught up halfway; see `RakNet.Server.Config`.
  """
  use GenServer, restart: :temporary

  alias RakNet.Native
  alias RakNet.ReliabilityLayer.Reliability

  @priorities [:immediate, :high, :medium, :low]

  @typedoc "A connection: its process, or its handle (`conn_ref/1`)."
  @type t :: pid() | reference()

  @typedoc "`:immediate`, `:high` (default), `:medium` or `:low`."
  @type priority :: :immediate | :high | :medium | :low

  @typedoc "Options of `send/4`."
  @type send_opt :: {:channel, 0..31} | {:priority, priority()}

  # Messages above this size are sent from a dirty scheduler (see send/4).
  @dirty_send_bytes 1_048_576

  # Confirm deliveries to the runtime (flow control) at least this often.
  @confirm_every 256

  @doc false
  def start_link(args), do: GenServer.start_link(__MODULE__, args)

  # A connection process collects its garbage once at a random moment of its first
  # @gc_phase_ms. Players who connected together and send at the same rate otherwise fill
  # their heaps in step: all of their processes collected within the same 100-200 ms (1,500
  # collections in one 100 ms window, every second or so, at 1,500 players x 20 Hz on one
  # core), and the echoes queued behind them (a second's p99 up to 70-110 ms). One early
  # collection at a random time sets each process's cycle apart, and equal cycles keep
  # them apart. (Heaps of random sizes did it too, at 22 KB more memory per connection.)
  @gc_phase_ms 2_000

  @typedoc "What `send/3` and `send/4` return."
  @type send_result :: {:ok, nil | pos_integer()} | {:error, send_error()}

  @typedoc "Why a send failed; see the module documentation."
  @type send_error ::
          :closed
          | :not_connected
          | :too_large
          | :over_budget
          | :bad_reliability
          | :bad_channel
          | :bad_priority
          | {:unknown_option, term()}
          | :empty
          | :not_binary
          | :nodedown
          | :timeout

  @doc """
  Sends `message` with `reliability` on channel 0 at high priority; X-Plane's `send/3`.

  Returns `{:ok, nil}`, `{:ok, receipt_id}` for the `*_ack_receipt` reliabilities (the id
  later given to `RakNet.Client.got_ack/2`, or sent as `{:raknet_receipt, conn, receipt_id,
  :acked | :lost}` to a raw connection's owner), or `{:error, reason}` (see the module
  documentation); it never exits, also not for a dead pid.

      {:ok, nil} = RakNet.Connection.send(connection, :reliable_ordered, <<0x86, "hello">>)
      {:ok, receipt_id} = RakNet.Connection.send(connection, :reliable_ack_receipt, <<0x86>>)
  """
  @spec send(t(), RakNet.ReliabilityLayer.Reliability.t(), binary()) :: send_result()
  def send(connection, reliability, message), do: send(connection, reliability, message, [])

  @doc """
  Like `send/3`, with options:

    * `:channel` - the ordering channel, 0..31 (default 0): ordered and sequenced messages
      are ordered per channel, so independent streams do not wait for each other;
    * `:priority` - `:immediate` (sent at the next tick, before anything else), `:high`
      (default), `:medium` or `:low` (weighted 4:2:1 after `:immediate`).

      {:ok, nil} = RakNet.Connection.send(connection, :unreliable_sequenced, data, channel: 3, priority: :low)
  """
  @spec send(t(), RakNet.ReliabilityLayer.Reliability.t(), binary(), [send_opt()]) ::
          send_result()
  def send(connection, reliability, message, opts)

  def send(_connection, _reliability, message, _opts) when not is_binary(message),
    do: {:error, :not_binary}

  def send(conn, reliability, message, opts) when is_reference(conn) do
    with {:ok, channel, priority} <- check_send(reliability, opts) do
      # A large message's copy would hold a normal scheduler too long: a dirty one takes it.
      if byte_size(message) > @dirty_send_bytes,
        do: Native.conn_send_dirty(conn, reliability, channel, priority, message),
        else: Native.conn_send(conn, reliability, channel, priority, message)
    end
  end

  def send(pid, reliability, message, opts) when is_pid(pid) and node(pid) != node() do
    # Checked here too: an error is the same wherever the connection is.
    with {:ok, _channel, _priority} <- check_send(reliability, opts) do
      RakNet.Relay.call(node(pid), {:send, pid, reliability, message, opts})
    end
  end

  def send(pid, reliability, message, opts) when is_pid(pid) do
    case handle(pid) do
      {:ok, conn} -> send(conn, reliability, message, opts)
      error -> error
    end
  end

  # What send/4 and the broadcasts check before the runtime is handed a message: the
  # reliability (for a broadcast, none with a receipt: a receipt belongs to one send), and
  # the channel and priority the options give. Packet.send/4 and Packet.broadcast/4 check it
  # before a message goes to another node, where an error could only drop it.
  @doc false
  @spec check_send(term(), term(), :send | :broadcast) ::
          {:ok, 0..31, atom()} | {:error, term()}
  def check_send(reliability, opts, kind \\ :send) do
    with {:ok, channel, priority} <- send_options(opts) do
      cond do
        not Reliability.valid?(reliability) -> {:error, :bad_reliability}
        kind == :broadcast and Reliability.receipt?(reliability) -> {:error, :bad_reliability}
        not (is_integer(channel) and channel in 0..31) -> {:error, :bad_channel}
        priority not in @priorities -> {:error, :bad_priority}
        true -> {:ok, channel, priority}
      end
    end
  end

  # The options of send/4 (and of the broadcasts): the channel and priority, or
  # {:error, {:unknown_option, key}}, so that a misspelt `chanel: 3` is not sent on channel 0
  # without a word. The first of a repeated key counts, as for Keyword.get/3.
  @doc false
  @spec send_options(term()) ::
          {:ok, term(), term()} | {:error, {:unknown_option, term()}}
  def send_options([]), do: {:ok, 0, :high}

  def send_options(opts) do
    with :ok <- known_options(opts) do
      {:ok, Keyword.get(opts, :channel, 0), Keyword.get(opts, :priority, :high)}
    end
  end

  # A keyword list of :channel and :priority only; anything else (another key, an element
  # that is no pair, options that are no list at all) is named in the error.
  defp known_options([]), do: :ok
  defp known_options([{key, _} | rest]) when key in [:channel, :priority], do: known_options(rest)
  defp known_options([{key, _} | _]), do: {:error, {:unknown_option, key}}
  defp known_options([other | _]), do: {:error, {:unknown_option, other}}
  defp known_options(other), do: {:error, {:unknown_option, other}}

  # Inside the connection process itself (a RakNet.Client callback answering), the handle is
  # in the process dictionary; any other process reads the registry. Neither asks the
  # connection process anything, so no send can wait on it or deadlock.
  defp handle(pid) when pid == self() do
    case Process.get(:raknet_conn) do
      nil -> conn_ref(pid)
      conn -> {:ok, conn}
    end
  end

  defp handle(pid), do: conn_ref(pid)

  @doc """
  The connection's handle, for `send/3` without the table look-up; `{:error, :closed}` when
  the process is gone. It never calls the connection process, so it also works inside the
  connection's own callbacks.

      {:ok, conn} = RakNet.Connection.conn_ref(connection_pid)
  """
  @spec conn_ref(pid()) :: {:ok, reference()} | {:error, :closed}
  def conn_ref(pid) when is_pid(pid) do
    case RakNet.Connection.Registry.lookup(pid) do
      {:ok, conn} -> {:ok, conn}
      :error -> {:error, :closed}
    end
  end

  @doc """
  Gives the calling connection an application id (a player id, say), unique within its
  server, by which any process finds it with `RakNet.Server.lookup(server, :id, id)`; call it
  from the connection's own callbacks (`RakNet.Client.new/3`, `receive/4`). Registering again
  replaces the id; it goes away with the connection.

      def receive(player, 0x86, <<"login ", name::binary>>, _transit) do
        :ok = RakNet.Connection.register_id({:player, name})
      end

  Returns `{:error, {:already_registered, pid}}` when another connection of the server has
  that id, and `{:error, :not_a_connection}` outside a connection process.
  """
  @spec register_id(term()) ::
          :ok | {:error, {:already_registered, pid()} | :not_a_connection}
  defdelegate register_id(id), to: RakNet.Connection.Registry

  @doc """
  Merges `assigns` (a map or keyword list) into the calling connection's assigns: what the
  game knows of the player (its name, zone, team), readable by any process of the node
  without asking the connection (from ETS), with `assigns/1`, and in the maps of
  `RakNet.Server.connections/1` and `lookup/3`. Call it from the connection's own callbacks;
  they go away with the connection.

      def handle_message(0x86, <<"login ", name::binary>>, _transit, state) do
        :ok = RakNet.Connection.assign(name: name, zone: 3)
        {:noreply, state}
      end

  Returns `{:error, :not_a_connection}` outside a connection process.
  """
  @spec assign(map() | keyword()) :: :ok | {:error, :not_a_connection}
  def assign(assigns) when is_map(assigns) or is_list(assigns),
    do: RakNet.Connection.Registry.assign(Map.new(assigns))

  @doc """
  The assigns of a connection (see `assign/1`), or `{:error, :closed}`; for a connection of
  another node, asked there.

      {:ok, %{name: "ann", zone: 3}} = RakNet.Connection.assigns(player)
  """
  @spec assigns(pid()) :: {:ok, map()} | {:error, :closed | :nodedown | :timeout}
  def assigns(pid) when is_pid(pid) and node(pid) != node(),
    do: RakNet.Relay.call(node(pid), {:assigns, pid})

  def assigns(pid) when is_pid(pid) do
    case RakNet.Connection.Registry.info(pid) do
      {:ok, %{assigns: assigns}} -> {:ok, assigns}
      :error -> {:error, :closed}
    end
  end

  @doc """
  Stops the connection process, as X-Plane's `RakNet.Connection.stop/1` does: the process
  exits with `:shutdown`, running `RakNet.Client.disconnect/1` (or `disconnect/2` with
  `:shutdown`) first, and the peer gets a disconnection notification. With a handle (a raw
  connection of `RakNet.connect/3`) it closes the connection. Stopping a connection that has
  ended is `:ok`.

      :ok = RakNet.Connection.stop(connection_pid)
  """
  @spec stop(t()) :: :ok
  def stop(conn) when is_reference(conn), do: Native.conn_close(conn)

  def stop(pid) when pid == self() do
    # From inside a callback: GenServer.stop/2 on oneself would deadlock, an exit does not.
    exit(:shutdown)
  end

  def stop(pid) when is_pid(pid) do
    GenServer.stop(pid, :shutdown)
  catch
    :exit, _ -> :ok
  end

  @doc """
  Closes the connection gracefully: what is queued is still sent, the peer gets a
  disconnection notification, and then the owner gets `{:raknet_disconnect, conn, reason}`
  (a `RakNet.Connection` calls the handler's disconnect callback with `reason` and exits with
  `{:shutdown, reason}`). `reason` defaults to `:local_close`; give your own to tell the
  handler why (a kick, a ban, a server move). It may be any term whose external format is at
  most 64 KiB. Closing a closed connection is `:ok`, and only the first reason counts.

      :ok = RakNet.Connection.close(connection)
      :ok = RakNet.Connection.close(connection, {:kicked, "spamming chat"})

  Any process may call it; it never waits on the connection process (for another node's
  connection it waits for that node, see "Across the cluster").
  """
  @spec close(t(), term()) :: :ok | {:error, :nodedown | :timeout}
  def close(connection, reason \\ :local_close)

  def close(conn, reason) when is_reference(conn) do
    case reason do
      :local_close -> Native.conn_close(conn)
      reason -> Native.conn_close_with(conn, close_reason(reason))
    end
  end

  def close(pid, reason) when is_pid(pid) and node(pid) != node() do
    _ = close_reason(reason)
    RakNet.Relay.call(node(pid), {:close, pid, reason})
  end

  def close(pid, reason) when is_pid(pid) do
    case handle(pid) do
      {:ok, conn} -> close(conn, reason)
      {:error, :closed} -> :ok
    end
  end

  @max_close_reason 64 * 1024

  defp close_reason(reason) do
    case :erlang.term_to_binary(reason) do
      binary when byte_size(binary) <= @max_close_reason -> binary
      _ -> raise ArgumentError, "close reason over #{@max_close_reason} bytes"
    end
  end

  @doc """
  Addresses, GUID, MTU, protocol version, round-trip time, congestion controller
  (`:congestion_control`, `:reno` or `:bbr`), network rates and counters of the connection;
  `{:error, :closed}` once it has ended.

      {:ok, %{address: {{127, 0, 0, 1}, 51234}, rtt_ms: 0.2, rates: rates, stats: stats}} =
        RakNet.Connection.info(connection)

  `:rates` is the connection's network info over the last second (as renet's
  `network_info`), sampled once a second by the runtime, so reading it costs nothing:

  | key | meaning |
  |---|---|
  | `:rtt_ms` | smoothed round-trip time, milliseconds |
  | `:packet_loss` | datagrams declared lost / datagrams sent, 0.0 to 1.0 |
  | `:bytes_in_per_sec`, `:bytes_out_per_sec` | UDP payload bytes received / sent |
  | `:messages_in_per_sec`, `:messages_out_per_sec` | messages received / sent |
  | `:resends_per_sec` | reliable frames resent |
  | `:cwnd_bytes` | the congestion window |

  `:stats` holds the counters since the connection started (`:bytes_in`, `:resends`,
  `:datagrams_lost`, `:duplicates`, `:refused_paused`, ...).
  """
  @spec info(t()) :: {:ok, map()} | {:error, :closed}
  def info(conn) when is_reference(conn), do: Native.conn_info(conn)

  def info(pid) when is_pid(pid) and node(pid) != node(),
    do: RakNet.Relay.call(node(pid), {:info, pid})

  def info(pid) when is_pid(pid) do
    case handle(pid) do
      {:ok, conn} -> Native.conn_info(conn)
      error -> error
    end
  end

  # ---- process -------------------------------------------------------------------
  #
  # The process runs either a RakNet.Client struct (X-Plane's protocol: `client` holds the
  # struct, return values are ignored) or a RakNet.Handler module (`handler` holds the module
  # and `client` its state, replaced by what each callback returns).

  # A connection process traps exits (its handler's linked processes end with it) and keeps
  # its mailbox off its heap: the runtime delivers in bursts, and a queue of thousands of
  # messages on the heap is copied by every garbage collection (a large part of the VM's CPU
  # per message in make bench's one-way scenario).
  defp init_process do
    Process.flag(:trap_exit, true)
    Process.flag(:message_queue_data, :off_heap)
    Process.send_after(self(), :raknet_gc_phase, :rand.uniform(@gc_phase_ms))
  end

  @impl GenServer
  def init({:accepted, conn, spec, client_data, server, info}) do
    init_process()

    case Native.conn_set_owner(conn, self()) do
      :ok ->
        Process.put(:raknet_conn, conn)
        Process.put(:raknet_server, server)
        info = Map.put(info, :connected_at, System.system_time(:millisecond))
        RakNet.Connection.Registry.register(conn, server, info)

        state =
          new_state(conn, spec)
          |> Map.merge(%{server: server, started: nil, info: info})

        # The :start event and the handler come in handle_continue, not here: the server's
        # listener waits for init to return, so a new/3 or a telemetry handler that calls the
        # server (to update the MOTD, or read RakNet.Server.info/1) would wait for it in vain.
        {:ok, state, {:continue, {:new, spec, client_data, info}}}

      {:error, :closed} ->
        :ignore
    end
  end

  def init({:connect, {endpoint, native_opts}, host, port, spec, client_data}) do
    init_process()

    case RakNet.open(endpoint, host, port, self(), native_opts) do
      {:ok, conn} ->
        Process.put(:raknet_conn, conn)
        RakNet.Connection.Registry.register(conn, :client, %{})

        state =
          new_state(conn, spec)
          |> Map.merge(%{
            pending: {spec, client_data},
            result: nil,
            server: nil,
            started: nil,
            info: nil
          })

        {:ok, state}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  defp new_state(conn, spec) do
    handler =
      case spec do
        {:handler, module} -> module
        {:client, _struct} -> nil
      end

    # `stopping`: a handler callback returned {:stop, ...}; the peer's later messages are
    # dropped while the close completes.
    %{
      conn: conn,
      client: nil,
      handler: handler,
      delivered: 0,
      delivered_bytes: 0,
      # Messages and bytes handled in all (the :stop telemetry event's totals).
      total_in: 0,
      total_in_bytes: 0,
      confirm_queued: false,
      waiting: nil,
      stopping: false
    }
  end

  @impl GenServer
  def handle_continue({:new, spec, client_data, info}, state) do
    # Set with the :start event: the :stop event's duration counts from it.
    state = %{state | started: System.monotonic_time()}
    RakNet.Telemetry.connection_start(state.server, info)

    start_handler(
      state,
      spec,
      client_data,
      Map.merge(info, %{role: :server, server: state.server})
    )
  end

  def handle_continue(continue, %{handler: module} = state) when module != nil do
    module.handle_continue(continue, state.client) |> handler_result(state)
  end

  # Runs RakNet.Client.new/3 or RakNet.Handler.handle_connect/2.
  defp start_handler(state, {:client, struct}, data, _info),
    do: {:noreply, %{state | client: RakNet.Client.new(struct, self(), data)}}

  defp start_handler(state, {:handler, module}, data, info) do
    case module.handle_connect(info, data) do
      {:ok, handler_state} ->
        {:noreply, %{state | client: handler_state}}

      {:stop, reason} ->
        close(state.conn, reason)
        {:stop, {:shutdown, reason}, %{state | handler: nil}}

      other ->
        raise "#{inspect(module)}.handle_connect/2 returned #{inspect(other)}, " <>
                "expected {:ok, state} or {:stop, reason}"
    end
  end

  @impl GenServer
  # Client role: answer once the handshake has an outcome.
  def handle_call(:"$raknet_await_connected", from, %{result: nil} = state),
    do: {:noreply, %{state | waiting: from}}

  def handle_call(:"$raknet_await_connected", _from, %{result: result} = state),
    do: {:reply, result, state}

  def handle_call(:"$raknet_await_connected", _from, state), do: {:reply, {:ok, self()}, state}

  def handle_call(request, from, %{handler: module} = state) when module != nil do
    case module.handle_call(request, from, state.client) do
      {:reply, reply, handler_state} ->
        {:reply, reply, %{state | client: handler_state}}

      {:reply, reply, handler_state, extra} ->
        {:reply, reply, %{state | client: handler_state}, extra}

      {:stop, reason, reply, handler_state} ->
        GenServer.reply(from, reply)
        {:stop, reason, handler_state} |> handler_result(state)

      other ->
        handler_result(other, state)
    end
  end

  def handle_call(request, _from, state), do: {:reply, {:error, {:unknown_call, request}}, state}

  @impl GenServer
  def handle_cast(request, %{handler: module} = state) when module != nil do
    module.handle_cast(request, state.client) |> handler_result(state)
  end

  def handle_cast(_request, state), do: {:noreply, state}

  @impl GenServer
  def handle_info({:raknet, conn, type, payload, transit}, %{conn: conn} = state) do
    state = handled(state, 1, byte_size(payload) + 1)

    case state.handler do
      nil ->
        # As in X-Plane's library the return value is not the new client state.
        RakNet.Client.receive(state.client, type, payload, transit)
        {:noreply, confirm(state)}

      _module when state.stopping ->
        {:noreply, confirm(state)}

      module ->
        module.handle_message(type, payload, transit, state.client)
        |> handler_result(confirm(state))
    end
  end

  # Batch delivery (the server's :batch_delivery): the messages that arrived together, in
  # order, each handled as if it came alone.
  def handle_info({:raknet_batch, conn, messages}, %{conn: conn} = state) do
    {count, bytes} =
      Enum.reduce(messages, {0, 0}, fn {_type, payload, _transit}, {n, b} ->
        {n + 1, b + byte_size(payload) + 1}
      end)

    deliver_batch(messages, confirm(handled(state, count, bytes)))
  end

  def handle_info({:raknet_receipt, conn, id, fate}, %{conn: conn, handler: module} = state)
      when module != nil do
    module.handle_receipt(id, fate, state.client) |> handler_result(confirm(state))
  end

  def handle_info({:raknet_receipt, conn, id, :acked}, %{conn: conn} = state) do
    RakNet.Client.got_ack(state.client, id)
    {:noreply, confirm(state)}
  end

  def handle_info({:raknet_receipt, conn, id, :lost}, %{conn: conn} = state) do
    if exports?(state.client, :got_loss, 2) do
      RakNet.Client.impl_for(state.client).got_loss(state.client, id)
    end

    {:noreply, confirm(state)}
  end

  def handle_info({:raknet_confirm, conn}, %{conn: conn} = state),
    do: {:noreply, confirm_now(%{state | confirm_queued: false})}

  def handle_info({:raknet_disconnect, conn, reason}, %{conn: conn} = state) do
    # The peer is gone (or the connection closed): no longer listed by the time the handler
    # hears of it, so what it tells the others ("X left") agrees with what
    # RakNet.Server.connections/1 and lookup/3 answer them.
    RakNet.Connection.Registry.unregister()
    disconnect(state, reason)
    # Not :normal: processes linked to this one (started by new/3) end with the connection.
    {:stop, {:shutdown, reason}, %{state | client: nil, handler: nil}}
  end

  def handle_info(
        {:raknet_connected, conn, info},
        %{conn: conn, pending: {spec, data}} = state
      ) do
    info =
      Map.merge(info, %{
        role: :client,
        server: nil,
        connected_at: System.system_time(:millisecond)
      })

    state = %{state | result: {:ok, self()}, started: System.monotonic_time(), info: info}
    RakNet.Telemetry.connection_start(nil, info)
    if state.waiting, do: GenServer.reply(state.waiting, {:ok, self()})
    start_handler(state, spec, data, info)
  end

  def handle_info({:raknet_connect_failed, conn, reason}, %{conn: conn} = state) do
    if state.waiting, do: GenServer.reply(state.waiting, {:error, reason})
    {:stop, {:shutdown, reason}, %{state | result: {:error, reason}}}
  end

  # The one early collection that sets this process's cycle apart (see @gc_phase_ms).
  def handle_info(:raknet_gc_phase, state) do
    :erlang.garbage_collect(self(), type: :minor)
    {:noreply, state}
  end

  # Exits are trapped only so that terminate/2 runs on a supervisor's shutdown (the parent's
  # EXIT never gets here: gen_server handles it). Other linked processes count as if exits
  # were not trapped: a normal exit is ignored, anything else takes the connection down.
  def handle_info({:EXIT, _pid, :normal}, state), do: {:noreply, state}
  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}

  # The server is stopping (its listener waits for this answer, at most a moment): the
  # handler's handle_shutdown/2 may still send, before every connection is closed after what
  # is queued.
  def handle_info({:"$raknet_shutdown", listener, ref}, state) do
    result =
      if state.handler != nil and not state.stopping and
           function_exported?(state.handler, :handle_shutdown, 2),
         do: state.handler.handle_shutdown(:shutdown, state.client) |> handler_result(state),
         else: {:noreply, state}

    send(listener, {ref, self()})
    result
  end

  def handle_info(msg, %{handler: module} = state) when module != nil do
    module.handle_info(msg, state.client) |> handler_result(state)
  end

  # Anything else goes to a RakNet.Client implementation's optional handle_info/2, whose
  # state is kept.
  def handle_info(other, state) do
    if exports?(state.client, :handle_info, 2) do
      case RakNet.Client.impl_for(state.client).handle_info(state.client, other) do
        {:noreply, client} -> {:noreply, %{state | client: client}}
        _ignored -> {:noreply, state}
      end
    else
      {:noreply, state}
    end
  end

  # A handler callback's result: the new state, or a stop that closes the connection with
  # the reason (handle_disconnect/2 runs when the runtime confirms, with that reason).
  defp deliver_batch([], state), do: {:noreply, state}
  defp deliver_batch(_rest, %{stopping: true} = state), do: {:noreply, state}

  defp deliver_batch([{type, payload, transit} | rest], %{handler: nil} = state) do
    RakNet.Client.receive(state.client, type, payload, transit)
    deliver_batch(rest, state)
  end

  defp deliver_batch([{type, payload, transit} | rest], %{handler: module} = state) do
    module.handle_message(type, payload, transit, state.client)
    |> handler_result(state)
    |> batch_result(rest)
  end

  # A {:continue, term} runs before the next message, as it would between two messages; a
  # timeout or :hibernate only counts after the last one (the next message would cancel it).
  defp batch_result({:noreply, state}, rest), do: deliver_batch(rest, state)

  defp batch_result({:noreply, state, {:continue, continue}}, rest),
    do: handle_continue(continue, state) |> batch_result(rest)

  defp batch_result({:noreply, state, extra}, []), do: {:noreply, state, extra}

  defp batch_result({:noreply, state, _timeout_or_hibernate}, rest),
    do: deliver_batch(rest, state)

  defp handler_result({:noreply, handler_state}, state),
    do: {:noreply, %{state | client: handler_state}}

  defp handler_result({:noreply, handler_state, extra}, state),
    do: {:noreply, %{state | client: handler_state}, extra}

  defp handler_result({:stop, reason, handler_state}, state) do
    close(state.conn, reason)
    {:noreply, %{state | client: handler_state, stopping: true}}
  end

  defp handler_result(other, state) do
    raise "the RakNet handler #{inspect(state.handler)} returned #{inspect(other)}, expected " <>
            "{:noreply, state}, {:noreply, state, timeout | :hibernate | {:continue, term}} " <>
            "or {:stop, reason, state}"
  end

  @impl GenServer
  def terminate(reason, %{conn: conn} = state) do
    # A stop after {:raknet_disconnect, ...} has already told the handler (client is nil). A
    # supervisor's shutdown has not: tell it now, then close. After a crash the handler's
    # state is suspect, so it is not called again. Closing is graceful (the peer is notified);
    # the runtime would also close the connection once this process is gone.
    # Still registered while its disconnect callback runs: the connection is open, and a
    # goodbye sent to it by pid, from another process too, must find it.
    if shutdown?(reason) and (state.client != nil or state.handler != nil) do
      try do
        disconnect(state, :shutdown)
      catch
        _kind, _error -> :ok
      end
    end

    RakNet.Connection.Registry.unregister()
    Native.conn_close(conn)
    RakNet.Telemetry.connection_stop(state, reason)
  end

  defp shutdown?(:shutdown), do: true
  defp shutdown?({:shutdown, _}), do: true
  defp shutdown?(_reason), do: false

  # The handler's disconnect callback: handle_disconnect/2 of a RakNet.Handler; disconnect/2
  # (optional) instead of disconnect/1 when a RakNet.Client implementation defines it.
  defp disconnect(%{handler: module, client: handler_state}, reason) when module != nil,
    do: module.handle_disconnect(reason, handler_state)

  defp disconnect(%{client: nil}, _reason), do: :ok

  defp disconnect(%{client: client}, reason) do
    if exports?(client, :disconnect, 2) do
      RakNet.Client.impl_for(client).disconnect(client, reason)
    else
      RakNet.Client.disconnect(client)
    end
  end

  # Whether the client's RakNet.Client implementation defines an optional callback.
  defp exports?(nil, _name, _arity), do: false

  defp exports?(client, name, arity) do
    impl = RakNet.Client.impl_for(client)
    impl != nil and Code.ensure_loaded?(impl) and function_exported?(impl, name, arity)
  end

  # `count` more messages of `bytes` handled, to confirm (flow control).
  defp handled(state, count, bytes),
    do: %{
      state
      | delivered: state.delivered + count,
        delivered_bytes: state.delivered_bytes + bytes,
        total_in: state.total_in + count,
        total_in_bytes: state.total_in_bytes + bytes
    }

  # Flow control: tell the runtime how many messages were handled, in batches, at the latest
  # when the mailbox runs empty. When other messages wait behind the last RakNet one (a
  # handler's tick, a call), a {:raknet_confirm, conn} sent to self goes behind them: the
  # count is confirmed once they are handled. Without it a connection paused for its
  # delivery budget got no further RakNet message to confirm on, and its handler, idle,
  # was closed as overloaded.
  defp confirm(%{delivered: 0} = state), do: state

  defp confirm(%{delivered: delivered} = state) do
    cond do
      delivered >= @confirm_every or mailbox_empty?() ->
        confirm_now(state)

      state.confirm_queued ->
        state

      true ->
        send(self(), {:raknet_confirm, state.conn})
        %{state | confirm_queued: true}
    end
  end

  defp confirm_now(%{delivered: 0} = state), do: state

  defp confirm_now(%{delivered: delivered} = state) do
    Native.conn_delivered(state.conn, delivered, state.delivered_bytes)
    %{state | delivered: 0, delivered_bytes: 0}
  end

  defp mailbox_empty? do
    match?({:message_queue_len, 0}, Process.info(self(), :message_queue_len))
  end
end
