defmodule RakNet.FaultsTest do
  # Faults anywhere (a crashed endpoint thread, killed or raising connection processes) end
  # what they must and nothing more: the VM, the server and other connections carry on.
  use ExUnit.Case, async: false

  alias RakNet.{Connection, Native}
  alias RakNet.Test.{EchoClient, RaisingClient}

  defp start_server(module, opts \\ []), do: RakNet.Test.Server.start!(module, opts)

  defp listener(server), do: RakNet.Test.Server.child(server, RakNet.Server.Listener)
  defp connections(server), do: RakNet.Test.Server.child(server, DynamicSupervisor)

  @tag :capture_log
  test "a panic on an endpoint's thread tells every connection owner, and only that endpoint dies" do
    opts =
      RakNet.Server.Config.new(EchoClient, 0, ip: "127.0.0.1", open_ipv6_socket: false)
      |> RakNet.Server.Config.to_native(:inet)
      |> Map.put(:fault_injection, true)

    {:ok, endpoint} = Native.endpoint_start(opts, self())
    %{port: port} = Native.endpoint_info(endpoint)
    {:ok, client} = RakNet.connect("127.0.0.1", port)
    assert_receive {:raknet_endpoint, ^endpoint, :connected, conn, _info}, 5_000
    :ok = Native.conn_set_owner(conn, self())

    assert :ok = Native.endpoint_inject_fault(endpoint)
    assert_receive {:raknet_disconnect, ^conn, :endpoint_down}, 5_000
    assert_receive {:raknet_endpoint, ^endpoint, :log, :error, text}, 5_000
    assert text =~ "panicked: fault injected"
    assert_receive {:raknet_endpoint, ^endpoint, :stopped}, 5_000
    assert Native.conn_send(conn, :reliable, 0, :high, <<0x86>>) == {:error, :closed}
    assert Native.endpoint_info(endpoint) == {:error, :closed}

    # Other endpoints (this node's client endpoint, a new server) are untouched.
    {_server, port2} = start_server(EchoClient)
    {conn2, _} = {RakNet.connect("127.0.0.1", port2), nil}
    assert {:ok, conn2} = conn2
    {:ok, nil} = Connection.send(conn2, :reliable, <<0x86, "alive">>)
    assert_receive {:raknet, ^conn2, 0x86, "alive", _}, 5_000
    Connection.close(client)
  end

  test "fault injection is refused unless the endpoint allows it" do
    opts =
      RakNet.Server.Config.new(EchoClient, 0, ip: "127.0.0.1", open_ipv6_socket: false)
      |> RakNet.Server.Config.to_native(:inet)

    {:ok, endpoint} = Native.endpoint_start(opts, self())
    assert Native.endpoint_inject_fault(endpoint) == {:error, :not_enabled}
    assert %{port: _} = Native.endpoint_info(endpoint)
  end

  @tag :capture_log
  test "a server whose endpoint stops unexpectedly restarts its listener and serves again" do
    {server, port} = start_server(EchoClient)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, server_side}, 5_000
    old_listener = listener(server)
    # One of its endpoint threads (a server has one per scheduler by default).
    [{:inet, endpoint} | _] = :sys.get_state(old_listener).endpoints
    ref = Process.monitor(old_listener)

    # As if the thread had ended by itself: the listener did not ask for it.
    Native.endpoint_stop(endpoint)

    assert_receive {:DOWN, ^ref, :process, ^old_listener, {:shutdown, {:endpoint_down, :inet}}},
                   5_000

    assert_receive {:client_disconnect, ^server_side}, 5_000
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000

    # The supervisor started a new listener with a fresh socket (port 0: a new port).
    new_listener = listener(server)
    assert is_pid(new_listener) and new_listener != old_listener
    %{ipv4_port: new_port, connections: 0} = RakNet.Server.info(server)
    {:ok, conn} = RakNet.connect("127.0.0.1", new_port)
    {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "again">>)
    assert_receive {:raknet, ^conn, 0x86, "again", _}, 5_000
  end

  # A listener restarts when its endpoint stops by itself (above); one that keeps stopping is
  # not restarted for ever: past the supervisor's intensity (3 restarts in 5 s) the server
  # gives up and ends.
  @tag :capture_log
  test "a server whose endpoints keep stopping gives up" do
    {server, _port} = start_server(EchoClient, restart: :temporary)
    server_ref = Process.monitor(server)
    # Stop the endpoint of each listener in turn, as if its thread had ended, until the
    # server ends: after the fourth restart in 5 s at the latest.
    stops = stop_endpoints_until_down(server, server_ref, 0)
    assert stops in 3..5
  end

  defp stop_endpoints_until_down(server, server_ref, stops) do
    receive do
      {:DOWN, ^server_ref, :process, ^server, :shutdown} -> stops
    after
      0 ->
        assert stops <= 5, "the server restarted its listener #{stops} times"
        # The supervisor may be ending already: then it answers nothing.
        listener =
          try do
            listener(server)
          catch
            :exit, _ -> nil
          end

        case is_pid(listener) and :sys.get_state(listener).endpoints do
          [{:inet, endpoint} | _] ->
            ref = Process.monitor(listener)
            Native.endpoint_stop(endpoint)

            assert_receive {:DOWN, ^ref, :process, ^listener,
                            {:shutdown, {:endpoint_down, :inet}}},
                           5_000

            stop_endpoints_until_down(server, server_ref, stops + 1)

          _ ->
            assert_receive {:DOWN, ^server_ref, :process, ^server, :shutdown}, 5_000
            stops
        end
    end
  end

  # What the operator changed was kept by the endpoints only: a restarted listener lifted
  # every ban, resumed a suspended server, and forgot the connection limit and the pong.
  @tag :capture_log
  test "a listener that restarts keeps the operator's bans, suspension, limit and pong" do
    {server, _port} = start_server(EchoClient)
    :ok = RakNet.Server.ban(server, "10.1.2.3")
    :ok = RakNet.Server.ban(server, "10.1.2.4", 60_000)
    :ok = RakNet.Server.ban(server, "10.1.2.5")
    :ok = RakNet.Server.unban(server, "::ffff:10.1.2.5")
    # An IPv6 ban covers the /64, and so does lifting it.
    :ok = RakNet.Server.ban(server, "2001:db8::1")
    :ok = RakNet.Server.unban(server, "2001:db8::2")
    :ok = RakNet.Server.set_offline_ping_response(server, "kept")
    :ok = RakNet.Server.set_max_connections(server, 1)
    :ok = RakNet.Server.suspend(server)

    old_listener = listener(server)
    [{:inet, endpoint} | _] = :sys.get_state(old_listener).endpoints
    ref = Process.monitor(old_listener)
    Native.endpoint_stop(endpoint)
    assert_receive {:DOWN, ^ref, :process, ^old_listener, _}, 5_000
    %{ipv4_port: port} = RakNet.Server.info(server)
    assert listener(server) != old_listener

    bans = Map.new(RakNet.Server.banned(server))
    assert %{{10, 1, 2, 3} => :infinity, {10, 1, 2, 4} => left} = bans
    assert left > 50_000 and map_size(bans) == 2
    assert {:ok, %{data: "kept"}} = RakNet.Ping.ping("127.0.0.1", port)
    assert {:error, :no_free_incoming_connections} = RakNet.connect("127.0.0.1", port)

    :ok = RakNet.Server.resume(server)
    assert {:ok, _player} = RakNet.connect("127.0.0.1", port)
    # A calm server takes a client's slot at its 0x13, which the client sends as its connect
    # returns: on another endpoint thread the next OCR2 could be read before it.
    assert_receive {:client_new, _}, 5_000
    assert {:error, :no_free_incoming_connections} = RakNet.connect("127.0.0.1", port)
  end

  test "a connection supervisor that dies is started again, and the new listener uses it" do
    {server, _port} = start_server(EchoClient)

    {old_connections, old_listener} = {connections(server), listener(server)}
    ref = Process.monitor(old_listener)
    Process.exit(old_connections, :kill)
    # :rest_for_one: the listener stops, then both start again, the connection supervisor first.
    assert_receive {:DOWN, ^ref, :process, ^old_listener, _}, 5_000
    # Answered once the supervisor has started both again.
    new_listener = listener(server)
    assert is_pid(new_listener) and new_listener != old_listener

    %{ipv4_port: new_port, connections: 0} = RakNet.Server.info(server)
    {:ok, conn} = RakNet.connect("127.0.0.1", new_port)
    assert_receive {:client_new, server_side}, 5_000

    assert [{_, ^server_side, :worker, _}] = DynamicSupervisor.which_children(connections(server))

    {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "again">>)
    assert_receive {:raknet, ^conn, 0x86, "again", _}, 5_000
  end

  test "info/1 leaves out an endpoint that cannot answer instead of crashing the listener" do
    {server, port} = start_server(EchoClient)
    listener = listener(server)

    dead_opts =
      RakNet.Server.Config.new(EchoClient, 0, ipv6_ip: "::1", open_ipv4_socket: false)
      |> RakNet.Server.Config.to_native(:inet6)

    {:ok, dead} = Native.endpoint_start(dead_opts, spawn(fn -> :ok end))
    # Its owner is gone: the endpoint shuts down.
    Stream.repeatedly(fn -> Native.endpoint_info(dead) end)
    |> Enum.find(&match?({:error, :closed}, &1))

    :sys.replace_state(listener, fn s -> %{s | endpoints: s.endpoints ++ [{:inet6, dead}]} end)

    assert %{ipv4_port: ^port, ipv6_port: nil, endpoints: [_one]} = RakNet.Server.info(server)
    assert Process.alive?(listener)
  end

  @tag :capture_log
  test "a killed connection process closes its connection; the peer and the server carry on" do
    {server, port} = start_server(EchoClient)
    {:ok, victim} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, victim_side}, 5_000
    {:ok, survivor} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000

    Process.exit(victim_side, :kill)
    assert_receive {:raknet_disconnect, ^victim, :peer_closed}, 5_000
    assert Connection.send(victim_side, :reliable, <<0x86>>) == {:error, :closed}

    {:ok, nil} = Connection.send(survivor, :reliable, <<0x86, "ok">>)
    assert_receive {:raknet, ^survivor, 0x86, "ok", _}, 5_000
    assert RakNet.Server.info(server).connections == 1
  end

  for callback <- [:new, :receive, :got_ack, :disconnect] do
    @tag :capture_log
    test "raising in #{callback} ends that connection only" do
      callback = unquote(callback)
      {server, port} = start_server(RaisingClient, client_data: {self(), callback})
      {:ok, conn} = RakNet.connect("127.0.0.1", port)
      assert_receive {:raising_new, pid}, 5_000
      # new/3 raises right after telling us its pid: that process may be gone already.
      ref = if callback == :new, do: Process.monitor(pid), else: RakNet.Test.Monitor.monitor!(pid)

      case callback do
        :new ->
          :ok

        :disconnect ->
          # The peer closes; disconnect/1 raises while the process ends anyway.
          :ok = Connection.close(conn)

        _ ->
          {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "go">>)
      end

      assert_receive {:DOWN, ^ref, :process, ^pid, reason}, 5_000

      # new/3 raises right after telling us its pid: the process may be gone before the
      # monitor is set up (:noproc); the peer's disconnection below still shows it ended.
      unless callback == :new and reason == :noproc do
        assert {%RuntimeError{message: "raised in " <> _}, _stack} = reason
      end

      unless callback == :disconnect do
        assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
      end

      # The server serves the next client.
      {:ok, other} = RakNet.connect("127.0.0.1", port)
      assert_receive {:raising_new, _}, 5_000
      # It holds that client's connection and no longer the first one; when new/3 raises,
      # it raises for that client too, and the server holds neither.
      expected = if callback == :new, do: 0, else: 1

      assert :ok =
               RakNet.Test.Wait.until(fn ->
                 RakNet.Server.info(server).connections == expected
               end)

      Connection.close(other)
    end
  end
end
