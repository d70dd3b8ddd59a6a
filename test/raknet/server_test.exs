defmodule RakNet.ServerTest do
  use ExUnit.Case, async: false

  alias RakNet.Connection
  import RakNet.Test.Monitor
  alias RakNet.Test.{EchoClient, ReasonClient}

  @reliabilities RakNet.ReliabilityLayer.Reliability.all()

  defp start_server(opts \\ []) do
    {module, opts} = Keyword.pop(opts, :module, EchoClient)
    {server, _port} = RakNet.Test.Server.start!(module, opts)
    {server, RakNet.Server.info(server)}
  end

  defp connect(port, host \\ "127.0.0.1") do
    assert {:ok, conn} = RakNet.connect(host, port)
    assert_receive {:client_new, server_side}, 5_000
    {conn, server_side}
  end

  test "the usage example of X-Plane's README works unchanged" do
    localhost = {127, 0, 0, 1}

    spec = [
      EchoClient,
      0,
      include_timestamp_with_datagrams: false,
      host: localhost,
      client_timeout_ms: 20 * 60 * 1_000,
      open_ipv6_socket: false,
      client_data: self()
    ]

    server = start_supervised!({RakNet.Server, spec})
    %{ipv4_port: port} = RakNet.Server.info(server)
    {conn, server_side} = connect(port)

    assert {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "ahoy">>)
    assert_receive {:client_received, ^server_side, 0x86, 4, transit}, 5_000
    assert is_integer(transit)
    assert_receive {:raknet, ^conn, 0x86, "ahoy", _}, 5_000
    assert RakNet.Server.info(server).connections == 1
    # The socket buffers the kernel granted are reported (capped by net.core.rmem_max).
    [endpoint] = RakNet.Server.info(server).endpoints
    assert endpoint.stats.recv_buffer_bytes > 0 and endpoint.stats.send_buffer_bytes > 0
  end

  test "X-Plane's README client state (@enforce_keys, new/3 building its own struct) works over both sockets" do
    # X-Plane's README, with port 0, loopback addresses and the test process as client_data.
    # (Its include_timestamp_with_datagrams: true needs a peer built that way, as X-Plane's
    # client is; RakNet.connect/3 is not, so it stays false here.)
    localhost = {127, 0, 0, 1}

    make_server_spec = fn port ->
      [
        RakNet.Test.XPlaneState,
        port,
        include_timestamp_with_datagrams: false,
        host: localhost,
        client_timeout_ms: 20 * 60 * 1_000,
        open_ipv6_socket: true,
        ipv6_ip: "::1",
        client_data: self()
      ]
    end

    servers = Enum.map([0], fn port -> {RakNet.Server, make_server_spec.(port)} end)
    opts = [strategy: :one_for_one]

    supervisor =
      start_supervised!(%{
        id: :mmo_supervisor,
        start: {Supervisor, :start_link, [servers, opts]},
        type: :supervisor
      })

    [{_id, server, :supervisor, _}] = Supervisor.which_children(supervisor)
    %{ipv4_port: port, ipv6_port: port6} = RakNet.Server.info(server)
    assert is_integer(port) and port > 0 and is_integer(port6) and port6 > 0

    for {host, port} <- [{"127.0.0.1", port}, {"::1", port6}] do
      assert {:ok, conn} = RakNet.connect(host, port)
      assert_receive {:xplane_new, connection_pid, session_id}, 5_000
      assert is_pid(connection_pid)

      assert {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "ahoy">>)
      assert_receive {:xplane_packet, ^session_id, 0x86, "ahoy", transit}, 5_000
      assert is_integer(transit) and transit >= 0
      assert_receive {:raknet, ^conn, 0x86, "ahoy", _}, 5_000

      assert {:ok, receipt} =
               Connection.send(connection_pid, :reliable_ack_receipt, <<0x87, "ack me">>)

      assert_receive {:xplane_ack, ^session_id, ^receipt}, 5_000

      :ok = Connection.close(conn)
      assert_receive {:xplane_disconnect, ^session_id}, 5_000
    end
  end

  test "a loopback :ip keeps the IPv6 socket on loopback too, unless :ipv6_ip says otherwise" do
    for {opts, ipv6} <- [
          {[ip: "127.0.0.1"], {0, 0, 0, 0, 0, 0, 0, 1}},
          {[ip: {127, 0, 0, 1}, ipv6_ip: "::"], {0, 0, 0, 0, 0, 0, 0, 0}}
        ] do
      server =
        start_supervised!(%{RakNet.Server.child_spec([EchoClient, 0 | opts]) | id: make_ref()})

      addresses = Enum.map(RakNet.Server.info(server).endpoints, &elem(&1.address, 0))
      assert Enum.sort(addresses) == Enum.sort([{127, 0, 0, 1}, ipv6]), inspect(opts)
    end

    # Another :ip without :ipv6_ip: the server warns at start (the IPv6 socket is open to all).
    config = &RakNet.Server.Config.new(EchoClient, 0, &1)
    assert config.(ip: {192, 0, 2, 1}).ipv6_unrestricted
    refute config.(ip: {192, 0, 2, 1}, ipv6_ip: "::").ipv6_unrestricted
    refute config.(ip: {192, 0, 2, 1}, open_ipv6_socket: false).ipv6_unrestricted
    refute config.(ip: "127.0.0.1").ipv6_unrestricted
    refute config.([]).ipv6_unrestricted
  end

  test "a server registered under :name is reached by it, and its child id is the name" do
    opts = [
      ip: "127.0.0.1",
      open_ipv6_socket: false,
      client_data: self(),
      name: RakNet.Test.NamedServer
    ]

    spec = RakNet.Server.child_spec([EchoClient, 0 | opts])
    assert spec.id == RakNet.Test.NamedServer
    server = start_supervised!(spec)

    assert Process.whereis(RakNet.Test.NamedServer) == server
    assert %{ipv4_port: port} = RakNet.Server.info(RakNet.Test.NamedServer)
    {:ok, conn} = RakNet.connect({127, 0, 0, 1}, port)

    assert :ok =
             RakNet.Test.Wait.until(fn ->
               RakNet.Server.connections(RakNet.Test.NamedServer) != []
             end)

    assert RakNet.Server.start_link(EchoClient, 0, opts) == {:error, {:already_started, server}}
    :ok = Connection.close(conn)
  end

  test "servers on port 0 can share a supervisor without ids of their own" do
    opts = [ip: "127.0.0.1", open_ipv6_socket: false]
    # name: nil is the default, unregistered (as an unset `Application.get_env/2` gives it).
    children =
      for extra <- [[], [name: nil]], do: {RakNet.Server, [EchoClient, 0 | opts ++ extra]}

    sup =
      start_supervised!(%{
        id: :servers,
        start: {Supervisor, :start_link, [children, [strategy: :one_for_one]]},
        type: :supervisor
      })

    servers = for {_id, pid, :supervisor, _} <- Supervisor.which_children(sup), do: pid
    assert length(servers) == 2
    ports = Enum.map(servers, &RakNet.Server.info(&1).ipv4_port)
    assert length(Enum.uniq(ports)) == 2

    # A fixed port keeps X-Plane's id, the same for the same port.
    assert RakNet.Server.child_spec([EchoClient, 19_132]).id ==
             RakNet.Server.child_spec([EchoClient, 19_132, host: "127.0.0.1"]).id
  end

  test "an invalid option's error shows a shortened value" do
    error =
      assert_raise ArgumentError, fn ->
        RakNet.Server.start_link(EchoClient, 0,
          offline_ping_response: String.duplicate("x", 5_000)
        )
      end

    assert error.message =~ ":offline_ping_response must be a binary of at most 1431 bytes"
    assert byte_size(error.message) < 200
  end

  test "start_link returns the socket's error when the port is taken" do
    {:ok, holder} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(holder)
    Process.flag(:trap_exit, true)

    assert RakNet.Server.start_link(EchoClient, port, ip: {127, 0, 0, 1}, open_ipv6_socket: false) ==
             {:error, :eaddrinuse}

    :gen_udp.close(holder)
  end

  test "an :ip that is not loopback, without :ipv6_ip, warns that IPv6 listens everywhere" do
    Process.flag(:trap_exit, true)

    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the IPv4 socket, opened first,
    # fails, so nothing is bound; the warning comes before. (A host that binds foreign
    # addresses, net.ipv4.ip_nonlocal_bind, starts the server: it is stopped at once.)
    log =
      ExUnit.CaptureLog.capture_log(fn ->
        opts = [ip: {192, 0, 2, 1}, open_ipv6_socket: true]
        start_and_stop(opts)
      end)

    assert log =~ ":ip 192.0.2.1 restricts the IPv4 socket only"

    # With :ipv6_ip the IPv6 socket is restricted too: no warning.
    log =
      ExUnit.CaptureLog.capture_log(fn ->
        start_and_stop(ip: {192, 0, 2, 1}, ipv6_ip: "::1", open_ipv6_socket: true)
      end)

    refute log =~ "restricts the IPv4 socket only"
  end

  defp start_and_stop(opts) do
    case RakNet.Server.start_link(EchoClient, 0, opts) do
      {:error, :eaddrnotavail} -> :ok
      {:ok, pid} -> Supervisor.stop(pid)
    end
  end

  test "every reliability is delivered" do
    {_server, %{ipv4_port: port}} = start_server()
    {conn, _} = connect(port)

    for {reliability, i} <- Enum.with_index(@reliabilities) do
      assert {:ok, _} =
               Connection.send(conn, reliability, <<0x86, i, "payload">>, channel: rem(i, 4))
    end

    for i <- 0..7 do
      assert_receive {:raknet, ^conn, 0x86, <<^i, "payload">>, _}, 5_000
    end
  end

  # Above 1 MiB a send goes through a dirty scheduler (its copy is long).
  test "messages from 1 B to 3 MB arrive intact both ways" do
    {_server, %{ipv4_port: port}} = start_server()
    {conn, _} = connect(port)

    for size <- [1, 2, 100, 1_400, 1_500, 5_000, 100_000, 1_000_000, 3_000_000] do
      payload = <<0x86, :crypto.strong_rand_bytes(size - 1)::binary>>
      assert {:ok, nil} = Connection.send(conn, :reliable_ordered, payload)
      <<type, rest::binary>> = payload
      assert_receive {:raknet, ^conn, ^type, ^rest, _}, 10_000
    end
  end

  test "a server with BBR congestion control echoes 1 MB intact" do
    {_server, %{ipv4_port: port}} = start_server(congestion_control: :bbr)
    {conn, _} = connect(port)
    payload = <<0x86, :crypto.strong_rand_bytes(999_999)::binary>>
    assert {:ok, nil} = Connection.send(conn, :reliable_ordered, payload)
    <<type, rest::binary>> = payload
    assert_receive {:raknet, ^conn, ^type, ^rest, _}, 10_000
  end

  test "ack receipts reach both sides" do
    {_server, %{ipv4_port: port}} = start_server()
    {conn, server_side} = connect(port)

    assert {:ok, id} = Connection.send(conn, :reliable_ack_receipt, <<0x86>>)
    assert is_integer(id) and id > 0
    assert_receive {:raknet_receipt, ^conn, ^id, :acked}, 5_000

    assert {:ok, server_id} =
             Connection.send(server_side, :reliable_ordered_ack_receipt, <<0x87>>)

    assert_receive {:raknet, ^conn, 0x87, "", _}, 5_000
    # The server-side client module hears of it through got_ack/2.
    assert_receive {:client_ack, ^server_side, ^server_id}, 5_000
  end

  test "the client closing reaches the server's disconnect/1" do
    {_server, %{ipv4_port: port}} = start_server()
    {conn, server_side} = connect(port)
    ref = monitor!(server_side)

    :ok = Connection.close(conn)
    assert_receive {:raknet_disconnect, ^conn, :local_close}, 5_000
    assert_receive {:client_disconnect, ^server_side}, 5_000
    assert_receive {:DOWN, ^ref, :process, ^server_side, {:shutdown, :peer_closed}}, 5_000
    assert Connection.send(conn, :reliable, <<0x86>>) == {:error, :closed}
  end

  test "the server closing a connection reaches the client" do
    {_server, %{ipv4_port: port}} = start_server()
    {conn, server_side} = connect(port)

    :ok = Connection.close(server_side)
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    assert_receive {:client_disconnect, ^server_side}, 5_000
    assert Connection.send(server_side, :reliable, <<0x86>>) == {:error, :closed}
  end

  @tag :interop
  @tag timeout: 30_000
  test "a silent peer times out" do
    # Above both sides' 5 s keepalive: a live peer never times out, a dead one does.
    {_server, %{ipv4_port: port}} = start_server(module: ReasonClient, client_timeout_ms: 6_000)
    peer = RakNet.Test.Official.start_hanging_client(port)
    assert_receive {:reason_new, server_side}, 5_000
    # Kill the official client without a goodbye: the server hears nothing more.
    RakNet.Test.Official.kill(peer)
    killed_at = System.monotonic_time(:millisecond)
    assert_receive {:disconnect_2, ^server_side, :timeout}, 10_000
    assert System.monotonic_time(:millisecond) - killed_at >= 5_000
  end

  @tag :interop
  @tag timeout: 30_000
  test "a peer that stops reading fills the open half of :max_send_bytes, not more" do
    # 1 MiB for 4 connections: each is guaranteed 128 KiB, and 512 KiB is open beyond shares.
    {_server, %{ipv4_port: port}} =
      start_server(module: ReasonClient, max_send_bytes: 1_048_576, max_connections: 4)

    peer = RakNet.Test.Official.start_hanging_client(port)
    assert_receive {:reason_new, server_side}, 5_000
    RakNet.Test.Official.kill(peer)

    # 1 KB reliable messages to a peer that acknowledges nothing, until refused.
    sent =
      Enum.reduce_while(1..2_000, 0, fn _, n ->
        case Connection.send(server_side, :reliable_ordered, :binary.copy(<<0x86>>, 1_000)) do
          {:ok, _} -> {:cont, n + 1}
          {:error, :over_budget} -> {:halt, n}
        end
      end)

    # Each counts 1,128 bytes (payload and bookkeeping): 512 KiB's worth is 464. The check
    # before enqueueing reads the others' backlog as the endpoint thread last published it,
    # so on a busy machine it refuses a little early, never late.
    assert sent in 350..470
  end

  test "an owner's death closes its connection" do
    {_server, %{ipv4_port: port}} = start_server()
    test = self()

    owner =
      spawn(fn ->
        {:ok, conn} = RakNet.connect("127.0.0.1", port)
        send(test, {:conn, conn})
        Process.sleep(:infinity)
      end)

    assert_receive {:conn, conn}, 5_000
    assert_receive {:client_new, server_side}, 5_000
    Process.exit(owner, :kill)
    assert_receive {:client_disconnect, ^server_side}, 5_000
    assert Connection.send(conn, :reliable, <<0x86>>) == {:error, :closed}
  end

  @tag :capture_log
  test "a crashing handler closes its own connection only" do
    {server, %{ipv4_port: port}} = start_server()
    {victim, victim_side} = connect(port)
    {survivor, _} = connect(port)
    ref = monitor!(victim_side)

    {:ok, nil} = Connection.send(victim, :reliable, <<0x99>>)
    assert_receive {:DOWN, ^ref, :process, ^victim_side, {%RuntimeError{}, _}}, 5_000
    assert_receive {:raknet_disconnect, ^victim, :peer_closed}, 5_000

    {:ok, nil} = Connection.send(survivor, :reliable, <<0x86, "still here">>)
    assert_receive {:raknet, ^survivor, 0x86, "still here", _}, 5_000
    assert Process.alive?(server)
  end

  test "100 concurrent clients share one client thread" do
    {server, %{ipv4_port: port}} = start_server(RakNet.Test.Server.crowd())
    test = self()
    threads_before = os_threads()

    tasks =
      for i <- 1..100 do
        Task.async(fn ->
          {:ok, conn} = RakNet.connect("127.0.0.1", port)
          {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i::32>>)

          receive do
            {:raknet, ^conn, 0x86, <<^i::32>>, _} -> send(test, {:echoed, i})
          after
            10_000 -> send(test, {:timeout, i})
          end

          # Stay connected until the test has counted.
          receive do
            :done -> :ok
          end
        end)
      end

    for i <- 1..100, do: assert_receive({:echoed, ^i}, 20_000)
    assert RakNet.Server.info(server).connections == 100
    # 100 client sockets (one per connection to the same server), yet at most the shared
    # client thread was added to the VM.
    assert os_threads() - threads_before <= 2
    Enum.each(tasks, &send(&1.pid, :done))
    Task.await_many(tasks)
  end

  test "IPv6 on ::1" do
    {_server, info} =
      start_server(open_ipv4_socket: false, open_ipv6_socket: true, ipv6_ip: "::1")

    assert info.ipv4_port == nil
    {conn, _} = connect(info.ipv6_port, "::1")
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "v6">>)
    assert_receive {:raknet, ^conn, 0x86, "v6", _}, 5_000
    assert {:ok, %{address: {{0, 0, 0, 0, 0, 0, 0, 1}, _}}} = Connection.info(conn)
  end

  test "an Elixir client can run a RakNet.Client implementation too" do
    {_server, %{ipv4_port: port}} = start_server()
    assert {:ok, client} = RakNet.connect("127.0.0.1", port, client: {ReasonClient, self()})
    assert_receive {:client_new, server_side}, 5_000
    {:ok, nil} = Connection.send(client, :reliable, <<0x86, "ping">>)
    assert_receive {:client_received, ^server_side, 0x86, 4, _}, 5_000
    :ok = Connection.close(client)
    assert_receive {:disconnect_2, ^client, :local_close}, 5_000
    assert_receive {:client_disconnect, ^server_side}, 5_000
  end

  test "optional callbacks get the disconnect reason" do
    {_server, %{ipv4_port: port}} = start_server(module: ReasonClient)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    :ok = Connection.close(conn)
    assert_receive {:disconnect_2, _server_side, :peer_closed}, 5_000
    refute_received {:disconnect_1, _}
  end

  test "stopping the server disconnects its clients" do
    {server, %{ipv4_port: port}} = start_server()
    {conn, server_side} = connect(port)
    ref = Process.monitor(server)
    :ok = RakNet.Server.stop(server)
    assert_receive {:DOWN, ^ref, :process, ^server, _}
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    # The server side's client heard of it too, before the server was gone.
    assert_receive {:client_disconnect, ^server_side}, 1_000
    refute Process.alive?(server)
  end

  test "stopping the server tells disconnect/2 it was a shutdown" do
    {server, %{ipv4_port: port}} = start_server(module: ReasonClient)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:reason_new, server_side}, 5_000
    :ok = RakNet.Server.stop(server)
    assert_receive {:disconnect_2, ^server_side, :shutdown}, 1_000
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
  end

  # The listener found its connection supervisor by asking the server's supervisor, on the
  # first connection. A first connection announced while the supervisor was stopping its
  # children (it waits for the listener) deadlocked the two: the listener took the
  # announcement before the supervisor's exit signal and called the supervisor. Seen as a
  # test supervisor's 60 s shutdown timeout when a test ended right after a client connected.
  # The runtime waited 2 s for its peers whatever the wait asked for, and said it had
  # stopped before its socket was closed: a server started again on the port (a listener
  # restarted by its supervisor) could find it taken.
  test "a server stopped with a wait of 0 frees its port at once, even with a silent peer" do
    {server, port} = RakNet.Test.Server.start!(EchoClient, restart: :temporary)
    {_conn, _server_side} = connect(port)
    # The peer's datagrams are dropped from now on: it never acknowledges the disconnection.
    :ok = RakNet.Server.ban(server, "127.0.0.1")
    :ok = RakNet.Server.stop(server, 0)

    opts = [ip: {127, 0, 0, 1}, open_ipv6_socket: false, client_data: self()]
    assert {:ok, again} = RakNet.Server.start_link(EchoClient, port, opts)
    :ok = RakNet.Server.stop(again, 0)
  end

  test "a server stops while its first connection's announcement is still queued" do
    {server, %{ipv4_port: port}} = start_server(restart: :temporary)

    listener = RakNet.Test.Server.child(server, RakNet.Server.Listener)

    # Held still, the listener queues the announcement; then the stop's exit signal.
    true = :erlang.suspend_process(listener)
    assert {:ok, _conn} = RakNet.connect("127.0.0.1", port)

    assert :ok == RakNet.Test.Wait.until(fn -> queued(listener) >= 1 end, 500)

    ref = Process.monitor(server)
    spawn(fn -> Supervisor.stop(server, :shutdown, :infinity) end)

    assert :ok == RakNet.Test.Wait.until(fn -> queued(listener) >= 2 end, 500)

    # The order the old listener deadlocked on: the announcement, then the exit signal.
    assert {:messages, [{:raknet_endpoint, _, :connected, _, _}, {:EXIT, ^server, :shutdown}]} =
             Process.info(listener, :messages)

    true = :erlang.resume_process(listener)

    assert_receive {:DOWN, ^ref, :process, ^server, _}, 10_000
    refute Process.alive?(listener)
  end

  defp queued(pid) do
    case Process.info(pid, :message_queue_len) do
      {:message_queue_len, n} -> n
      nil -> 0
    end
  end

  # A handler that calls its server while the server stops (a game updating its MOTD when a
  # player leaves) is answered at once, and without an exit: the call used to ask the
  # server's supervisor for the listener, and a supervisor stopping its children answers no
  # calls (the callback waited until its connection process was killed, 5 s); then it exited.
  test "a disconnect callback that calls its stopping server gets {:error, :stopping} at once" do
    key = {__MODULE__, make_ref()}
    server_fun = fn -> :persistent_term.get(key) end

    {server, %{ipv4_port: port}} =
      start_server(
        module: RakNet.Test.CallsServerClient,
        client_data: {self(), server_fun},
        restart: :temporary
      )

    :persistent_term.put(key, server)
    on_exit(fn -> :persistent_term.erase(key) end)

    assert {:ok, _conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
    # While it runs, the call is answered.
    assert :ok = RakNet.Server.set_offline_ping_response(server, "still one player")

    :ok = RakNet.Server.stop(server)
    # Sent before the stop returned; 2 s is well under the connection's 5 s shutdown.
    assert_receive {:disconnect_called_server, {:error, :stopping}}, 2_000
  end

  test "connect errors" do
    {:ok, silent} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(silent)
    assert RakNet.connect("127.0.0.1", port, timeout: 500) == {:error, :timeout}
    assert RakNet.connect("no-such-host.invalid", 19_132) == {:error, :nxdomain}

    {_server, %{ipv4_port: full}} = start_server(max_connections: 1)
    {_conn, _} = connect(full)
    assert RakNet.connect("127.0.0.1", full) == {:error, :no_free_incoming_connections}

    # A server speaking only a version we do not: refused with its version.
    {_server, %{ipv4_port: other}} = start_server(protocol_versions: [5])
    assert {:error, {:incompatible_protocol, 5}} = RakNet.connect("127.0.0.1", other)
    # One speaking only 6 is reached by falling back from 11.
    {_server, %{ipv4_port: old}} = start_server(protocol_versions: [6])
    assert {:ok, conn} = RakNet.connect("127.0.0.1", old)
    assert {:ok, %{protocol: 6}} = RakNet.Connection.info(conn)
  end

  test "sends validate their arguments" do
    {_server, %{ipv4_port: port}} = start_server()
    {conn, _} = connect(port)
    assert Connection.send(conn, :fast, <<0x86>>) == {:error, :bad_reliability}
    assert Connection.send(conn, :reliable, <<0x86>>, channel: 32) == {:error, :bad_channel}

    assert Connection.send(conn, :reliable, <<0x86>>, priority: :urgent) ==
             {:error, :bad_priority}

    assert Connection.send(conn, :reliable, <<>>) == {:error, :empty}
    assert Connection.send(conn, :reliable, :not_binary) == {:error, :not_binary}

    assert Connection.send(conn, :reliable, :binary.copy(<<0>>, 33 * 1024 * 1024)) ==
             {:error, :too_large}

    # Under the 32 MiB maximum, but more than 16 384 fragments hold at the connection's MTU
    # (about 22 MiB at 1492): the peer would refuse it. Refused here, not dropped later.
    big = :binary.copy(<<0>>, 24 * 1024 * 1024)
    assert Connection.send(conn, :reliable_ack_receipt, big) == {:error, :too_large}

    dead = spawn(fn -> :ok end)
    assert Connection.send(dead, :reliable, <<0x86>>) == {:error, :closed}
  end

  test "new/3 may call its own server" do
    key = {__MODULE__, make_ref()}
    server_fun = fn -> :persistent_term.get(key) end

    {server, %{ipv4_port: port}} =
      start_server(module: RakNet.Test.CallsServerClient, client_data: {self(), server_fun})

    :persistent_term.put(key, server)
    on_exit(fn -> :persistent_term.erase(key) end)

    assert {:ok, _conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
    assert {:ok, %{data: "one player"}} = RakNet.Ping.ping("127.0.0.1", port)
  end

  test "the offline ping response can change live" do
    {server, %{ipv4_port: port}} = start_server(offline_ping_response: "first")
    assert {:ok, %{data: "first"}} = RakNet.Ping.ping("127.0.0.1", port)
    :ok = RakNet.Server.set_offline_ping_response(server, "second")
    assert {:ok, %{data: "second"}} = RakNet.Ping.ping("127.0.0.1", port)
  end

  describe "option validation" do
    for {opts, message} <- [
          {[host: "not an ip"],
           ":host must be an IP address (tuple or string) or nil, got: \"not an ip\""},
          {[host: {127, 0, 0}], ":host must be an IP address"},
          {[ip: "not an ip"],
           ":ip must be an IPv4 address (tuple or string), got: \"not an ip\""},
          {[ip: {127, 0, 0}], ":ip must be an IPv4 address"},
          {[ip: "::1"], ":ip must be an IPv4 address (the IPv4 socket's); use :ipv6_ip"},
          {[ipv6_ip: "127.0.0.1"], ":ipv6_ip must be an IPv6 address"},
          {[ipv6_ip: :localhost], ":ipv6_ip must be an IPv6 address"},
          {[convert_timestamps: :yes], ":convert_timestamps must be a boolean"},
          {[open_ipv4_socket: "yes"], ":open_ipv4_socket must be a boolean, got: \"yes\""},
          {[open_ipv6_socket: nil], ":open_ipv6_socket must be a boolean, got: nil"},
          {[ipv6_port: 70_000], ":ipv6_port must be nil or an integer in 0..65535"},
          {[ipv6_port: -1], ":ipv6_port must be nil or an integer in 0..65535"},
          {[client_timeout_ms: 5], ":client_timeout_ms must be an integer >= 100"},
          {[client_timeout_ms: 1.5e4], ":client_timeout_ms must be an integer >= 100"},
          {[include_timestamp_with_datagrams: 1], ":include_timestamp_with_datagrams must be"},
          {[offline_ping_response: 'charlist'], ":offline_ping_response must be a binary"},
          {[offline_ping_response: String.duplicate("x", 1_432)],
           ":offline_ping_response must be a binary of at most 1431 bytes"},
          {[server_identifier: "short"], ":server_identifier must be a 64-bit integer"},
          {[server_identifier: -1], ":server_identifier must be a 64-bit integer"},
          {[server_identifier: 0x1_0000_0000_0000_0000], ":server_identifier must be"},
          {[max_number_of_internal_ids: 0],
           ":max_number_of_internal_ids must be an integer in 1..64"},
          {[max_number_of_internal_ids: 65], ":max_number_of_internal_ids must be"},
          {[max_connections: 0], ":max_connections must be a positive integer, got: 0"},
          {[max_connections: :infinity], ":max_connections must be a positive integer"},
          {[protocol_versions: []], ":protocol_versions must be a non-empty list"},
          {[protocol_versions: [11, 256]], ":protocol_versions must be a non-empty list"},
          {[protocol_versions: 11], ":protocol_versions must be a non-empty list"},
          {[min_mtu: 399], ":min_mtu must be an integer in 400..1500, got: 399"},
          {[max_mtu: 9000], ":max_mtu must be an integer in 400..1500, got: 9000"},
          {[min_mtu: 1400, max_mtu: 1200], ":min_mtu (1400) must not exceed :max_mtu (1200)"},
          {[use_cookies: "true"], ":use_cookies must be :auto or a boolean"},
          {[max_pending_deliveries: 15], ":max_pending_deliveries must be an integer >= 16"},
          {[max_pending_bytes: 1_000], ":max_pending_bytes must be an integer >= 65536"},
          {[max_buffered_bytes: 1_000], ":max_buffered_bytes must be an integer >= 1048576"},
          {[congestion_control: :cubic], ":congestion_control must be :reno or :bbr"},
          {[open_ipv4_socket: false, open_ipv6_socket: false], "at least one of"},
          {[name: "server"],
           ":name must be an atom, {:global, term}, {:via, module, term} or nil"},
          {[name: true], ":name must be an atom"},
          {[name: {:via, "Registry", :x}], ":name must be an atom"},
          {[bogus: 1], "unknown option :bogus for RakNet.Server"},
          {[client_module: Other], "unknown option :client_module"},
          {[:not_a_keyword], "options must be a keyword list"}
        ] do
      test "rejects #{inspect(opts, limit: 3, printable_limit: 12)}" do
        assert_raise ArgumentError, ~r/#{Regex.escape(unquote(message))}/, fn ->
          RakNet.Server.start_link(EchoClient, 0, unquote(Macro.escape(opts)))
        end
      end
    end

    test "rejects a bad port or client module" do
      assert_raise ArgumentError, ~r/:port must be an integer in 0..65535, got: 65536/, fn ->
        RakNet.Server.start_link(EchoClient, 65_536)
      end

      assert_raise ArgumentError, ~r/client module must be a module, got: "EchoClient"/, fn ->
        RakNet.Server.start_link("EchoClient", 0)
      end

      assert_raise ArgumentError, ~r/RakNet.Test.NoSuchModule is not available/, fn ->
        RakNet.Server.start_link(RakNet.Test.NoSuchModule, 0, open_ipv6_socket: false)
      end

      assert_raise ArgumentError, ~r/must implement RakNet.Client/, fn ->
        RakNet.Server.start_link(RakNet.Server.Config, 0, open_ipv6_socket: false)
      end

      assert_raise ArgumentError, ~r/expected \[client_module, port \| options\]/, fn ->
        RakNet.Server.Config.new([EchoClient])
      end
    end

    test "fills in X-Plane's defaults" do
      config = RakNet.Server.Config.new([EchoClient, 19_132])
      assert config.open_ipv6_socket == (System.get_env("SEPARATE_IPV6_PORT") != "false")

      assert %RakNet.Server.Config{
               client_module: EchoClient,
               port: 19_132,
               host: nil,
               ip: {0, 0, 0, 0},
               open_ipv4_socket: true,
               client_timeout_ms: 10_000,
               include_timestamp_with_datagrams: false,
               client_data: %{},
               offline_ping_response: "RakNet Server",
               max_number_of_internal_ids: 10
             } = config

      native = RakNet.Server.Config.to_native(config, :inet6)
      assert %{host: "::", port: 19_132, accept_incoming: true, timeout_ms: 10_000} = native
      assert %{advertised_ip: nil, strip_timestamps: true} = native
      assert %{congestion_control: :reno} = native

      bbr = RakNet.Server.Config.new(EchoClient, 0, congestion_control: :bbr)
      assert %{congestion_control: :bbr} = RakNet.Server.Config.to_native(bbr, :inet)
    end

    test "SEPARATE_IPV6_PORT=false turns the IPv6 socket off by default" do
      original = System.get_env("SEPARATE_IPV6_PORT")
      System.put_env("SEPARATE_IPV6_PORT", "false")

      on_exit(fn ->
        if original,
          do: System.put_env("SEPARATE_IPV6_PORT", original),
          else: System.delete_env("SEPARATE_IPV6_PORT")
      end)

      refute RakNet.Server.Config.new(EchoClient, 0, []).open_ipv6_socket
      assert RakNet.Server.Config.new(EchoClient, 0, open_ipv6_socket: true).open_ipv6_socket
    end

    test "turns options into the runtime's map for each socket" do
      config =
        RakNet.Server.Config.new(EchoClient, 0,
          ip: "127.0.0.1",
          ipv6_ip: "::1",
          ipv6_port: 0,
          server_identifier: <<1, 2, 3, 4, 5, 6, 7, 8>>,
          client_timeout_ms: 20_000
        )

      assert %{host: "127.0.0.1", port: 0, guid: 0x0102030405060708, timeout_ms: 20_000} =
               v4 = RakNet.Server.Config.to_native(config, :inet)

      assert %{host: "::1"} = RakNet.Server.Config.to_native(config, :inet6)

      assert Enum.sort(Map.keys(v4)) ==
               Enum.sort([
                 :host,
                 :port,
                 :accept_incoming,
                 :max_connections,
                 :protocol_versions,
                 :min_mtu,
                 :max_mtu,
                 :timeout_ms,
                 :include_timestamp_with_datagrams,
                 :offline_ping_response,
                 :max_number_of_internal_ids,
                 :use_cookies,
                 :guid,
                 :max_pending_deliveries,
                 :max_pending_bytes,
                 :max_buffered_bytes,
                 :max_send_bytes,
                 :max_message_bytes,
                 :max_messages_per_sec,
                 :send_delay_ms,
                 :handshake_timeout_ms,
                 :max_half_open,
                 :max_half_open_per_ip,
                 :strict_half_open,
                 :strict_handshakes_per_sec,
                 :max_unproven,
                 :max_unproven_per_ip,
                 :max_connections_per_ip,
                 :new_connections_per_ip_per_sec,
                 :pongs_per_ip_per_sec,
                 :pong_bytes_per_sec,
                 :pong_amplification,
                 :advertised_ip,
                 :strip_timestamps,
                 :congestion_control,
                 :batch_delivery,
                 :inline_sends,
                 :gso,
                 :max_reliable_in_flight,
                 :proxy_protocol,
                 :raw_prefixes
               ])
    end

    test "accepts X-Plane's extra options" do
      assert %RakNet.Server.Config{} =
               RakNet.Server.Config.new(EchoClient, 0,
                 custom_packets: [],
                 custom_types: [],
                 send: & &1
               )
    end

    test "reports a port in use" do
      {:ok, taken} = :gen_udp.open(0, ip: {127, 0, 0, 1})
      {:ok, port} = :inet.port(taken)
      Process.flag(:trap_exit, true)

      assert {:error, _} =
               RakNet.Server.start_link(EchoClient, port,
                 ip: {127, 0, 0, 1},
                 open_ipv6_socket: false
               )
    end
  end

  defp os_threads do
    "/proc/#{System.pid()}/task" |> File.ls!() |> length()
  end
end
