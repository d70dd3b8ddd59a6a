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
