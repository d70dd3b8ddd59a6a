defmodule RakNet.Server.Listener do
  @moduledoc false
  # Owns a server's endpoints (sockets + engines) and starts a RakNet.Connection for every
  # client that completes the handshake.
  # The listener bounds its own terminate (its stop wait); the supervisor waits for it.
  use GenServer, shutdown: :infinity

  require Logger

  alias RakNet.Native
  alias RakNet.Server.Config

  # How long stopping waits for peers to acknowledge their disconnection notifications.
  @stop_wait 3_000
  # How long past that the listener waits for its endpoints to say they stopped.
  @stop_margin 1_000
  # The longest a stop waits for the handlers' handle_shutdown/2.
  @shutdown_wait 1_000

  def start_link(args), do: GenServer.start_link(__MODULE__, args)

  @impl GenServer
  def init({%Config{} = config, supervisor, connections}) do
    Process.flag(:trap_exit, true)
    warn_ignored(config)
    warn_open_ipv6(config)
    warn_pong_size(config, config.offline_ping_response)

    # A listener that restarts opens its sockets with what the operator changed since the
    # server started (the rest, bans and suspension, right after).
    overrides = seed_bans(RakNet.Connection.Registry.overrides(supervisor), config, supervisor)

    config = %{
      config
      | max_connections: Map.get(overrides, :max_connections, config.max_connections),
        offline_ping_response:
          Map.get(overrides, :offline_ping_response, config.offline_ping_response),
        # One GUID for both sockets: clients see one server, and the sockets share the table
        # that keeps each client GUID one peer's.
        server_identifier: config.server_identifier || :rand.uniform(0xFFFF_FFFF_FFFF_FFFF)
    }

    families =
      [{config.open_ipv4_socket, :inet}, {config.open_ipv6_socket, :inet6}]
      |> Enum.filter(&elem(&1, 0))
      |> Enum.map(&elem(&1, 1))

    # Both sockets' endpoints share one group in the runtime: one connection limit, one
    # per-IP count and one pair of memory budgets for the whole server.
    group = :erlang.unique_integer([:positive])

    # NetherNet rides every family's sockets: each family's first endpoint hosts its sessions.
    nethernet =
      if config.nethernet,
        do: RakNet.NetherNet.Options.to_native(config.nethernet, load_key(config.nethernet))

    case open(config, families, group, [], nethernet) do
      {:ok, endpoints} ->
        schedule_telemetry(config)
        RakNet.Connection.Registry.register_server(supervisor)

        state = %{
          config: config,
          supervisor: supervisor,
          endpoints: endpoints,
          connections: connections,
          handler: RakNet.Handler.spec!(config.client_module),
          # The server's stats at the last :stats event.
          telemetry: %{},
          # What GameSpy4 Query answers (`query: true`), and the process answering the
          # datagrams that are not RakNet (`:query`, `:raw_handler`), if any.
          query_info: Map.get(overrides, :query_info, query_info(config)),
          raw: nil
        }

        state = state |> start_raw() |> start_signaling()

        {:ok, reapply(state, overrides)}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  # What the operator changed while the server runs (suspend/1, set_max_connections/2,
  # set_offline_ping_response/2, ban/3, unban/2) is kept beside the server's registry rows,
  # and applied again by a listener that restarts (after an endpoint's thread failed, say):
  # a restart lifted every ban and resumed a suspended server.
  defp remember(state, fun) do
    overrides = RakNet.Connection.Registry.overrides(state.supervisor)
    RakNet.Connection.Registry.put_overrides(state.supervisor, fun.(overrides))
  end

  # The `:bans` option, on the server's first start: from then on they are the operator's
  # bans like any other (an unban lifts one for good, also across a restart).
  defp seed_bans(%{bans: _} = overrides, _config, _supervisor), do: overrides

  defp seed_bans(overrides, config, supervisor) do
    bans = Map.new(config.bans, &{ban_key(&1), {&1, :infinity}})
    overrides = Map.put(overrides, :bans, bans)
    RakNet.Connection.Registry.put_overrides(supervisor, overrides)
    overrides
  end

  defp reapply(state, overrides) do
    for {_, ep} <- state.endpoints do
      if Map.get(overrides, :suspended), do: Native.endpoint_set_suspended(ep, true)

      if pong = overrides[:offline_ping_response],
        do: Native.endpoint_set_offline_ping_response(ep, pong)

      if max = overrides[:max_connections], do: Native.endpoint_set_max_connections(ep, max)

      now = now_ms()

      for {_key, {ban, until}} <- Map.get(overrides, :bans, %{}) do
        case until do
          :infinity -> native_ban(ep, ban, nil)
          until when until > now -> native_ban(ep, ban, until - now)
          _expired -> :ok
        end
      end
    end

    with %{signaling: pid} <- state,
         %{} = status <- overrides[:nethernet_status],
         do: RakNet.NetherNet.Signaling.set_status(pid, status)

    case overrides[:max_connections] do
      nil -> state
      max -> %{state | config: %{state.config | max_connections: max}}
    end
  end

  defp now_ms, do: System.monotonic_time(:millisecond)

  # The saved bans, keyed as the engine keys them (`ban_key/1`), without the expired ones;
  # `ban` nil lifts `key`'s.
  defp save_ban(overrides, key, ban) do
    now = now_ms()

    bans =
      overrides
      |> Map.get(:bans, %{})
      |> Map.reject(fn {_, {_, until}} -> until != :infinity and until <= now end)

    bans = if ban, do: Map.put(bans, key, ban), else: Map.delete(bans, key)
    Map.put(overrides, :bans, bans)
  end

  # A ban of a network (its text) or of a client GUID, in each endpoint.
  defp native_ban(ep, {:guid, guid}, duration),
    do: Native.endpoint_ban_guid(ep, guid, true, duration)

  defp native_ban(ep, text, duration), do: Native.endpoint_ban(ep, text, duration)

  defp native_unban(ep, {:guid, guid}), do: Native.endpoint_ban_guid(ep, guid, false, nil)
  defp native_unban(ep, text), do: Native.endpoint_unban(ep, text)

  # The engine's key: one ban however it was written (an IPv6 address for its /64, an
  # IPv4-mapped address for its IPv4 one).
  defp ban_key({:guid, _} = guid), do: guid

  defp ban_key(text) do
    case Native.ban_key(text) do
      {:ok, key} -> key
      {:error, _} -> text
    end
  end

  # The periodic [:raknet, :server, :stats] event, when telemetry is there to take it.
  defp schedule_telemetry(%Config{telemetry_interval_ms: nil}), do: :ok

  defp schedule_telemetry(config) do
    if RakNet.Telemetry.enabled?(),
      do: Process.send_after(self(), :telemetry, config.telemetry_interval_ms)
  end

  # The first error of `fun` over every endpoint, or :ok.
  defp each_endpoint(state, fun) do
    state.endpoints
    |> Enum.map(fn {_, endpoint} -> fun.(endpoint) end)
    |> Enum.find(:ok, &match?({:error, _}, &1))
  end

  defp warn_pong_size(config, payload) do
    unless Config.pong_fits?(config, payload) do
      Logger.warning(
        "raknet: the offline ping response (#{byte_size(payload)} bytes) makes pongs larger " <>
          "than :pong_amplification (#{config.pong_amplification}) times a ping: pinging " <>
          "clients (server lists) get no answer; shorten it or raise :pong_amplification",
        raknet_port: config.port
      )
    end
  end

  # :ip restricts the IPv4 socket only; say so when the IPv6 socket still takes everything.
  defp warn_open_ipv6(%Config{ipv6_unrestricted: true, ip: ip} = config) do
    Logger.warning(
      "raknet: :ip #{:inet.ntoa(ip)} restricts the IPv4 socket only; the IPv6 socket " <>
        "listens on every interface ([::]); set :ipv6_ip, or open_ipv6_socket: false",
      raknet_port: config.port
    )
  end

  defp warn_open_ipv6(_config), do: :ok

  # X-Plane options that have no meaning here: said once, when the server starts.
  defp warn_ignored(%Config{ignored_options: ignored, port: port}) do
    for option <- ignored do
      Logger.warning(
        "raknet: the X-Plane option #{inspect(option)} is accepted and ignored " <>
          "(#{ignored_reason(option)})",
        raknet_port: port
      )
    end
  end

  defp ignored_reason(:send),
    do: "the Rust runtime owns the sockets, so outgoing datagrams cannot be captured from Elixir"

  defp ignored_reason(_option), do: "X-Plane's library does not use it either"

  defp open(_config, [], _group, acc, _nethernet), do: {:ok, acc}

  # Each family's port is served by endpoints, one per thread.
  defp open(config, [family | rest], group, acc, nethernet) do
    threads = Config.endpoint_threads(config)

    opts =
      config
      |> Config.to_native(family)
      |> Map.put(:server_group, group)
      |> Map.put(:nethernet, nethernet)

    case Native.endpoint_start_group(opts, self(), threads) do
      {:ok, endpoints} ->
        open(config, rest, group, acc ++ Enum.map(endpoints, &{family, &1}), nethernet)

      {:error, reason} ->
        Enum.each(acc, fn {_, endpoint} -> Native.endpoint_stop(endpoint, 0) end)
        {:error, reason}
    end
  end

  @impl GenServer
  def handle_call(:info, _from, state) do
    infos = family_infos(state)
    port = fn family -> infos |> Keyword.get(family, %{}) |> Map.get(:port) end
    count = DynamicSupervisor.count_children(state.connections).active

    info = %{
      ipv4_port: port.(:inet),
      ipv6_port: port.(:inet6),
      connections: count,
      endpoints: Enum.map(infos, &elem(&1, 1)),
      nethernet_port: state[:signaling] && RakNet.NetherNet.Signaling.port(state.signaling),
      nethernet_signaling: state[:signaling] && RakNet.NetherNet.Signaling.stats(state.signaling)
    }

    {:reply, info, state}
  end

  def handle_call({:set_offline_ping_response, data}, _from, state) do
    results =
      Enum.map(state.endpoints, fn {_, endpoint} ->
        Native.endpoint_set_offline_ping_response(endpoint, data)
      end)

    case Enum.find(results, &match?({:error, _}, &1)) do
      nil ->
        warn_pong_size(state.config, data)
        remember(state, &Map.put(&1, :offline_ping_response, data))
        {:reply, :ok, state}

      error ->
        {:reply, error, state}
    end
  end

  def handle_call({:set_nethernet_status, status}, _from, state) do
    case state do
      %{signaling: pid} ->
        remember(
          state,
          &Map.update(&1, :nethernet_status, status, fn s -> Map.merge(s, status) end)
        )

        {:reply, RakNet.NetherNet.Signaling.set_status(pid, status), state}

      _ ->
        {:reply, {:error, :no_nethernet}, state}
    end
  end

  def handle_call({:set_query_info, info}, _from, state) do
    remember(state, &Map.put(&1, :query_info, info))
    if state.raw, do: RakNet.Server.Raw.set_query_info(state.raw, info)
    {:reply, :ok, %{state | query_info: info}}
  end

  def handle_call({:stop_wait, ms}, _from, state),
    do: {:reply, :ok, Map.put(state, :stop_wait, ms)}

  def handle_call({:suspended, suspended}, _from, state) do
    Enum.each(state.endpoints, fn {_, ep} -> Native.endpoint_set_suspended(ep, suspended) end)
    remember(state, &Map.put(&1, :suspended, suspended))
    {:reply, :ok, state}
  end

  def handle_call({:max_connections, max}, _from, state) do
    Enum.each(state.endpoints, fn {_, ep} -> Native.endpoint_set_max_connections(ep, max) end)
    remember(state, &Map.put(&1, :max_connections, max))
    {:reply, :ok, %{state | config: %{state.config | max_connections: max}}}
  end

  def handle_call({:ban, ban, duration}, _from, state) do
    until = if duration, do: now_ms() + duration, else: :infinity
    remember(state, &save_ban(&1, ban_key(ban), {ban, until}))
    {:reply, each_endpoint(state, &native_ban(&1, ban, duration)), state}
  end

  def handle_call({:unban, ban}, _from, state) do
    remember(state, &save_ban(&1, ban_key(ban), nil))
    {:reply, each_endpoint(state, &native_unban(&1, ban)), state}
  end

  def handle_call(:banned, _from, state) do
    bans =
      state.endpoints
      |> Enum.flat_map(fn {_, endpoint} ->
        case Native.endpoint_banned(endpoint) do
          list when is_list(list) -> list
          {:error, _} -> []
        end
      end)
      |> Enum.flat_map(fn
        {{:guid, _} = guid, left} ->
          [{guid, left || :infinity}]

        {text, left} ->
          left = if left, do: left, else: :infinity

          case RakNet.Server.ban_target(text) do
            {:ok, ip, nil} -> [{ip, left}]
            {:ok, ip, len} -> [{{ip, len}, left}]
            {:error, _} -> []
          end
      end)
      |> Enum.uniq_by(&elem(&1, 0))

    {:reply, bans, state}
  end

  @impl GenServer
  def handle_info({:raknet_endpoint, endpoint, :connected, conn, info}, state) do
    case accept(state.config.accept, info) do
      :ok -> start_connection(conn, info, state)
      {:refuse, reason} -> reject(conn, endpoint, reason, state)
    end

    {:noreply, state}
  end

  # A datagram that is not RakNet (`:query`, `:raw_handler`), from an address without a
  # session; the endpoint bounded how many come (per IP and in all) and bounds the reply.
  def handle_info({:raknet_endpoint, endpoint, :raw, from, data}, state) do
    if state.raw, do: RakNet.Server.Raw.offer(state.raw, endpoint, from, data)
    {:noreply, state}
  end

  def handle_info({:raknet_endpoint, _endpoint, :log, level, text}, state) do
    Logger.log(level, "raknet: " <> text, raknet_port: state.config.port)
    {:noreply, state}
  end

  # An endpoint stopped although nobody asked (its thread crashed; the runtime has told every
  # connection process with {:raknet_disconnect, conn, :endpoint_down}): the listener stops so
  # that the server's supervisor starts it again with fresh sockets, or gives up if that keeps
  # happening (its restart intensity), taking the server down with it.
  def handle_info({:raknet_endpoint, endpoint, :stopped}, state) do
    case List.keyfind(state.endpoints, endpoint, 1) do
      {family, ^endpoint} ->
        Logger.error("raknet: the #{family} endpoint of port #{state.config.port} stopped",
          raknet_port: state.config.port
        )

        endpoints = List.keydelete(state.endpoints, endpoint, 1)
        {:stop, {:shutdown, {:endpoint_down, family}}, %{state | endpoints: endpoints}}

      nil ->
        {:noreply, state}
    end
  end

  def handle_info(:telemetry, state) do
    schedule_telemetry(state.config)

    case family_infos(state) do
      [] ->
        {:noreply, state}

      infos ->
        # One event for the server, its sockets added up.
        info = infos |> Enum.map(&elem(&1, 1)) |> merge()
        ports = Map.new(infos, fn {family, info} -> {family, info.port} end)

        metadata = %{
          server: state.supervisor,
          name: state.config.name,
          port: ports[:inet] || ports[:inet6],
          ports: ports
        }

        previous = state.telemetry

        # Emitted from a process of its own: handlers run where the event is emitted, and
        # one that called the server (to put the player count in the MOTD, say) called this
        # process from itself, exited and was detached; a slow one held up every accept.
        spawn(fn -> RakNet.Telemetry.server_stats(metadata, info, previous) end)
        {:noreply, %{state | telemetry: info.stats}}
    end
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}
  def handle_info(_other, state), do: {:noreply, state}

  defp load_key(options) do
    RakNet.NetherNet.Options.load_key!(options)
  rescue
    e in [ArgumentError, File.Error] ->
      reraise ArgumentError, [message: "NetherNet: " <> Exception.message(e)], __STACKTRACE__
  end

  # Signaling for the endpoint hosting the NetherNet sessions (the group's first), linked:
  # it stops with the listener, and takes it down if it fails.
  defp start_signaling(%{config: %Config{nethernet: nil}} = state), do: state

  defp start_signaling(%{config: config} = state) do
    sites =
      for family <- [:inet, :inet6],
          {^family, endpoint} <- [List.keyfind(state.endpoints, family, 0)] do
        %{port: udp_port} = endpoint_info(endpoint)
        bind_ip = if family == :inet, do: config.ip, else: config.ipv6_ip
        {family, endpoint, udp_port, bind_ip}
      end

    connections = state.connections
    count = fn -> DynamicSupervisor.count_children(connections).active end
    args = {config.nethernet, sites, count, config.max_connections}

    case RakNet.NetherNet.Signaling.start_link(args) do
      {:ok, pid} -> Map.put(state, :signaling, pid)
      {:error, reason} -> exit(reason)
    end
  end

  defp query_info(%Config{query: info}) when is_map(info), do: info
  defp query_info(_config), do: %{}

  # Query's `hostport` defaults to the port the server is bound to (port 0 picks one).
  defp start_raw(%{config: %Config{query: false, raw_handler: nil}} = state), do: state

  defp start_raw(state) do
    port =
      Enum.find_value(state.endpoints, fn {_family, endpoint} ->
        case endpoint_info(endpoint) do
          %{port: port} -> port
          _ -> nil
        end
      end)

    %{state | raw: RakNet.Server.Raw.start_link(state.config, state.query_info, port)}
  end

  @impl GenServer
  def terminate(reason, state) do
    # Stopped by the supervisor (the server stops, or restarts its children): calls to the
    # server fail at once from now, rather than wait for a supervisor busy stopping.
    if reason == :shutdown, do: RakNet.Connection.Registry.server_stopping(state.supervisor)
    linger = Map.get(state, :stop_wait, @stop_wait)
    if reason == :shutdown, do: shutdown_handlers(state, min(linger, @shutdown_wait))
    for {_, endpoint} <- state.endpoints, do: Native.endpoint_stop(endpoint, linger)

    # The endpoints' own wait, and a little more for them to close their sockets: once
    # each has said :stopped, its port is free (a restarted listener binds it again).
    deadline = System.monotonic_time(:millisecond) + linger + @stop_margin

    for {_, endpoint} <- state.endpoints do
      wait = max(deadline - System.monotonic_time(:millisecond), 0)

      receive do
        {:raknet_endpoint, ^endpoint, :stopped} -> :ok
      after
        wait -> :ok
      end
    end

    :ok
  end

  # The server stops: a RakNet.Handler with handle_shutdown/2 may still send on its open
  # connection. Each connection process answers once its callback has run; the endpoints
  # close the connections (after what is queued, goodbyes included) when all have, or after
  # `wait` ms.
  defp shutdown_handlers(%{handler: {:handler, module}} = state, wait) do
    if function_exported?(module, :handle_shutdown, 2) do
      ref = make_ref()
      pids = for {pid, _conn} <- RakNet.Connection.Registry.handles(state.supervisor), do: pid
      for pid <- pids, do: send(pid, {:"$raknet_shutdown", self(), ref})
      await_handlers(MapSet.new(pids), ref, System.monotonic_time(:millisecond) + wait)
    end
  end

  defp shutdown_handlers(_state, _wait), do: :ok

  defp await_handlers(pids, ref, deadline) do
    if MapSet.size(pids) > 0 do
      receive do
        {^ref, pid} -> await_handlers(MapSet.delete(pids, pid), ref, deadline)
      after
        max(deadline - System.monotonic_time(:millisecond), 0) -> :ok
      end
    end
  end

  defp start_connection(conn, info, state) do
    info = Map.put(info, :server_name, state.config.name)
    args = {:accepted, conn, state.handler, state.config.client_data, state.supervisor, info}

    case DynamicSupervisor.start_child(state.connections, {RakNet.Connection, args}) do
      {:ok, _pid} ->
        :ok

      :ignore ->
        :ok

      {:error, reason} ->
        Logger.warning("raknet: could not start a connection process: #{inspect(reason)}")
        Native.conn_close(conn)
    end
  end

  # The `:accept` option's verdict on a new connection; anything but :ok or {:refuse, _},
  # a crash included, refuses it (and is logged).
  defp accept(nil, _info), do: :ok

  defp accept(check, info) do
    result =
      case check do
        fun when is_function(fun, 1) -> fun.(info)
        {m, f, a} -> apply(m, f, [info | a])
      end

    case result do
      :ok -> :ok
      {:refuse, _reason} = refuse -> refuse
      other -> bad_verdict(info, "returned #{inspect(other)}")
    end
  catch
    kind, reason ->
      bad_verdict(info, "failed: " <> Exception.format(kind, reason, __STACKTRACE__))
  end

  defp bad_verdict(info, what) do
    Logger.error(
      "raknet: the :accept check for #{inspect(info[:address])} #{what}; " <>
        "expected :ok or {:refuse, reason}: the connection is refused"
    )

    {:refuse, :accept_failed}
  end

  # Closed at once, the peer told; no process starts.
  defp reject(conn, endpoint, reason, state) do
    Native.conn_close_with(conn, :erlang.term_to_binary({:rejected, reason}))
    {family, _} = List.keyfind(state.endpoints, endpoint, 1) || {nil, endpoint}
    meta = %{server: state.supervisor, port: state.config.port, family: family, reason: :rejected}

    # From a process of its own, as the periodic events: a handler may call the server.
    spawn(fn -> RakNet.Telemetry.execute([:raknet, :server, :refused], %{count: 1}, meta) end)
  end

  # Per address family, the info of its endpoint threads added up. An endpoint that cannot
  # answer (its thread just ended) is left out, never a crash here.
  defp family_infos(state) do
    infos =
      for {family, endpoint} <- state.endpoints,
          info = endpoint_info(endpoint),
          is_map(info),
          do: {family, info}

    for family <- infos |> Enum.map(&elem(&1, 0)) |> Enum.uniq() do
      {family,
       infos |> Enum.filter(&(elem(&1, 0) == family)) |> Enum.map(&elem(&1, 1)) |> merge()}
    end
  end

  # Counters and per-second rates add up; the group-wide buffered bytes (every thread reports
  # the same total), RTT percentiles and loss are the worst thread's.
  @not_summed [:buffered_bytes]
  @worst [:rtt_p50_ms, :rtt_p90_ms, :rtt_p99_ms, :rtt_max_ms, :packet_loss]

  defp merge([first | _] = infos) do
    stats =
      infos
      |> Enum.map(&Map.get(&1, :stats, %{}))
      |> Enum.reduce(fn stats, acc ->
        Map.merge(acc, stats, fn
          key, a, b when key in @not_summed -> max(a, b)
          _key, a, b -> a + b
        end)
      end)

    rates =
      infos
      |> Enum.map(&Map.get(&1, :rates, %{}))
      |> Enum.reduce(fn rates, acc ->
        Map.merge(acc, rates, fn
          key, a, b when key in @worst -> max(a, b)
          key, a, b when key in [:worst_rtt, :worst_loss] -> worst(key, a ++ b)
          _key, a, b -> a + b
        end)
      end)

    threads = Enum.map(infos, &%{connections: &1.connections, stats: &1.stats})

    %{
      first
      | connections: infos |> Enum.map(& &1.connections) |> Enum.sum(),
        stats: stats
    }
    |> Map.put(:rates, rates)
    |> Map.put(:threads, threads)
  end

  defp worst(:worst_rtt, list), do: list |> Enum.sort_by(& &1.rtt_ms, :desc) |> Enum.take(5)
  defp worst(:worst_loss, list), do: list |> Enum.sort_by(& &1.packet_loss, :desc) |> Enum.take(5)

  defp endpoint_info(endpoint) do
    Native.endpoint_info(endpoint)
  rescue
    _ -> nil
  end
end
