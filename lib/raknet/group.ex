defmodule RakNet.Group do
  @moduledoc """
  Named groups of connections, cluster-wide: zones, rooms, lobbies, teams. A zone broadcast
  is one call, and nobody keeps member lists by hand.

      # In the player's handler, when it enters zone 3:
      :ok = RakNet.Group.join(self(), {:zone, 3})

      # From anywhere in the cluster (the zone's process, a chat service on another node):
      {:ok, _sent} = RakNet.Group.broadcast({:zone, 3}, :unreliable_sequenced, position)

      RakNet.Group.members({:zone, 3})
      #=> [#PID<0.412.0>, #PID<21532.388.0>]

  A group is any term. Membership is kept in a `:pg` scope (`RakNet.Group`) started with the
  `:raknet` application on every node: it is seen from every connected node, and a
  connection leaves its groups when its process ends (closed, kicked, crashed, its node
  gone). As in `:pg`, each join counts: a connection that joined a group twice is listed
  twice (and sent a broadcast twice) until it leaves twice. Join when the player enters,
  leave when it leaves.

  The members are connection processes (`RakNet.Connection` pids: what a server's handler
  gets in `RakNet.Client.new/3`, or `RakNet.connect/3` with `:client`); `join/2` and
  `leave/2` work for a connection of any node (done on the connection's node).
  `broadcast/4` is `RakNet.broadcast/4` over the members: one message per other node.
  """

  @scope __MODULE__

  @doc """
  Adds `connection` (a connection pid, or a list of them) to `group`. `{:error,
  :not_a_connection}` when a pid of this node is no open connection (a pid of another node
  is checked there); `{:error, :nodedown}` when its node cannot be reached.

      :ok = RakNet.Group.join(player, {:zone, 3})
  """
  @spec join(pid() | [pid()], term()) :: :ok | {:error, :not_a_connection | :nodedown | :timeout}
  def join(connection, group), do: on_nodes(connection, group, :join)

  @doc """
  Removes `connection` (a pid, or a list) from `group` (one join of it); leaving a group one
  is not in is `:ok`. A connection that ends leaves its groups by itself.
  """
  @spec leave(pid() | [pid()], term()) :: :ok | {:error, :nodedown | :timeout}
  def leave(connection, group), do: on_nodes(connection, group, :leave)

  @doc "The connections in `group`, on every node, in no particular order."
  @spec members(term()) :: [pid()]
  def members(group), do: :pg.get_members(@scope, group)

  @doc "The connections of this node in `group`."
  @spec local_members(term()) :: [pid()]
  def local_members(group), do: :pg.get_local_members(@scope, group)

  @doc "Every group with a member, on any node."
  @spec groups() :: [term()]
  def groups, do: :pg.which_groups(@scope)

  @doc """
  Sends `message` to every connection in `group`, wherever it is: `RakNet.broadcast/4` over
  `members/1` (options `:channel`, `:priority`, and `:except`, connection pids left out,
  such as the sender's own). The calling process remembers the last group it broadcast to,
  with its members' handles, for as long as the membership stays the same: a player's
  process broadcasting to its zone every tick does not look its members up each time.

      {:ok, _} = RakNet.Group.broadcast({:zone, 3}, :reliable_ordered, chat, except: [speaker])
  """
  @spec broadcast(term(), atom(), binary(), keyword()) ::
          {:ok, non_neg_integer()} | {:error, atom() | {:unknown_option, term()}}
  def broadcast(group, reliability, message, opts \\ []) do
    {except, opts} =
      if Keyword.keyword?(opts), do: Keyword.pop(opts, :except, []), else: {[], opts}

    # As `members -- skip`: one copy per listed pid (a connection that joined twice and is
    # listed once still gets one).
    targets =
      except
      |> List.wrap()
      |> Enum.reduce(pairs(group), &List.keydelete(&2, &1, 0))
      |> Enum.map(fn {_pid, target} -> target end)

    RakNet.broadcast(targets, reliability, message, opts)
  end

  # What a broadcast to `group` addresses: this node's members by their handles, other
  # nodes' by pid. A member's handle is looked up in the registry (an ETS read each), so the
  # calling process keeps the last group it broadcast to, with its members and their
  # handles, and uses them again while the membership is the same list: a player's process
  # broadcasting to its zone ten times a second does one comparison instead of 49 lookups.
  # A member that closed since keeps its handle, which the runtime skips as closed.

  defp pairs(group) do
    members = members(group)

    case Process.get(__MODULE__) do
      {^group, ^members, pairs} ->
        pairs

      _ ->
        pairs = resolve(members)
        Process.put(__MODULE__, {group, members, pairs})
        pairs
    end
  end

  defp resolve(members) do
    here = node()

    for pid <- members,
        target =
          (if node(pid) == here do
             case RakNet.Connection.Registry.lookup(pid) do
               {:ok, conn} -> conn
               :error -> nil
             end
           else
             pid
           end),
        target != nil,
        do: {pid, target}
  end

  defp on_nodes(connections, group, op) do
    connections
    |> List.wrap()
    |> Enum.group_by(&node/1)
    |> Enum.reduce_while(:ok, fn {node, pids}, :ok ->
      result =
        if node == node(),
          do: local(op, group, pids),
          else: RakNet.Relay.call(node, {op, group, pids})

      if result == :ok, do: {:cont, :ok}, else: {:halt, result}
    end)
  end

  defp local(:join, group, pids) do
    if Enum.all?(pids, &match?({:ok, _}, RakNet.Connection.Registry.lookup(&1))),
      do: :pg.join(@scope, group, pids),
      else: {:error, :not_a_connection}
  end

  defp local(:leave, group, pids) do
    case :pg.leave(@scope, group, pids) do
      :ok -> :ok
      :not_joined -> :ok
    end
  end
end
