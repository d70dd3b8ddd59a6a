defmodule RakNet.Telemetry do
  @moduledoc """
  `:telemetry` events of raknet.

  raknet does not depend on the `telemetry` package: when the application running it has
  `telemetry` (most Phoenix and Nerves apps do), the events below are emitted with
  `:telemetry.execute/3`; without it they cost nothing and go nowhere. Attach handlers as
  usual:

      :telemetry.attach_many(
        "my-game-raknet",
        [[:raknet, :connection, :stop], [:raknet, :server, :stats]],
        &MyGame.Metrics.handle_event/4,
        nil
      )

  ## Events

  | event | measurements | metadata |
  |---|---|---|
  | `[:raknet, :connection, :start]` | `:system_time`, `:monotonic_time` | `:pid`, `:server`, `:server_name`, `:role`, `:address`, `:guid`, `:protocol` |
  | `[:raknet, :connection, :stop]` | `:duration` (native time units), `:monotonic_time`, `:messages_in` and `:bytes_in` (handled in all) | as `:start`, and `:reason` (`:peer_closed`, `:timeout`, `:overloaded`, `{:limit_exceeded, _}`, a `close/2` reason, ...) |
  | `[:raknet, :connection, :exception]` | as `:stop` | as `:start`, and `:kind`, `:reason`, `:stacktrace`: the handler crashed |
  | `[:raknet, :server, :stats]` | `:connections`, `:messages_in_per_sec`, `:messages_out_per_sec`, `:bytes_in_per_sec`, `:bytes_out_per_sec`, `:resends_per_sec`, `:packet_loss` (0.0..1.0), `:rtt_p50_ms`, `:rtt_p90_ms`, `:rtt_p99_ms`, `:rtt_max_ms` | `:server`, `:name`, `:port`, `:ports` (`%{inet: port, inet6: port}`) |
  | `[:raknet, :server, :refused]` | `:count` (since the last `:stats`) | as `:stats`, and `:reason` |
  | `[:raknet, :server, :limited]` | `:count` (since the last `:stats`) | as `:stats`, and `:limit` |
  | `[:raknet, :server, :handshake_mode]` | `:count` (changes since the last `:stats`) | as `:stats`, and `:mode` (`:strict` or `:calm`) |
  | `[:raknet, :packet, :dispatch]` | `:count` (1) | `:router`, `:packet` (the module), `:target`: a packet `RakNet.Packet.Router` cast to its target |
  | `[:raknet, :packet, :dropped]` | `:count` (1) | `:router`, `:packet`, `:reason` (`:missed`: no process under the target's name, `:unrouted`, `:overloaded`, `:decode_errors` with `:type` and `:connection`), `:target` |

  `:server` is the server's supervisor pid; `:name` (`:server_name` for connections) its
  `:name` option, `nil` without one. The connection events are a span in the
  `:telemetry.span/3` shape: `:start` with the times, `:stop` or `:exception` with the
  duration.

  `:stats` is emitted by each `RakNet.Server`, for all its sockets together, every
  `:telemetry_interval_ms` (default 1000, see `RakNet.Server.Config`), from a short-lived
  process (a handler may call the server, to put the player count in its MOTD, say);
  `:refused` and `:limited` follow it, one per counter that grew in the interval, and
  `:handshake_mode` when the handshake turned strict (cookies and the time echo required,
  under a spoofed-handshake flood) or calm again in it (see `:use_cookies` in
  `RakNet.Server.Config`; `strict` in the endpoint stats of `RakNet.Server.info/1` is the
  mode now). Refusal reasons:
  `:full` (and `:full_late`: full by the time the client's 0x09 or 0x13 came), `:ip_connections`
  (`:max_connections_per_ip`), `:recently_connected` (`:new_connections_per_ip_per_sec`),
  `:banned`, `:incompatible_protocol`, `:bad_cookie`, `:already_connected`, `:unproven`
  (`:max_unproven`, `:max_unproven_per_ip`), and `:rejected` (the `:accept` option's check;
  emitted at once, with `count: 1` and the connection's `:family`). Limits:
  `:half_open_evicted`, `:half_open_per_ip`, `:handshake_dropped`, `:amplification`,
  `:pongs_rate_limited`, `:pongs_budget`, `:offline_queue_full`, and behind proxies or with
  Query (docs/proxies.md) `:proxy_untrusted_header`, `:proxy_malformed_header`,
  `:proxy_missing_header`, `:proxy_flows_full`, `:raw_rate_limited`,
  `:raw_replies_refused`. Overloaded connections
  (a handler that fell behind for `:client_timeout_ms`) end with a `:stop` whose reason is
  `:overloaded`.
  """

  # The engine counters behind :refused and :limited, by the name the event gives them.
  @refusals [
    full: :refused_full,
    full_late: :refused_full_late,
    ip_connections: :refused_ip_connections,
    recently_connected: :refused_recently_connected,
    banned: :banned,
    incompatible_protocol: :incompatible_protocol,
    bad_cookie: :bad_cookies,
    already_connected: :refused_already_connected,
    unproven: :refused_unproven
  ]

  @modes [strict: :strict_entered, calm: :strict_left]

  @limits [
    half_open_evicted: :half_open_evicted,
    half_open_per_ip: :half_open_per_ip_full,
    handshake_dropped: :handshake_dropped,
    amplification: :amplification_limited,
    pongs_rate_limited: :pongs_rate_limited,
    pongs_budget: :pongs_budget_exhausted,
    offline_queue_full: :offline_queue_full,
    proxy_untrusted_header: :proxy_untrusted_header,
    proxy_malformed_header: :proxy_malformed_header,
    proxy_missing_header: :proxy_missing_header,
    proxy_flows_full: :proxy_flows_full,
    raw_rate_limited: :raw_rate_limited,
    raw_replies_refused: :raw_replies_refused
  ]

  @rates [
    :messages_in_per_sec,
    :messages_out_per_sec,
    :bytes_in_per_sec,
    :bytes_out_per_sec,
    :resends_per_sec,
    :packet_loss,
    :rtt_p50_ms,
    :rtt_p90_ms,
    :rtt_p99_ms,
    :rtt_max_ms
  ]

  @doc """
  Whether events go anywhere: the `:telemetry` module is available. Checked once, then
  remembered (whether a module exists does not change while the node runs).
  """
  @spec enabled?() :: boolean()
  def enabled?, do: module() != nil

  @doc false
  # Tests swap the telemetry module (application env :telemetry_module) and forget the cached
  # choice with this.
  def reset, do: :persistent_term.erase({__MODULE__, :module})

  @doc false
  @spec execute([atom()], map(), map()) :: :ok
  def execute(event, measurements, metadata) do
    case module() do
      nil -> :ok
      mod -> mod.execute(event, measurements, metadata)
    end

    :ok
  end

  defp module do
    case :persistent_term.get({__MODULE__, :module}, :unknown) do
      :unknown ->
        candidate = Application.get_env(:raknet, :telemetry_module, :telemetry)

        mod =
          if Code.ensure_loaded?(candidate) and function_exported?(candidate, :execute, 3),
            do: candidate

        :persistent_term.put({__MODULE__, :module}, mod)
        mod

      mod ->
        mod
    end
  end

  @doc false
  def connection_start(server, info) do
    if enabled?() do
      execute(
        [:raknet, :connection, :start],
        %{system_time: System.system_time(), monotonic_time: System.monotonic_time()},
        connection_metadata(server, info)
      )
    end
  end

  @doc false
  # From a connection's terminate/2: :stop for an end, :exception for a crash.
  def connection_stop(%{started: started} = state, reason) when is_integer(started) do
    if enabled?() do
      now = System.monotonic_time()

      measurements = %{
        duration: now - started,
        monotonic_time: now,
        messages_in: Map.get(state, :total_in, 0),
        bytes_in: Map.get(state, :total_in_bytes, 0)
      }

      metadata = connection_metadata(state.server, state.info)

      case reason do
        {:shutdown, why} ->
          execute([:raknet, :connection, :stop], measurements, Map.put(metadata, :reason, why))

        reason when reason in [:normal, :shutdown] ->
          execute([:raknet, :connection, :stop], measurements, Map.put(metadata, :reason, reason))

        {exception, stacktrace} when is_exception(exception) and is_list(stacktrace) ->
          metadata =
            Map.merge(metadata, %{kind: :error, reason: exception, stacktrace: stacktrace})

          execute([:raknet, :connection, :exception], measurements, metadata)

        other ->
          metadata = Map.merge(metadata, %{kind: :exit, reason: other, stacktrace: []})
          execute([:raknet, :connection, :exception], measurements, metadata)
      end
    end
  end

  def connection_stop(_state, _reason), do: :ok

  defp connection_metadata(server, info) do
    %{
      pid: self(),
      server: server,
      server_name: Map.get(info, :server_name),
      role: if(server, do: :server, else: :client),
      address: Map.get(info, :address),
      guid: Map.get(info, :guid),
      protocol: Map.get(info, :protocol)
    }
  end

  @doc false
  # For a server's listener (from a process it spawns), every :telemetry_interval_ms: the
  # :stats event of the server (its sockets' infos merged), and :refused / :limited /
  # :handshake_mode for the counters that grew since `previous` (the server's stats last
  # time, %{} the first time). `metadata` names the server.
  @spec server_stats(map(), map(), map()) :: :ok
  def server_stats(metadata, info, previous) do
    stats = Map.get(info, :stats, %{})
    rates = Map.get(info, :rates, %{})

    measurements =
      rates
      |> Map.take(@rates)
      |> Map.put(:connections, Map.get(info, :connections, 0))

    execute([:raknet, :server, :stats], measurements, metadata)

    deltas(:refused, :reason, @refusals, stats, previous, metadata)
    deltas(:limited, :limit, @limits, stats, previous, metadata)
    deltas(:handshake_mode, :mode, @modes, stats, previous, metadata)
    :ok
  end

  defp deltas(event, key, counters, stats, previous, metadata) do
    for {name, counter} <- counters,
        count = Map.get(stats, counter, 0) - Map.get(previous, counter, 0),
        count > 0 do
      execute([:raknet, :server, event], %{count: count}, Map.put(metadata, key, name))
    end
  end
end
