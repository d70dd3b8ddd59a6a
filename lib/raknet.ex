defmodule RakNet do
  @moduledoc """
  RakNet, the UDP game networking protocol of official RakNet and Minecraft Bedrock, for
  Elixir: reliable, ordered, sequenced and unreliable messages on 32 channels, large
  messages split and reassembled, congestion control and clock synchronisation.

  The protocol engine is written in Rust and runs in a NIF on its own threads, which
  `mix compile` builds with cargo; Elixir applications see plain supervised processes and
  messages. Each connection is a process running your handler:

      defmodule MyGame.Player do
        use RakNet.Handler

        @impl RakNet.Handler
        def handle_message(0x86, text, _transit_ms, state) do
          RakNet.Connection.send(self(), :reliable_ordered, <<0x86, text::binary>>)
          {:noreply, state}
        end
      end

      children = [{RakNet.Server, [MyGame.Player, 19132, name: MyGame.Server]}]
      Supervisor.start_link(children, strategy: :one_for_one)

  and a client connects to any RakNet server:

      {:ok, conn} = RakNet.connect("127.0.0.1", 19132)
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x86, "hi">>)

  ## Where things are

    * Servers: `RakNet.Server` (and its options, `RakNet.Server.Config`); handlers:
      `RakNet.Handler`, or X-Plane's `RakNet.Client` protocol.
    * Sending and connections: `RakNet.Connection`, `broadcast/4`, `RakNet.Group`.
    * Game packets as structs: `RakNet.Packet`, `RakNet.Packet.Set`.
    * Minecraft Bedrock: `RakNet.Bedrock.Motd`; pings: `RakNet.Ping`.
    * Operations: `RakNet.Telemetry`, `mix raknet.top`, `mix raknet.ping`, `mix raknet.load`.

  The guides (getting started, game servers, Bedrock, cluster, X-Plane migration,
  security, options, performance) are in `docs/`.
  """

  @typedoc """
  A description of the loaded native library:

    * `:version` - the version of the `raknet-nif` crate, which matches this library's version
    * `:nif_version` - the Erlang NIF API version the library was built against; any VM whose
      `:erlang.system_info(:nif_version)` is this or newer can load it
    * `:protocol_versions` - the RakNet protocol versions the server side accepts
  """
  @type build_info :: %{
          version: String.t(),
          nif_version: String.t(),
          protocol_versions: [non_neg_integer()]
        }

  @doc """
  Returns a description of the loaded native library; see `t:build_info/0`.

  Calling it is also the quickest check that the NIF was built and loads.

  ## Examples

      iex> RakNet.build_info()
      %{version: "0.1.0", nif_version: "2.15", protocol_versions: [6, 10, 11]}

  """
  @spec build_info() :: build_info()
  defdelegate build_info(), to: RakNet.Native

  @doc """
  Returns the bytes the native library holds right now, for every server and client endpoint
  of this VM: protocol engines, send and receive queues, reassembly buffers. It is the native
  counterpart of `:erlang.memory(:total)` (which does not include it); kernel socket buffers
  are in neither.

  ## Examples

      iex> RakNet.native_memory() > 0
      true
  """
  @spec native_memory() :: non_neg_integer()
  defdelegate native_memory(), to: RakNet.Native

  @doc """
  Connects to a RakNet server (official RakNet, Minecraft Bedrock, or a `RakNet.Server`).

  Options:

    * `:client` - `{ClientModule, client_data}`: run a `RakNet.Client` implementation in a
      `RakNet.Connection` process, exactly as a server does for its clients, and return
      `{:ok, connection_pid}`;
    * without `:client`, the caller owns the connection and receives
      `{:raknet, conn, type, payload, transit_time}`, `{:raknet_receipt, conn, id, :acked | :lost}`
      and `{:raknet_disconnect, conn, reason}` itself; the result is `{:ok, conn}`, a handle
      that every `RakNet.Connection` function takes (keeping up with its mailbox is then the
      caller's job: no delivery budget applies);
    * `:timeout` - ms to wait for the handshake at most (default 10 000). A server that
      never answers fails the handshake sooner, after 6 s (4 attempts at each of 3 MTU
      sizes, 500 ms apart), with `{:error, :timeout}` too;
    * `:congestion_control` - `:reno` (default, as official RakNet) or `:bbr`, how fast this
      side sends (see the server option of the same name): `:bbr` keeps bulk transfers fast
      over paths with random loss;
    * `:proxy_header` - `[mode: :v2_first | :v2_every | :spectrum, source: {ip, port}]`:
      speak to the server as a UDP proxy would, with a header naming `source` as the client
      (PROXY protocol v2 on the handshake's datagrams or on every datagram, or Spectrum's
      SPP header on every datagram). For tests of servers behind proxies, and for proxies
      written in Elixir. The server must trust this side's address (its `:proxy_protocol`).
    * `:transport` - `:raknet` (default) or `:nethernet`: Bedrock's WebRTC transport, its
      offer sent to the server's HTTP signaling (`POST /v1/join/{id}`, plain HTTP) on
      `:signaling_port` (default `port`); the server's identity assertion must verify (its
      token self-signed by its `cpk`, the answer's fingerprints signed by the same key), and
      `info/1` then carries its claims (`cpk` is the key a Minecraft client pins). Messages,
      reliabilities and receipts as on a server's NetherNet connections (see the NetherNet
      guide). `:identity` - `[token: jwt, key_pem: pem, domain: string]`: the player's
      assertion the offer carries (the token, from an auth service, names the public half of
      `key_pem`, a P-384 PKCS#8 key, as its `cpk`). `:batch_header` - `0xFE` for a Bedrock
      server: its batches come and go without RakNet's game-packet byte on NetherNet, and
      this puts it back in front of each message received and takes it off each message sent
      that starts with it, so the code that speaks Bedrock over RakNet speaks it here
      unchanged (default `nil`: messages as they travel). Failures: `{:error, {:signaling,
      reason}}` (the TCP connection or the HTTP
      exchange), `{:error, {:signaling, status, body}}` (refused),
      `{:error, {:protocol_violation, why}}` (an answer whose assertion does not verify).

  An unknown option raises `ArgumentError`. Failures:
  `{:error, {:incompatible_protocol, server_version}}`,
  `:no_free_incoming_connections`, `:banned`, `:already_connected`, `:ip_recently_connected`,
  `:security_required`, `:timeout`, `:nxdomain` (the name does not resolve).

      {:ok, conn} = RakNet.connect("127.0.0.1", 19132)
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x86, "hi">>)

      receive do
        {:raknet, ^conn, 0x86, "hi", _transit} -> :echoed
      end
  """
  @spec connect(String.t() | :inet.ip_address(), :inet.port_number(), keyword()) ::
          {:ok, pid() | reference()} | {:error, term()}
  def connect(host, port, opts \\ []) when is_integer(port) and port in 1..65_535 do
    # A misspelt option (`timout:`) raises instead of being ignored.
    Keyword.validate!(opts, [
      :client,
      :timeout,
      :congestion_control,
      :proxy_header,
      :transport,
      :signaling_port,
      :identity,
      :batch_header
    ])

    timeout = Keyword.get(opts, :timeout, 10_000)
    native = native_connect_opts(opts)

    native =
      case Keyword.get(opts, :transport, :raknet) do
        :raknet ->
          for key <- [:signaling_port, :identity, :batch_header],
              Keyword.has_key?(opts, key),
              do: raise(ArgumentError, "#{inspect(key)} is an option of transport: :nethernet")

          native

        :nethernet ->
          header = opts[:batch_header]

          unless is_nil(header) or header in 0..255,
            do:
              raise(ArgumentError, ":batch_header must be a byte or nil, got: #{inspect(header)}")

          opts =
            Keyword.take(opts, [:signaling_port, :identity, :batch_header]) ++
              [timeout: timeout]

          Map.put(native, :nethernet, opts)

        other ->
          raise ArgumentError, ":transport must be :raknet or :nethernet, got: #{inspect(other)}"
      end

    with {:ok, ip} <- resolve(host) do
      connect_ip(ip, port, opts, native, timeout, [])
    end
  end

  # A socket holds one connection per server address: the checkout skips endpoints that have
  # one to this server (they say so for as long as it lives) and reserves the one it returns
  # until the connect has returned. A server that still holds a connection from that socket's
  # address (one it closed and is still lingering on, unacknowledged: a ban does that) answers
  # :already_connected; the connect then goes through another socket, which is another client
  # to the server (up to 3 attempts, each through an endpoint not tried yet). :address_in_use,
  # which the bookkeeping leaves no room for, is retried the same way.
  @retried [:already_connected, :address_in_use]

  defp connect_ip(ip, port, opts, native, timeout, tried) do
    with {:ok, endpoint} <- RakNet.ClientEndpoint.checkout(ip, port, tried) do
      address = ip |> :inet.ntoa() |> to_string()

      result =
        try do
          case Keyword.get(opts, :client) do
            {module, data} ->
              connect_client({endpoint, native}, address, port, module, data, timeout)

            nil ->
              connect_raw({endpoint, native}, address, port, timeout)
          end
        after
          RakNet.ClientEndpoint.checkin(endpoint, ip, port)
        end

      case result do
        {:error, reason} when reason in @retried and length(tried) < 2 ->
          connect_ip(ip, port, opts, native, timeout, [endpoint | tried])

        result ->
          result
      end
    end
  end

  defp native_connect_opts(opts) do
    native =
      case Keyword.get(opts, :congestion_control) do
        nil ->
          %{}

        cc when cc in [:reno, :bbr] ->
          %{congestion_control: cc}

        other ->
          raise ArgumentError,
                ":congestion_control must be :reno or :bbr, got: #{inspect(other)}"
      end

    case Keyword.get(opts, :proxy_header) do
      nil -> native
      header -> Map.put(native, :send_proxy_header, proxy_header(header))
    end
  end

  defp proxy_header(header) do
    with true <- Keyword.keyword?(header),
         mode when mode in [:v2_first, :v2_every, :spectrum] <- header[:mode],
         {ip, port} when is_integer(port) and port in 1..65_535 <- header[:source],
         {:ok, ip} <- RakNet.Server.Config.parse_ip(ip) do
      %{mode: mode, ip: ip |> :inet.ntoa() |> to_string(), port: port}
    else
      _ ->
        raise ArgumentError,
              ":proxy_header must be [mode: :v2_first | :v2_every | :spectrum, " <>
                "source: {ip, port}], got: #{inspect(header)}"
    end
  end

  defp connect_raw({endpoint, native}, address, port, timeout) do
    with {:ok, conn} <- open(endpoint, address, port, self(), native) do
      receive do
        {:raknet_connected, ^conn, _info} -> {:ok, conn}
        {:raknet_connect_failed, ^conn, reason} -> {:error, reason}
      after
        timeout -> abandon(conn)
      end
    end
  end

  @doc false
  # Open a connection of either transport on `endpoint` for `owner`.
  @spec open(reference(), String.t(), :inet.port_number(), pid(), map()) ::
          {:ok, reference()} | {:error, term()}
  def open(endpoint, address, port, owner, %{nethernet: opts} = _native) do
    {:ok, ip} = :inet.parse_address(String.to_charlist(address))
    RakNet.NetherNet.Connect.open(endpoint, ip, port, opts, owner, opts[:timeout])
  end

  def open(endpoint, address, port, owner, native),
    do: RakNet.Native.endpoint_connect(endpoint, address, port, owner, native)

  # A connect that timed out: the close's own {:raknet_connect_failed, ...} (and any late
  # {:raknet_connected, ...}) goes to a process that drops it, not to the caller's mailbox.
  defp abandon(conn) do
    sink =
      spawn(fn ->
        receive do
          {:raknet_connect_failed, ^conn, _} -> :ok
          {:raknet_disconnect, ^conn, _} -> :ok
        after
          30_000 -> :ok
        end
      end)

    _ = RakNet.Native.conn_set_owner(conn, sink)
    RakNet.Native.conn_close(conn)

    # What came before the owner changed (a failure or a success at the last moment).
    receive do
      {:raknet_connected, ^conn, _} -> :ok
      {:raknet_connect_failed, ^conn, _} -> :ok
    after
      0 -> :ok
    end

    {:error, :timeout}
  end

  defp connect_client({endpoint, native}, address, port, module, data, timeout) do
    handler = RakNet.Handler.spec!(module)
    # The connection process takes a datagram's messages in one Erlang message.
    native = Map.put(native, :batch_delivery, true)
    spec = {RakNet.Connection, {:connect, {endpoint, native}, address, port, handler, data}}

    with {:ok, pid} <- DynamicSupervisor.start_child(RakNet.ClientSupervisor, spec) do
      try do
        GenServer.call(pid, :"$raknet_await_connected", timeout)
      catch
        :exit, {:timeout, _} ->
          RakNet.Connection.close(pid)
          {:error, :timeout}

        :exit, _ ->
          {:error, :closed}
      end
    end
  end

  @doc """
  Sends `message` to many connections with one call: the binary is copied once and shared
  by every recipient's queue, and each endpoint thread is woken once.

  `connections` holds connection pids, handles, or the maps `RakNet.Server.connections/1`
  and `RakNet.Server.lookup/3` return, of any node of the cluster: another node gets the
  message once, with its list of connections (one message per node, not per connection),
  and broadcasts it there in the order the calling process sent it (see
  `RakNet.Connection.send/4` for order across nodes). Anything else raises `ArgumentError`,
  as does a handle of another node's connection (a handle is only usable on its own node:
  give the pid).

  Connections that have closed, are over their send budget, or would need more fragments
  than their peer reassembles or more bytes than their server's `:max_message_bytes` (see
  `RakNet.Connection.send/4`), are skipped. Returns `{:ok, count}`: the connections of this
  node it was queued for, plus those of other nodes it was handed on for (their closed
  connections are skipped there, uncounted; a node that is not connected is skipped and
  not counted). `{:error, reason}` for bad arguments (`:too_large` when too large for every
  open connection of this node given; `:bad_reliability` also for the `*_ack_receipt`
  reliabilities: a receipt belongs to one send). Options as `RakNet.Connection.send/4`
  (`:channel`, `:priority`).

      {:ok, 3} = RakNet.broadcast([player1, player2, player3], :unreliable_sequenced, position)
      {:ok, _} = RakNet.broadcast(RakNet.Server.connections(server), :reliable_ordered, motd)

  To send to every player of a server but some, see `RakNet.Server.broadcast/4`; to a zone
  or room, `RakNet.Group.broadcast/4`.
  """
  @spec broadcast([pid() | reference() | map()], atom(), binary(), keyword()) ::
          {:ok, non_neg_integer()} | {:error, atom() | {:unknown_option, term()}}
  def broadcast(connections, reliability, message, opts \\ [])

  def broadcast(_connections, _reliability, message, _opts) when not is_binary(message),
    do: {:error, :not_binary}

  def broadcast(connections, reliability, message, opts) when is_list(connections) do
    with {:ok, channel, priority} <- RakNet.Connection.check_send(reliability, opts, :broadcast) do
      {handles, remote} = split_by_node(connections)

      # This node's connections first: an error there (a message too large for all of them)
      # comes before any other node was handed the message. Each connection's limit is
      # checked by the NIF: too large for every one of them is {:error, :too_large}.
      local =
        if handles == [] and remote != %{},
          do: {:ok, 0},
          else: RakNet.Native.broadcast(handles, reliability, channel, priority, message)

      with {:ok, sent} <- local do
        handed =
          for {node, pids} <- remote,
              RakNet.Relay.broadcast(node, pids, reliability, message, opts),
              reduce: 0,
              do: (n -> n + length(pids))

        {:ok, sent + handed}
      end
    end
  end

  def broadcast(connections, _reliability, _message, _opts),
    do: raise(ArgumentError, "expected a list of connections, got: #{inspect(connections)}")

  # This node's connections as handles (a pid the registry does not know has closed: left
  # out), other nodes' as pids grouped by node.
  defp split_by_node(connections) do
    here = node()

    Enum.reduce(connections, {[], %{}}, fn connection, {handles, remote} ->
      case connection do
        conn when is_reference(conn) and node(conn) == here ->
          {[conn | handles], remote}

        pid when is_pid(pid) and node(pid) == here ->
          case RakNet.Connection.Registry.lookup(pid) do
            {:ok, conn} -> {[conn | handles], remote}
            :error -> {handles, remote}
          end

        pid when is_pid(pid) ->
          {handles, Map.update(remote, node(pid), [pid], &[pid | &1])}

        %{pid: pid, conn: conn} when is_pid(pid) and node(pid) == here and is_reference(conn) ->
          {[conn | handles], remote}

        %{pid: pid} when is_pid(pid) ->
          {handles, Map.update(remote, node(pid), [pid], &[pid | &1])}

        conn when is_reference(conn) ->
          raise ArgumentError,
                "#{inspect(conn)} is a handle of a connection of #{node(conn)}: " <>
                  "give its pid to reach it from #{here}"

        other ->
          raise ArgumentError,
                "expected a connection pid, handle or map, got: #{inspect(other)}"
      end
    end)
  end

  defp resolve(host) when is_tuple(host), do: {:ok, host}

  defp resolve(host) do
    with {:error, _} <- :inet.getaddr(to_charlist(host), :inet),
         {:error, _} <- :inet.getaddr(to_charlist(host), :inet6) do
      {:error, :nxdomain}
    end
  end
end
