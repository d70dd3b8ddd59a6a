defprotocol RakNet.Client do
  @moduledoc """
  What your game code implements for each connection: the protocol of X-Plane's
  `elixir-raknet`, with the same names, arities and semantics.

  Implement it for a struct (`defimpl RakNet.Client, for: MyGame.Player`) and name the
  struct's module when starting a `RakNet.Server` (or in `RakNet.connect/3`'s `:client`
  option):

      defmodule MyGame.Player do
        defstruct [:connection, :name]
      end

      defimpl RakNet.Client, for: MyGame.Player do
        def new(player, connection_pid, _client_data), do: %{player | connection: connection_pid}

        def receive(player, packet_type, packet_buffer, _transit_time) do
          # Echo it back.
          RakNet.Connection.send(player.connection, :reliable_ordered, <<packet_type, packet_buffer::binary>>)
        end

        def got_ack(_player, _receipt_id), do: :ok
        def disconnect(_player), do: :ok
      end

  ## Lifecycle

  Each connection has its own `RakNet.Connection` process, and every callback runs in it, one
  at a time:

  1. **The handshake completes.** The process starts and calls
     `new(struct(MyGame.Player), connection_pid, client_data)`: the first argument is the
     struct with its defaults (built with `struct/1`, so `@enforce_keys` does not apply), the
     second the connection's pid (what `RakNet.Connection.send/3` takes), the third the
     server's `:client_data` option. **The return value becomes the client state**, passed to
     every later callback.
  2. **A message arrives.** `receive(client, packet_type, packet_buffer, transit_time)` is
     called: `packet_type` is the message's first byte (an integer), `packet_buffer` the rest
     (a binary), `transit_time` the estimated one-way transit in milliseconds (from an
     `ID_TIMESTAMP` prefix when the peer sent one, which is stripped; else RTT / 2). Messages
     arrive in the order the reliability promises. **The return value is ignored**, as in
     X-Plane's library: the client state stays the one `new/3` returned, so keep changing
     state elsewhere (a process of your own, ETS).
  3. **A receipt is acknowledged.** For each message sent with an `*_ack_receipt`
     reliability that the peer acknowledged, `got_ack(client, receipt_id)` is called with the
     id that `RakNet.Connection.send/3` returned (`{:ok, receipt_id}`). The return value is
     ignored.
  4. **The connection ends**: the peer closed it, it timed out (`:client_timeout_ms`), your
     code closed it (`RakNet.Connection.close/1`), or the server stopped. `disconnect(client)`
     is called once, and the process exits with `{:shutdown, reason}` (processes linked to it
     in `new/3` end with it). The return value is ignored.

  A crash (raise, throw or exit) in a callback takes down only that connection's process: the
  connection is closed (the peer gets a disconnection notification), `disconnect/1` is not
  called, and the server and every other connection carry on. Connection processes are not
  restarted.

  ## Optional callbacks

  An implementation may also define, in its `defimpl` block, any of:

    * `got_loss(client, receipt_id)` - an `*_ack_receipt` message was lost: the counterpart
      of `got_ack/2` (while the connection lives only unreliable messages can be lost;
      reliable ones are resent until acknowledged). Without it, losses are ignored, as in
      X-Plane's library.
    * `disconnect(client, reason)` - called *instead of* `disconnect/1` in step 4, with the
      reason: `:peer_closed`, `:timeout`, `:local_close`, `:shutdown`, `:overloaded`,
      `:endpoint_down` (the socket's thread failed), `{:limit_exceeded, :split_parts |
      :message_bytes | :message_rate | :stalled | :send_backlog}` (`:stalled`: a gap in the
      peer's reliable data, a message it never resent, stayed open for the timeout with
      data held behind it; `:send_backlog`: the peer stopped reading, acknowledging less
      than an eighth of its backlog in a timeout with more than its share of
      `:max_send_bytes` waiting) or `{:protocol_violation, text}`.
    * `handle_info(client, message)` - any other message the connection process receives
      (from your own processes: `send(connection_pid, ...)`); it returns
      `{:noreply, new_client}`, and unlike `receive/4`'s the new state is kept. This is how
      other processes change a connection's state (`RakNet.Packet.Handler.assign/2` uses it).
      Without it such messages are dropped.

      defimpl RakNet.Client, for: MyGame.Player do
        # new/3, receive/4, got_ack/2 and disconnect/1 as above, and:
        def got_loss(player, receipt_id), do: MyGame.resend_later(player, receipt_id)
        def disconnect(player, reason), do: MyGame.left(player, reason)
      end

  They are found with `function_exported?/3` on the implementation module
  (`RakNet.Client.impl_for/1`) rather than declared in the protocol, so that implementations
  written for X-Plane's library, which define neither, compile without warnings and keep
  working unchanged, and no second module or behaviour is needed to opt in.
  """

  @doc "Builds the client state for a new connection (step 1); the result is the client state."
  @spec new(t(), pid(), term()) :: t()
  def new(client_struct, connection_pid, client_data)

  @doc "Handles one message from the peer (step 2); the return value is ignored."
  @spec receive(t(), non_neg_integer(), binary(), non_neg_integer()) :: any()
  def receive(client, packet_type, packet_buffer, transit_time)

  @doc "A message sent with an ack receipt was acknowledged (step 3)."
  @spec got_ack(t(), pos_integer()) :: any()
  def got_ack(client, send_receipt_id)

  @doc "The connection ended (step 4); not called when the implementation defines `disconnect/2`."
  @spec disconnect(t()) :: any()
  def disconnect(client)
end
