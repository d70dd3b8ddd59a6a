defmodule MMO do
  @moduledoc """
  Starts the MMO's roles on this node: `:server` (the RakNet server, whose connections decode
  and route packets), `:world` (the world and the sessions it starts) and `:zones`. One node
  can run all three; in a cluster each node runs some (see examples/mmo/README.md).
  """

  @doc """
  Starts `roles` under a supervisor of its own that is not linked to the caller. Options:
  `:port` (server, default 19132; 0 picks one), `:zones` (zone ids, default [1, 2]).
  Returns `{:ok, supervisor}`; `server_port/0` then gives the server's port.
  """
  def start(roles, opts \\ []) do
    zones = Keyword.get(opts, :zones, [1, 2])

    children =
      Enum.flat_map(roles, fn
        :server ->
          handler = [set: MMO.Protocol, router: MMO.Router]

          [
            Supervisor.child_spec(
              {RakNet.Server,
               [RakNet.Packet.Handler, Keyword.get(opts, :port, 19132), client_data: handler] ++
                 Keyword.get(opts, :server, [])},
              id: :server
            )
          ]

        :world ->
          [
            {DynamicSupervisor, name: MMO.Sessions, strategy: :one_for_one},
            {MMO.World, zones: zones}
          ]

        :zones ->
          Enum.map(zones, &MMO.Zone.child_spec/1)
      end)

    {:ok, sup} = Supervisor.start_link(children, strategy: :one_for_one, name: MMO.Supervisor)
    Process.unlink(sup)
    {:ok, sup}
  end

  @doc "The bound port of this node's server."
  def server_port do
    {_, server, _, _} = MMO.Supervisor |> Supervisor.which_children() |> List.keyfind(:server, 0)

    RakNet.Server.info(server).ipv4_port
  end
end
