defmodule RakNet.XPlaneCompatTest do
  # What an application written for X-Plane's elixir-raknet relies on.
  use ExUnit.Case, async: false

  alias RakNet.{Connection, Native}
  alias RakNet.Test.{ChatClient, LinkingClient, XPlaneState}
  import RakNet.Test.Monitor

  defp start_server(module, opts) do
    {server, _port} = RakNet.Test.Server.start!(module, opts)
    {server, RakNet.Server.info(server)}
  end

  # A raw client endpoint built like X-Plane's client (official RakNet with
  # INCLUDE_TIMESTAMP_WITH_DATAGRAMS), owned by the test process.
  defp timestamp_client(family) do
    opts =
      family
      |> RakNet.ClientEndpoint.native_opts()
      |> Map.merge(%{include_timestamp_with_datagrams: true, shared_thread: false})

    {:ok, endpoint} = Native.endpoint_start(opts, self())
    endpoint
  end

  defp connect_raw(endpoint, host, port) do
    {:ok, conn} = Native.endpoint_connect(endpoint, host, port, self())
    assert_receive {:raknet_connected, ^conn, _info}, 5_000
    conn
  end

  test "X-Plane's README server spec binds every interface; :host is only advertised" do
    localhost = {127, 0, 0, 1}

    spec = [
      XPlaneState,
      0,
      include_timestamp_with_datagrams: true,
      host: localhost,
      client_timeout_ms: 20 * 60 * 1_000,
      open_ipv6_socket: true,
      client_data: self()
    ]

    server = start_supervised!({RakNet.Server, spec})
    %{ipv4_port: port, ipv6_port: port6, endpoints: endpoints} = RakNet.Server.info(server)

    assert Enum.map(endpoints, &elem(&1.address, 0)) |> Enum.sort() ==
             Enum.sort([{0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}])

    # 127.0.0.2 is not the :host address: the socket listens on every interface.
    for {family, host, port} <- [{:inet, "127.0.0.2", port}, {:inet6, "::1", port6}] do
      conn = connect_raw(timestamp_client(family), host, port)
      assert_receive {:xplane_new, _connection_pid, session_id}, 5_000

      # ID_TIMESTAMP reaches the X-Plane handler as X-Plane delivers it: type 27, then the
      # sender's 8-byte stamp and the inner message, untouched.
      stamp = 0x0102_0304_0506_0708
      {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x1B, stamp::64, 0x86, "hi">>)
      assert_receive {:xplane_packet, ^session_id, 0x1B, <<^stamp::64, 0x86, "hi">>, t}, 5_000
      assert is_integer(t) and t >= 0
      :ok = Connection.close(conn)
      assert_receive {:xplane_disconnect, ^session_id}, 5_000
    end
  end

  test "without datagram timestamps, ID_TIMESTAMP is converted unless told otherwise" do
    {_server, %{ipv4_port: port}} = start_server(XPlaneState, [])
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:xplane_new, _, id}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x1B, 0::64, 0x86, "hi">>)
    assert_receive {:xplane_packet, ^id, 0x86, "hi", _}, 5_000

    {_server, %{ipv4_port: port}} = start_server(XPlaneState, convert_timestamps: false)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:xplane_new, _, id}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x1B, 7::64, 0x86, "hi">>)
    assert_receive {:xplane_packet, ^id, 0x1B, <<7::64, 0x86, "hi">>, _}, 5_000
  end

  test "processes linked in new/3 end with the connection, with the reason" do
    {_server, %{ipv4_port: port}} = start_server(LinkingClient, [])

    for {ending, reason} <- [close: :peer_closed, stop: :shutdown] do
      {:ok, conn} = RakNet.connect("127.0.0.1", port)
      assert_receive {:linking_new, connection_pid, player}, 5_000
      player_ref = Process.monitor(player)
      conn_ref = monitor!(connection_pid)

      case ending do
        :close -> :ok = Connection.close(conn)
        :stop -> {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "stop">>)
      end

      assert_receive {:linking_disconnect, ^connection_pid}, 5_000

      expected = if reason == :shutdown, do: :shutdown, else: {:shutdown, reason}
      assert_receive {:DOWN, ^conn_ref, :process, ^connection_pid, ^expected}, 5_000
      assert_receive {:DOWN, ^player_ref, :process, ^player, ^expected}, 5_000
    end
  end

  test "stop/1 from another process stops the connection and notifies the peer" do
    {_server, %{ipv4_port: port}} = start_server(LinkingClient, [])
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:linking_new, connection_pid, player}, 5_000
    player_ref = Process.monitor(player)

    assert Connection.stop(connection_pid) == :ok
    assert_receive {:linking_disconnect, ^connection_pid}, 5_000
    assert_receive {:DOWN, ^player_ref, :process, ^player, :shutdown}, 5_000
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    # Stopping it again, or a handle of a closed connection, is :ok.
    assert Connection.stop(connection_pid) == :ok
    assert Connection.stop(conn) == :ok
  end

  test "conn_ref(self()) works inside a callback" do
    {_server, %{ipv4_port: port}} = start_server(LinkingClient, [])
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:linking_new, _connection_pid, _player}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "conn_ref">>)
    assert_receive {:conn_ref_result, {:ok, handle}}, 5_000
    assert is_reference(handle)
  end

  test "sending to a pid never waits on that process" do
    {_server, %{ipv4_port: port}} = start_server(LinkingClient, [])
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:linking_new, connection_pid, _player}, 5_000

    # The connection process is suspended: a send through its pid still goes out at once.
    :erlang.suspend_process(connection_pid)

    try do
      assert {:ok, nil} = Connection.send(connection_pid, :reliable, <<0x86, "while busy">>)
      assert_receive {:raknet, ^conn, 0x86, "while busy", _}, 5_000
    after
      :erlang.resume_process(connection_pid)
    end
  end

  test "chat: 50 handlers relay every message to all the others through their pids" do
    registry = :"chat_registry_#{System.unique_integer([:positive])}"
    start_supervised!({Registry, keys: :duplicate, name: registry})

    {_server, %{ipv4_port: port}} =
      start_server(ChatClient, [client_data: {registry, self()}] ++ RakNet.Test.Server.crowd())

    n = 50

    conns =
      for i <- 1..n do
        {:ok, conn} = RakNet.connect("127.0.0.1", port)
        assert_receive {:chat_joined, _}, 5_000
        {i, conn}
      end

    # Every player speaks at once: the handlers relay to each other concurrently.
    for {i, conn} <- conns, do: {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i>>)

    for {i, conn} <- conns do
      heard =
        for _ <- 1..(n - 1) do
          assert_receive {:raknet, ^conn, 0x86, <<from>>, _}, 10_000
          from
        end

      assert Enum.sort(heard) == Enum.to_list(1..n) -- [i]
    end

    refute_received {:chat_send_failed, _}
    refute_received {:raknet, _, 0x86, _, _}
  end

  test "RakNet.Message and RakNet.Server.timestamp/1 behave as X-Plane's" do
    assert RakNet.Message.name(0x1C) == :unconnected_pong
    assert RakNet.Message.name(0xFE) == :error
    assert RakNet.Message.binary(:client_handshake) == 0x13
    assert_raise KeyError, fn -> RakNet.Message.binary(:no_such_message) end
    assert RakNet.Message.is_known?(0xC0) and not RakNet.Message.is_known?(0x1B)
    assert RakNet.Message.is_protocol_data?(0x8F) and not RakNet.Message.is_protocol_data?(0x90)
    assert MapSet.size(RakNet.Message.known_message_names()) == 35

    now = System.os_time(:millisecond)
    assert_in_delta RakNet.Server.timestamp(), now, 1_000
    assert_in_delta RakNet.Server.timestamp(now), 0, 1_000
  end

  test "X-Plane's :send option is accepted and warned about once at start" do
    log =
      ExUnit.CaptureLog.capture_log(fn ->
        {server, _} = start_server(XPlaneState, send: fn _, _, _ -> :ok end)
        RakNet.Server.info(server)
      end)

    assert log =~ "the X-Plane option :send is accepted and ignored"
    assert length(String.split(log, ":send is accepted")) == 2
  end
end
