defmodule MMO.World do
  @moduledoc """
  Logs players in: gives each an id and a zone, starts its `MMO.Session` (on this node) and
  tells the connection where its packets go from now on. One per cluster, registered as
  `:world`.
  """
  use GenServer

  alias MMO.Packets.{Login, LoginOk}
  alias RakNet.Packet.Registry

  @spawn {500.0, 500.0}

  def spawn_point, do: @spawn

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: Registry.via(:world))

  @impl true
  def init(opts), do: {:ok, %{next_id: 1, zones: Keyword.get(opts, :zones, [1])}}

  @impl true
  def handle_cast({:raknet_packet, %Login{name: name}, ctx}, state) when name != "" do
    connection = ctx.connection

    # Logging in twice gives the same answer (the session is already there).
    {player_id, zone, state} =
      case Registry.whereis_name({:session, connection}) do
        :undefined ->
          id = state.next_id
          zone = Enum.at(state.zones, rem(id - 1, length(state.zones)))
          session = %{player_id: id, name: name, connection: connection, zone: zone}
          {:ok, _} = DynamicSupervisor.start_child(MMO.Sessions, {MMO.Session, session})
          {id, zone, %{state | next_id: id + 1}}

        pid ->
          %{player_id: id, zone: zone} = MMO.Session.info(pid)
          {id, zone, state}
      end

    # Assign, then answer: in this order the client's moves after the answer reach the zone.
    :ok = RakNet.Packet.Handler.assign(connection, player: player_id, zone: zone)
    {x, y} = @spawn
    answer = %LoginOk{player_id: player_id, zone: zone, x: x, y: y}
    RakNet.Packet.send(connection, :reliable_ordered, answer)
    {:noreply, state}
  end

  def handle_cast({:raknet_packet, _packet, _ctx}, state), do: {:noreply, state}
end

defmodule MMO.Session do
  @moduledoc """
  A logged-in player: name, id, zone. Registered as `{:session, connection}`; joins its zone
  (before the login is answered), forwards chat to it, leaves when the connection ends (or
  its node goes away).
  """
  use GenServer, restart: :temporary

  alias MMO.Packets.Chat
  alias RakNet.Packet.Registry

  @join_timeout 2_000

  def start_link(session),
    do:
      GenServer.start_link(__MODULE__, session, name: Registry.via({:session, session.connection}))

  def info(pid), do: GenServer.call(pid, :info)

  @impl true
  def init(session) do
    Process.monitor(session.connection)
    join_now(session)
    {:ok, session}
  end

  # The first join is a call, made before the world answers the login: the client's moves go
  # to the zone straight from its connection's node, and a cast from this node could reach
  # the zone after the first of them (which the zone would reject, not knowing the player).
  # A zone that is down, restarting or slow gets the cast, and asks for a rejoin if it needs
  # one; the wait is short, since the world starts sessions one at a time, and a join the
  # zone already took is ignored there.
  defp join_now(s) do
    :ok = GenServer.call(zone(s), join_message(s), @join_timeout)
  catch
    :exit, _ -> join(s)
  end

  defp join(s), do: GenServer.cast(zone(s), join_message(s))
  defp join_message(s), do: {:join, s.player_id, s.name, s.connection}
  defp zone(s), do: Registry.via({:zone, s.zone})

  @impl true
  def handle_call(:info, _from, s), do: {:reply, s, s}

  @impl true
  def handle_cast({:raknet_packet, %Chat{text: text}, _ctx}, s) do
    GenServer.cast(zone(s), {:chat, s.name, text})
    {:noreply, s}
  end

  # The zone does not know the player (it restarted): join again.
  def handle_cast(:rejoin, s) do
    join(s)
    {:noreply, s}
  end

  def handle_cast(:disconnected, s), do: {:stop, :normal, s}

  @impl true
  def handle_info({:DOWN, _, :process, _connection, _}, s), do: {:stop, :normal, s}

  @impl true
  def terminate(_reason, s), do: GenServer.cast(zone(s), {:leave, s.connection})
end
