defmodule RakNet.Connection.Registry do
  @moduledoc false
  # Maps a connection process to its connection handle, so that RakNet.Connection.send/3 to a
  # pid never waits on that process: any process looks the handle up in a public ETS table
  # (read concurrency, no message, no call) and hands the message to the runtime itself.
  #
  # A connection process registers itself in its init and unregisters in terminate. This
  # process owns the table and monitors every registered pid, so an entry also goes away when
  # its process is killed without running terminate.
  use GenServer

  @table __MODULE__

  @doc false
  def start_link(_args), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Registers the calling process as the owner of `conn`."
  @spec register(reference()) :: :ok
  def register(conn) do
    :ets.insert(@table, {self(), conn})
    GenServer.cast(__MODULE__, {:monitor, self()})
  end

  @doc "Removes the calling process's entry."
  @spec unregister() :: :ok
  def unregister do
    :ets.delete(@table, self())
    :ok
  end

  @doc "The handle of the connection that `pid` runs, or `:error`."
  @spec lookup(pid()) :: {:ok, reference()} | :error
  def lookup(pid) do
    case :ets.lookup(@table, pid) do
      [{^pid, conn}] -> {:ok, conn}
      [] -> :error
    end
  rescue
    # The table is gone only while the :raknet application is down.
    ArgumentError -> :error
  end

  @impl GenServer
  def init(:ok) do
    :ets.new(@table, [
      :set,
      :public,
      :named_table,
      read_concurrency: true,
      write_concurrency: true
    ])

    {:ok, nil}
  end

  @impl GenServer
  def handle_cast({:monitor, pid}, state) do
    Process.monitor(pid)
    {:noreply, state}
  end

  @impl GenServer
  def handle_info({:DOWN, _ref, :process, pid, _reason}, state) do
    :ets.delete(@table, pid)
    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}
end
