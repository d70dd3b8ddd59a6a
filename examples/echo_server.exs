# A RakNet echo server with a live Bedrock MOTD: `make server`, or
#
#     mix run examples/echo_server.exs [PORT]
#
# Listens on udp/PORT (default 19132) on 127.0.0.1 and on PORT + 1 on ::1 (set HOST and HOST6,
# e.g. HOST=0.0.0.0 HOST6=::, to accept other machines), answers unconnected pings with a
# Minecraft Bedrock MOTD showing the player count, and sends every message back reliable-ordered.
# Try it with `mix raknet.ping 127.0.0.1 19132` and `mix raknet.load --port 19132`.

defmodule EchoServer.Motd do
  @moduledoc "Counts players and keeps the server's MOTD up to date."
  use Agent

  def start_link(server, ports),
    do: Agent.start_link(fn -> {server, ports, 0} end, name: __MODULE__)

  def join, do: update(+1)
  def leave, do: update(-1)

  defp update(delta) do
    Agent.update(__MODULE__, fn {server, ports, players} ->
      players = players + delta
      RakNet.Server.set_offline_ping_response(server, motd(players, ports))
      {server, ports, players}
    end)
  end

  # The ports a Bedrock client joins on (IPv4, IPv6) are part of the MOTD.
  def motd(players, {port4, port6}) do
    RakNet.Bedrock.Motd.encode(
      motd: "raknet echo server",
      protocol: 527,
      version: "1.19.1",
      players: players,
      max_players: 100,
      server_guid: 0,
      sub_motd: "raknet",
      port_v4: port4,
      port_v6: port6
    )
  end
end

defmodule EchoServer.Player do
  @moduledoc "One connected player: echoes what it receives."
  defstruct [:connection]
end

defimpl RakNet.Client, for: EchoServer.Player do
  require Logger

  def new(player, connection, _client_data) do
    {:ok, info} = RakNet.Connection.info(connection)

    how =
      case info.transport do
        :nethernet -> "NetherNet"
        :raknet -> "RakNet protocol #{info.protocol}, MTU #{info.mtu}"
      end

    Logger.info("player connected from #{inspect(info.address)} (#{how})")

    EchoServer.Motd.join()
    %{player | connection: connection}
  end

  def receive(player, type, buffer, _transit_time) do
    RakNet.Connection.send(player.connection, :reliable_ordered, <<type, buffer::binary>>)
  end

  def got_ack(_player, _receipt), do: :ok

  def disconnect(_player) do
    Logger.info("player disconnected")
    EchoServer.Motd.leave()
  end
end

port = System.argv() |> List.first("19132") |> String.to_integer()
host = System.get_env("HOST", "127.0.0.1")
host6 = System.get_env("HOST6", "::1")

{:ok, server} =
  RakNet.Server.start_link(EchoServer.Player, port,
    ip: host,
    open_ipv6_socket: true,
    ipv6_ip: host6,
    ipv6_port: port + 1,
    offline_ping_response: EchoServer.Motd.motd(0, {port, port + 1}),
    # `mix raknet.load` opens all its connections from one address, at once; a public server
    # would keep the defaults (128 per IP, 20 new ones per IP a second).
    max_connections_per_ip: 20_000,
    new_connections_per_ip_per_sec: 20_000,
    # Bedrock's WebRTC transport beside RakNet: HTTP signaling on tcp PORT, sessions on the
    # IPv4 UDP socket. The operator key is made at the first start and kept (clients pin it).
    nethernet: [
      key_file: Path.expand("../_build/nethernet_operator.pem", __DIR__),
      status: %{name: "raknet echo server", version: "1.26.50"}
    ]
  )

info = RakNet.Server.info(server)
{:ok, _} = EchoServer.Motd.start_link(server, {info.ipv4_port, info.ipv6_port})

:ok =
  RakNet.Server.set_offline_ping_response(
    server,
    EchoServer.Motd.motd(0, {info.ipv4_port, info.ipv6_port})
  )

IO.puts(
  "raknet echo server on udp #{host}:#{info.ipv4_port} and [#{host6}]:#{info.ipv6_port}, " <>
    "NetherNet signaling on http://#{host}:#{info.nethernet_port}; Ctrl-C twice to stop"
)

# The server is linked to this script's process: keep it alive.
Process.sleep(:infinity)
