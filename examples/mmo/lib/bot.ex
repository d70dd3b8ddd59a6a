defmodule MMO.Bot do
  @moduledoc """
  A scripted player over a real RakNet connection: logs in, walks, chats, and prints what
  its zone tells it. `run/3` returns the packets it received.
  """

  alias MMO.Packets.{Chat, Login, LoginOk, Move}

  def run(host, port, name, steps \\ 5) do
    {:ok, conn} = RakNet.connect(host, port)
    send!(conn, %Login{name: name})
    %LoginOk{x: x, y: y} = ok = await(conn, &match?(%LoginOk{}, &1))
    IO.puts("#{name}: logged in as player #{ok.player_id} in zone #{ok.zone} at (#{x}, #{y})")

    for i <- 1..steps, do: send!(conn, %Move{x: x + i * 5.0, y: y, seq: i}, :unreliable_sequenced)
    send!(conn, %Move{x: 0.0, y: 0.0, seq: steps + 1})
    send!(conn, %Chat{text: "hello from #{name}"})
    got = collect(conn, 500, [])
    for p <- got, do: IO.puts("#{name} <- #{inspect(p)}")
    RakNet.Connection.close(conn)
    got
  end

  defp send!(conn, packet, reliability \\ :reliable_ordered),
    do: {:ok, _} = RakNet.Connection.send(conn, reliability, RakNet.Packet.encode!(packet))

  defp await(conn, pred) do
    receive do
      {:raknet, ^conn, type, body, _} ->
        {:ok, p} = RakNet.Packet.decode(MMO.Protocol, type, body)
        if pred.(p), do: p, else: await(conn, pred)
    after
      5_000 -> raise "no answer from the server"
    end
  end

  defp collect(conn, ms, acc) do
    receive do
      {:raknet, ^conn, type, body, _} ->
        {:ok, p} = RakNet.Packet.decode(MMO.Protocol, type, body)
        collect(conn, ms, [p | acc])
    after
      ms -> Enum.reverse(acc)
    end
  end
end
