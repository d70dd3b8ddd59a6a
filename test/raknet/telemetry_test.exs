defmodule RakNet.TelemetryTest do
  # :telemetry events, with the test-only stand-in module (test/support/telemetry_stub.ex),
  # and silence without it. Per-connection rates (RakNet.Connection.info/1) ride along: the
  # same once-a-second sample feeds both.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.EchoClient

  @moduletag timeout: 60_000

  @events [
    [:raknet, :connection, :start],
    [:raknet, :connection, :stop],
    [:raknet, :connection, :exception],
    [:raknet, :server, :stats],
    [:raknet, :server, :refused],
    [:raknet, :server, :limited],
    [:raknet, :server, :handshake_mode]
  ]

  setup do
    test = self()
    id = make_ref()

    :ok =
      :telemetry.attach_many(
        id,
        @events,
        fn event, measurements, metadata, _ ->
          send(test, {:telemetry, event, measurements, metadata})
        end,
        nil
      )

    on_exit(fn ->
      :telemetry.detach(id)
      Application.delete_env(:raknet, :telemetry_module)
      RakNet.Telemetry.reset()
    end)
  end

  # A handler of `event` for this test only: `fun` gets the measurements and metadata.
  defp attach(event, fun) do
    id = make_ref()
    :ok = :telemetry.attach(id, event, fn _event, m, meta, _ -> fun.(m, meta) end, nil)
    on_exit(fn -> :telemetry.detach(id) end)
  end

  defp start_server(opts \\ []),
    do: RakNet.Test.Server.start!(EchoClient, Keyword.merge([telemetry_interval_ms: 100], opts))

  test "connection start and stop, with the reason, the duration and the totals" do
    {server, port} = start_server(name: :telemetry_test_server)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, pid}, 5_000

    assert_receive {:telemetry, [:raknet, :connection, :start], %{system_time: _},
                    %{pid: ^pid, server: ^server, role: :server, address: {{127, 0, 0, 1}, _}}},
                   5_000

    for _ <- 1..3, do: {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "abc">>)
    for _ <- 1..3, do: assert_receive({:raknet, ^conn, 0x86, "abc", _}, 5_000)
    :ok = Connection.close(conn)

    assert_receive {:telemetry, [:raknet, :connection, :stop],
                    %{duration: duration, monotonic_time: at, messages_in: 3, bytes_in: 12},
                    %{
                      pid: ^pid,
                      server: ^server,
                      server_name: :telemetry_test_server,
                      reason: :peer_closed
                    }},
                   5_000

    assert is_integer(duration) and duration > 0 and at <= System.monotonic_time()
  end

  # It fired once per IP family: a dual-stack server's dashboards counted it twice.
  test "one :stats event per server, its sockets added up" do
    {server, _port} = start_server(open_ipv6_socket: true)
    %{ipv4_port: port4, ipv6_port: port6} = RakNet.Server.info(server)
    {:ok, _} = RakNet.connect("127.0.0.1", port4)
    {:ok, _} = RakNet.connect("::1", port6)
    for _ <- 1..2, do: assert_receive({:client_new, _}, 5_000)

    # Both connections in one event, both ports in its metadata.
    assert_receive {:telemetry, [:raknet, :server, :stats], %{connections: 2},
                    %{server: ^server, ports: %{inet: ^port4, inet6: ^port6}}},
                   5_000
  end

  test "a handler of the :start event may call the server" do
    {server, port} = start_server()
    test = self()

    attach([:raknet, :connection, :start], fn _measurements, %{pid: pid} ->
      send(test, {:info_from_start, pid, RakNet.Server.info(server)})
    end)

    {:ok, _conn} = RakNet.connect("127.0.0.1", port)
    # The listener was waiting for the connection's init, which sent the event: the call
    # timed out after 5 s (and took the connection down).
    assert_receive {:info_from_start, pid, %{ipv4_port: ^port}}, 2_000
    assert_receive {:client_new, ^pid}, 2_000
  end

  test "a handler of the :stats event may call the server" do
    {server, _port} = start_server()
    test = self()

    attach([:raknet, :server, :stats], fn %{connections: n}, metadata ->
      # Other servers' events (of earlier tests still stopping) are not this test's.
      if metadata.server == server do
        :ok = RakNet.Server.set_offline_ping_response(server, "players: #{n}")
        send(test, {:info_from_stats, RakNet.Server.info(server)})
      end
    end)

    # It ran in the listener, which it called: the call exited (:calling_self), and the
    # handler was detached for good.
    assert_receive {:info_from_stats, %{connections: 0}}, 2_000
    assert_receive {:info_from_stats, %{connections: 0}}, 2_000
  end

  @tag :capture_log
  test "a handler crash is an :exception event" do
    {_server, port} = start_server()
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, pid}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable, <<0x99>>)

    assert_receive {:telemetry, [:raknet, :connection, :exception], %{duration: _},
                    %{pid: ^pid, kind: :error, reason: %RuntimeError{}, stacktrace: [_ | _]}},
                   5_000
  end

  test "periodic server stats carry connections and rates; connections report their own" do
    {server, port} = start_server()
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, pid}, 5_000

    # Keep traffic flowing so that every one-second sample sees some.
    sender =
      spawn_link(fn ->
        Stream.repeatedly(fn -> Connection.send(conn, :reliable_ordered, <<0x86, 0::800>>) end)
        |> Enum.each(fn _ -> receive after: (5 -> :ok) end)
      end)

    assert_receive {:telemetry, [:raknet, :server, :stats],
                    %{connections: 1, messages_in_per_sec: rate} = stats,
                    %{server: ^server, port: ^port, ports: %{inet: ^port}}}
                   when rate > 0,
                   5_000

    for key <- [:bytes_in_per_sec, :bytes_out_per_sec, :messages_out_per_sec, :rtt_p50_ms],
        do: assert(is_float(stats[key]), "#{key}: #{inspect(stats)}")

    assert stats.bytes_in_per_sec > 100 * rate
    assert stats.rtt_max_ms >= stats.rtt_p50_ms

    {:ok, %{rates: rates}} = Connection.info(pid)
    assert rates.messages_in_per_sec > 0 and rates.bytes_out_per_sec > 0
    assert rates.packet_loss == 0.0 and rates.cwnd_bytes > 0 and rates.rtt_ms >= 0
    unlink(sender)
  end

  defp unlink(pid) do
    Process.unlink(pid)
    Process.exit(pid, :kill)
  end

  # There was no way to refuse a connection (by address, GUID, protocol) before its
  # process started.
  test "the :accept check refuses a connection before its process starts" do
    test = self()
    key = {__MODULE__, make_ref()}
    :persistent_term.put(key, false)
    on_exit(fn -> :persistent_term.erase(key) end)

    accept = fn info ->
      send(test, {:accept?, info})
      if :persistent_term.get(key), do: :ok, else: {:refuse, :maintenance}
    end

    {server, port} = start_server(accept: accept)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:accept?, %{address: {{127, 0, 0, 1}, _}, guid: _, protocol: 11}}, 5_000
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000

    assert_receive {:telemetry, [:raknet, :server, :refused], %{count: 1},
                    %{server: ^server, reason: :rejected, family: :inet}},
                   5_000

    refute_received {:client_new, _}
    assert RakNet.Server.count(server) == 0

    :persistent_term.put(key, true)
    {:ok, _conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
  end

  @tag :capture_log
  test "an :accept check that crashes or answers nonsense refuses, and is logged" do
    {_server, port} = start_server(accept: fn _ -> :yes end)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000
    refute_received {:client_new, _}

    assert_raise ArgumentError, ~r/:accept must be nil, a function of one argument/, fn ->
      RakNet.Server.Config.new(EchoClient, 0, accept: :yes)
    end
  end

  test "refused connections are counted by reason" do
    {server, port} = start_server(max_connections: 1)
    {:ok, _conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
    assert {:error, :no_free_incoming_connections} = RakNet.connect("127.0.0.1", port)

    assert_receive {:telemetry, [:raknet, :server, :refused], %{count: 1},
                    %{server: ^server, reason: :full}},
                   5_000
  end

  test "limits that took effect are counted by limit" do
    {server, port} = start_server(pongs_per_ip_per_sec: 2)
    magic = <<0, 255, 255, 0, 254, 254, 254, 254, 253, 253, 253, 253, 18, 52, 86, 120>>
    {:ok, socket} = :gen_udp.open(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    on_exit(fn -> :gen_udp.close(socket) end)

    # 10 unconnected pings at once from one address: its budget answers some (2 a second,
    # bursts of a second's worth), and the rest are counted as rate-limited.
    for t <- 1..10 do
      :ok = :gen_udp.send(socket, {127, 0, 0, 1}, port, <<0x01, t::64, magic::binary, 7::64>>)
    end

    assert_receive {:telemetry, [:raknet, :server, :limited], %{count: count},
                    %{server: ^server, limit: :pongs_rate_limited}},
                   5_000

    assert count >= 1
    assert %{endpoints: [%{stats: %{pongs_rate_limited: limited}}]} = RakNet.Server.info(server)
    assert limited >= count
  end

  test "the handshake turning strict under a flood of unproven handshakes is an event" do
    {server, port} = start_server(strict_half_open: 3, endpoint_threads: 1)
    magic = <<0, 255, 255, 0, 254, 254, 254, 254, 253, 253, 253, 253, 18, 52, 86, 120>>

    # Open-connection-request-2s without a cookie (the server is calm: it asked for none),
    # from three addresses that never go further: three half-open handshakes.
    for b <- 1..3 do
      {:ok, socket} = :gen_udp.open(0, [:binary, active: false, ip: {127, 4, 0, b}])
      ocr2 = <<0x07, magic::binary, 4, 0x80, 0xFF, 0xFF, 0xFE, port::16, 1492::16, b::64>>
      :ok = :gen_udp.send(socket, {127, 0, 0, 1}, port, ocr2)
      on_exit(fn -> :gen_udp.close(socket) end)
    end

    assert_receive {:telemetry, [:raknet, :server, :handshake_mode], %{count: 1},
                    %{server: ^server, mode: :strict}},
                   5_000

    assert %{endpoints: [%{stats: %{strict: 1, strict_entered: 1}}]} = RakNet.Server.info(server)
  end

  test "without a telemetry module nothing is emitted and everything works" do
    Application.put_env(:raknet, :telemetry_module, RakNet.TelemetryTest.Missing)
    RakNet.Telemetry.reset()
    refute RakNet.Telemetry.enabled?()

    {_server, port} = start_server()
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, pid}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "hi">>)
    assert_receive {:raknet, ^conn, 0x86, "hi", _}, 5_000
    ref = Process.monitor(pid)
    :ok = Connection.close(conn)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000
    refute_received {:telemetry, _, _, _}
  end
end
