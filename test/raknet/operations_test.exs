defmodule RakNet.OperationsTest do
  # Running a server: suspend/resume, a new connection limit, and a graceful stop that
  # tells every client and drains what was queued.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.EchoClient

  @moduletag timeout: 60_000

  defp start_server(opts \\ []),
    do: RakNet.Test.Server.start!(EchoClient, Keyword.merge([restart: :temporary], opts))

  test "suspend/1 refuses newcomers, keeps players and still answers pings; resume/1 undoes it" do
    {server, port} = start_server()
    {:ok, player} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000

    assert :ok = RakNet.Server.suspend(server)
    assert {:error, :no_free_incoming_connections} = RakNet.connect("127.0.0.1", port)
    assert {:ok, _pong} = RakNet.Ping.ping("127.0.0.1", port)
    {:ok, nil} = Connection.send(player, :reliable_ordered, <<0x86, "still here">>)
    assert_receive {:raknet, ^player, 0x86, "still here", _}, 5_000

    assert :ok = RakNet.Server.resume(server)
    assert {:ok, _newcomer} = RakNet.connect("127.0.0.1", port)
    # Its connection process starts once the handshake is done: wait for it.
    assert_receive {:client_new, _}, 5_000
    assert RakNet.Server.info(server).connections == 2
  end

  test "bans given at start are in force from the first handshake, and lifted like any" do
    {server, port} = start_server(bans: ["127.0.0.1", {:guid, 42}, "2001:db8::/48"])
    assert {:error, :banned} = RakNet.connect("127.0.0.1", port)

    assert %{{127, 0, 0, 1} => :infinity, {:guid, 42} => :infinity} =
             bans = Map.new(RakNet.Server.banned(server))

    assert bans[{{0x2001, 0xDB8, 0, 0, 0, 0, 0, 0}, 48}] == :infinity

    :ok = RakNet.Server.unban(server, "127.0.0.1")
    assert {:ok, _} = RakNet.connect("127.0.0.1", port)

    assert_raise ArgumentError, ~r/:bans must be a list of addresses/, fn ->
      RakNet.Server.Config.new(EchoClient, 0, bans: ["not an address"])
    end
  end

  # There was no ban by GUID: a player who moved to another address came back.
  test "a GUID ban closes that client's connection, from any address, and is listed" do
    {server, port} = start_server()
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    {:ok, other} = RakNet.connect("127.0.0.1", port)
    for _ <- 1..2, do: assert_receive({:client_new, _}, 5_000)
    {:ok, %{local_address: local}} = Connection.info(conn)
    {:ok, %{guid: guid}} = RakNet.Server.lookup(server, :address, local)

    :ok = RakNet.Server.ban(server, {:guid, guid}, 60_000)
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000
    assert [{{:guid, ^guid}, left}] = RakNet.Server.banned(server)
    assert left <= 60_000
    # The other client (another GUID, the same address) stays.
    {:ok, nil} = Connection.send(other, :reliable_ordered, <<0x86, "still">>)
    assert_receive {:raknet, ^other, 0x86, "still", _}, 5_000

    :ok = RakNet.Server.unban(server, {:guid, guid})
    assert [] = RakNet.Server.banned(server)
    assert {:error, :einval} = RakNet.Server.ban(server, {:guid, -1})
  end

  # It was per socket: a dual-stack server admitted twice its limit.
  test ":max_connections is the whole server's, IPv4 and IPv6 together" do
    {server, port} = start_server(max_connections: 1, open_ipv6_socket: true)
    %{ipv6_port: port6} = RakNet.Server.info(server)
    {:ok, _v4} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
    assert {:error, :no_free_incoming_connections} = RakNet.connect("::1", port6)

    :ok = RakNet.Server.set_max_connections(server, 2)
    assert {:ok, _v6} = RakNet.connect("::1", port6)
    assert_receive {:client_new, _}, 5_000
    assert {:error, :no_free_incoming_connections} = RakNet.connect("127.0.0.1", port)
    assert RakNet.Server.count(server) == 2
  end

  test "set_max_connections/2 closes nobody and refuses newcomers over the new limit" do
    {server, port} = start_server()
    {:ok, a} = RakNet.connect("127.0.0.1", port)
    {:ok, _b} = RakNet.connect("127.0.0.1", port)
    for _ <- 1..2, do: assert_receive({:client_new, _}, 5_000)

    assert :ok = RakNet.Server.set_max_connections(server, 1)
    assert {:error, :no_free_incoming_connections} = RakNet.connect("127.0.0.1", port)
    {:ok, nil} = Connection.send(a, :reliable_ordered, <<0x86, "ok">>)
    assert_receive {:raknet, ^a, 0x86, "ok", _}, 5_000
    assert RakNet.Server.info(server).connections == 2

    assert :ok = RakNet.Server.set_max_connections(server, 3)
    assert {:ok, _c} = RakNet.connect("127.0.0.1", port)
  end

  test "stop/2 delivers what was queued, tells every client, runs every disconnect" do
    {server, port} = start_server()
    {:ok, a} = RakNet.connect("127.0.0.1", port)
    {:ok, b} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, pid_a}, 5_000
    assert_receive {:client_new, pid_b}, 5_000

    # Queued just before the stop: 200 messages of 1 KB to each client.
    payload = :binary.copy(<<7>>, 1_000)

    for _ <- 1..200 do
      assert {:ok, 2} =
               RakNet.broadcast([pid_a, pid_b], :reliable_ordered, <<0x86, payload::binary>>)
    end

    ref = Process.monitor(server)
    assert :ok = RakNet.Server.stop(server, 5_000)
    assert_receive {:DOWN, ^ref, :process, ^server, _}, 5_000

    for conn <- [a, b] do
      for _ <- 1..200, do: assert_receive({:raknet, ^conn, 0x86, ^payload, _}, 5_000)
      assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    end

    assert_receive {:client_disconnect, ^pid_a}, 5_000
    assert_receive {:client_disconnect, ^pid_b}, 5_000
  end
end
