defmodule RakNet.Test.Cluster do
  @moduledoc false
  # Helpers for tests that run `:peer` nodes. Compiled into the test build, so the peers load
  # it from the test node's code paths.

  @doc """
  Makes this node distributed (short names, starting epmd if need be): `{:ok, started?}`
  (`started?` false when it already was) or `{:error, reason}`. Short names, as
  `mix raknet.top`'s test uses, so that either test may come first.
  """
  def ensure_distributed do
    if Node.alive?() do
      {:ok, false}
    else
      if epmd = System.find_executable("epmd"), do: System.cmd(epmd, ["-daemon"])
      name = :"raknet_test_#{System.unique_integer([:positive])}"

      case :net_kernel.start([name, :shortnames]) do
        {:ok, _} -> {:ok, true}
        {:error, reason} -> {:error, reason}
      end
    end
  end

  @doc "Starts a peer with this node's code paths and the :raknet application running."
  def start_peer(name) do
    {:ok, peer, node} =
      :peer.start(%{name: name, args: [~c"-setcookie", Atom.to_charlist(Node.get_cookie())]})

    :ok = :erpc.call(node, :code, :add_pathsa, [:code.get_path()])
    :ok = :erpc.call(node, __MODULE__, :prepare, [])
    {peer, node}
  end

  @doc false
  def prepare do
    {:ok, _} = Application.ensure_all_started(:raknet)
    # The test node shows what matters; the peers' consoles would only interleave with it.
    Logger.remove_backend(:console)
    :ok
  end

  @doc """
  Forwards joins and leaves of `group` in this node's RakNet.Packet.Registry to `pid` as
  {:pg_watch, node, group, :join | :leave, pids}; returns the current members.
  """
  def watch(pid, group) do
    parent = self()

    spawn(fn ->
      {ref, members} = :pg.monitor(RakNet.Packet.Registry, group)
      send(parent, {:members, members})
      watch_loop(pid, ref)
    end)

    receive do
      {:members, members} -> members
    end
  end

  defp watch_loop(pid, ref) do
    receive do
      {^ref, event, group, pids} -> send(pid, {:pg_watch, node(), group, event, pids})
    end

    watch_loop(pid, ref)
  end

  @doc """
  On a peer: starts a `RakNet.Server` of `RakNet.Test.EchoClient` on loopback that outlives
  the call (unlinked), for many clients of this machine; its connections announce themselves
  to a sink process (see `await_connections/2`). Returns `{server, port, sink}`.
  """
  def start_server(opts \\ []) do
    sink = spawn(fn -> sink_loop(0, []) end)

    opts =
      [ip: {127, 0, 0, 1}, open_ipv6_socket: false, client_data: sink] ++
        RakNet.Test.Server.crowd() ++ [max_connections_per_ip: 4_096] ++ opts

    {:ok, server} = RakNet.Server.start_link(RakNet.Test.EchoClient, 0, opts)
    Process.unlink(server)
    {server, RakNet.Server.info(server).ipv4_port, sink}
  end

  @doc "Waits (at most `timeout` ms) until the sink of `start_server/1` has seen `n` connections."
  def await_connections(sink, n, timeout \\ 60_000) do
    send(sink, {:await, self(), n})

    receive do
      {:connections, ^sink, ^n} -> :ok
    after
      timeout -> {:error, :timeout}
    end
  end

  defp sink_loop(count, waiters) do
    receive do
      {:client_new, _pid} ->
        count = count + 1
        {done, waiting} = Enum.split_with(waiters, fn {_, n} -> count >= n end)
        for {pid, n} <- done, do: send(pid, {:connections, self(), n})
        sink_loop(count, waiting)

      {:await, pid, n} when count >= n ->
        send(pid, {:connections, self(), n})
        sink_loop(count, waiters)

      {:await, pid, n} ->
        sink_loop(count, [{pid, n} | waiters])

      _other ->
        sink_loop(count, waiters)
    end
  end

  @doc "Waits (at most 5 s) until the process `pid` of this node has ended."
  def await_down(pid) do
    ref = Process.monitor(pid)

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> :ok
    after
      5_000 -> {:error, :timeout}
    end
  end

  @doc """
  Waits (at most 5 s) until this node's view of `group` in `RakNet.Group` is `expected` (in
  any order): a join or leave reaches the other nodes' `:pg` after the member's own node
  has made it. Returns `:ok` or `{:error, {:timeout, members}}`.
  """
  def await_members(group, expected) do
    {ref, members} = :pg.monitor(RakNet.Group, group)
    deadline = System.monotonic_time(:millisecond) + 5_000

    try do
      await_members(ref, Enum.sort(expected), members, deadline)
    after
      :pg.demonitor(RakNet.Group, ref)
    end
  end

  defp await_members(ref, expected, members, deadline) do
    if Enum.sort(members) == expected do
      :ok
    else
      left = max(deadline - System.monotonic_time(:millisecond), 0)

      receive do
        {^ref, :leave, _group, pids} -> await_members(ref, expected, members -- pids, deadline)
        {^ref, :join, _group, pids} -> await_members(ref, expected, members ++ pids, deadline)
      after
        left -> {:error, {:timeout, members}}
      end
    end
  end

  @doc "Waits (at most 5 s) until this node is not connected to `node`."
  def await_nodedown(node) do
    # A monitor of a node that is not connected gets its :nodedown at once.
    true = Node.monitor(node, true)

    receive do
      {:nodedown, ^node} -> :ok
    after
      5_000 -> {:error, :timeout}
    end
  end

  @doc "Joins every connection `server` has on this node to `group`."
  def join_all(server, group) do
    server |> RakNet.Server.connections() |> Enum.map(& &1.pid) |> RakNet.Group.join(group)
  end

  @doc """
  On a peer: opens `n` raw client connections to `port` on loopback, owned by a holder
  process that counts what they receive (see `await_received/3`). Returns the holder.
  """
  def connect_many(port, n) do
    holder = spawn(fn -> holder_loop(%{}, []) end)

    1..n
    |> Task.async_stream(
      fn _ ->
        {:ok, conn} = RakNet.connect("127.0.0.1", port)
        :ok = RakNet.Native.conn_set_owner(conn, holder)
      end,
      max_concurrency: 16,
      timeout: 60_000
    )
    |> Stream.run()

    holder
  end

  @doc """
  Waits (at most `timeout` ms) until the connections of `holder` received `n` messages of
  type 0x86 with `body`; returns how many arrived.
  """
  def await_received(holder, body, n, timeout \\ 30_000) do
    send(holder, {:await, self(), body, n})

    receive do
      {:received, ^holder, ^body, count} -> count
    after
      timeout ->
        send(holder, {:count, self(), body})

        receive do
          {:received, ^holder, ^body, count} -> count
        end
    end
  end

  defp holder_loop(counts, waiters) do
    receive do
      {:raknet, _conn, 0x86, body, _transit} ->
        counts = Map.update(counts, body, 1, &(&1 + 1))
        count = counts[body]

        {done, waiting} = Enum.split_with(waiters, fn {_, b, n} -> b == body and count >= n end)

        for {pid, _, _} <- done, do: send(pid, {:received, self(), body, count})
        holder_loop(counts, waiting)

      {:await, pid, body, n} ->
        if Map.get(counts, body, 0) >= n do
          send(pid, {:received, self(), body, counts[body]})
          holder_loop(counts, waiters)
        else
          holder_loop(counts, [{pid, body, n} | waiters])
        end

      {:count, pid, body} ->
        send(pid, {:received, self(), body, Map.get(counts, body, 0)})
        holder_loop(counts, waiters)

      _other ->
        holder_loop(counts, waiters)
    end
  end

  @doc """
  Runs `fun` and returns `{its result, the messages the calling process sent to other nodes
  meanwhile}`, counted by tracing its sends.
  """
  def remote_sends(fun) do
    me = self()
    tracer = spawn(fn -> tracer_loop(0) end)
    :erlang.trace(me, true, [:send, {:tracer, tracer}])

    result =
      try do
        fun.()
      after
        :erlang.trace(me, false, [:send])
      end

    # Every trace message is with the tracer before it is asked for the count.
    delivered = :erlang.trace_delivered(me)

    receive do
      {:trace_delivered, ^me, ^delivered} -> :ok
    end

    ref = make_ref()
    send(tracer, {:done, me, ref})

    receive do
      {^ref, sends} -> {result, sends}
    end
  end

  @doc "`remote_sends/1` of `apply(module, fun, args)`."
  def counting_remote_sends(module, fun, args),
    do: remote_sends(fn -> apply(module, fun, args) end)

  defp tracer_loop(remote) do
    receive do
      {:trace, _pid, :send, _msg, to} ->
        tracer_loop(if remote_destination?(to), do: remote + 1, else: remote)

      {:done, pid, ref} ->
        send(pid, {ref, remote})
    end
  end

  defp remote_destination?({_name, node}) when is_atom(node), do: node != node()
  defp remote_destination?(pid) when is_pid(pid), do: node(pid) != node()
  defp remote_destination?(_local_name), do: false

  @doc "Forwards this node's log events to `pid` as {:log, node, level, text}."
  def forward_logs(pid) do
    :logger.add_handler(
      :"raknet_test_forward_#{System.unique_integer([:positive])}",
      __MODULE__,
      %{
        config: %{pid: pid}
      }
    )
  end

  @doc false
  # The :logger handler callback of forward_logs/1.
  def log(%{level: level, msg: msg}, %{config: %{pid: pid}}) do
    text =
      case msg do
        {:string, chardata} -> IO.chardata_to_string(chardata)
        {:report, report} -> inspect(report)
        {format, args} -> format |> :io_lib.format(args) |> IO.chardata_to_string()
      end

    send(pid, {:log, node(), level, text})
  end
end

defmodule RakNet.Test.ClusterCase do
  @moduledoc """
  `use RakNet.Test.ClusterCase` in an `ExUnit.Case` module whose tests run `:peer` nodes: the
  test node is made distributed once for the module (the helper starts epmd if need be), and
  stops being so after it if it was not before. Where distribution cannot start the module
  fails in `setup_all` rather than skip; a machine that cannot run it at all (no network
  stack) opts out with RAKNET_NO_DISTRIBUTION=1.
  """

  defmacro __using__(_opts) do
    quote do
      if System.get_env("RAKNET_NO_DISTRIBUTION") == "1" do
        @moduletag skip: "RAKNET_NO_DISTRIBUTION=1"
      end

      setup_all do
        {:ok, started?} = RakNet.Test.Cluster.ensure_distributed()
        # Other test modules find the node as it was.
        if started?, do: on_exit(fn -> :net_kernel.stop() end)
        :ok
      end
    end
  end
end
