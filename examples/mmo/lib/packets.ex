defmodule MMO.Packet do
  @moduledoc """
  The MMO's packets: message type 0x86 (`ID_USER_PACKET_ENUM`), then a little-endian u16
  packet id, then the fields. `use MMO.Packet, id: ...` says it once for every packet.
  """
  defmacro __using__(opts) do
    quote do
      use RakNet.Packet, unquote([message_type: 0x86, id_type: :uint16_le] ++ opts)
    end
  end
end

defmodule MMO.Packets.Login do
  @moduledoc "Client -> world: log in with a name (a 24-byte zero-padded field)."
  use MMO.Packet, id: 0x0001, dispatch_to: :world
  field(:name, {:fixed_string, 24})
end

defmodule MMO.Packets.LoginOk do
  @moduledoc "World -> client: the player's id, zone and spawn point."
  use MMO.Packet, id: 0x0002
  field(:player_id, :uint32_le)
  field(:zone, :uint16_le)
  field(:x, :float32_le)
  field(:y, :float32_le)
end

defmodule MMO.Packets.Move do
  @moduledoc "Client -> zone: where the player wants to be."
  use MMO.Packet, id: 0x0010, dispatch_to: :zone
  field(:x, :float32_le)
  field(:y, :float32_le)
  field(:seq, :uint16_le)
end

defmodule MMO.Packets.Moved do
  @moduledoc "Zone -> every player in the zone: where a player is (also a correction)."
  use MMO.Packet, id: 0x0011
  field(:player_id, :uint32_le)
  field(:x, :float32_le)
  field(:y, :float32_le)
  field(:seq, :uint16_le)
end

defmodule MMO.Packets.Chat do
  @moduledoc "Client -> session: a line of chat for the zone."
  use MMO.Packet, id: 0x0020, dispatch_to: :session
  field(:text, {:string, :uint8}, max: 200)
end

defmodule MMO.Packets.ChatLine do
  @moduledoc "Zone -> every player in the zone: a line of chat and who said it."
  use MMO.Packet, id: 0x0021
  field(:from, {:fixed_string, 24})
  field(:text, {:string, :uint8}, max: 200)
end

defmodule MMO.Protocol do
  @moduledoc "Every packet of the MMO, by id."
  use RakNet.Packet.Set,
    id_format: {0x86, :uint16_le},
    packets: [
      MMO.Packets.Login,
      MMO.Packets.LoginOk,
      MMO.Packets.Move,
      MMO.Packets.Moved,
      MMO.Packets.Chat,
      MMO.Packets.ChatLine
    ]
end

defmodule MMO.Router do
  @moduledoc """
  Logins go to the world, chat to the player's session, moves to the player's zone (once the
  world has assigned one).
  """
  use RakNet.Packet.Router

  @impl true
  def target(:world, _packet, _ctx), do: :world
  def target(:session, _packet, ctx), do: {:session, ctx.connection}
  def target(:zone, _packet, %{assigns: %{zone: zone}}), do: {:zone, zone}
  def target(_kind, _packet, _ctx), do: nil

  @impl true
  def disconnected(ctx, _reason),
    do: GenServer.cast(RakNet.Packet.Registry.via({:session, ctx.connection}), :disconnected)
end
