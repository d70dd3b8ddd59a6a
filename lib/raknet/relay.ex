defmodule RakNet.Relay do
  @moduledoc false
  # How a process on one node reaches connections and servers on another: every RakNet
  # function given a pid of another node hands its work to a relay process there, which runs
  # it with the local functions (a connection's handle, the ETS registry and the NIF exist
  # only on the connection's own node).
  #
  # A sender always goes through the same relay of a node (chosen by hashing its pid), so
  # what one process sends to a node (broadcasts, sends, closes, group joins) is done there
  # in the order it was sent, as it would be locally; different senders spread over @count
  # relays and are not serialized behind one process. `:erpc` would not keep that order (each
  # call or cast is a new process there, scheduled independently), and a zone's position
  # updates must not overtake each other.
  #
  # A broadcast is one message per node and is not answered (as Discord's Manifold does); the
  # other operations are one message there and one answer back.
  use GenServer

  @count 8
  @timeout 5_000

  @doc false
  def child_specs,
    do: for(i <- 0..(@count - 1), do: Supervisor.child_spec({__MODULE__, i}, id: {__MODULE__, i}))

  @doc false
  def start_link(i), do: GenServer.start_link(__MODULE__, :ok, name: name(i))

  defp name(i), do: :"#{__MODULE__}.#{i}"

  defp relay(node), do: {name(:erlang.phash2(self(), @count)), node}

  @doc """
  Broadcasts `message` to `connections` (pids of `node`) there; not answered. `false` when
  `node` is not connected (nothing is sent: a send to it would try to connect and could
  block the caller).
  """
  @spec broadcast(node(), [pid()], atom(), binary(), keyword()) :: boolean()
  def broadcast(node, connections, reliability, message, opts) do
    if connected?(node) do
      send(relay(node), {:broadcast, connections, reliability, message, opts})
      true
    else
      false
    end
  end

  @doc """
  Runs `operation` on `node` (see `run/1`) and returns its result; `{:error, :nodedown}` when
  the node is not connected or goes down before answering, `{:error, :timeout}` after
  #{@timeout} ms. An exception or exit there is raised or exited with here.
  """
  @spec call(node(), tuple()) :: term()
  def call(node, operation) do
    if connected?(node) do
      relay = relay(node)
      ref = Process.monitor(relay)
      send(relay, {:call, self(), ref, operation})

      receive do
        {^ref, {:raise, kind, reason, stack}} ->
          Process.demonitor(ref, [:flush])
          :erlang.raise(kind, reason, stack)

        {^ref, result} ->
          Process.demonitor(ref, [:flush])
          result

        {:DOWN, ^ref, :process, _, _} ->
          {:error, :nodedown}
      after
        @timeout ->
          Process.demonitor(ref, [:flush])
          {:error, :timeout}
      end
    else
      {:error, :nodedown}
    end
  end

  defp connected?(node), do: node in Node.list(:connected)

  # What another node may ask: the functions of RakNet's own API that need this node.
  defp run({:send, pid, reliability, message, opts}),
    do: RakNet.Connection.send(pid, reliability, message, opts)

  defp run({:close, pid, reason}), do: RakNet.Connection.close(pid, reason)
  defp run({:info, pid}), do: RakNet.Connection.info(pid)
  defp run({:assigns, pid}), do: RakNet.Connection.assigns(pid)
  defp run({:join, group, pids}), do: RakNet.Group.join(pids, group)
  defp run({:leave, group, pids}), do: RakNet.Group.leave(pids, group)

  defp run({:server, fun, args}) when fun in [:connections, :lookup, :broadcast, :count],
    do: apply(RakNet.Server, fun, args)

  @impl GenServer
  def init(:ok), do: {:ok, nil}

  @impl GenServer
  def handle_info({:broadcast, connections, reliability, message, opts}, state) do
    RakNet.broadcast(connections, reliability, message, opts)
    {:noreply, state}
  end

  def handle_info({:call, from, ref, operation}, state) do
    result =
      try do
        run(operation)
      catch
        kind, reason -> {:raise, kind, reason, __STACKTRACE__}
      end

    send(from, {ref, result})
    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}
end
