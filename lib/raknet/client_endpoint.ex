defmodule RakNet.ClientEndpoint do
  @moduledoc false
  # Owns the node's client endpoints: UDP sockets with an engine each, shared by every
  # RakNet.connect/3 (the engine tells connections apart by server address, so one socket
  # holds one connection per server; more go through extra endpoints). Up to
  # `:client_threads` endpoints per address family (default: one per scheduler) run on as
  # many threads, new connections going to the least loaded.
  use GenServer

  require Logger

  def start_link(_args), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Any client endpoint of `ip`'s address family (for pings: no reservation)."
  @spec any(:inet.ip_address()) :: {:ok, reference()} | {:error, term()}
  def any(ip), do: GenServer.call(__MODULE__, {:any, ip})

  @doc """
  An endpoint for connecting to `ip:port` with no connection to that server yet: the least
  loaded one, or a new one on the next client thread while there are fewer endpoints than
  threads. It is reserved for the caller's connect until `checkin/3` (or the caller's exit):
  from then on the endpoint itself says it has that connection, for as long as it lives
  (`RakNet.Native.endpoint_connected_to/3`). Endpoints in `exclude` are not offered (those a
  connect already failed through).
  """
  @spec checkout(:inet.ip_address(), :inet.port_number(), [reference()]) ::
          {:ok, reference()} | {:error, term()}
  def checkout(ip, port, exclude \\ []),
    do: GenServer.call(__MODULE__, {:checkout, ip, port, exclude})

  @doc "The connect that `checkout/2` reserved `endpoint` for has returned."
  @spec checkin(reference(), :inet.ip_address(), :inet.port_number()) :: :ok
  def checkin(endpoint, ip, port),
    do: GenServer.cast(__MODULE__, {:checkin, endpoint, {ip, port}})

  @doc "The endpoints started so far, per address family (`:inet`, `:inet6`)."
  @spec endpoints() :: %{optional(:inet | :inet6) => [reference()]}
  def endpoints, do: GenServer.call(__MODULE__, :endpoints)

  @impl GenServer
  # `reserved`: {endpoint, {ip, port}} => the monitor of the process connecting through it;
  # `monitors`: the reverse.
  def init(:ok), do: {:ok, %{endpoints: %{}, reserved: %{}, monitors: %{}}}

  @impl GenServer
  def handle_call({:any, ip}, _from, state) do
    family = family(ip)

    case Map.get(state.endpoints, family, []) do
      [endpoint | _] ->
        {:reply, {:ok, endpoint}, state}

      [] ->
        case start_endpoint(family, state) do
          {:error, _} = error ->
            {:reply, error, state}

          endpoint ->
            {:reply, {:ok, endpoint},
             %{state | endpoints: Map.put(state.endpoints, family, [endpoint])}}
        end
    end
  end

  def handle_call({:checkout, ip, port, exclude}, {pid, _}, state) do
    family = family(ip)
    endpoints = Map.get(state.endpoints, family, [])
    # An endpoint may hold one connection per server address: the candidates are those
    # without one to this server, or a connect to it under way.
    host = ip |> :inet.ntoa() |> to_string()

    free =
      Enum.reject(endpoints, fn endpoint ->
        endpoint in exclude or Map.has_key?(state.reserved, {endpoint, {ip, port}}) or
          RakNet.Native.endpoint_connected_to(endpoint, host, port)
      end)

    loads = Map.new(free, &{&1, load(state, &1)})
    least = Enum.min_by(free, &Map.fetch!(loads, &1), fn -> nil end)

    # Connections are spread over the client threads: while a family has fewer endpoints
    # than threads, a new connection gets an endpoint (on the next thread) of its own.
    grow = least == nil or (length(endpoints) < threads() and Map.fetch!(loads, least) > 0)

    case if(grow, do: start_endpoint(family, state), else: least) do
      {:error, _} = error ->
        {:reply, error, state}

      endpoint ->
        endpoints = if grow, do: endpoints ++ [endpoint], else: endpoints
        key = {endpoint, {ip, port}}
        monitor = Process.monitor(pid)

        state = %{
          state
          | endpoints: Map.put(state.endpoints, family, endpoints),
            reserved: Map.put(state.reserved, key, monitor),
            monitors: Map.put(state.monitors, monitor, key)
        }

        {:reply, {:ok, endpoint}, state}
    end
  end

  def handle_call(:endpoints, _from, state), do: {:reply, state.endpoints, state}

  @impl GenServer
  def handle_cast({:checkin, endpoint, server}, state) do
    case Map.pop(state.reserved, {endpoint, server}) do
      {nil, _} ->
        {:noreply, state}

      {monitor, reserved} ->
        Process.demonitor(monitor, [:flush])
        {:noreply, %{state | reserved: reserved, monitors: Map.delete(state.monitors, monitor)}}
    end
  end

  # Connections on an endpoint (connecting ones included, as the NIF counts them), or the
  # connects reserved on it, whichever is more.
  defp load(state, endpoint) do
    reserved = Enum.count(state.reserved, fn {{e, _}, _} -> e == endpoint end)
    max(RakNet.Native.endpoint_load(endpoint), reserved)
  end

  # How many threads the node's client endpoints are spread over (app env
  # `:client_threads`, default one per scheduler).
  defp threads do
    case Application.get_env(:raknet, :client_threads) do
      n when is_integer(n) and n > 0 -> n
      _ -> System.schedulers_online()
    end
  end

  @impl GenServer
  def handle_info({:DOWN, monitor, :process, _pid, _reason}, state) do
    # The connecting process died before its checkin.
    case Map.pop(state.monitors, monitor) do
      {nil, _} ->
        {:noreply, state}

      {key, monitors} ->
        {:noreply, %{state | reserved: Map.delete(state.reserved, key), monitors: monitors}}
    end
  end

  # An endpoint that stopped (its thread failed; it said why in a log line first) is
  # forgotten, with the connects reserved on it: the next connect or ping starts another,
  # instead of every one failing with :closed for the life of the node.
  def handle_info({:raknet_endpoint, endpoint, :stopped}, state) do
    Logger.warning("raknet client: an endpoint stopped; the next connection starts another")
    {gone, kept} = Enum.split_with(state.reserved, fn {{e, _}, _} -> e == endpoint end)
    Enum.each(gone, fn {_key, monitor} -> Process.demonitor(monitor, [:flush]) end)

    {:noreply,
     %{
       state
       | endpoints:
           Map.new(state.endpoints, fn {family, list} -> {family, list -- [endpoint]} end),
         reserved: Map.new(kept),
         monitors: Map.drop(state.monitors, Enum.map(gone, &elem(&1, 1)))
     }}
  end

  def handle_info({:raknet_endpoint, _endpoint, :log, level, text}, state) do
    Logger.log(level, "raknet client: " <> text)
    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp family(ip) when tuple_size(ip) == 4, do: :inet
  defp family(_ip), do: :inet6

  @doc """
  The `endpoint_start` options of a client endpoint of `family` (docs/nif-contract.md): what
  differs from the engine's defaults, which the NIF fills in for every key left out.
  """
  @spec native_opts(:inet | :inet6) :: map()
  def native_opts(family) do
    %{
      host: if(family == :inet, do: "0.0.0.0", else: "::"),
      accept_incoming: false,
      # One connection per server; the engine's limit is a server's.
      max_connections: 65_536,
      # The application chose the server it connects to: no limit on its message rate.
      max_messages_per_sec: nil,
      # One socket per endpoint, running on one of the node's shared client threads.
      shared_thread: true,
      # As a server's (RakNet.Server.Config.to_native/2): tests and benchmarks only.
      gso: Application.get_env(:raknet, :udp_gso, true)
    }
  end

  # The n-th endpoint of the node (counting both families) runs on client thread n mod
  # `threads()`.
  defp start_endpoint(family, state) do
    started = state.endpoints |> Map.values() |> Enum.map(&length/1) |> Enum.sum()
    opts = %{native_opts(family) | shared_thread: rem(started, threads())}

    case RakNet.Native.endpoint_start(opts, self()) do
      {:ok, endpoint} -> endpoint
      {:error, _} = error -> error
    end
  end
end
