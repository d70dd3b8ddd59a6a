# `make bench`, the Elixir half: RakNet.Server in this VM, measured from outside.
#
#   mix run bench/run.exs
#
# Prints a table and writes bench/results/<date>.json. A benchmark, not a test: it asserts only
# that each scenario completed. Runs on loopback only.

defmodule Bench.Handler do
  @moduledoc "Counts messages into a :counters slot; echoes them when `echo` is set."
  defstruct [:connection, :counter, :echo, :marks]
end

defimpl RakNet.Client, for: Bench.Handler do
  def new(h, connection, {counter, echo, marks}),
    do: %{h | connection: connection, counter: counter, echo: echo, marks: marks}

  def receive(h, 0x87, _buffer, _transit) do
    # End-of-run marker (official sender): record when it arrived.
    :ets.insert(h.marks, {:marker, System.monotonic_time(:microsecond)})
  end

  def receive(h, type, buffer, _transit) do
    if :counters.get(h.counter, 1) == 0,
      do: :ets.insert(h.marks, {:first, System.monotonic_time(:microsecond)})

    :counters.add(h.counter, 1, 1)

    if h.echo,
      do: RakNet.Connection.send(h.connection, :reliable_ordered, <<type, buffer::binary>>)
  end

  def got_ack(_h, _id), do: :ok
  def disconnect(_h), do: :ok
end

