defmodule RakNet.PacketClusterTest do
  # The MMO example spread over three :peer nodes: the RakNet server on A, the world and the
  # sessions on B, the zone on C; a real RakNet client on the test node. Packets cross nodes
  # through RakNet.Packet.Router and RakNet.Packet.Registry (:pg). Node C is stopped mid-test
  # and started again.
  use ExUnit.Case, async: false

  alias MMO.Packets.{Chat, ChatLine, Login, LoginOk, Move, Moved}
  alias RakNet.Test.Cluster

  @moduletag timeout: 180_000
  @moduletag :capture_log
  @example Path.expand("../../examples/mmo/load.exs", __DIR__)

  # The example's modules, on this node too (the client encodes and decodes its packets).
  Code.require_file(@example)

  use RakNet.Test.ClusterCase

  defp peer(role) do
    name = :"raknet_#{role}_#{System.unique_integer([:positive])}"
    start_peer(name)
  end

  defp start_peer(name) do
    {peer, node} = Cluster.start_peer(name)
    _ = :erpc.call(node, Code, :require_file, [@example])
    {peer, node}
  end

  defp mesh(nodes) do
    for a <- nodes, b <- nodes, a < b, do: true = :erpc.call(a, Node, :connect, [b])
  end

  # Waits until `node`'s registry has a process for `name` (a :pg join, not a sleep).
  defp await_registered(node, name) do
    if :erpc.call(node, Cluster, :watch, [self(), name]) == [] do
      assert_receive {:pg_watch, ^node, ^name, :join, [_]}, 10_000
    end
  end

  defp send_packet(conn, packet),
    do:
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, RakNet.Packet.encode!(packet))

  # The next packet of the client that `pred` accepts (others are skipped).
  defp await_packet(conn, pred) do
    assert_receive {:raknet, ^conn, type, body, _}, 10_000
    {:ok, packet} = RakNet.Packet.decode(MMO.Protocol, type, body)
    if pred.(packet), do: packet, else: await_packet(conn, pred)
  end

  defp stats(node), do: :erpc.call(node, RakNet.Packet.Router, :stats, [])

  test "packets reach the world, sessions and zones on other nodes; a lost node's misses are counted and logged; dispatch resumes when it is back" do
    {_pa, a} = peer(:server)
    {_pb, b} = peer(:world)
    {pc, c} = peer(:zone)
    mesh([a, b, c])

    {:ok, _} = :erpc.call(c, MMO, :start, [[:zones], [zones: [1]]])
    await_registered(b, {:zone, 1})
    {:ok, _} = :erpc.call(b, MMO, :start, [[:world], [zones: [1]]])
    server_opts = [port: 0, server: [ip: {127, 0, 0, 1}, open_ipv6_socket: false]]
    {:ok, _} = :erpc.call(a, MMO, :start, [[:server], server_opts])
    await_registered(a, :world)
    await_registered(a, {:zone, 1})
    port = :erpc.call(a, MMO, :server_port, [])

    # A real RakNet client logs in: A decodes, the world on B answers through A.
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    send_packet(conn, %Login{name: "ann"})
    ok = await_packet(conn, &match?(%LoginOk{}, &1))
    assert %LoginOk{zone: 1, x: 500.0, y: 500.0} = ok
    id = ok.player_id

    # The session runs on B, is registered cluster-wide, and the zone on C knows the player.
    assert [{_, session, _, _}] =
             :erpc.call(b, DynamicSupervisor, :which_children, [MMO.Sessions])

    assert node(session) == b
    %{connection: connection} = :erpc.call(b, MMO.Session, :info, [session])
    assert node(connection) == a

    assert :erpc.call(a, RakNet.Packet.Registry, :whereis_name, [{:session, connection}]) ==
             session

    zone = :erpc.call(a, RakNet.Packet.Registry, :whereis_name, [{:zone, 1}])
    assert node(zone) == c

    # The session joined its zone (on C) before the world answered the login, so the first
    # move, which goes to the zone from A, finds the player there.
    assert Map.has_key?(:erpc.call(c, MMO.Zone, :info, [1]).players, connection)

    # A move goes from A to the zone on C, which validates it and broadcasts it (through A).
    send_packet(conn, %Move{x: 505.0, y: 500.0, seq: 1})

    assert %Moved{x: 505.0, y: 500.0} =
             await_packet(conn, &match?(%Moved{player_id: ^id, seq: 1}, &1))

    # A second join of the player (as a session's cast after its call timed out makes) leaves
    # it where it is, not back at the spawn point.
    :ok = :erpc.call(c, GenServer, :call, [zone, {:join, id, "ann", connection}])
    assert %{x: 505.0, seq: 1} = :erpc.call(c, MMO.Zone, :info, [1]).players[connection]

    # A move too far is not broadcast; the zone sends the player its real position.
    send_packet(conn, %Move{x: 900.0, y: 500.0, seq: 2})
    assert %Moved{x: 505.0, seq: 1} = await_packet(conn, &match?(%Moved{player_id: ^id}, &1))
    assert %{moves: 2, rejected: 1} = :erpc.call(c, MMO.Zone, :info, [1])

    # Chat goes from A to the session on B, then to the zone on C, then to every player.
    send_packet(conn, %Chat{text: "hi"})
    assert %ChatLine{from: "ann", text: "hi"} = await_packet(conn, &match?(%ChatLine{}, &1))

    # Node C goes away. A's registry drops the zone at once (nodedown).
    :ok = :erpc.call(a, Cluster, :forward_logs, [self()])
    assert [^zone] = :erpc.call(a, Cluster, :watch, [self(), {:zone, 1}])
    :peer.stop(pc)
    assert_receive {:pg_watch, ^a, {:zone, 1}, :leave, [^zone]}, 10_000

    before = stats(a)
    for seq <- 3..7, do: send_packet(conn, %Move{x: 505.0, y: 500.0, seq: seq})
    # A barrier: logging in again is answered by the world with the same id, and reliable
    # ordered delivery means the five moves were handled by then.
    send_packet(conn, %Login{name: "ann"})
    assert %LoginOk{player_id: ^id} = await_packet(conn, &match?(%LoginOk{}, &1))

    after_loss = stats(a)
    assert after_loss.missed - before.missed == 5
    assert after_loss.dispatched - before.dispatched == 1
    # (Other warnings may come first: :global's about overlapping partitions, say.)
    assert_receive {:log, ^a, :warning,
                    "raknet packet missed: no process registered as {:zone, 1}" <> _},
                   5_000

    assert :erpc.call(a, Process, :alive?, [connection])

    # C comes back under the same name with its zone; every node sees it again.
    {_pc, ^c} = start_peer(c |> Atom.to_string() |> String.split("@") |> hd() |> String.to_atom())
    mesh([a, b, c])
    {:ok, _} = :erpc.call(c, MMO, :start, [[:zones], [zones: [1]]])
    await_registered(a, {:zone, 1})
    await_registered(b, {:zone, 1})

    # The new zone does not know the player: the first move makes the session join again
    # (the zone broadcasts the spawn point), and moves are validated and broadcast again.
    send_packet(conn, %Move{x: 505.0, y: 500.0, seq: 8})
    assert %Moved{x: 500.0, seq: 0} = await_packet(conn, &match?(%Moved{player_id: ^id}, &1))
    send_packet(conn, %Move{x: 503.0, y: 504.0, seq: 9})

    assert %Moved{x: 503.0, y: 504.0} =
             await_packet(conn, &match?(%Moved{player_id: ^id, seq: 9}, &1))

    assert %{moves: 2, rejected: 1} = :erpc.call(c, MMO.Zone, :info, [1])
    assert stats(a).missed == after_loss.missed

    RakNet.Connection.close(conn)
  end
end
