defmodule RakNet.ClusterTest do
  # One API across the cluster: from another node, every send, broadcast, group, lookup,
  # connection list, count, ban and close reaches a server's connections (before, a remote
  # pid read as closed, a remote broadcast sent nothing and returned {:ok, 0}, and a remote
  # server had no connections). Three :peer nodes; real RakNet clients.
  use ExUnit.Case, async: false

  alias RakNet.Test.Cluster

  @moduletag timeout: 300_000
  @moduletag :capture_log

  use RakNet.Test.ClusterCase

  defp peers(roles), do: roles |> peers_and_nodes() |> Enum.map(&elem(&1, 1))

  defp peers_and_nodes(roles) do
    started =
      for role <- roles do
        {peer, node} = Cluster.start_peer(:"raknet_#{role}_#{System.unique_integer([:positive])}")

        on_exit(fn ->
          try do
            :peer.stop(peer)
          catch
            _, _ -> :ok
          end
        end)

        {peer, node}
      end

    nodes = Enum.map(started, &elem(&1, 1))
    for a <- nodes, b <- nodes, a < b, do: true = :erpc.call(a, Node, :connect, [b])
    started
  end

  # Runs `module.fun(args)` on `node` (this module's closures do not exist there).
  defp on(node, module, fun, args), do: :erpc.call(node, module, fun, args, 30_000)

  test "from another node: lookup, connections, count, send, broadcast, groups, close and ban reach a server's connections" do
    [a, c] = peers([:server, :caller])
    {server, port, sink} = :erpc.call(a, Cluster, :start_server, [])

    # Two real clients (this node) of the server on A.
    {:ok, one} = RakNet.connect("127.0.0.1", port)
    {:ok, two} = RakNet.connect("127.0.0.1", port)
    {:ok, %{local_address: one_addr}} = RakNet.Connection.info(one)
    :ok = :erpc.call(a, Cluster, :await_connections, [sink, 2])

    # Found from C: pids of A.
    assert 2 = on(c, RakNet.Server, :count, [server])
    conns = on(c, RakNet.Server, :connections, [server])
    assert [%{pid: p1}, %{pid: p2}] = conns
    assert node(p1) == a and node(p2) == a

    assert {:ok, %{pid: one_pid}} =
             on(c, RakNet.Server, :lookup, [server, :address, loopback(one_addr)])

    [two_pid] = [p1, p2] -- [one_pid]

    # A send from C, with what the connection's node answers.
    assert {:ok, nil} =
             on(c, RakNet.Connection, :send, [one_pid, :reliable_ordered, <<0x86, "send">>])

    assert_receive {:raknet, ^one, 0x86, "send", _}, 5_000

    assert {:ok, receipt} =
             on(c, RakNet.Connection, :send, [one_pid, :reliable_ack_receipt, <<0x86>>])

    assert is_integer(receipt)
    assert {:ok, %{address: _}} = on(c, RakNet.Connection, :info, [one_pid])
    assert {:ok, %{}} = on(c, RakNet.Connection, :assigns, [one_pid])

    # Errors are the connection node's, not a false :closed.
    assert {:error, :bad_channel} =
             on(c, RakNet.Connection, :send, [one_pid, :reliable, <<0x86>>, [channel: 40]])

    # RakNet.broadcast takes the maps connections/1 returns, wherever they are.
    assert {:ok, 2} = on(c, RakNet, :broadcast, [conns, :reliable_ordered, <<0x86, "all">>])

    assert_receive {:raknet, ^one, 0x86, "all", _}, 5_000
    assert_receive {:raknet, ^two, 0x86, "all", _}, 5_000

    assert {:ok, 1} =
             on(c, RakNet.Server, :broadcast, [
               server,
               :reliable_ordered,
               <<0x86, "but">>,
               [except: [one_pid]]
             ])

    assert_receive {:raknet, ^two, 0x86, "but", _}, 5_000

    # A group joined from C, seen on every node, broadcast to from C.
    assert :ok = on(c, RakNet.Group, :join, [one_pid, {:zone, 3}])
    # The join is made on A; C's :pg hears of it just after.
    :ok = on(c, Cluster, :await_members, [{:zone, 3}, [one_pid]])
    assert [^one_pid] = on(c, RakNet.Group, :members, [{:zone, 3}])
    assert [^one_pid] = :erpc.call(a, RakNet.Group, :local_members, [{:zone, 3}])

    assert {:ok, 1} =
             on(c, RakNet.Group, :broadcast, [{:zone, 3}, :reliable_ordered, <<0x86, "zone">>])

    assert_receive {:raknet, ^one, 0x86, "zone", _}, 5_000
    refute_received {:raknet, ^two, 0x86, "zone", _}

    # Close from C: the player is told why.
    assert :ok = on(c, RakNet.Connection, :close, [two_pid, :kicked])
    assert_receive {:raknet_disconnect, ^two, _}, 5_000

    # A ban from C closes the banned player's connection on A; it leaves its group.
    assert :ok = on(c, RakNet.Server, :ban, [server, "127.0.0.1", 60_000])
    assert_receive {:raknet_disconnect, ^one, _}, 5_000
    :ok = :erpc.call(a, Cluster, :await_down, [one_pid])
    # C hears of the leave after A's :pg has.
    :ok = on(c, Cluster, :await_members, [{:zone, 3}, []])
    assert [] = on(c, RakNet.Group, :members, [{:zone, 3}])

    assert {:error, :closed} = on(c, RakNet.Connection, :send, [one_pid, :reliable, <<0x86>>])
  end

  test "a node that is gone is an error, not a silent success" do
    [{peer_a, a}, {_, c}] = peers_and_nodes([:server, :caller])
    {server, port, sink} = :erpc.call(a, Cluster, :start_server, [])
    {:ok, _one} = RakNet.connect("127.0.0.1", port)
    :ok = :erpc.call(a, Cluster, :await_connections, [sink, 1])
    [%{pid: pid}] = on(c, RakNet.Server, :connections, [server])

    # A goes down, and C has seen it go.
    :ok = :peer.stop(peer_a)
    :ok = on(c, Cluster, :await_nodedown, [a])

    assert {:error, :nodedown} = on(c, RakNet.Connection, :send, [pid, :reliable, <<0x86>>])

    assert {:ok, 0} = on(c, RakNet, :broadcast, [[pid], :reliable, <<0x86>>])
    assert {:error, :nodedown} = on(c, RakNet.Group, :join, [pid, :lobby])
  end

  test "a broadcast to 3,000 connections on 3 nodes sends one message to each other node" do
    nodes = [_a, _b, c] = peers([:a, :b, :c])

    # A server and 1,000 clients on each node.
    setups =
      for node <- nodes do
        {server, port, sink} = :erpc.call(node, Cluster, :start_server, [])
        holder = :erpc.call(node, Cluster, :connect_many, [port, 1_000], 120_000)
        :ok = :erpc.call(node, Cluster, :await_connections, [sink, 1_000])
        {node, server, holder}
      end

    # From C: every connection of the three servers, then one broadcast to all of them.
    pids =
      for {_node, server, _} <- setups,
          %{pid: pid} <- on(c, RakNet.Server, :connections, [server]),
          do: pid

    assert length(pids) == 3_000

    {result, remote_sends} =
      on(c, Cluster, :counting_remote_sends, [
        RakNet,
        :broadcast,
        [pids, :reliable_ordered, <<0x86, "fan">>]
      ])

    assert result == {:ok, 3_000}
    # A and B get one message each; C's own connections none.
    assert remote_sends == 2

    for {node, _server, holder} <- setups do
      assert 1_000 = :erpc.call(node, Cluster, :await_received, [holder, "fan", 1_000], 60_000)
    end

    # Group.broadcast the same way.
    for {node, server, _} <- setups do
      :ok = :erpc.call(node, Cluster, :join_all, [server, :everyone])
    end

    # C's :pg hears of A's and B's joins just after they are made.
    :ok = on(c, Cluster, :await_members, [:everyone, pids])

    {result, remote_sends} =
      on(c, Cluster, :counting_remote_sends, [
        RakNet.Group,
        :broadcast,
        [:everyone, :reliable_ordered, <<0x86, "grp">>]
      ])

    assert result == {:ok, 3_000} and remote_sends == 2

    for {node, _server, holder} <- setups do
      assert 1_000 = :erpc.call(node, Cluster, :await_received, [holder, "grp", 1_000], 60_000)
    end
  end

  defp loopback({_ip, port}), do: {{127, 0, 0, 1}, port}
end
