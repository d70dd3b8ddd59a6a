defmodule RakNet.Packet.Registry do
  @moduledoc """
  A process registry for the whole Erlang cluster, built on OTP's `:pg`: the `:via` module
  that `RakNet.Packet.Router` delivers through, and that your session, zone and world
  processes register with.

      GenServer.start_link(MyGame.Zone, zone_id, name: RakNet.Packet.Registry.via({:zone, zone_id}))

      GenServer.cast({:via, RakNet.Packet.Registry, {:zone, 7}}, :tick)
      RakNet.Packet.Registry.whereis_name({:zone, 7})   #=> #PID<12345.230.0> (on any node)

  Names are any term. Every node that runs the `:raknet` application runs the registry's
  `:pg` scope (started by the application), and nodes find each other as soon as they are
  connected (`Node.connect/1`, `-connect_all`, or your own cluster discovery).

  ## Why `:pg` and not `:global`

  Both keep a full copy of the names on every node and both answer `whereis_name/1` from a
  local ETS table, so delivering a packet costs about the same: a local read and a send (the
  numbers are in `make bench`, `bench/packet.exs`: "registry: ..."). They differ in what a
  game cluster does all the time, which is registering processes (a session per login, a
  zone per instance) and losing or regaining a node:

    * **Registering.** `:global.register_name/2` takes a cluster-wide lock and talks to every
      node before it returns: its cost grows with the cluster and it stalls while any node is
      slow or while a connection is being set up. `:pg.join/3` is local: the scope process
      records the member and tells the other nodes asynchronously. In `bench/packet.exs` a
      register/unregister pair cost 6 µs with `:pg` and 41-67 µs with `:global` on one
      node, and 38 µs against 1,190-1,570 µs (30-40 times more) in a three-node cluster on
      loopback; the look-ups cost about the same (310-390 ns for `:pg`, 320-440 ns for
      `:global`). Measured on the 2-core development VM under load from other jobs.
    * **A node leaves.** Both drop the names of the lost node's processes when the node goes
      down (`:pg` on `nodedown`, `:global` likewise), so lookups return `:undefined` at once,
      and the router counts each packet for them as a miss. `:global` in OTP 25 also applies
      `prevent_overlapping_partitions`: a node that loses only *some* of its connections is
      disconnected from the others, turning a partial failure into a full one. The cluster
      test shows it: when the zone node is stopped, `:global` on the server node logs that
      it "requested disconnect ... in order to prevent overlapping partitions", while the
      `:pg` names simply go.
    * **The node comes back.** With `:pg` the restarted node's processes register again
      (their `start_link` runs `register_name/2`) and the other nodes see them as soon as the
      scopes sync on `nodeup`; nothing else happens. With `:global`, names registered on
      both sides while they were apart clash when the partitions heal, and `:global`
      resolves the clash by killing one of the processes (`:global.random_exit_name/3`), a
      surprising thing to do to a zone full of players.

  The price of `:pg`: uniqueness is checked on the registering node's view of the cluster, so
  the same name registered at the same moment on two nodes (or on both sides of a partition)
  gives two processes. `whereis_name/1` then answers the same one on every node (the
  smallest pid), so messages still go to one place, and the other can find out with
  `members/1`. A game that needs strict uniqueness across partitions needs a consensus
  system, which neither `:pg` nor `:global` is.

  A process that dies leaves its names at once on its own node and, on the others, as soon
  as its node's scope tells them; in that short window a lookup may return the dead pid and
  a message to it is lost, as with any registry.
  """

  @scope __MODULE__

  @doc false
  def child_spec(_args),
    do: %{id: __MODULE__, start: {:pg, :start_link, [@scope]}, type: :worker}

  @doc "The `:via` tuple of `name`, for `GenServer.start_link/3`, `cast/2`, `call/3`."
  @spec via(term()) :: {:via, module(), term()}
  def via(name), do: {:via, __MODULE__, name}

  @doc """
  Registers `pid` (a process of this node) as `name`: `:yes`, or `:no` when some process of
  the cluster already has the name. Called by `GenServer.start_link/3` with a `via/1` name.
  """
  @spec register_name(term(), pid()) :: :yes | :no
  def register_name(name, pid) when is_pid(pid) and node(pid) == node() do
    case :pg.get_members(@scope, name) do
      [] ->
        :ok = :pg.join(@scope, name, pid)
        :yes

      _taken ->
        :no
    end
  end

  @doc "Removes the name from this node's processes."
  @spec unregister_name(term()) :: :ok
  def unregister_name(name) do
    for pid <- :pg.get_local_members(@scope, name), do: :pg.leave(@scope, name, pid)
    :ok
  end

  @doc """
  The process registered as `name` anywhere in the cluster, or `:undefined`. A local ETS
  read: no process is asked.
  """
  @spec whereis_name(term()) :: pid() | :undefined
  def whereis_name(name) do
    case :pg.get_members(@scope, name) do
      [pid] -> pid
      [] -> :undefined
      # Registered twice (see the moduledoc): every node picks the same one.
      pids -> Enum.min(pids)
    end
  end

  @doc """
  Sends `message` to the process registered as `name`, as `Kernel.send/2` does; exits with
  `{:badarg, {name, message}}` when there is none, as the `:via` contract requires (so
  `GenServer.cast/2` drops it and `GenServer.call/3` exits). The miss is counted and logged
  (see `RakNet.Packet.Router.stats/0`).
  """
  @spec send(term(), term()) :: pid()
  def send(name, message) do
    case whereis_name(name) do
      :undefined ->
        RakNet.Packet.Stats.incident(:missed, fn ->
          "no process registered as #{inspect(name)}"
        end)

        exit({:badarg, {name, message}})

      pid ->
        Kernel.send(pid, message)
        pid
    end
  end

  @doc "Every process registered as `name` in the cluster (more than one only after a race)."
  @spec members(term()) :: [pid()]
  def members(name), do: :pg.get_members(@scope, name)
end
