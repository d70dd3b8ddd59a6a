# A tiny RakNet chat server: every message a player sends (type 0x86, UTF-8 text) is relayed
# to every other player, reliable-ordered.
#
#     mix run examples/chat_server.exs [PORT]

defmodule ChatServer.Player do
  @moduledoc "One chat participant."
  defstruct [:connection]
end

defimpl RakNet.Client, for: ChatServer.Player do
  def new(player, connection, _client_data) do
    {:ok, _} = Registry.register(ChatServer.Players, :players, nil)
    %{player | connection: connection}
  end

  def receive(player, 0x86, text, _transit_time) do
    for {pid, _} <- Registry.lookup(ChatServer.Players, :players), pid != player.connection do
      RakNet.Connection.send(pid, :reliable_ordered, <<0x86, text::binary>>)
    end
  end

  def receive(_player, _type, _buffer, _transit_time), do: :ok
  def got_ack(_player, _receipt), do: :ok
  def disconnect(_player), do: :ok
end

port = System.argv() |> List.first("19134") |> String.to_integer()
{:ok, _} = Registry.start_link(keys: :duplicate, name: ChatServer.Players)

{:ok, server} =
  RakNet.Server.start_link(ChatServer.Player, port, ip: "127.0.0.1", open_ipv6_socket: false)

IO.puts("raknet chat server on udp 127.0.0.1:#{RakNet.Server.info(server).ipv4_port}")

# The server is linked to this script's process: keep it alive.
Process.sleep(:infinity)
