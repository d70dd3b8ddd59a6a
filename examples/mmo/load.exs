# Compiles the MMO example's modules into this node, in dependency order. Used by run.exs, the
# cluster test (on each :peer node) and bench/packet.exs.
for file <- ~w(packets.ex world.ex zone.ex bot.ex mmo.ex) do
  Code.require_file(file, Path.join(__DIR__, "lib"))
end
