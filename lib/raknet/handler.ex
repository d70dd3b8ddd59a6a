defmodule RakNet.Handler do
  @moduledoc """
  A connection handler with a home for its state: the connection's process is a GenServer
  that runs your callbacks and keeps what they return.

  `RakNet.Client` (X-Plane's protocol) stays as it is; this behaviour is the alternative for
  new code. Name the module where a `RakNet.Client` struct module would go:

      children = [{RakNet.Server, [MyGame.Player, 19132, client_data: MyGame.World]}]
      {:ok, pid} = RakNet.connect("127.0.0.1", 19132, client: {MyGame.Bot, :some_arg})

  ## Example

      defmodule MyGame.Player do
        use RakNet.Handler
        require Logger

        @impl RakNet.Handler
        def handle_connect(info, world) do
          Logger.info("player from \#{inspect(info.address)}")
          {:ok, %{world: world, name: nil, moves: 0}}
        end

        @impl RakNet.Handler
        def handle_message(0x86, <<"login ", name::binary>>, _transit_ms, state) do
          :ok = RakNet.Connection.register_id({:player, name})
          {:noreply, %{state | name: name}}
        end

        def handle_message(0x87, <<x::float-32, y::float-32>>, _transit_ms, state) do
          MyGame.World.move(state.world, state.name, x, y)
          {:noreply, %{state | moves: state.moves + 1}}
        end

        def handle_message(_type, _payload, _transit_ms, state),
          do: {:stop, :protocol_error, state}

        # The application's own messages: GenServer.call(connection_pid, :moves) ...
        @impl RakNet.Handler
        def handle_call(:moves, _from, state), do: {:reply, state.moves, state}

        @impl RakNet.Handler
        def handle_disconnect(reason, state) do
          MyGame.World.leave(state.world, state.name, reason)
        end
      end

  ## Lifecycle

  1. **Connected**: `c:handle_connect/2` gets the connection's `t:info/0` and the server's
     `:client_data` (for `RakNet.connect/3`, the `data` of `client: {module, data}`) and
     returns the initial state.
  2. **Messages, receipts and your own messages** run `c:handle_message/4`,
     `c:handle_receipt/3`, `c:handle_info/2`, `c:handle_call/3` and `c:handle_cast/2`, one at a
     time, each returning the new state as a GenServer callback does (with an optional
     timeout, `:hibernate` or `{:continue, term}` as the last element, handled by
     `c:handle_continue/2`). `RakNet.Connection.send/3` with `self()` answers the peer.
  3. **Closing from the handler**: any callback may return `{:stop, reason, state}` (or
     `{:stop, reason, reply, state}` from `c:handle_call/3`): the connection is closed
     gracefully (queued messages still go out, the peer is notified) and
     `c:handle_disconnect/2` gets `reason`. Messages from the peer that arrive after the one
     the handler stopped on (in the same datagram or later) are dropped, not delivered.
     `RakNet.Connection.close(conn, reason)` from any process closes the same way.
  4. **Shutdown**: when the server stops, the optional `c:handle_shutdown/2` runs while the
     connection is still open (a goodbye sent there still goes out).
  5. **Disconnected** (the peer left, a timeout, a close, the server stopping):
     `c:handle_disconnect/2` runs once with the reason (`:peer_closed`, `:timeout`,
     `:shutdown`, `:overloaded`, the reason given to `close/2`, ... as listed in
     `RakNet.Client`), and the process exits with `{:shutdown, reason}`.

  A crash in a callback ends only this connection (the peer is notified) and is reported as
  the `[:raknet, :connection, :exception]` telemetry event; `c:handle_disconnect/2` is not
  called then. Flow control works as for `RakNet.Client` (see `RakNet.Connection`).

  `use RakNet.Handler` declares the behaviour, so a misspelt callback marked `@impl` is a
  compile-time warning, and defines defaults for every callback but `c:handle_message/4`.

  ## Packets

  `use RakNet.Handler, packets: MyGame.Protocol` (a `RakNet.Packet.Set`) decodes every
  message with the set and hands the packet struct to `c:handle_packet/3` instead of
  `c:handle_message/4`; what does not decode goes to `c:handle_bad_packet/4` (default:
  dropped). Answer with `RakNet.Packet.send/4`:

      defmodule MyGame.Player do
        use RakNet.Handler, packets: MyGame.Protocol

        @impl RakNet.Handler
        def handle_packet(%MyGame.Packets.Login{name: name}, _transit_ms, state) do
          RakNet.Packet.send(self(), :reliable_ordered, %MyGame.Packets.LoginOk{name: name})
          {:noreply, %{state | name: name}}
        end

        def handle_packet(%MyGame.Packets.Move{x: x, y: y}, _transit_ms, state),
          do: {:noreply, %{state | x: x, y: y}}
      end
  """

  @typedoc """
  The connection as `c:handle_connect/2` sees it: the peer's `:address` and `:guid`, the
  RakNet `:protocol`, the `:mtu`, `:role` (`:server` for accepted connections, `:client` for
  `RakNet.connect/3`), `:server` (the `RakNet.Server` supervisor, `nil` for a client) and
  `:connected_at` (Unix milliseconds).
  """
  @type info :: %{
          address: {:inet.ip_address(), :inet.port_number()} | nil,
          guid: non_neg_integer() | nil,
          protocol: non_neg_integer() | nil,
          mtu: pos_integer() | nil,
          role: :server | :client,
          server: pid() | nil,
          connected_at: integer()
        }

  @typedoc "The handler's state."
  @type state :: term()

  @typedoc "What a callback returns; `{:stop, reason, state}` closes the connection."
  @type result ::
          {:noreply, state()}
          | {:noreply, state(), timeout() | :hibernate | {:continue, term()}}
          | {:stop, reason :: term(), state()}

  @doc "The connection is established: build the state from its `t:info/0` and the argument."
  @callback handle_connect(info(), arg :: term()) :: {:ok, state()} | {:stop, reason :: term()}

  @doc """
  A message from the peer: its type (first byte), the rest, and the estimated one-way
  transit time in milliseconds.
  """
  @callback handle_message(
              type :: byte(),
              payload :: binary(),
              transit_ms :: non_neg_integer(),
              state()
            ) :: result()

  @doc """
  With `use RakNet.Handler, packets: set`: a message from the peer, decoded by the
  `RakNet.Packet` set (a module of `RakNet.Packet.Set`), with the transit time. Messages
  the set does not know, or that do not decode, go to `c:handle_bad_packet/4`.
  """
  @callback handle_packet(packet :: struct(), transit_ms :: non_neg_integer(), state()) ::
              result()

  @doc """
  With `use RakNet.Handler, packets: set`: a message the set could not decode (its type
  byte, the rest, and why). Default: dropped, `{:noreply, state}` (a peer that keeps
  sending garbage is better closed: return `{:stop, reason, state}`).
  """
  @callback handle_bad_packet(type :: byte(), payload :: binary(), reason :: term(), state()) ::
              result()

  @doc "A message sent with an `*_ack_receipt` reliability was acknowledged or lost."
  @callback handle_receipt(receipt_id :: pos_integer(), :acked | :lost, state()) :: result()

  @doc "The connection ended (see the lifecycle); the return value is ignored."
  @callback handle_disconnect(reason :: term(), state()) :: term()

  @doc """
  The server is stopping (`RakNet.Server.stop/2`, or its supervisor stopping it): the
  connection is still open, and what this callback sends goes out before the server closes
  every connection (after what is queued) — the place for a goodbye ("server restarting in
  5 minutes") or to save the player. `reason` is `:shutdown`. Then `c:handle_disconnect/2`
  runs with `:shutdown`, as for any connection the server closes.

  The server waits for every handler's `handle_shutdown/2` at most 1 s (or its stop's
  timeout, if shorter) before it closes the connections; a handler that is busy longer is
  closed all the same. Optional: without it the server stops at once. Returning
  `{:stop, reason, state}` closes this connection now, with `reason`.

      @impl RakNet.Handler
      def handle_shutdown(_reason, state) do
        RakNet.Connection.send(self(), :reliable_ordered, <<0x86, "server restarting">>)
        {:noreply, state}
      end
  """
  @callback handle_shutdown(reason :: :shutdown, state()) :: result()

  @doc "A message of the application's own, as `c:GenServer.handle_info/2`."
  @callback handle_info(msg :: term(), state()) :: result()

  @doc "A call of the application's own, as `c:GenServer.handle_call/3`."
  @callback handle_call(request :: term(), GenServer.from(), state()) ::
              {:reply, reply :: term(), state()}
              | {:reply, reply :: term(), state(), timeout() | :hibernate | {:continue, term()}}
              | {:stop, reason :: term(), reply :: term(), state()}
              | result()

  @doc "A cast of the application's own, as `c:GenServer.handle_cast/2`."
  @callback handle_cast(request :: term(), state()) :: result()

  @doc "Continues after a callback returned `{:continue, term}`, as `c:GenServer.handle_continue/2`."
  @callback handle_continue(continue :: term(), state()) :: result()

  @optional_callbacks handle_continue: 2,
                      handle_shutdown: 2,
                      handle_packet: 3,
                      handle_bad_packet: 4

  defmacro __using__(opts) do
    {packets, opts} = Keyword.pop(opts, :packets)

    if opts != [] do
      raise ArgumentError,
            "use RakNet.Handler takes only :packets, got: #{Macro.to_string(opts)}"
    end

    quote location: :keep do
      @behaviour RakNet.Handler
      unquote(if packets, do: packet_callbacks(packets))

      @doc false
      def __raknet_handler__, do: true

      @impl RakNet.Handler
      def handle_connect(_info, arg), do: {:ok, arg}

      @impl RakNet.Handler
      def handle_receipt(_receipt_id, _fate, state), do: {:noreply, state}

      @impl RakNet.Handler
      def handle_disconnect(_reason, _state), do: :ok

      @impl RakNet.Handler
      def handle_info(msg, state) do
        require Logger

        Logger.warning(
          "#{inspect(__MODULE__)} #{inspect(self())} received an unexpected message in " <>
            "handle_info/2: #{inspect(msg)}"
        )

        {:noreply, state}
      end

      @impl RakNet.Handler
      def handle_call(request, _from, _state) do
        raise "attempted to call the RakNet handler #{inspect(__MODULE__)} " <>
                "but no handle_call/3 clause matched #{inspect(request)}"
      end

      @impl RakNet.Handler
      def handle_cast(request, _state) do
        raise "attempted to cast to the RakNet handler #{inspect(__MODULE__)} " <>
                "but no handle_cast/2 clause matched #{inspect(request)}"
      end

      defoverridable handle_connect: 2,
                     handle_receipt: 3,
                     handle_disconnect: 2,
                     handle_info: 2,
                     handle_call: 3,
                     handle_cast: 2
    end
  end

  # `packets: set`: handle_message/4 decodes through the set and calls handle_packet/3.
  defp packet_callbacks(set) do
    quote location: :keep do
      @impl RakNet.Handler
      def handle_message(type, payload, transit, state) do
        case RakNet.Packet.decode(unquote(set), type, payload) do
          {:ok, packet} -> handle_packet(packet, transit, state)
          {:error, reason} -> handle_bad_packet(type, payload, reason, state)
        end
      end

      @impl RakNet.Handler
      def handle_bad_packet(_type, _payload, _reason, state), do: {:noreply, state}

      defoverridable handle_bad_packet: 4
    end
  end

  @doc false
  # What runs a connection: a `RakNet.Handler` module, or a `RakNet.Client` struct (X-Plane's
  # protocol). Raises ArgumentError for anything else.
  @spec spec!(module()) :: {:handler, module()} | {:client, struct()}
  def spec!(module) when is_atom(module) do
    cond do
      not Code.ensure_loaded?(module) ->
        raise ArgumentError, "the client module #{inspect(module)} is not available"

      function_exported?(module, :__raknet_handler__, 0) ->
        {:handler, module}

      not function_exported?(module, :__struct__, 0) ->
        raise ArgumentError,
              "the client module #{inspect(module)} must `use RakNet.Handler`, or define a " <>
                "struct and implement RakNet.Client"

      RakNet.Client.impl_for(struct(module)) == nil ->
        raise ArgumentError,
              "the client module #{inspect(module)} must implement RakNet.Client " <>
                "(defimpl RakNet.Client, for: #{inspect(module)}) or `use RakNet.Handler`"

      true ->
        {:client, struct(module)}
    end
  end
end
