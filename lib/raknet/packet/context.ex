defmodule RakNet.Packet.Context do
  @moduledoc """
  What a `RakNet.Packet.Router` knows about the connection a packet came from, and what the
  target process receives with the packet: `{:raknet_packet, packet, context}` as a cast.

    * `:connection` - the connection's process (`RakNet.Connection`), on the node that runs
      the RakNet server. Answer with `RakNet.Packet.send/4` (from any node) and use it as the
      player's key (a pid is unique in the cluster).
    * `:assigns` - a map the application fills with `RakNet.Packet.Handler.assign/2`: the
      player's id, zone, session... whatever the router needs to pick targets. Empty at
      first, or what the router's `connected/1` put there.

  It travels with every packet, so keep the assigns small (ids, not state).
  """

  @enforce_keys [:connection]
  defstruct connection: nil, assigns: %{}

  @typedoc "See the moduledoc."
  @type t :: %__MODULE__{connection: pid(), assigns: map()}
end
