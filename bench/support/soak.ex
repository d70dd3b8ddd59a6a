defmodule Bench.Soak do
  @moduledoc """
  The soak run shared by `make soak` (`bench/soak.exs`: 1,000 connections for 10 minutes) and
  its short variant in `make test` (`test/raknet/soak_test.exs`: 100 connections for 30 s).

  It starts a `RakNet.Server` whose handler (`Bench.Soak.Echo`) echoes every message with the
  reliability and on the channel tagged in it, puts `raknet-relay` in front of it (seeded loss,
  duplication and reordering on every path), and runs `raknet-load --verify` through the relay:
  each connection sends one reliable-ordered and one unreliable-sequenced message per tick on
  one channel and checks the echoes by the numbers they carry (see `raknet-load`'s docs).
  Meanwhile the server is sampled: connections, `:erlang.memory(:total)` (after a full
  collection of every process), `RakNet.native_memory/0` and the VM's CPU time.

  The code lives in `bench/support/`, which `mix.exs` compiles in the dev and test
  environments only: both entry points call it (one copy), its `RakNet.Client` implementation
  is compiled (test builds consolidate protocols, so an implementation defined at run time by a
  script would not be dispatched to), and it is not part of the library that apps depend on
  (dependencies compile in prod).
  """

  @root Path.expand("../..", __DIR__)

  @defaults [
    connections: 1_000,
    seconds: 600,
    rate: 5,
    size: 64,
    channel: 2,
    loss: 0.05,
    dup: 0.02,
    reorder: 0.05,
    seed: 1,
    sample_ms: 5_000,
    warmup_s: nil,
    drain_s: 20,
    progress: nil
  ]

  @doc "The binaries' directory: `target/release` (or `$CARGO_TARGET_DIR/release`)."
  def bin_dir do
    target = System.get_env("CARGO_TARGET_DIR") || Path.join(@root, "target")
    Path.join(target, "release")
  end

  @doc "Builds `raknet-load` and `raknet-relay` (release); cargo does nothing when up to date."
  def build! do
    args = ~w(build --release --quiet -p raknet-bench --bin raknet-load --bin raknet-relay)

    {:ok, cargo} = Mix.Tasks.Compile.RaknetNative.find_cargo()

    case System.cmd(cargo, args, cd: @root, stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, status} -> raise "cargo build of raknet-load and raknet-relay: #{status}\n#{out}"
    end
  end

  @doc """
  Runs one soak and returns its measurements (a map; see `report/1` and `failures/1`).

  Options (defaults in brackets): `:connections` [1000], `:seconds` of traffic [600], `:rate`
  ticks per second per connection, each sending both reliabilities [5], `:size` bytes per
  message [64], `:channel` [2], `:loss`, `:dup`, `:reorder` probabilities [0.05, 0.02, 0.05],
  `:seed` [1], `:sample_ms` between server samples [5000], `:warmup_s` before memory counts
  [a sixth of the run, at most 60], `:drain_s` allowed for the last echoes [20], `:progress`
  (a 1-arity function given a line per sample, or nil).
  """
  def run(opts \\ []) do
    opts = Keyword.merge(@defaults, opts)
    warmup = opts[:warmup_s] || min(60, div(opts[:seconds], 6))
    conns = :ets.new(:soak_connections, [:public, :set, write_concurrency: true])
    {server, port} = start_server(opts[:connections], conns)

    relay =
      open(
        "raknet-relay",
        ~w(--target 127.0.0.1:#{port} --loss #{opts[:loss]} --dup #{opts[:dup]}
           --reorder #{opts[:reorder]} --seed #{opts[:seed]}),
        [{:line, 256}, :stderr_to_stdout]
      )

    try do
      relay_port =
        receive do
          {^relay, {:data, {:eol, "RELAY " <> p}}} -> String.to_integer(p)
        after
          10_000 -> raise "raknet-relay did not start"
        end

      load =
        open(
          "raknet-load",
          ~w(--port #{relay_port} --connections #{opts[:connections]} --rate #{opts[:rate]}
             --size #{opts[:size]} --channel #{opts[:channel]} --duration #{opts[:seconds]}
             --drain #{opts[:drain_s]} --verify),
          [:exit_status, :stderr_to_stdout]
        )

      {:os_pid, load_pid} = Port.info(load, :os_pid)
      {:os_pid, relay_pid} = Port.info(relay, :os_pid)
      t0 = System.monotonic_time(:millisecond)
      {:ok, timer} = :timer.send_interval(opts[:sample_ms], :soak_sample)
      pids = %{server: System.pid(), load: load_pid, relay: relay_pid}

      {out, samples} =
        try do
          collect(load, {server, conns}, pids, t0, opts[:progress], "", [])
        after
          :timer.cancel(timer)
          flush(:soak_sample)
        end

      Port.command(relay, "stats\n")

      relay_stats =
        receive do
          {^relay, {:data, {:eol, "STATS " <> stats}}} -> stats
        after
          5_000 -> "unknown"
        end

      opts = Keyword.put(opts, :server_counters, server_counters(server))
      analyse(out, Enum.reverse(samples), relay_stats, opts, warmup)
    after
      {:os_pid, relay_pid} = Port.info(relay, :os_pid)
      Port.close(relay)
      stop_relay(relay_pid)
      RakNet.Server.stop(server)
      :ets.delete(conns)
    end
  end

  # The relay exits when its stdin closes; make sure of it (it has a thread per client).
  defp stop_relay(pid, tries \\ 50) do
    alive = match?({:ok, "raknet-relay" <> _}, File.read("/proc/#{pid}/comm"))

    cond do
      not alive -> :ok
      tries == 0 -> System.cmd("kill", ["#{pid}"])
      true -> Process.sleep(10) && stop_relay(pid, tries - 1)
    end
  end

  defp start_server(connections, conns) do
    {:ok, sup} =
      RakNet.Server.start_link(Bench.Soak.Echo, 0,
        ip: "127.0.0.1",
        open_ipv6_socket: false,
        max_connections: max(connections * 2, 1024),
        # Every connection comes through the relay, from one address: the per-IP admission
        # limits (128 connections, 64 handshakes at once) would refuse most of them.
        max_connections_per_ip: max(connections * 2, 1024),
        max_half_open_per_ip: 4096,
        # ... and they connect faster than 20 a second.
        new_connections_per_ip_per_sec: 100_000,
        client_data: conns
      )

    Process.unlink(sup)
    {sup, RakNet.Server.info(sup).ipv4_port}
  end

  defp open(bin, args, port_opts) do
    path = Path.join(bin_dir(), bin)
    unless File.exists?(path), do: raise("#{path} is missing: run Bench.Soak.build!/0")
    Port.open({:spawn_executable, path}, [:binary, args: args] ++ port_opts)
  end

  # The BEAM's memory by kind (`:erlang.memory/1`), so that a growing BEAM side names itself.
  @beam_kinds [:processes, :binary, :ets, :atom, :code, :system]

  # Reads raknet-load's output until it exits, sampling the server on each :soak_sample.
  defp collect(load, {server, conns} = srv, pids, t0, progress, out, samples) do
    receive do
      {^load, {:data, data}} ->
        collect(load, srv, pids, t0, progress, out <> data, samples)

      {^load, {:exit_status, 0}} ->
        {out, samples}

      {^load, {:exit_status, status}} ->
        raise "raknet-load exited with #{status}:\n#{out}"

      :soak_sample ->
        # Memory is read after a full collection of every process: what is live, not the
        # garbage collector's slack (each heap's size follows its largest burst so far and
        # swings by a quarter between collections), so that a trend is a leak.
        Enum.each(Process.list(), &:erlang.garbage_collect/1)

        s = %{
          t: System.monotonic_time(:millisecond) - t0,
          connections: RakNet.Server.info(server).connections,
          beam: :erlang.memory(:total),
          beam_by_kind: Map.new(@beam_kinds, &{&1, :erlang.memory(&1)}),
          rust: RakNet.native_memory(),
          heap: heap(server),
          cpu: Map.new(pids, fn {k, pid} -> {k, Bench.Proc.cpu_ticks(pid)} end),
          queues: queues(conns)
        }

        if progress do
          q = s.queues

          progress.(
            "  #{pad(div(s.t, 1000), 5)} s  #{pad(s.connections, 5)} connected  " <>
              "BEAM #{mb(s.beam)} + Rust #{mb(s.rust)} = #{mb(s.beam + s.rust)} MB " <>
              "(Rust heap accounted #{mb(Enum.sum(Map.values(s.heap)))} MB)  " <>
              "(summed over connections: send queue #{q.send_queue_frames} frames #{kb(q.send_queue_bytes)} KB, " <>
              "in flight #{q.reliable_in_flight} frames #{kb(q.bytes_in_flight)} KB, " <>
              "held #{q.held_for_ordering} #{kb(q.held_bytes)} KB, reassembly #{kb(q.reassembly_bytes)} KB; " <>
              "median srtt #{q.srtt_ms} ms)"
          )
        end

        collect(load, srv, pids, t0, progress, out, [s | samples])
    end
  end

  @queue_keys [
    :send_queue_frames,
    :send_queue_bytes,
    :reliable_in_flight,
    :bytes_in_flight,
    :held_for_ordering,
    :held_bytes,
    :reassembly_bytes
  ]

  # The server connections' queues, summed (where the memory of a backlog would be).
  defp queues(conns) do
    stats =
      for {pid} <- :ets.tab2list(conns),
          {:ok, %{stats: stats}} <- [RakNet.Connection.info(pid)],
          do: stats

    sums =
      Map.new(@queue_keys, fn k -> {k, stats |> Enum.map(&Map.get(&1, k, 0)) |> Enum.sum()} end)

    srtts = stats |> Enum.map(&Map.get(&1, :srtt_us, 0)) |> Enum.sort()

    sums
    |> Map.put(:srtt_ms, div(Enum.at(srtts, div(length(srtts), 2)) || 0, 1000))
    |> Map.put(:records, records_histogram(stats))
  end

  @record_buckets [{0, 0}, {1, 1}, {2, 3}, {4, 7}, {8, 15}, {16, 63}, {64, 511}, {512, nil}]

  # How many connections keep how many datagram records (in flight, or lost and kept for a
  # late ACK): where the records' memory goes.
  defp records_histogram(stats) do
    counts = Enum.map(stats, &Map.get(&1, :datagram_records, 0))

    for {lo, hi} <- @record_buckets do
      {if(hi, do: "#{lo}-#{hi}", else: "#{lo}+"),
       Enum.count(counts, &(&1 >= lo and (hi == nil or &1 <= hi)))}
    end
  end

  # The Rust heap by structure (`:heap` of each endpoint of `RakNet.Server.info/1`), summed
  # over the server's endpoints.
  defp heap(server) do
    for %{heap: heap} <- RakNet.Server.info(server).endpoints, reduce: %{} do
      acc -> Map.merge(acc, heap, fn _k, a, b -> a + b end)
    end
  end

  defp flush(msg) do
    receive do
      ^msg -> flush(msg)
    after
      0 -> :ok
    end
  end

  # The server's socket counters that are not zero: refusals, drops, limits.
  defp server_counters(server) do
    for %{stats: stats} <- RakNet.Server.info(server).endpoints,
        {key, value} <- stats,
        is_integer(value) and value > 0,
        key not in [:recv_buffer_bytes, :send_buffer_bytes, :buffered_bytes],
        reduce: %{} do
      acc -> Map.update(acc, key, value, &(&1 + value))
    end
  end

  defp analyse(out, samples, relay_stats, opts, warmup) do
    # Steady state: after the warm-up, while the load tester still sends.
    steady = Enum.filter(samples, &(&1.t >= warmup * 1000 and &1.t <= opts[:seconds] * 1000))

    totals = Enum.map(steady, &(&1.beam + &1.rust))
    natives = Enum.map(steady, & &1.rust)

    %{
      opts: Map.new(opts) |> Map.delete(:progress) |> Map.put(:warmup_s, warmup),
      connections_ok: num(out, ~r/connections\s+(\d+) ok/),
      connections_failed: num(out, ~r/connections\s+\d+ ok, (\d+) failed/),
      connections_dropped: num(out, ~r/dropped\s+(\d+) connections/),
      drop_reasons: drop_reasons(out),
      reliable: verify_line(out, "reliable"),
      sequenced: verify_line(out, "sequenced"),
      verify_ok: out =~ ~r/verify\s+ok/,
      p50_ms: num(out, ~r/round trip\s+p50 ([\d.]+) ms/),
      p99_ms: num(out, ~r/round trip\s+p50 [\d.]+ ms, p99 ([\d.]+) ms/),
      max_ms: num(out, ~r/max ([\d.]+) ms/),
      relay: relay_stats,
      samples: samples,
      steady_samples: length(steady),
      memory: spread(totals),
      native_memory: spread(natives),
      native_slope: slope(steady, :rust),
      # Judged over the last two thirds of the run: a structure still settling after the
      # warm-up (capacities that bursts reach over minutes) rises early and then levels off,
      # which a slope from the warm-up on reads as growth; a leak rises in every third.
      native_slope_settled:
        steady |> Enum.filter(&(&1.t >= div(opts[:seconds] * 1000, 3))) |> slope(:rust),
      heap: heap_growth(steady),
      beam_by_kind: beam_growth(steady),
      records: records_growth(steady),
      cpu: cpu(steady),
      summary: out |> String.split("summary:\n") |> List.last()
    }
  end

  defp verify_line(out, name) do
    re =
      ~r/#{name}\s+sent (\d+), echoed (\d+), lost (\d+).*?, (?:duplicated (\d+), )?out of \w+ (\d+), p99 ([\d.]+|NaN) ms/

    case Regex.run(re, out) do
      [_, sent, echoed, lost, dup, disorder, p99] ->
        %{
          sent: int(sent),
          echoed: int(echoed),
          lost: int(lost),
          duplicated: if(dup == "", do: nil, else: int(dup)),
          out_of_order: int(disorder),
          p99_ms: if(p99 == "NaN", do: nil, else: String.to_float(p99))
        }

      nil ->
        raise "no #{name} line in raknet-load's output:\n#{out}"
    end
  end

  # Median, min, max, first and last of a series, and whether it is flat: the median of its
  # last third within 10 % of the median of its first third. A leak shows as growth between
  # them; the garbage collector's sawtooth (the BEAM heap swings by a quarter between
  # collections) does not.
  defp spread([]), do: nil

  defp spread(xs) do
    median = median(xs)
    {min, max} = Enum.min_max(xs)
    third = max(div(length(xs), 3), 1)
    growth = median(Enum.take(xs, -third)) / max(median(Enum.take(xs, third)), 1) - 1

    %{
      median: median,
      min: min,
      max: max,
      first: hd(xs),
      last: List.last(xs),
      max_dev_percent: Float.round(max(max - median, median - min) * 100 / max(median, 1), 1),
      growth_percent: Float.round(growth * 100, 1),
      flat: growth <= 0.1
    }
  end

  defp median(xs), do: xs |> Enum.sort() |> Enum.at(div(length(xs), 2))

  # The least-squares slope of `key` over the samples' times, in bytes per second (nil with
  # fewer than 3 samples). Unlike the thirds comparison, it weighs every sample, so neither a
  # lucky last third nor one garbage collection decides it.
  defp slope(samples, key) when length(samples) >= 3 do
    xs = Enum.map(samples, fn s -> s.t / 1000 end)
    ys = Enum.map(samples, &Map.fetch!(&1, key))
    n = length(xs)
    mx = Enum.sum(xs) / n
    my = Enum.sum(ys) / n
    sxx = xs |> Enum.map(&((&1 - mx) * (&1 - mx))) |> Enum.sum()
    sxy = Enum.zip(xs, ys) |> Enum.map(fn {x, y} -> (x - mx) * (y - my) end) |> Enum.sum()
    if sxx > 0, do: sxy / sxx, else: 0.0
  end

  defp slope(_samples, _key), do: nil

  # Each heap structure's bytes at the first and last steady sample, largest last first.
  defp heap_growth([first | _] = steady) do
    last = List.last(steady)

    last.heap
    |> Enum.map(fn {k, v} -> {k, Map.get(first.heap, k, 0), v} end)
    |> Enum.sort_by(fn {_, _, v} -> -v end)
  end

  defp heap_growth([]), do: []

  # Each BEAM memory kind's medians over the first and the last third of the steady samples
  # (medians, as the garbage collector's sawtooth makes single samples meaningless).
  defp beam_growth([_, _, _ | _] = steady) do
    third = div(length(steady), 3)

    for kind <- @beam_kinds do
      at = fn xs -> xs |> Enum.map(& &1.beam_by_kind[kind]) |> median() end
      {kind, at.(Enum.take(steady, third)), at.(Enum.take(steady, -third))}
    end
  end

  defp beam_growth(_), do: []

  @doc """
  The Rust heap's growth over the last two thirds of the run (`:settled`, the verdict's) or
  from the warm-up on (`:warmup`), in bytes per connection per hour (the least-squares slope
  of `RakNet.native_memory/0`), or nil without enough samples.
  """
  def native_growth_per_connection_hour(r, from \\ :settled) do
    slope = if from == :settled, do: r.native_slope_settled, else: r.native_slope
    slope && slope * 3600 / max(r.opts.connections, 1)
  end

  @doc "Bytes per connection per hour of Rust heap growth above which a soak fails."
  def max_native_growth, do: 1024

  # Each process's CPU over the steady samples, as a share of one core.
  defp cpu([first, _ | _] = steady) do
    last = List.last(steady)
    ms = max(last.t - first.t, 1)
    Map.new(last.cpu, fn {k, ticks} -> {k, Float.round((ticks - first.cpu[k]) * 10 / ms, 2)} end)
  end

  defp cpu(_), do: nil

  @doc "What went wrong in a run: an empty list when every count that must be 0 is 0."
  def failures(r) do
    n = r.opts.connections

    [
      {r.connections_ok != n, "#{r.connections_ok} of #{n} connections came up"},
      {r.connections_failed != 0, "#{r.connections_failed} connections failed"},
      {r.connections_dropped != 0, "#{r.connections_dropped} connections ended early"},
      {r.reliable.sent == 0, "no reliable message was sent"},
      {r.reliable.lost != 0, "#{r.reliable.lost} reliable messages lost"},
      {r.reliable.duplicated != 0, "#{r.reliable.duplicated} reliable messages duplicated"},
      {r.reliable.out_of_order != 0, "#{r.reliable.out_of_order} reliable messages out of order"},
      {r.reliable.echoed != r.reliable.sent,
       "#{r.reliable.echoed} of #{r.reliable.sent} reliable messages echoed"},
      {r.sequenced.echoed == 0, "no unreliable-sequenced message was echoed"},
      {r.sequenced.out_of_order != 0,
       "#{r.sequenced.out_of_order} unreliable-sequenced messages out of sequence"},
      {not r.verify_ok, "raknet-load's verify line is not ok"}
    ]
    |> Enum.filter(&elem(&1, 0))
    |> Enum.map(&elem(&1, 1))
  end

  @doc "The report's lines."
  def report(r) do
    o = r.opts
    mem = r.memory
    native = r.native_memory
    rel = r.reliable
    seq = r.sequenced
    cpu = r.cpu || %{}

    [
      "soak: #{o.connections} connections x #{o.rate} ticks/s x (reliable_ordered + unreliable_sequenced), " <>
        "#{o.size} B on channel #{o.channel}, #{o.seconds} s, through a relay with " <>
        "#{pct(o.loss)} loss, #{pct(o.dup)} duplication, #{pct(o.reorder)} reordering (seed #{o.seed})",
      "  connections          #{r.connections_ok} ok, #{r.connections_failed} failed, #{r.connections_dropped} ended early" <>
        if(r.drop_reasons, do: " (#{r.drop_reasons})", else: ""),
      "  reliable_ordered     sent #{rel.sent}, echoed #{rel.echoed}: lost #{rel.lost}, " <>
        "duplicated #{rel.duplicated}, out of order #{rel.out_of_order}",
      "  unreliable_sequenced sent #{seq.sent}, echoed #{seq.echoed}: lost #{seq.lost} " <>
        "(#{Float.round(seq.lost * 100 / max(seq.sent, 1), 2)} %), out of sequence #{seq.out_of_order}",
      "  echo round trip      p50 #{r.p50_ms} ms, p99 #{r.p99_ms} ms, max #{r.max_ms} ms " <>
        "(p99 reliable #{rel.p99_ms} ms, sequenced #{seq.p99_ms} ms)",
      "  relay                #{r.relay}",
      "  server counters      #{o.server_counters |> Enum.sort() |> Enum.map_join(", ", fn {k, v} -> "#{k} #{v}" end)}",
      "  CPU (share of a core, steady state)  server #{cpu[:server]}, load tester #{cpu[:load]}, relay #{cpu[:relay]}",
      memory_line("server memory", mem, o.warmup_s, r.steady_samples),
      memory_line("  of which Rust", native, o.warmup_s, r.steady_samples)
      |> String.replace(~r/; (NOT )?flat$/, ""),
      slope_line(r),
      "  Rust heap by structure, first → last steady sample (KB; estimates from capacities):",
      heap_line(r.heap),
      "  BEAM by kind, median of the first → last third (KB):",
      heap_line(r.beam_by_kind),
      "  connections by datagram records kept, first → last steady sample: " <>
        records_line(r.records),
      "  largest BEAM processes at the end (KB): " <> largest_processes()
    ]
  end

  defp records_growth([first | _] = steady),
    do: {first.queues.records, List.last(steady).queues.records}

  defp records_growth([]), do: nil

  defp records_line(nil), do: "(no sample)"

  defp records_line({first, last}) do
    Enum.zip_with(first, last, fn {bucket, a}, {_, b} -> "#{bucket}: #{a} → #{b}" end)
    |> Enum.join(", ")
  end

  defp largest_processes do
    Process.list()
    |> Enum.flat_map(fn pid ->
      case Process.info(pid, [:memory, :registered_name, :initial_call, :dictionary]) do
        nil -> []
        info -> [{info[:memory], process_name(pid, info)}]
      end
    end)
    |> Enum.sort(:desc)
    |> Enum.take(6)
    |> Enum.map_join(", ", fn {bytes, name} -> "#{name} #{kb(bytes)}" end)
  end

  defp process_name(pid, info) do
    case info[:registered_name] do
      name when is_atom(name) and name != nil and name != [] ->
        inspect(name)

      _ ->
        case info[:dictionary][:"$initial_call"] do
          {m, f, a} -> "#{inspect(m)}.#{f}/#{a}"
          _ -> inspect(pid)
        end
    end
  end

  defp slope_line(r) do
    case {native_growth_per_connection_hour(r), native_growth_per_connection_hour(r, :warmup)} do
      {nil, _} ->
        "  Rust slope           not enough samples"

      {settled, from_warmup} ->
        "  Rust slope           #{Float.round(r.native_slope_settled / 1024, 2)} KB/s = " <>
          "#{round(settled)} B per connection per hour (least squares over the last two " <>
          "thirds; at most #{max_native_growth()} allowed); from the warm-up on " <>
          "#{round(from_warmup || 0)}"
    end
  end

  defp heap_line([]), do: "    (no sample)"

  defp heap_line(heap) do
    "    " <>
      Enum.map_join(heap, ", ", fn {k, first, last} -> "#{k} #{kb(first)} → #{kb(last)}" end)
  end

  defp memory_line(label, nil, _warmup, _n), do: "  #{label}: no sample after the warm-up"

  defp memory_line(label, m, warmup, n) do
    "  #{String.pad_trailing(label, 20)} after #{warmup} s warm-up (#{n} samples): " <>
      "median #{mb(m.median)} MB, min #{mb(m.min)}, max #{mb(m.max)}, first #{mb(m.first)}, " <>
      "last #{mb(m.last)}: within #{m.max_dev_percent} % of the median, last third " <>
      "#{m.growth_percent} % over the first; " <>
      if(m.flat, do: "flat", else: "NOT flat")
  end

  defp pct(p), do: "#{Float.round(p * 100, 1)} %"
  defp kb(bytes), do: div(bytes, 1024)
  defp mb(bytes), do: :erlang.float_to_binary(bytes / 1_048_576, decimals: 1)
  defp pad(x, n), do: x |> to_string() |> String.pad_leading(n)

  defdelegate num(out, re), to: Bench.Proc

  # Why connections ended early, as the load tester says (its first five), or nil.
  defp drop_reasons(out) do
    case Regex.run(~r/dropped\s+\d+ connections ended early \((.*)\)/, out) do
      [_, reasons] -> reasons
      nil -> nil
    end
  end

  defp int(v), do: String.to_integer(v)
end

defmodule Bench.Soak.Echo do
  @moduledoc """
  The soak server's handler: echoes each message of `raknet-load`'s format with the
  reliability its tag names (0 reliable_ordered, 1 unreliable_sequenced) on the channel it
  names, and anything else reliable-ordered on channel 0.
  """
  defstruct [:connection, :conns]
end

defimpl RakNet.Client, for: Bench.Soak.Echo do
  def new(h, connection, conns) do
    :ets.insert(conns, {connection})
    %{h | connection: connection, conns: conns}
  end

  def receive(h, type, <<_time::64, _n::64, tag, channel, _::binary>> = buffer, _transit)
      when tag in [0, 1] and channel < 32 do
    reliability = if tag == 0, do: :reliable_ordered, else: :unreliable_sequenced
    RakNet.Connection.send(h.connection, reliability, <<type, buffer::binary>>, channel: channel)
  end

  def receive(h, type, buffer, _transit),
    do: RakNet.Connection.send(h.connection, :reliable_ordered, <<type, buffer::binary>>)

  def got_ack(_h, _id), do: :ok
  # The table goes when the run ends, possibly before the last connection does.
  def disconnect(h) do
    :ets.delete(h.conns, h.connection)
  rescue
    ArgumentError -> :ok
  end
end
