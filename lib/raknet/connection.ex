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
  `conn_ref/1` (or `RakNet.connect/3` without `:client`): sending through the handle skips the
  hop through this process.

  Errors: `{:error, :closed}` (the connection ended), `:too_large` (over 32 MiB),
  `:over_budget` (64 MiB queued or unacknowledged), `:bad_reliability`, `:bad_channel` (not
  0..31), `:bad_priority`, `:empty`, `:not_binary`.
  """
  use GenServer, restart: :temporary

  alias RakNet.Native

  @typedoc "A connection: its process, or its handle (`conn_ref/1`)."
  @type t :: pid() | reference()

  @typedoc "`:immediate`, `:high` (default), `:medium` or `:low`."
  @type priority :: :immediate | :high | :medium | :low

  @typedoc "Options of `send/4`."
  @type send_opt :: {:channel, 0..31} | {:priority, priority()}

  # Confirm deliveries to the runtime (flow control) at least this often.
  @confirm_every 256

  @doc false
  def start_link(args), do: GenServer.start_link(__MODULE__, args)

  @doc """
  Sends `message` with `reliability` on channel 0 at high priority.

  Returns `{:ok, nil}`, `{:ok, receipt_id}` for the `*_ack_receipt` reliabilities (the id
  later given to `RakNet.Client.got_ack/2`), or `{:error, reason}`.
  """
  @spec send(t(), RakNet.ReliabilityLayer.Reliability.t(), binary()) ::
          {:ok, nil | pos_integer()} | {:error, atom()}
  def send(connection, reliability, message), do: send(connection, reliability, message, [])

  @doc "Like `send/3`, with `:channel` (0..31, default 0) and `:priority` (default `:high`)."
  @spec send(t(), RakNet.ReliabilityLayer.Reliability.t(), binary(), [send_opt()]) ::
          {:ok, nil | pos_integer()} | {:error, atom()}
  def send(connection, reliability, message, opts)

  def send(_connection, _reliability, message, _opts) when not is_binary(message),
    do: {:error, :not_binary}

  def send(conn, reliability, message, opts) when is_reference(conn) do
    channel = Keyword.get(opts, :channel, 0)
    priority = Keyword.get(opts, :priority, :high)

    if is_integer(channel) and is_atom(reliability) and is_atom(priority) do
      Native.conn_send(conn, reliability, channel, priority, message)
    else
      {:error, :badarg}
    end
  end

  def send(pid, reliability, message, opts) when is_pid(pid) do
    case handle(pid) do
      {:ok, conn} -> send(conn, reliability, message, opts)
      error -> error
    end
  end

  # Inside the connection process itself (a RakNet.Client callback answering), the handle is
  # in the process dictionary: no call to self.
  defp handle(pid) when pid == self() do
    case Process.get(:raknet_conn) do
      nil -> conn_ref(pid)
      conn -> {:ok, conn}
    end
  end

  defp handle(pid), do: conn_ref(pid)

  @doc "The connection's handle, for `send/3` without the process hop."
  @spec conn_ref(pid()) :: {:ok, reference()} | {:error, :closed}
  def conn_ref(pid) when is_pid(pid) do
    GenServer.call(pid, :conn_ref)
  catch
    :exit, _ -> {:error, :closed}
  end

  @doc "Closes the connection gracefully (the peer gets a disconnection notification)."
  @spec close(t()) :: :ok
  def close(conn) when is_reference(conn), do: Native.conn_close(conn)

  def close(pid) when is_pid(pid) do
    case handle(pid) do
      {:ok, conn} -> Native.conn_close(conn)
      {:error, :closed} -> :ok
    end
  end

  @doc """
  Addresses, GUID, MTU, protocol version, round-trip time and counters of the connection.

      {:ok, %{address: {{127, 0, 0, 1}, 51234}, mtu: 1492, protocol: 11, rtt_ms: 0.2, stats: %{...}}}
  """
  @spec info(t()) :: {:ok, map()} | {:error, :closed}
  def info(conn) when is_reference(conn), do: Native.conn_info(conn)

  def info(pid) when is_pid(pid) do
    case handle(pid) do
      {:ok, conn} -> Native.conn_info(conn)
      error -> error
    end
  end

  # ---- process -------------------------------------------------------------------

  @impl GenServer
  def init({:accepted, conn, client_struct, client_data}) do
    Process.flag(:trap_exit, true)

    case Native.conn_set_owner(conn, self()) do
      :ok ->
        Process.put(:raknet_conn, conn)
        # new/3 runs in handle_continue, not here: the server's listener waits for init to
        # return, so a new/3 that calls the server (to update the MOTD, say) would deadlock.
        {:ok, %{conn: conn, client: nil, delivered: 0, waiting: nil},
         {:continue, {:new, client_struct, client_data}}}

      {:error, :closed} ->
        :ignore
    end
  end

  def init({:connect, endpoint, host, port, client_struct, client_data}) do
    Process.flag(:trap_exit, true)

    case Native.endpoint_connect(endpoint, host, port, self()) do
      {:ok, conn} ->
        {:ok,
         %{
           conn: conn,
           client: nil,
           pending: {client_struct, client_data},
           delivered: 0,
           waiting: nil,
           result: nil
         }}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl GenServer
  def handle_continue({:new, client_struct, client_data}, state) do
    {:noreply, %{state | client: RakNet.Client.new(client_struct, self(), client_data)}}
  end

  @impl GenServer
  def handle_call(:conn_ref, _from, state), do: {:reply, {:ok, state.conn}, state}

  # Client role: answer once the handshake has an outcome.
  def handle_call(:await_connected, from, %{result: nil} = state),
    do: {:noreply, %{state | waiting: from}}

  def handle_call(:await_connected, _from, %{result: result} = state), do: {:reply, result, state}
  def handle_call(:await_connected, _from, state), do: {:reply, {:ok, self()}, state}

  @impl GenServer
  def handle_info({:raknet, conn, type, payload, transit}, %{conn: conn} = state) do
    RakNet.Client.receive(state.client, type, payload, transit)
    delivered = state.delivered + 1

    if delivered >= @confirm_every or mailbox_empty?() do
      Native.conn_delivered(conn, delivered)
      {:noreply, %{state | delivered: 0}}
    else
      {:noreply, %{state | delivered: delivered}}
    end
  end

  def handle_info({:raknet_receipt, conn, id, :acked}, %{conn: conn} = state) do
    RakNet.Client.got_ack(state.client, id)
    {:noreply, state}
  end

  def handle_info({:raknet_receipt, conn, id, :lost}, %{conn: conn} = state) do
    optional(state.client, :got_loss, [id])
    {:noreply, state}
  end

  def handle_info({:raknet_disconnect, conn, reason}, %{conn: conn} = state) do
    if state.client do
      impl = RakNet.Client.impl_for(state.client)

      if impl && function_exported?(impl, :disconnect, 2) do
        impl.disconnect(state.client, reason)
      else
        RakNet.Client.disconnect(state.client)
      end
    end

    {:stop, :normal, %{state | client: nil}}
  end

  def handle_info(
        {:raknet_connected, conn, _info},
        %{conn: conn, pending: {struct, data}} = state
      ) do
    client = RakNet.Client.new(struct, self(), data)
    state = %{state | client: client, result: {:ok, self()}}
    if state.waiting, do: GenServer.reply(state.waiting, {:ok, self()})
    {:noreply, state}
  end

  def handle_info({:raknet_connect_failed, conn, reason}, %{conn: conn} = state) do
    if state.waiting, do: GenServer.reply(state.waiting, {:error, reason})
    {:stop, :normal, %{state | result: {:error, reason}}}
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}
  def handle_info(_other, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{conn: conn}) do
    # Normal stops follow a disconnect; anything else (a crash, a shutdown) closes the
    # connection gracefully. The runtime also closes it when this process is gone.
    Native.conn_close(conn)
  end

  defp optional(client, name, args) do
    impl = RakNet.Client.impl_for(client)

    if impl && function_exported?(impl, name, length(args) + 1),
      do: apply(impl, name, [client | args])
  end

  defp mailbox_empty? do
    match?({:message_queue_len, 0}, Process.info(self(), :message_queue_len))
  end
end
