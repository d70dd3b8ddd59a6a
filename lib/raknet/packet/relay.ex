defmodule RakNet.Packet.Relay do
  @moduledoc false
  # Hands broadcasts from other nodes to RakNet.broadcast/4 on this node, in the order each
  # sender sent them. `:erpc.cast/4` would not keep that order (each cast is a new process
  # here, scheduled independently), and a zone's position updates must not overtake each
  # other. A sender always goes through the same relay of a node (chosen by hashing its pid),
  # so its broadcasts stay in order, while different senders spread over @count relays and
  # are not serialized behind one process. The relays only call the NIF, which enqueues.
  use GenServer

  @count 8

  @doc false
  def child_specs,
    do: for(i <- 0..(@count - 1), do: Supervisor.child_spec({__MODULE__, i}, id: {__MODULE__, i}))

  @doc false
  def start_link(i), do: GenServer.start_link(__MODULE__, :ok, name: name(i))

  defp name(i), do: :"#{__MODULE__}.#{i}"

  @doc false
  # Sends `message` to `connections` (pids of `node`) through the caller's relay there.
  def broadcast(node, connections, reliability, message, opts) do
    relay = name(:erlang.phash2(self(), @count))
    send({relay, node}, {:broadcast, connections, reliability, message, opts})
    :ok
  end

  @impl GenServer
  def init(:ok), do: {:ok, nil}

  @impl GenServer
  def handle_info({:broadcast, connections, reliability, message, opts}, state) do
    RakNet.broadcast(connections, reliability, message, opts)
    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}
end
