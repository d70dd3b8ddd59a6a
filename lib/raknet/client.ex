defprotocol RakNet.Client do
  @moduledoc """
  What your game code implements for each connection: the protocol of X-Plane's
  `elixir-raknet`, unchanged.

  Implement it for a struct (`defimpl RakNet.Client, for: MyGame.Player`) and name the struct's
  module when starting a `RakNet.Server` (or in `RakNet.connect/3`'s `:client` option). For each
  connection:

  1. When the handshake completes, a `RakNet.Connection` process starts and calls
     `new(%MyGame.Player{}, connection_pid, client_data)`. Its return value is the client
     state kept for the connection's life. Send with
     `RakNet.Connection.send(connection_pid, reliability, binary)`.
  2. For every message the peer sends, `receive(client, packet_type, packet_buffer,
     transit_time)` is called in the connection process: `packet_type` is the message's first
     byte (an integer), `packet_buffer` the rest, `transit_time` the estimated one-way transit
     in milliseconds (from an `ID_TIMESTAMP` prefix when the peer sent one, else RTT / 2). As in
     X-Plane's library, the return value is ignored.
  3. For every message sent with an `*_ack_receipt` reliability that the peer acknowledged,
     `got_ack(client, receipt_id)` is called with the id `send/3` returned.
  4. When the connection ends (peer closed, timeout, local close, server stop),
     `disconnect(client)` is called and the process stops normally.

  A crash in any callback takes down only that connection's process; the connection is
  closed and the server and every other connection carry on.

  ## Optional callbacks

  An implementation may also define, inside its `defimpl` block, either of:

    * `got_loss(client, receipt_id)`: an `*_ack_receipt` message was lost (only unreliable
      ones can be; reliable ones are lost only when the connection closes first);
    * `disconnect(client, reason)`: called *instead of* `disconnect/1`, with the reason
      (`:peer_closed`, `:timeout`, `:local_close`, `:shutdown`, `:overloaded`,
      `{:limit_exceeded, limit}` or `{:protocol_violation, text}`).

  Existing implementations that define neither keep working unchanged.
  """

  @doc "Builds the client state for a new connection (step 1)."
  @spec new(t(), pid(), term()) :: t()
  def new(client_struct, connection_pid, client_data)

  @doc "Handles one message from the peer (step 2); the return value is ignored."
  @spec receive(t(), non_neg_integer(), binary(), number()) :: any()
  def receive(client, packet_type, packet_buffer, transit_time)

  @doc "A message sent with an ack receipt was acknowledged (step 3)."
  @spec got_ack(t(), pos_integer()) :: any()
  def got_ack(client, send_receipt_id)

  @doc "The connection ended (step 4)."
  @spec disconnect(t()) :: any()
  def disconnect(client)
end
