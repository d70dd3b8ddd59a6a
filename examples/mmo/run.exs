# The MMO example: packets as modules, dispatched to session, zone and world processes.
#
#   mix run examples/mmo/run.exs                        every role on this node, plus a short demo
#   mix run examples/mmo/run.exs -- --demo-only         the demo, then exit
#   elixir --sname NAME -S mix run examples/mmo/run.exs -- --roles world,zones --connect OTHER@HOST
#
# Options: --roles server,world,zones (default all three), --port N (default 19132),
# --connect NODE (repeatable: nodes to join), --demo-only. See examples/mmo/README.md.
Code.require_file("load.exs", __DIR__)

{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [roles: :string, port: :integer, connect: :keep, demo_only: :boolean]
  )

for node <- Keyword.get_values(opts, :connect) do
  true = Node.connect(String.to_atom(node)) || raise "cannot connect to #{node}"
end

roles =
  opts
  |> Keyword.get(:roles, "server,world,zones")
  |> String.split(",")
  |> Enum.map(&String.to_atom/1)

port = Keyword.get(opts, :port, if(opts[:demo_only], do: 0, else: 19132))
{:ok, _} = MMO.start(roles, port: port, server: [ip: {127, 0, 0, 1}, open_ipv6_socket: false])
IO.puts("MMO roles #{inspect(roles)} on #{node()}")

if :server in roles do
  port = MMO.server_port()
  IO.puts("RakNet server on udp 127.0.0.1:#{port}")

  if Enum.all?([:world, :zones], &(&1 in roles)) or opts[:demo_only] do
    # Two players in the same zone (zones are dealt out in turn: ids 1 and 3 share zone 1).
    bots =
      for name <- ["ann", "bob", "cyd"] do
        Task.async(fn -> MMO.Bot.run("127.0.0.1", port, name) end)
      end

    Task.await_many(bots, 15_000)
    IO.puts("dispatch counters: #{inspect(RakNet.Packet.Router.stats())}")
  end
end

unless opts[:demo_only], do: Process.sleep(:infinity)
