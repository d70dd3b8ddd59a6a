defmodule RakNet.BroadcastTest do
  # Broadcast and finding connections: what a game server does every tick.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.{EchoClient, LinkingClient, Mailbox}

  @moduletag timeout: 120_000

  defp start_server(module, opts \\ []), do: RakNet.Test.Server.start!(module, opts)

  test "a broadcast reaches each of 1,000 connections exactly once" do
    {server, port} =
      start_server(
        EchoClient,
        [max_connections: 2_000, max_connections_per_ip: 2_000] ++ RakNet.Test.Server.crowd()
      )

    n = 1_000

    conns =
      for _ <- 1..n do
        assert {:ok, conn} = RakNet.connect("127.0.0.1", port)
        conn
      end

    for _ <- 1..n, do: assert_receive({:client_new, _}, 10_000)
    assert length(RakNet.Server.connections(server)) == n

    assert {:ok, ^n} = RakNet.Server.broadcast(server, :reliable_ordered, <<0x86, "to all">>)
    got = Mailbox.echoes(1_000)
    assert length(got) == n
    assert got |> Enum.map(&elem(&1, 0)) |> Enum.sort() == Enum.sort(conns)
    assert Enum.all?(got, fn {_, payload} -> payload == "to all" end)

    # All but one, by pid and by handle.
    [%{pid: first_pid}, %{conn: second_conn} | _] = RakNet.Server.connections(server)

    assert {:ok, count} =
             RakNet.Server.broadcast(server, :unreliable, <<0x86, "most">>,
               except: [first_pid, second_conn],
               channel: 3,
               priority: :low
             )

    assert count == n - 2
    assert length(Mailbox.echoes(1_000)) == n - 2
  end

  # Group.broadcast keeps the last group's members and handles in the calling process: a
  # change of membership must reach the next broadcast.
  test "a group broadcast follows joins, leaves and closes between broadcasts" do
    {server, port} = start_server(EchoClient)
    conns = for _ <- 1..4, do: elem(RakNet.connect("127.0.0.1", port), 1)
    for _ <- 1..4, do: assert_receive({:client_new, _}, 5_000)
    [pa, pb, pc, pd] = Enum.map(conns, &lookup_pid(server, &1))
    [a, b, c, d] = conns
    group = {:zone, make_ref()}
    :ok = RakNet.Group.join([pa, pb, pc], group)

    echoed = fn -> RakNet.Test.Mailbox.echoes(300) |> Enum.map(&elem(&1, 0)) |> Enum.sort() end

    assert {:ok, 2} =
             RakNet.Group.broadcast(group, :reliable_ordered, <<0x86, "1">>, except: [pa])

    assert echoed.() == Enum.sort([b, c])

    :ok = RakNet.Group.join(pd, group)

    assert {:ok, 3} =
             RakNet.Group.broadcast(group, :reliable_ordered, <<0x86, "2">>, except: [pa])

    assert echoed.() == Enum.sort([b, c, d])

    :ok = RakNet.Group.leave(pb, group)
    assert {:ok, 3} = RakNet.Group.broadcast(group, :reliable_ordered, <<0x86, "3">>)
    assert echoed.() == Enum.sort([a, c, d])

    # A member that closes leaves the group; meanwhile its handle is skipped as closed.
    ref = Process.monitor(pc)
    :ok = Connection.close(c)
    assert_receive {:DOWN, ^ref, _, _, _}, 5_000
    assert {:ok, 2} = RakNet.Group.broadcast(group, :reliable_ordered, <<0x86, "4">>)
    assert echoed.() == Enum.sort([a, d])
  end

  test "RakNet.broadcast/4 takes pids and handles, skips the closed, checks its arguments" do
    {server, port} = start_server(EchoClient)
    {:ok, a} = RakNet.connect("127.0.0.1", port)
    {:ok, b} = RakNet.connect("127.0.0.1", port)
    {:ok, c} = RakNet.connect("127.0.0.1", port)
    for _ <- 1..3, do: assert_receive({:client_new, _}, 5_000)
    [pid_a, pid_b, pid_c] = Enum.map([a, b, c], &lookup_pid(server, &1))

    {:ok, handle_c} = Connection.conn_ref(pid_c)
    ref = Process.monitor(pid_c)
    :ok = Connection.close(c)
    assert_receive {:raknet_disconnect, ^c, :local_close}, 5_000
    # The server's side has ended too (the client's end can come first).
    assert_receive {:DOWN, ^ref, :process, ^pid_c, _}, 5_000
    dead = spawn(fn -> :ok end)

    # Server side to clients: a pid, a handle, a closed connection's handle and its process,
    # a dead pid.
    {:ok, handle_b} = Connection.conn_ref(pid_b)
    targets = [pid_a, handle_b, handle_c, pid_c, dead]
    assert {:ok, 2} = RakNet.broadcast(targets, :reliable, <<0x86, "x">>)
    got = Mailbox.echoes(500) |> Enum.map(&elem(&1, 0)) |> Enum.sort()
    assert got == Enum.sort([a, b])

    assert RakNet.broadcast([pid_a], :reliable_ack_receipt, <<0x86>>) ==
             {:error, :bad_reliability}

    assert RakNet.broadcast([pid_a], :nope, <<0x86>>) == {:error, :bad_reliability}
    assert RakNet.broadcast([pid_a], :reliable, <<0x86>>, channel: 32) == {:error, :bad_channel}

    assert RakNet.broadcast([pid_a], :reliable, <<0x86>>, priority: :top) ==
             {:error, :bad_priority}

    assert RakNet.broadcast([pid_a], :reliable, <<>>) == {:error, :empty}
    too_large = :binary.copy(<<0x86>>, 32 * 1024 * 1024 + 1)
    assert RakNet.broadcast([pid_a], :reliable, too_large) == {:error, :too_large}
    assert RakNet.broadcast([pid_a], :reliable, 'x') == {:error, :not_binary}
    assert RakNet.broadcast([], :reliable, <<0x86>>) == {:ok, 0}
  end

  # The natural first try, broadcast(Server.connections(server), ...), returned {:ok, 0} and
  # sent nothing: the maps were skipped as unknown.
  test "RakNet.broadcast/4 takes the maps connections/1 returns, and raises on anything else" do
    {server, port} = start_server(EchoClient)
    {:ok, a} = RakNet.connect("127.0.0.1", port)
    {:ok, b} = RakNet.connect("127.0.0.1", port)
    for _ <- 1..2, do: assert_receive({:client_new, _}, 5_000)
    assert RakNet.Server.count(server) == 2

    conns = RakNet.Server.connections(server)
    assert {:ok, 2} = RakNet.broadcast(conns, :reliable_ordered, <<0x86, "maps">>)
    assert_receive {:raknet, ^a, 0x86, "maps", _}, 5_000
    assert_receive {:raknet, ^b, 0x86, "maps", _}, 5_000

    {:ok, one} = RakNet.Server.lookup(server, :address, local_address(a))
    assert {:ok, 1} = RakNet.broadcast([one], :reliable_ordered, <<0x86, "one">>)
    assert_receive {:raknet, ^a, 0x86, "one", _}, 5_000

    assert_raise ArgumentError, ~r/expected a connection pid, handle or map, got: :nope/, fn ->
      RakNet.broadcast([:nope], :reliable, <<0x86>>)
    end

    assert_raise ArgumentError, ~r/expected a list of connections/, fn ->
      RakNet.broadcast(server, :reliable, <<0x86>>)
    end

    :ok = Connection.close(a)
    assert_receive {:raknet_disconnect, ^a, :local_close}, 5_000
  end

  # Nothing but one id could be kept per connection for others to read.
  test "assigns: set by the connection, read by anyone from ETS, in connections/1" do
    {server, port} = start_server(RakNet.Test.AssignClient)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, pid}, 5_000
    assert {:ok, %{}} == Connection.assigns(pid)

    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "ann">>)
    assert_receive {:assigned, ^pid}, 5_000
    assert {:ok, %{name: "ann", zone: 3}} = Connection.assigns(pid)
    assert [%{pid: ^pid, assigns: %{name: "ann"}}] = RakNet.Server.connections(server)

    assert {:error, :not_a_connection} = Connection.assign(zone: 4)
    :ok = Connection.close(conn)
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000
    ref = Process.monitor(pid)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000
    assert {:error, :closed} = Connection.assigns(pid)
  end

  defp local_address(conn) do
    {:ok, %{local_address: local}} = Connection.info(conn)
    local
  end

  defp lookup_pid(server, conn) do
    {:ok, %{pid: pid}} = RakNet.Server.lookup(server, :address, local_address(conn))
    pid
  end

  test "connections are found by address, GUID and application id, and forgotten when gone" do
    {server, port} = start_server(LinkingClient)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:linking_new, pid, _player}, 5_000
    {:ok, %{local_address: address, guid: _server_guid}} = Connection.info(conn)

    assert [%{pid: ^pid, address: ^address, protocol: 11, id: nil} = info] =
             RakNet.Server.connections(server)

    assert is_integer(info.guid) and is_integer(info.connected_at) and info.mtu > 0
    assert {:ok, %{pid: ^pid}} = RakNet.Server.lookup(server, :address, address)
    assert {:ok, %{pid: ^pid}} = RakNet.Server.lookup(server, :guid, info.guid)
    assert RakNet.Server.lookup(server, :id, "alice") == :error

    {:ok, nil} = Connection.send(conn, :reliable, <<0x86, "id alice">>)
    assert_receive {:register_result, :ok}, 5_000
    assert {:ok, %{pid: ^pid, id: "alice"}} = RakNet.Server.lookup(server, :id, "alice")

    # A second connection cannot take the same id.
    {:ok, other} = RakNet.connect("127.0.0.1", port)
    assert_receive {:linking_new, _, _}, 5_000
    {:ok, nil} = Connection.send(other, :reliable, <<0x86, "id alice">>)
    assert_receive {:register_result, {:error, {:already_registered, ^pid}}}, 5_000
    assert RakNet.Connection.register_id("bob") == {:error, :not_a_connection}

    ref = Process.monitor(pid)
    :ok = Connection.close(conn)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000
    # The registry forgets it (its rows are removed as the process ends).
    assert :ok ==
             RakNet.Test.Wait.until(fn -> RakNet.Server.lookup(server, :id, "alice") == :error end)

    assert RakNet.Server.lookup(server, :address, address) == :error
    assert length(RakNet.Server.connections(server)) == 1
  end

  test "a killed connection process leaves no rows behind" do
    {server, port} = start_server(LinkingClient)
    {:ok, _conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:linking_new, pid, _player}, 5_000
    Process.exit(pid, :kill)
    assert :ok == RakNet.Test.Wait.until(fn -> RakNet.Server.connections(server) == [] end)
  end
end
