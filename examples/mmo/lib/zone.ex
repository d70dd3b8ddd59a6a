defmodule MMO.Zone do
  @moduledoc """
  One zone of the world, registered as `{:zone, id}`: the players in it and where they are.
  A move is checked (inside the zone's bounds, at most `@max_step` from the last position,
  newer than the last one) and then sent to every player of the zone as a `Moved`; a move
  that fails the check gets the player's real position back, to that player only.
  """
  use GenServer

  alias MMO.Packets.{ChatLine, Move, Moved}
  alias RakNet.Packet.Registry

  @size 1_000.0
  @max_step 10.0

  def start_link(id), do: GenServer.start_link(__MODULE__, id, name: Registry.via({:zone, id}))

  def child_spec(id), do: %{id: {__MODULE__, id}, start: {__MODULE__, :start_link, [id]}}

  @doc "Players and counters, for tests and the console."
  def info(id), do: GenServer.call(Registry.via({:zone, id}), :info)

  @impl true
  def init(id), do: {:ok, %{id: id, players: %{}, moves: 0, rejected: 0}}

  @impl true
  def handle_call(:info, _from, z), do: {:reply, z, z}

  def handle_call({:join, _, _, _} = join, _from, z), do: {:reply, :ok, join(z, join)}

  @impl true
  def handle_cast({:join, _, _, _} = join, z), do: {:noreply, join(z, join)}

  def handle_cast({:leave, connection}, z),
    do: {:noreply, update_in(z.players, &Map.delete(&1, connection))}

  def handle_cast({:chat, name, text}, z) do
    broadcast(z, %ChatLine{from: name, text: text}, :reliable_ordered)
    {:noreply, z}
  end

  def handle_cast({:raknet_packet, %Move{} = move, ctx}, z) do
    z = %{z | moves: z.moves + 1}

    case Map.fetch(z.players, ctx.connection) do
      :error ->
        # A player this zone does not know: it was restarted; the session joins again.
        GenServer.cast(Registry.via({:session, ctx.connection}), :rejoin)
        {:noreply, %{z | rejected: z.rejected + 1}}

      {:ok, p} ->
        if valid?(p, move) do
          p = %{p | x: move.x, y: move.y, seq: move.seq}
          broadcast(z, %Moved{player_id: p.id, x: p.x, y: p.y, seq: p.seq})
          {:noreply, put_in(z.players[ctx.connection], p)}
        else
          # To this player only; a broadcast (to one) keeps it in order with the others.
          correction = %Moved{player_id: p.id, x: p.x, y: p.y, seq: p.seq}
          RakNet.Packet.broadcast([ctx.connection], :reliable_ordered, correction)
          {:noreply, %{z | rejected: z.rejected + 1}}
        end
    end
  end

  def handle_cast({:raknet_packet, _other, _ctx}, z), do: {:noreply, z}

  # A second join of a player already here (a session's cast after its call timed out, or a
  # rejoin that crossed a move) keeps the player where it is.
  defp join(z, {:join, _player_id, _name, connection}) when is_map_key(z.players, connection),
    do: z

  defp join(z, {:join, player_id, name, connection}) do
    {x, y} = MMO.World.spawn_point()
    player = %{id: player_id, name: name, x: x, y: y, seq: 0}
    z = put_in(z.players[connection], player)
    broadcast(z, %Moved{player_id: player_id, x: x, y: y, seq: 0})
    z
  end

  defp valid?(p, %Move{x: x, y: y, seq: seq}) do
    x >= 0 and x <= @size and y >= 0 and y <= @size and
      :math.sqrt((x - p.x) * (x - p.x) + (y - p.y) * (y - p.y)) <= @max_step and
      newer?(seq, p.seq)
  end

  # Sequence numbers wrap at 2^16.
  defp newer?(seq, last), do: seq != last and Bitwise.band(seq - last, 0xFFFF) < 0x8000

  defp broadcast(z, packet, reliability \\ :unreliable_sequenced) do
    RakNet.Packet.broadcast(Map.keys(z.players), reliability, packet)
  end
end
