defmodule RakNet.Packet.Stats do
  @moduledoc false
  # Node-wide counters of packet dispatch, readable from anywhere (RakNet.Packet.Router.stats/0),
  # and warnings that cannot flood the log: per kind of incident at most one line per
  # interval, which carries the count so far. A :counters array and an :atomics array created
  # once by the application and kept in :persistent_term; no process is involved.
  import Bitwise, only: [<<<: 2]
  require Logger

  @kinds [:dispatched, :missed, :unrouted, :overloaded, :decode_errors, :logged]
  @key __MODULE__

  @doc false
  def init do
    counters = :counters.new(length(@kinds), [:write_concurrency])
    last_logged = :atomics.new(length(@kinds), signed: true)
    for i <- 1..length(@kinds), do: :atomics.put(last_logged, i, -(1 <<< 62))
    interval = Application.get_env(:raknet, :packet_log_interval_ms, 1_000)
    :persistent_term.put(@key, {counters, last_logged, interval})
  end

  defp refs, do: :persistent_term.get(@key)

  for {kind, i} <- Enum.with_index(@kinds, 1) do
    defp index(unquote(kind)), do: unquote(i)
  end

  @doc false
  # A packet cast to its target; `[:raknet, :packet, :dispatch]` when telemetry is there (its
  # metadata built only then: this runs for every packet).
  def dispatched(router, packet, target) do
    {counters, _, _} = refs()
    :counters.add(counters, 1, 1)

    if RakNet.Telemetry.enabled?() do
      RakNet.Telemetry.execute([:raknet, :packet, :dispatch], %{count: 1}, %{
        router: router,
        packet: packet,
        target: target
      })
    end

    :ok
  end

  @doc false
  # Counts an incident of `kind`, emits `[:raknet, :packet, :dropped]` (reason `kind`, and
  # `metadata`), and logs `message.()` unless a line for `kind` was logged less than the
  # interval ago.
  def incident(kind, message, metadata \\ %{}) do
    {counters, last_logged, interval} = refs()
    i = index(kind)
    :counters.add(counters, i, 1)

    RakNet.Telemetry.execute(
      [:raknet, :packet, :dropped],
      %{count: 1},
      Map.put(metadata, :reason, kind)
    )

    now = System.monotonic_time(:millisecond)
    last = :atomics.get(last_logged, i)

    if now - last >= interval and :atomics.compare_exchange(last_logged, i, last, now) == :ok do
      :counters.add(counters, index(:logged), 1)

      Logger.warning(
        "raknet packet #{kind}: #{message.()} (#{:counters.get(counters, i)} on this node so far; at most one such line per #{interval} ms)",
        raknet_packet: kind
      )
    end

    :ok
  end

  @doc false
  def get do
    {counters, _, _} = refs()
    Map.new(@kinds, fn kind -> {kind, :counters.get(counters, index(kind))} end)
  end
end