defmodule Bench do
  @root Path.expand("..", __DIR__)
  @load Path.join([@root, "target", "release", "raknet-load"])
  @python Path.join([@root, ".venv", "bin", "python"])
  @sender Path.join([@root, "test", "interop", "peers", "official_sender.py"])

  def server(echo) do
    counter = :counters.new(1, [:atomics])
    marks = :ets.new(:marks, [:public, :set])

    {:ok, sup} =
      RakNet.Server.start_link(Bench.Handler, 0,
        host: "127.0.0.1",
        open_ipv6_socket: false,
        max_connections: 20_000,
        client_data: {counter, echo, marks}
      )

    Process.unlink(sup)
    {sup, RakNet.Server.info(sup).ipv4_port, counter, marks}
  end

  def median(xs), do: xs |> Enum.sort() |> Enum.at(div(length(xs), 2))

  # 1. One connection, 64 B reliable_ordered, Elixir client -> Elixir handler.
  def throughput(echo, n \\ 100_000) do
    {sup, port, counter, _} = server(echo)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    payload = <<0x86, 0::504>>
    t0 = System.monotonic_time(:microsecond)
    send_all(conn, payload, n)
    if echo, do: await_echoes(conn, n), else: await_count(counter, n)
    us = System.monotonic_time(:microsecond) - t0
    RakNet.Server.stop(sup)
    n * 1_000_000 / us
  end

  defp send_all(_conn, _payload, 0), do: :ok

  defp send_all(conn, payload, n) do
    case RakNet.Connection.send(conn, :reliable_ordered, payload) do
      {:ok, _} ->
        send_all(conn, payload, n - 1)

      {:error, :over_budget} ->
        Process.sleep(1)
        send_all(conn, payload, n)
    end
  end

  defp await_count(counter, n) do
    if :counters.get(counter, 1) < n do
      Process.sleep(1)
      await_count(counter, n)
    end
  end

  defp await_echoes(_conn, 0), do: :ok

  defp await_echoes(conn, n) do
    receive do
      {:raknet, ^conn, _, _, _} -> await_echoes(conn, n - 1)
    after
      30_000 -> raise "echoes stopped with #{n} missing"
    end
  end

  # 2. The official client sending to our server, and to an official server.
  def official(n \\ 20_000) do
    {sup, port, counter, marks} = server(false)
    {_, 0} = System.cmd(@python, [@sender, "send", "127.0.0.1", "#{port}", "#{n}", "64"])
    [{:first, first}] = :ets.lookup(marks, :first)
    [{:marker, last}] = :ets.lookup(marks, :marker)
    ours = :counters.get(counter, 1) * 1_000_000 / max(last - first, 1)
    RakNet.Server.stop(sup)

    counting =
      Port.open({:spawn_executable, @python}, [:binary, {:line, 256}, args: [@sender, "count"]])

    official_port = receive do: ({^counting, {:data, {:eol, "PORT " <> p}}} -> p)

    sender =
      Task.async(fn ->
        System.cmd(@python, [@sender, "send", "127.0.0.1", official_port, "#{n}", "64"])
      end)

    rate =
      receive do:
                ({^counting, {:data, {:eol, "RATE " <> r}}} ->
                   r |> String.split() |> hd() |> String.to_integer())

    Task.await(sender, 150_000)
    %{ours: round(ours), official: rate, ratio: Float.round(ours / max(rate, 1), 2)}
  end

  # 4 and 5: raknet-load against an echoing RakNet.Server.
  def load(args) do
    {sup, port, _counter, _} = server(true)
    before = {cpu_ticks(), System.monotonic_time(:millisecond), :erlang.memory(:total), rss_kb()}
    {out, 0} = System.cmd(@load, ["--port", "#{port}" | args], stderr_to_stdout: true)
    {cpu0, t0, mem0, rss0} = before
    # Memory while connected is sampled by the load tester's run; take the peak from info.
    wall_ms = System.monotonic_time(:millisecond) - t0
    cpu_share = (cpu_ticks() - cpu0) * 10 / max(wall_ms, 1)
    connections = parse(out, ~r/connections\s+(\d+) ok/)

    result = %{
      connections: connections,
      out_per_s: parse(out, ~r/sent\s+\d+ messages \((\d+)\/s/),
      in_per_s: parse(out, ~r/received\s+\d+ messages \((\d+)\/s/),
      p50_ms: parse_f(out, ~r/p50 ([\d.]+) ms/),
      p99_ms: parse_f(out, ~r/p99 ([\d.]+) ms/),
      unanswered: parse(out, ~r/unanswered\s+(\d+)/),
      server_cpu_share_of_one_core: Float.round(cpu_share, 2),
      beam_bytes_per_connection_after:
        div(max(:erlang.memory(:total) - mem0, 0), max(connections, 1)),
      rss_kb_delta: rss_kb() - rss0
    }

    RakNet.Server.stop(sup)
    result
  end

  defp parse(out, re),
    do:
      (case Regex.run(re, out) do
         [_, v] -> String.to_integer(v)
         _ -> nil
       end)

  defp parse_f(out, re),
    do:
      (case Regex.run(re, out) do
         [_, v] -> String.to_float(v)
         _ -> nil
       end)

  # utime + stime of this OS process, in clock ticks (100 per second on Linux).
  defp cpu_ticks do
    fields =
      "/proc/self/stat" |> File.read!() |> String.split(") ") |> List.last() |> String.split()

    String.to_integer(Enum.at(fields, 11)) + String.to_integer(Enum.at(fields, 12))
  end

  defp rss_kb do
    "/proc/self/status"
    |> File.read!()
    |> then(&Regex.run(~r/VmRSS:\s+(\d+)/, &1))
    |> List.last()
    |> String.to_integer()
  end

  def json(value) when is_map(value),
    do:
      "{" <>
        Enum.map_join(value, ",", fn {k, v} -> json(to_string(k)) <> ":" <> json(v) end) <> "}"

  def json(value) when is_list(value), do: "[" <> Enum.map_join(value, ",", &json/1) <> "]"
  def json(value) when is_binary(value), do: inspect(value)
  def json(nil), do: "null"
  def json(value), do: to_string(value)
end

IO.puts("== make bench: Elixir scenarios (RakNet.Server in this VM, loopback) ==")
one_way = Bench.median(for _ <- 1..3, do: Bench.throughput(false))
echo = Bench.median(for _ <- 1..3, do: Bench.throughput(true))

IO.puts(
  "1. one connection, 64 B reliable_ordered into a RakNet.Client handler: #{round(one_way)} msg/s one way, #{round(echo)} msg/s echoed (median of 3)"
)

official = Bench.official()

IO.puts(
  "2. official client -> RakNet.Server: #{official.ours} msg/s; official client -> official server: #{official.official} msg/s; ratio #{official.ratio}x"
)

latency = Bench.load(~w(--connections 1 --rate 1000 --size 64 --duration 5))

IO.puts(
  "4. echo round trip at 1,000 msg/s: p50 #{latency.p50_ms} ms, p99 #{latency.p99_ms} ms (raw UDP: see the udp benchmark)"
)

scale =
  for n <- [1_000, 5_000, 10_000] do
    r =
      Bench.load(
        ~w(--connections #{n} --rate 20 --size 40 --reliability unreliable_sequenced --duration 8)
      )

    IO.puts(
      "5. #{n} connections x 20 msg/s (40 B unreliable_sequenced, echoed): #{r.connections} connected, in #{r.in_per_s}/s, p99 #{r.p99_ms} ms, server CPU #{r.server_cpu_share_of_one_core} of one core, RSS +#{r.rss_kb_delta} kB"
    )

    Map.put(r, :target_connections, n)
  end

results = %{
  date: Date.utc_today() |> Date.to_iso8601(),
  machine: "#{System.schedulers_online()} cores, #{:erlang.system_info(:otp_release)} OTP",
  throughput_one_way_msgs_per_s: round(one_way),
  throughput_echo_msgs_per_s: round(echo),
  official_comparison: official,
  latency_1k_per_s: latency,
  scale: scale
}

path = Path.join([__DIR__, "results", "#{Date.utc_today()}.json"])
File.write!(path, Bench.json(results) <> "\n")
IO.puts("wrote #{Path.relative_to_cwd(path)}")
