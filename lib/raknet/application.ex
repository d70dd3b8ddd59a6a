defmodule RakNet.Application do
  @moduledoc false
  # Shared by every outgoing connection of the node: the client endpoints (one per address
  # family, started on first use) and a supervisor for client connection processes.
  use Application

  @impl Application
  def start(_type, _args) do
    RakNet.Packet.Stats.init()

    children = [
      RakNet.Connection.Registry,
      # The :pg scope of RakNet.Packet.Registry, the cluster-wide names packets are routed to.
      RakNet.Packet.Registry,
      # Broadcasts from other nodes' processes (RakNet.Packet.broadcast/4), in order.
      %{
        id: RakNet.Packet.Relays,
        start:
          {Supervisor, :start_link,
           [
             RakNet.Packet.Relay.child_specs(),
             [strategy: :one_for_one, name: RakNet.Packet.Relays]
           ]},
        type: :supervisor
      },
      RakNet.ClientEndpoint,
      {DynamicSupervisor, name: RakNet.ClientSupervisor, strategy: :one_for_one}
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: RakNet.Supervisor)
  end
end

defmodule RakNet.ClientEndpoint do
  @moduledoc false
  # Owns the node's client endpoints: one UDP socket and engine per address family, shared by
  # every RakNet.connect/3 (the engine tells connections apart by server address, so one
  # socket holds one connection per server; more go through extra endpoints).
  use GenServer

  require Logger

  def start_link(_args), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Any client endpoint of `ip`'s address family (for pings: no reservation)."
  @spec any(:inet.ip_address()) :: {:ok, reference()} | {:error, term()}
  def any(ip), do: GenServer.call(__MODULE__, {:any, ip})

  @doc "An endpoint for connecting to `ip:port` with no connection to that server yet."
  @spec checkout(:inet.ip_address(), :inet.port_number()) :: {:ok, reference()} | {:error, term()}
  def checkout(ip, port), do: GenServer.call(__MODULE__, {:checkout, ip, port})

  @impl GenServer
  def init(:ok), do: {:ok, %{endpoints: %{}, used: %{}}}

  @impl GenServer
  def handle_call({:any, ip}, _from, state) do
    family = family(ip)

    case Map.get(state.endpoints, family, []) do
      [endpoint | _] ->
        {:reply, {:ok, endpoint}, state}

      [] ->
        case start_endpoint(family) do
          {:error, _} = error ->
            {:reply, error, state}

          endpoint ->
            {:reply, {:ok, endpoint},
             %{state | endpoints: Map.put(state.endpoints, family, [endpoint])}}
        end
    end
  end

  def handle_call({:checkout, ip, port}, _from, state) do
    family = family(ip)
    endpoints = Map.get(state.endpoints, family, [])
    # An endpoint may hold one connection per server address: use the first without one.
    free =
      Enum.find(endpoints, fn ep ->
        not MapSet.member?(Map.get(state.used, ep, MapSet.new()), {ip, port})
      end)

    case free || start_endpoint(family) do
      {:error, _} = error ->
        {:reply, error, state}

      endpoint ->
        used =
          Map.update(state.used, endpoint, MapSet.new([{ip, port}]), &MapSet.put(&1, {ip, port}))

        endpoints = if free, do: endpoints, else: endpoints ++ [endpoint]
        # Forget the reservation after the connection had time to fail or succeed; a
        # reconnect to the same server then reuses the endpoint.
        Process.send_after(self(), {:release, endpoint, {ip, port}}, 15_000)

        {:reply, {:ok, endpoint},
         %{state | endpoints: Map.put(state.endpoints, family, endpoints), used: used}}
    end
  end

  @impl GenServer
  def handle_info({:release, endpoint, key}, state) do
    {:noreply,
     %{state | used: Map.update(state.used, endpoint, MapSet.new(), &MapSet.delete(&1, key))}}
  end

  def handle_info({:raknet_endpoint, _endpoint, :log, level, text}, state) do
    Logger.log(level, "raknet client: " <> text)
    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp family(ip) when tuple_size(ip) == 4, do: :inet
  defp family(_ip), do: :inet6

  @doc "The `endpoint_start` options of a client endpoint of `family` (docs/nif-contract.md)."
  @spec native_opts(:inet | :inet6) :: map()
  def native_opts(family) do
    %{
      host: if(family == :inet, do: "0.0.0.0", else: "::"),
      port: 0,
      accept_incoming: false,
      max_connections: 65_536,
      protocol_versions: [11, 10, 6],
      min_mtu: 400,
      max_mtu: 1492,
      timeout_ms: 10_000,
      include_timestamp_with_datagrams: false,
      offline_ping_response: "",
      max_number_of_internal_ids: 10,
      use_cookies: true,
      guid: nil,
      max_pending_deliveries: 10_000,
      max_pending_bytes: 4_194_304,
      # One socket per endpoint, but all client endpoints share one runtime thread.
      shared_thread: true
    }
  end

  defp start_endpoint(family) do
    opts = native_opts(family)

    case RakNet.Native.endpoint_start(opts, self()) do
      {:ok, endpoint} -> endpoint
      {:error, _} = error -> error
    end
  end
end
