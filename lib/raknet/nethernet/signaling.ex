defmodule RakNet.NetherNet.Signaling do
  @moduledoc """
  NetherNet's HTTP signaling for a `RakNet.Server` started with `:nethernet` (see
  `RakNet.NetherNet.Options`): `GET /v1/join` answers the server's status as JSON,
  `POST /v1/join/{networkId}` takes a WebRTC offer (`application/sdp`) and answers with the
  server's SDP, identity assertion included.

  One process per request, at most `:max_http_connections` at once and
  `:max_http_connections_per_ip` from one address (more are answered 503 and closed); a
  request must arrive within `:http_timeout_ms`, its head within 8 KiB and an
  offer within 16 KiB; offers per IP per second are limited (429). The sessions themselves
  live in the runtime, on the server's UDP socket.
  """

  use GenServer
  require Logger

  alias RakNet.NetherNet.Options

  @max_head 8 * 1024
  @max_headers 64
  @max_body 16 * 1024
  @answer_timeout 5_000

  @doc false
  def start_link(args), do: GenServer.start_link(__MODULE__, args)

  @doc "The TCP port signaling listens on."
  @spec port(pid()) :: :inet.port_number()
  def port(pid), do: GenServer.call(pid, :port)

  @doc "Replace the status fields `GET /v1/join` answers (see `RakNet.NetherNet.Options`)."
  @spec set_status(pid(), map()) :: :ok
  def set_status(pid, status) when is_map(status), do: GenServer.call(pid, {:status, status})

  @impl GenServer
  # `sites`: `[{family, endpoint, udp_port, bind_ip}]`, one per address family the server
  # serves NetherNet on (its endpoint hosting the sessions): a listener each, and an offer
  # goes to the endpoint of the family it came in on.
  def init({%Options{} = opts, sites, count_players, max_players}) do
    transport = if opts.tls, do: :ssl, else: :gen_tcp

    case listen_all(transport, opts, sites, []) do
      {:ok, listeners} ->
        me = self()

        for l <- listeners,
            do: spawn_link(fn -> accept_loop(me, transport, l.listen, l.family) end)

        {:ok,
         %{
           opts: opts,
           endpoints: Map.new(listeners, &{&1.family, &1.endpoint}),
           transport: transport,
           listeners: listeners,
           port: hd(listeners).port,
           status: opts.status,
           count_players: count_players,
           max_players: max_players,
           active: %{},
           evicted: 0,
           refused: 0,
           limited: 0,
           offers: %{},
           window: now_s()
         }}

      {:error, reason} ->
        {:stop, {:nethernet_signaling, reason}}
    end
  end

  defp listen_all(_transport, _opts, [], acc), do: {:ok, Enum.reverse(acc)}

  defp listen_all(transport, opts, [{family, endpoint, udp_port, bind_ip} | rest], acc) do
    # :ip is signaling's own address for its family; the server's otherwise.
    ip =
      case opts.ip do
        ip when tuple_size(ip) == 4 and family == :inet -> ip
        ip when tuple_size(ip) == 8 and family == :inet6 -> ip
        _ -> bind_ip
      end

    listen_opts =
      [family, :binary, active: false, reuseaddr: true, ip: ip, backlog: 128] ++
        if(family == :inet6, do: [ipv6_v6only: true], else: []) ++
        if opts.tls, do: [certfile: opts.tls[:certfile], keyfile: opts.tls[:keyfile]], else: []

    case transport.listen(opts.port || udp_port, listen_opts) do
      {:ok, listen} ->
        {:ok, {_, port}} = sockname(transport, listen)
        l = %{family: family, endpoint: endpoint, listen: listen, port: port}
        listen_all(transport, opts, rest, [l | acc])

      {:error, reason} ->
        Enum.each(acc, &close(transport, &1.listen))
        {:error, {family, reason}}
    end
  end

  @doc """
  Signaling's counters: `:port`, `:active` requests, and since it started `:refused` (503:
  no slot for the address or in all), `:evicted` (slow requests that gave their slot to a
  new one), `:offers_limited` (429).
  """
  @spec stats(pid()) :: map()
  def stats(pid), do: GenServer.call(pid, :stats)

  @impl GenServer
  def handle_call(:port, _from, state), do: {:reply, state.port, state}

  def handle_call(:stats, _from, state) do
    stats = %{
      port: state.port,
      ports: Map.new(state.listeners, &{&1.family, &1.port}),
      active: map_size(state.active),
      refused: state.refused,
      evicted: state.evicted,
      offers_limited: state.limited
    }

    {:reply, stats, state}
  end

  def handle_call({:status, status}, _from, state),
    do: {:reply, :ok, %{state | status: Map.merge(state.status, status)}}

  # A connection accepted: served by a process of its own if there is room for its address
  # (one address cannot hold every slot with requests it never finishes) and in all. When
  # every slot is taken, the request that has been arriving longest gives way if that is
  # longer than `:slow_request_ms`, or at once for an address that holds no slot: slow
  # requests from many addresses cannot lock signaling up, while requests that arrive at
  # once (a client's takes a millisecond) are served.
  def handle_call({:accepted, socket, ip, family}, _from, state) do
    per_ip = Enum.count(state.active, fn {_ref, slot} -> slot.ip == ip end)

    state =
      if per_ip < state.opts.max_http_connections_per_ip,
        do: make_room(state, per_ip == 0),
        else: state

    if map_size(state.active) >= state.opts.max_http_connections or
         per_ip >= state.opts.max_http_connections_per_ip do
      respond(state.transport, socket, 503, "text/plain", "busy")
      {:reply, :closed, %{state | refused: state.refused + 1}}
    else
      context = %{
        transport: state.transport,
        endpoint: Map.fetch!(state.endpoints, family),
        endpoints: state.endpoints,
        opts: state.opts,
        server: self(),
        status: status_json(state)
      }

      {pid, ref} = spawn_monitor(fn -> serve(context) end)
      slot = %{pid: pid, ip: ip, since: now_ms(), reading: true}
      {:reply, {:handover, pid}, %{state | active: Map.put(state.active, ref, slot)}}
    end
  end

  # A request was read whole: its process no longer waits on the client.
  def handle_call(:read, {pid, _}, state) do
    active =
      Map.new(state.active, fn
        {ref, %{pid: ^pid} = slot} -> {ref, %{slot | reading: false}}
        other -> other
      end)

    {:reply, :ok, %{state | active: active}}
  end

  # An offer from `ip`: within its rate?
  def handle_call({:offer, ip}, _from, state) do
    state = roll_window(state)
    count = Map.get(state.offers, ip, 0)

    if count >= state.opts.offers_per_ip_per_sec do
      {:reply, :limited, %{state | limited: state.limited + 1}}
    else
      {:reply, :ok, %{state | offers: Map.put(state.offers, ip, count + 1)}}
    end
  end

  @impl GenServer
  def handle_info({:DOWN, ref, :process, _pid, _reason}, state),
    do: {:noreply, %{state | active: Map.delete(state.active, ref)}}

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}
  def handle_info(_other, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, state) do
    Enum.each(state.listeners, &close(state.transport, &1.listen))
  end

  defp roll_window(state) do
    now = now_s()
    if now == state.window, do: state, else: %{state | offers: %{}, window: now}
  end

  defp now_s, do: System.monotonic_time(:second)
  defp now_ms, do: System.monotonic_time(:millisecond)

  # All slots taken: the request that has been reading longest goes, if past
  # :slow_request_ms, or whatever its age for a `newcomer` (an address without a slot).
  defp make_room(state, newcomer) do
    if map_size(state.active) < state.opts.max_http_connections do
      state
    else
      cutoff = if newcomer, do: :infinity, else: now_ms() - state.opts.slow_request_ms

      state.active
      |> Enum.filter(fn {_ref, slot} -> slot.reading and slot.since <= cutoff end)
      |> Enum.min_by(fn {_ref, slot} -> slot.since end, fn -> nil end)
      |> case do
        nil ->
          state

        {ref, slot} ->
          Process.demonitor(ref, [:flush])
          Process.exit(slot.pid, :kill)
          %{state | active: Map.delete(state.active, ref), evicted: state.evicted + 1}
      end
    end
  end

  # -- accepting -------------------------------------------------------------------------

  defp accept_loop(server, transport, listen, family) do
    case accept(transport, listen) do
      {:ok, socket} ->
        ip =
          case peername(transport, socket) do
            {:ok, {ip, _port}} -> ip
            _ -> nil
          end

        case GenServer.call(server, {:accepted, socket, ip, family}) do
          {:handover, pid} ->
            case controlling_process(transport, socket, pid) do
              :ok -> send(pid, {:go, socket})
              {:error, _} -> close(transport, socket)
            end

          :closed ->
            close(transport, socket)
        end

        accept_loop(server, transport, listen, family)

      {:error, :closed} ->
        :ok

      {:error, _transient} ->
        accept_loop(server, transport, listen, family)
    end
  end

  defp accept(:gen_tcp, listen), do: :gen_tcp.accept(listen)

  # The TLS handshake happens in the request's own process (a slow client must not hold up
  # the acceptor): here only the transport-level accept.
  defp accept(:ssl, listen), do: :ssl.transport_accept(listen)

  # -- one request -----------------------------------------------------------------------

  defp serve(context) do
    receive do
      {:go, socket} ->
        deadline = System.monotonic_time(:millisecond) + context.opts.http_timeout_ms

        with {:ok, socket} <- handshake(context.transport, socket, deadline),
             {:ok, request} <- read_request(context.transport, socket, deadline) do
          handle_request(context, socket, request, deadline)
          close(context.transport, socket)
        else
          _ -> close(context.transport, socket)
        end
    after
      context.opts.http_timeout_ms -> :ok
    end
  end

  defp handshake(:gen_tcp, socket, _deadline), do: {:ok, socket}
  defp handshake(:ssl, socket, deadline), do: :ssl.handshake(socket, left(deadline))

  defp left(deadline), do: max(deadline - System.monotonic_time(:millisecond), 0)

  defp read_request(transport, socket, deadline) do
    :ok = setopts(transport, socket, packet: :http_bin, packet_size: @max_head)

    with {:ok, {:http_request, method, {:abs_path, path}, _version}} <-
           recv(transport, socket, 0, deadline),
         {:ok, headers} <- read_headers(transport, socket, deadline, []) do
      {:ok, %{method: method, path: path, headers: headers}}
    else
      _ -> :error
    end
  end

  defp read_headers(_transport, _socket, _deadline, acc) when length(acc) > @max_headers,
    do: :error

  defp read_headers(transport, socket, deadline, acc) do
    case recv(transport, socket, 0, deadline) do
      {:ok, :http_eoh} ->
        {:ok, acc}

      {:ok, {:http_header, _, name, _, value}} ->
        name = if is_atom(name), do: Atom.to_string(name), else: name
        read_headers(transport, socket, deadline, [{String.downcase(name), value} | acc])

      _ ->
        :error
    end
  end

  defp handle_request(context, socket, %{method: :GET, path: "/v1/join"}, _deadline) do
    read(context)
    respond(context.transport, socket, 200, "application/json", context.status)
  end

  defp handle_request(context, socket, %{method: :POST, path: "/v1/join/" <> id} = req, deadline)
       when id != "" do
    %{transport: transport} = context

    with {:length, {len, ""}} when len in 1..@max_body <-
           {:length, Integer.parse(header(req, "content-length", ""))},
         {:ip, {:ok, {ip, _}}} <- {:ip, peername(transport, socket)},
         {:rate, :ok} <- {:rate, GenServer.call(context.server, {:offer, ip})},
         :ok <- setopts(transport, socket, packet: :raw),
         {:body, {:ok, body}} <- {:body, recv(transport, socket, len, deadline)} do
      read(context)
      candidate = candidate(context.opts, transport, socket)
      tag = :erlang.unique_integer([:positive])

      peer = ip |> :inet.ntoa() |> to_string()

      case RakNet.Native.endpoint_nethernet_offer(
             endpoint_for(context),
             body,
             candidate,
             peer,
             self(),
             tag
           ) do
        :ok ->
          receive do
            {:raknet_nethernet_answer, ^tag, {:ok, answer}} ->
              respond(transport, socket, 200, "application/sdp", answer)

            {:raknet_nethernet_answer, ^tag, {:error, reason}} ->
              respond(transport, socket, 400, "text/plain", reason)
          after
            @answer_timeout -> respond(transport, socket, 503, "text/plain", "no answer")
          end

        {:error, reason} ->
          respond(transport, socket, 400, "text/plain", Atom.to_string(reason))
      end
    else
      {:length, _} -> respond(transport, socket, 413, "text/plain", "offer length")
      {:rate, :limited} -> respond(transport, socket, 429, "text/plain", "slow down")
      _ -> :error
    end
  end

  defp handle_request(context, socket, _request, _deadline),
    do: respond(context.transport, socket, 404, "text/plain", "not found")

  # Tell signaling the request is read: its slot may no longer be given away.
  defp read(context), do: GenServer.call(context.server, :read)

  defp header(%{headers: headers}, name, default),
    do: headers |> List.keyfind(name, 0, {name, default}) |> elem(1)

  # The endpoint whose socket the answer's address is: the configured public address's
  # family's (when the server has a socket of that family), else the one the request came in
  # on.
  defp endpoint_for(%{opts: %Options{public_address: ip}} = context) when ip != nil do
    family = if tuple_size(ip) == 4, do: :inet, else: :inet6
    Map.get(context.endpoints, family, context.endpoint)
  end

  defp endpoint_for(context), do: context.endpoint

  # The address answers name: the configured public one, else the one the client reached
  # signaling at (IPv4-mapped addresses of a dual-stack listener as IPv4).
  defp candidate(%Options{public_address: ip}, _transport, _socket) when ip != nil,
    do: ip |> :inet.ntoa() |> to_string()

  defp candidate(_opts, transport, socket) do
    case sockname(transport, socket) do
      {:ok, {{0, 0, 0, 0, 0, 0xFFFF, a, b}, _}} ->
        to_string(:inet.ntoa({div(a, 256), rem(a, 256), div(b, 256), rem(b, 256)}))

      {:ok, {ip, _}} ->
        ip |> :inet.ntoa() |> to_string()

      _ ->
        nil
    end
  end

  defp respond(transport, socket, status, type, body) do
    reason = %{200 => "OK", 400 => "Bad Request", 404 => "Not Found", 413 => "Payload Too Large"}
    reason = Map.merge(reason, %{429 => "Too Many Requests", 503 => "Service Unavailable"})

    head =
      "HTTP/1.1 #{status} #{reason[status]}\r\ncontent-type: #{type}\r\n" <>
        "content-length: #{byte_size(body)}\r\nconnection: close\r\n\r\n"

    send_data(transport, socket, [head, body])
  end

  # -- status JSON -----------------------------------------------------------------------

  defp status_json(state) do
    s = state.status
    players = state.count_players.()

    %{
      "name" => Map.get(s, :name, "RakNet Server"),
      "protocol" => Map.get(s, :protocol, 0),
      "version" => Map.get(s, :version, ""),
      "level" => Map.get(s, :level, ""),
      "players" => players,
      "maxPlayers" => Map.get(s, :max_players, state.max_players),
      "gameType" => Map.get(s, :game_type, 0)
    }
    |> json()
  end

  @doc false
  # JSON of a flat map of strings, integers and booleans (what the status holds).
  @spec json(map()) :: binary()
  def json(map) when is_map(map) do
    fields =
      map
      |> Enum.sort()
      |> Enum.map(fn {k, v} -> [json_string(to_string(k)), ?:, json_value(v)] end)
      |> Enum.intersperse(?,)

    IO.iodata_to_binary([?{, fields, ?}])
  end

  defp json_value(v) when is_integer(v), do: Integer.to_string(v)
  defp json_value(v) when is_float(v), do: Float.to_string(v)
  defp json_value(v) when is_boolean(v), do: Atom.to_string(v)
  defp json_value(nil), do: "null"
  defp json_value(v) when is_binary(v), do: json_string(v)
  defp json_value(v) when is_atom(v), do: json_string(Atom.to_string(v))

  defp json_string(text) do
    escaped =
      for <<c::utf8 <- text>>, into: "" do
        case c do
          ?" -> "\\\""
          ?\\ -> "\\\\"
          c when c < 0x20 -> "\\u" <> String.pad_leading(Integer.to_string(c, 16), 4, "0")
          c -> <<c::utf8>>
        end
      end

    [?", escaped, ?"]
  end

  # -- transport -------------------------------------------------------------------------

  defp recv(transport, socket, len, deadline), do: transport.recv(socket, len, left(deadline))
  defp setopts(:gen_tcp, socket, opts), do: :inet.setopts(socket, opts)
  defp setopts(:ssl, socket, opts), do: :ssl.setopts(socket, opts)
  defp sockname(:gen_tcp, socket), do: :inet.sockname(socket)
  defp sockname(:ssl, socket), do: :ssl.sockname(socket)
  defp peername(:gen_tcp, socket), do: :inet.peername(socket)
  defp peername(:ssl, socket), do: :ssl.peername(socket)
  defp send_data(transport, socket, data), do: transport.send(socket, data)
  defp close(transport, socket), do: transport.close(socket)
  defp controlling_process(transport, socket, pid), do: transport.controlling_process(socket, pid)
end
