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
      # The :pg scope of RakNet.Group (zones, rooms, lobbies: connections cluster-wide).
      %{id: RakNet.Group, start: {:pg, :start_link, [RakNet.Group]}},
      # Sends, broadcasts, closes and server calls from other nodes' processes, in order.
      %{
        id: RakNet.Relays,
        start:
          {Supervisor, :start_link,
           [RakNet.Relay.child_specs(), [strategy: :one_for_one, name: RakNet.Relays]]},
        type: :supervisor
      },
      RakNet.ClientEndpoint,
      {DynamicSupervisor, name: RakNet.ClientSupervisor, strategy: :one_for_one}
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: RakNet.Supervisor)
  end
end
