defmodule RakNet.Connection.Registry do
  @moduledoc false
  # Who is connected, readable from any process without a message to anyone (ETS):
  #
  #   * `@table` (set): connection pid => {handle, server, info}. RakNet.Connection.send/3 to a
  #     pid reads it, so a send never waits on the connection process;
  #   * `@index` (ordered_set): {server, kind, key} => pid, for finding a connection by
  #     address, GUID or application id, {server, :listener, nil} => the server's listener
  #     (so that a call to a server never has to ask its supervisor, which answers no calls
  #     while it stops its children), and {server, :pid, pid} => handle for listing a
  #     server's connections (a broadcast to all of them reads only these rows). A lookup
  #     binds the key's prefix, so it costs O(log n), and listing one server's connections
  #     costs O(its connections), not O(every connection of the node).
  #
  # A connection process registers itself in its init and unregisters in terminate. This
  # process owns the tables and monitors every registered pid, so the rows also go away when
  # a connection process is killed without running terminate.
  use GenServer

  @table __MODULE__
  @index RakNet.Connection.Index

  @doc false
  def start_link(_args), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Registers the calling process as the owner of `conn`, a connection of `server`."
  @spec register(reference(), pid() | :client, map()) :: :ok
  def register(conn, server, info) do
    pid = self()
    info = Map.merge(info, %{pid: pid, conn: conn, id: nil, assigns: %{}})
    :ets.insert(@table, {pid, conn, server, info})

    rows =
      for {kind, key} <- [address: info[:address], guid: info[:guid]],
          key != nil,
          do: {{server, kind, key}, pid}

    :ets.insert(@index, [{{server, :pid, pid}, conn} | rows])

    GenServer.cast(__MODULE__, {:monitor, pid})
  end

  @doc "Registers the calling process as the listener of the server `supervisor`."
  @spec register_server(pid()) :: :ok
  def register_server(supervisor) do
    :ets.insert(@table, {self(), :server, supervisor})
    # A restarted listener takes the row over from the one before.
    :ets.insert(@index, {{supervisor, :listener, nil}, self()})
    GenServer.cast(__MODULE__, {:monitor, self()})
    # The row goes with the supervisor.
    GenServer.cast(__MODULE__, {:monitor_server, supervisor})
  end

  @doc """
  Marks the server `supervisor` as stopping (its listener calls this as its supervisor stops
  it): calls to the server fail at once from now on, until a new listener registers.
  """
  @spec server_stopping(pid()) :: :ok
  def server_stopping(supervisor) do
    :ets.insert(@index, {{supervisor, :listener, nil}, :stopping})
    :ok
  rescue
    # The table is gone only while the :raknet application is down: nothing to mark.
    ArgumentError -> :ok
  end

  @doc """
  The listener of the server `supervisor` (a pid on this node): `{:ok, pid}` (the pid may have
  just exited), `{:ok, :stopping}` while its supervisor stops it, `:none` when none is
  registered (the server has ended, or a listener that ended by itself is being restarted),
  or `:error` when the registry is not running.
  """
  @spec listener(pid()) :: {:ok, pid() | :stopping} | :none | :error
  def listener(supervisor) do
    case :ets.lookup(@index, {supervisor, :listener, nil}) do
      [{_, pid}] -> {:ok, pid}
      [] -> :none
    end
  rescue
    # The table is gone only while the :raknet application is down.
    ArgumentError -> :error
  end

  @doc "Every running server of the node (their supervisors)."
  @spec servers() :: [pid()]
  def servers, do: :ets.select(@table, [{{:_, :server, :"$1"}, [], [:"$1"]}])

  @doc """
  Gives the calling connection process an application id, unique within its server:
  `{:error, {:already_registered, pid}}` when another connection has it.
  """
  @spec register_id(term()) :: :ok | {:error, {:already_registered, pid()} | :not_a_connection}
  def register_id(id) do
    pid = self()

    case :ets.lookup(@table, pid) do
      [{^pid, conn, server, info}] ->
        cond do
          info.id == id ->
            :ok

          :ets.insert_new(@index, {{server, :id, id}, pid}) ->
            if info.id != nil, do: :ets.delete(@index, {server, :id, info.id})
            :ets.insert(@table, {pid, conn, server, %{info | id: id}})
            :ok

          true ->
            case :ets.lookup(@index, {server, :id, id}) do
              [{_, owner}] -> {:error, {:already_registered, owner}}
              # Its owner let go of it just now: try again.
              [] -> register_id(id)
            end
        end

      _ ->
        {:error, :not_a_connection}
    end
  end

  @doc """
  Merges `assigns` into the calling connection process's assigns (its row, readable by
  anyone); `{:error, :not_a_connection}` outside a connection process.
  """
  @spec assign(map()) :: :ok | {:error, :not_a_connection}
  def assign(assigns) do
    pid = self()

    case :ets.lookup(@table, pid) do
      [{^pid, conn, server, %{assigns: old} = info}] ->
        # Only the connection's own process writes its row: no update is lost.
        :ets.insert(@table, {pid, conn, server, %{info | assigns: Map.merge(old, assigns)}})
        :ok

      _ ->
        {:error, :not_a_connection}
    end
  end

  @doc "Removes the calling process's rows."
  @spec unregister() :: :ok
  def unregister, do: remove(self())

  @doc "The handle of the connection that `pid` runs, or `:error`."
  @spec lookup(pid()) :: {:ok, reference()} | :error
  def lookup(pid) do
    # Only the handle is copied out of the table, not the row's info map: a send and each
    # member of a broadcast look one up.
    case :ets.lookup_element(@table, pid, 2) do
      conn when is_reference(conn) -> {:ok, conn}
      # A server's listener row.
      _ -> :error
    end
  rescue
    # No such row, or the table is gone (only while the :raknet application is down).
    ArgumentError -> :error
  end

  @doc """
  Keeps what the operator changed on the server `supervisor` while it runs (bans, suspension,
  connection limit, pong), for a listener that restarts to apply again. Removed with the
  server's other rows when its supervisor goes.
  """
  @spec put_overrides(pid(), map()) :: :ok
  def put_overrides(supervisor, overrides) do
    :ets.insert(@index, {{supervisor, :overrides, nil}, overrides})
    :ok
  end

  @doc "What `put_overrides/2` kept for the server `supervisor` (`%{}`: nothing)."
  @spec overrides(pid()) :: map()
  def overrides(supervisor) do
    case :ets.lookup(@index, {supervisor, :overrides, nil}) do
      [{_, overrides}] -> overrides
      [] -> %{}
    end
  end

  @doc "What is known of the connection `pid` runs, or `:error`."
  @spec info(pid()) :: {:ok, map()} | :error
  def info(pid) do
    case :ets.lookup(@table, pid) do
      [{^pid, _conn, _server, info}] -> {:ok, info}
      _ -> :error
    end
  end

  @doc "`{pid, handle}` of every connection of `server`, from one read of the index."
  @spec handles(pid()) :: [{pid(), reference()}]
  def handles(server),
    do: :ets.select(@index, [{{{server, :pid, :"$1"}, :"$2"}, [], [{{:"$1", :"$2"}}]}])

  @doc "How many connections `server` has (its `{server, :pid, pid}` rows)."
  @spec count(pid()) :: non_neg_integer()
  def count(server),
    do: :ets.select_count(@index, [{{{server, :pid, :_}, :_}, [], [true]}])

  @doc "The connections of `server`, in no particular order."
  @spec connections(pid()) :: [map()]
  def connections(server) do
    server
    |> handles()
    |> Enum.flat_map(fn {pid, _conn} ->
      case info(pid) do
        {:ok, info} -> [info]
        :error -> []
      end
    end)
  end

  @doc "The connection of `server` found by `:address`, `:guid` or `:id`, or `:error`."
  @spec find(pid(), :address | :guid | :id, term()) :: {:ok, map()} | :error
  def find(server, kind, key) do
    case :ets.lookup(@index, {server, kind, key}) do
      [{_, pid}] -> info(pid)
      [] -> :error
    end
  end

  defp remove(pid) do
    case :ets.lookup(@table, pid) do
      [{^pid, _conn, server, info}] ->
        # An index row whose key a newer connection took over (the same address after a
        # reconnect) belongs to that one now: delete only rows that still point here.
        :ets.delete(@index, {server, :pid, pid})

        for key <- [
              {server, :address, info[:address]},
              {server, :guid, info[:guid]},
              {server, :id, info.id}
            ] do
          :ets.select_delete(@index, [{{key, pid}, [], [true]}])
        end

        :ets.delete(@table, pid)
        :ok

      [{^pid, :server, supervisor}] ->
        # Unless a newer listener of that server has taken the row over, or the server is
        # stopping (that row stays until the supervisor has gone).
        :ets.select_delete(@index, [{{{supervisor, :listener, nil}, pid}, [], [true]}])
        :ets.delete(@table, pid)
        :ok

      [] ->
        # A server's supervisor (or nothing of ours).
        :ets.delete(@index, {pid, :listener, nil})
        :ets.delete(@index, {pid, :overrides, nil})
        :ok
    end
  end

  @impl GenServer
  def init(:ok) do
    opts = [:public, :named_table, read_concurrency: true, write_concurrency: true]
    :ets.new(@table, [:set | opts])
    :ets.new(@index, [:ordered_set | opts])
    # The servers' supervisors monitored (once each, however often a listener restarts).
    {:ok, MapSet.new()}
  end

  @impl GenServer
  def handle_cast({:monitor_server, supervisor}, servers) do
    if MapSet.member?(servers, supervisor) do
      {:noreply, servers}
    else
      Process.monitor(supervisor)
      {:noreply, MapSet.put(servers, supervisor)}
    end
  end

  def handle_cast({:monitor, pid}, state) do
    Process.monitor(pid)
    {:noreply, state}
  end

  @impl GenServer
  def handle_info({:DOWN, _ref, :process, pid, _reason}, servers) do
    remove(pid)
    {:noreply, MapSet.delete(servers, pid)}
  end

  def handle_info(_other, state), do: {:noreply, state}
end
