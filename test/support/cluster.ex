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
