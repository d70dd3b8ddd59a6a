defmodule RakNet.EndpointThreadsTest do
  # A server spread over several endpoint threads (SO_REUSEPORT sockets on one port).
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.{EchoClient, Mailbox}

  @moduletag timeout: 120_000

  defp start_server(opts), do: RakNet.Test.Server.start!(EchoClient, opts)

  test "200 connections spread over 4 threads: handshakes, echo, broadcast, info, ban" do
    n = 200
    # One IP for all: the per-IP limit is shared by the threads, so exactly n fit.
    {server, port} =
      start_server(
        [endpoint_threads: 4, max_connections: 1_000, max_connections_per_ip: n] ++
          RakNet.Test.Server.crowd()
      )

    conns =
      for _ <- 1..n do
        assert {:ok, conn} = RakNet.connect("127.0.0.1", port, timeout: 5_000)
        conn
      end

    for _ <- 1..n, do: assert_receive({:client_new, _}, 10_000)

    info = RakNet.Server.info(server)
    assert %{connections: ^n, endpoints: [endpoint]} = info
    assert length(endpoint.threads) == 4
    per_thread = Enum.map(endpoint.threads, & &1.connections)
    assert Enum.sum(per_thread) == n
    assert endpoint.connections == n
    assert endpoint.stats.connections == n
    # The kernel spread them: more than one thread holds connections.
    assert Enum.count(per_thread, &(&1 > 0)) > 1

    assert endpoint.stats.offline_in ==
             endpoint.threads |> Enum.map(& &1.stats.offline_in) |> Enum.sum()

    # No client failed its cookie check. (The threads share the server's cookie key, so a
    # handshake whose datagrams move to another thread half-way completes too: the engine's
    # tests/group.rs moves one.)
    assert endpoint.stats.bad_cookies == 0

    # One server GUID whichever thread a client landed on.
    guids = conns |> Enum.map(&elem(Connection.info(&1), 1).guid) |> Enum.uniq()
    assert guids == [endpoint.guid]

    # The per-IP limit holds across threads: one more from 127.0.0.1 is refused.
    assert RakNet.connect("127.0.0.1", port, timeout: 5_000) ==
             {:error, :no_free_incoming_connections}

    # Echo on every connection.
    for conn <- conns, do: {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "echo">>)
    got = Mailbox.echoes(1_000)
    assert got |> Enum.map(&elem(&1, 0)) |> Enum.sort() == Enum.sort(conns)

    assert {:ok, ^n} = RakNet.Server.broadcast(server, :reliable_ordered, <<0x86, "to all">>)
    got = Mailbox.echoes(1_000)
    assert got |> Enum.map(&elem(&1, 0)) |> Enum.sort() == Enum.sort(conns)
    assert Enum.all?(got, fn {_, payload} -> payload == "to all" end)

    # A ban closes the connections of every thread and refuses newcomers on all of them.
    :ok = RakNet.Server.ban(server, "127.0.0.1")

    for conn <- conns,
        do: assert_receive({:raknet_disconnect, ^conn, _}, 10_000)

    assert [{{127, 0, 0, 1}, :infinity}] = RakNet.Server.banned(server)
    assert RakNet.connect("127.0.0.1", port, timeout: 3_000) == {:error, :banned}
  end

  test "20 players connecting together from one address all get in, however the threads share them" do
    # The kernel spreads one address's clients over the threads unevenly: each thread keeps
    # the whole per-IP rate (20 a second), or the one that gets an 11th refuses it.
    {_server, port} = start_server(endpoint_threads: 2)

    conns =
      for _ <- 1..20 do
        assert {:ok, conn} = RakNet.connect("127.0.0.1", port, timeout: 5_000)
        assert_receive {:client_new, _}, 5_000
        conn
      end

    for conn <- conns, do: Connection.close(conn)
  end

  test "max_connections holds for the server, whichever thread a client lands on" do
    # 20 connects from one address in a moment: over the per-IP rate (20 a second, a quarter
    # of it per thread), some would be told "recently connected" instead of "full".
    {server, port} =
      start_server([endpoint_threads: 4, max_connections: 3] ++ RakNet.Test.Server.crowd())

    results = for _ <- 1..20, do: RakNet.connect("127.0.0.1", port, timeout: 3_000)
    assert Enum.count(results, &match?({:ok, _}, &1)) == 3
    assert Enum.count(results, &(&1 == {:error, :no_free_incoming_connections})) == 17
    assert %{connections: 3} = RakNet.Server.info(server)
  end

  test "suspend, resume and set_max_connections apply to every thread" do
    {server, port} = start_server(endpoint_threads: 3)
    :ok = RakNet.Server.suspend(server)

    for _ <- 1..6,
        do:
          assert(
            RakNet.connect("127.0.0.1", port, timeout: 3_000) ==
              {:error, :no_free_incoming_connections}
          )

    :ok = RakNet.Server.resume(server)
    :ok = RakNet.Server.set_max_connections(server, 2)
    results = for _ <- 1..8, do: RakNet.connect("127.0.0.1", port, timeout: 3_000)
    assert Enum.count(results, &match?({:ok, _}, &1)) == 2
  end

  test "the option is validated; the default is one thread per scheduler" do
    assert_raise ArgumentError, ~r/:endpoint_threads must be nil or an integer in 1..1024/, fn ->
      RakNet.Server.Config.new(EchoClient, 0, endpoint_threads: 0)
    end

    {server, _port} = start_server([])
    [%{threads: threads}] = RakNet.Server.info(server).endpoints
    assert length(threads) == System.schedulers_online()
  end

  @tag :capture_log
  test "a second server cannot join the port of a multi-threaded one" do
    {_server, port} = start_server(endpoint_threads: 2)

    spec =
      RakNet.Server.child_spec([
        EchoClient,
        port,
        ip: {127, 0, 0, 1},
        open_ipv6_socket: false,
        endpoint_threads: 2
      ])

    assert {:error, reason} = start_supervised(%{spec | id: make_ref()})
    assert inspect(reason) =~ ":eaddrinuse"
  end

  test "outgoing connections are spread over the client threads, the least loaded first" do
    fresh_client_pool(2)

    ports = for _ <- 1..4, do: elem(start_server([]), 1)

    conns =
      for port <- ports do
        assert {:ok, conn} = RakNet.connect("127.0.0.1", port, timeout: 5_000)
        conn
      end

    # Which thread each connection's endpoint runs on, as its thread says.
    threads =
      RakNet.ClientEndpoint.endpoints()
      |> Map.get(:inet, [])
      |> Map.new(fn endpoint ->
        info = RakNet.Native.endpoint_info(endpoint)
        {info.port, info.thread}
      end)

    used =
      for conn <- conns do
        {:ok, %{local_address: {_ip, local_port}}} = Connection.info(conn)
        Map.fetch!(threads, local_port)
      end

    assert Enum.all?(used, &String.starts_with?(&1, "raknet-clients-"))
    per_thread = used |> Enum.frequencies() |> Map.values()
    assert length(per_thread) >= 2, "all on one thread: #{inspect(used)}"
    assert Enum.max(per_thread) - Enum.min(per_thread) <= 1, inspect(used)

    # Each connection works whichever thread it is on.
    for conn <- conns, do: {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "echo">>)
    got = Mailbox.echoes(1_000)
    assert got |> Enum.map(&elem(&1, 0)) |> Enum.sort() == Enum.sort(conns)
    for conn <- conns, do: Connection.close(conn)
  end

  test "an endpoint connected to a server is not offered for it again until that connection ends" do
    fresh_client_pool(1)
    {_server, port} = start_server([])

    assert {:ok, first} = RakNet.connect("127.0.0.1", port)
    [busy] = RakNet.ClientEndpoint.endpoints()[:inet]
    assert endpoint_of(first) == busy
    # The connect has returned: nothing is reserved any more, and the endpoint itself says
    # it holds a connection to that server, for as long as the connection lives (it used to
    # be a 15 s reservation, after which the endpoint was offered again).
    assert :sys.get_state(RakNet.ClientEndpoint).reserved == %{}
    assert RakNet.Native.endpoint_connected_to(busy, "127.0.0.1", port)
    refute RakNet.Native.endpoint_connected_to(busy, "127.0.0.1", port + 1)
    # The socket takes no second connection to that server, and says so at once.
    assert {:error, :address_in_use} =
             RakNet.Native.endpoint_connect(busy, "127.0.0.1", port, self())

    # So a second connection to it gets an endpoint of its own.
    assert {:ok, second} = RakNet.connect("127.0.0.1", port)
    other = endpoint_of(second)
    assert other != busy

    for conn <- [first, second] do
      {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "echo">>)
      assert_receive {:raknet, ^conn, 0x86, "echo", _}, 5_000
    end

    # Once the first connection ended, its endpoint is the least loaded one for that server.
    :ok = Connection.close(first)
    assert_receive {:raknet_disconnect, ^first, _}, 5_000
    refute RakNet.Native.endpoint_connected_to(busy, "127.0.0.1", port)
    assert {:ok, third} = RakNet.connect("127.0.0.1", port)
    assert endpoint_of(third) == busy
    for conn <- [second, third], do: Connection.close(conn)
  end

  test "a client the server closed can connect to it again at once" do
    fresh_client_pool(1)
    {_server, port} = start_server([])
    assert {:ok, first} = RakNet.connect("127.0.0.1", port)
    busy = endpoint_of(first)
    assert_receive {:client_new, server_side}, 5_000

    # The server closes the connection. The client acknowledges its 0x15 for a while
    # (draining): until then its socket cannot connect to that server, and if that is still so
    # at the connect below, the pool, whose only endpoint it is, starts another one.
    :ok = Connection.close(server_side)
    assert_receive {:raknet_disconnect, ^first, _reason}, 5_000
    assert {:ok, second} = RakNet.connect("127.0.0.1", port)

    {:ok, nil} = Connection.send(second, :reliable, <<0x86, "again">>)
    assert_receive {:raknet, ^second, 0x86, "again", _}, 5_000

    # The socket that held the closed connection is given back for that server once the
    # engine has let go of it: before the connect above, which then took it, or soon after.
    if endpoint_of(second) != busy do
      assert :ok ==
               RakNet.Test.Wait.until(
                 fn -> not RakNet.Native.endpoint_connected_to(busy, "127.0.0.1", port) end,
                 300
               )
    end

    Connection.close(second)
  end

  test "a client endpoint that stops is replaced, not offered again" do
    fresh_client_pool(1)
    {_server, port} = start_server([])
    assert {:ok, first} = RakNet.connect("127.0.0.1", port)
    [endpoint] = RakNet.ClientEndpoint.endpoints()[:inet]

    # As when its thread fails: the endpoint stops, its connection ends.
    :ok = RakNet.Native.endpoint_stop(endpoint)
    assert_receive {:raknet_disconnect, ^first, _reason}, 5_000

    assert RakNet.Test.Wait.until(fn -> RakNet.ClientEndpoint.endpoints()[:inet] == [] end, 500) ==
             :ok

    # Pings and connects get a new one (they failed with :closed for the life of the node).
    assert {:ok, _pong} = RakNet.Ping.ping("127.0.0.1", port)
    assert {:ok, second} = RakNet.connect("127.0.0.1", port)
    assert [other] = RakNet.ClientEndpoint.endpoints()[:inet]
    assert other != endpoint
    Connection.close(second)
  end

  # `:client_threads` set to `threads` for this test, and a fresh pool of client endpoints:
  # endpoints and reservations left by earlier tests would skew which one a connect takes.
  defp fresh_client_pool(threads) do
    previous = Application.fetch_env(:raknet, :client_threads)
    Application.put_env(:raknet, :client_threads, threads)

    on_exit(fn ->
      case previous do
        {:ok, value} -> Application.put_env(:raknet, :client_threads, value)
        :error -> Application.delete_env(:raknet, :client_threads)
      end
    end)

    :ok = Supervisor.terminate_child(RakNet.Supervisor, RakNet.ClientEndpoint)
    {:ok, _} = Supervisor.restart_child(RakNet.Supervisor, RakNet.ClientEndpoint)
  end

  defp endpoint_of(conn) do
    {:ok, %{local_address: {_ip, local_port}}} = Connection.info(conn)

    Enum.find(RakNet.ClientEndpoint.endpoints()[:inet], fn endpoint ->
      RakNet.Native.endpoint_info(endpoint).port == local_port
    end)
  end
end
