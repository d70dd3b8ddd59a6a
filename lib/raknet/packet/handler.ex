defmodule RakNet.Packet.Handler do
  @moduledoc """
  A ready-made `RakNet.Client`: each connection decodes its messages with a packet set
  (`RakNet.Packet.Set`) and dispatches them with a router (`RakNet.Packet.Router`). With it an
  application declares packets, a set and a router, and writes no connection code.

      children = [
        {RakNet.Server,
         [RakNet.Packet.Handler, 19132, client_data: [set: MyGame.Protocol, router: MyGame.Router]]}
      ]

  Options (`client_data`, a keyword list or map): `:set` and `:router` (required), and
  `:assigns`, the context's first assigns (default `%{}`).

  The same for a client connection: `RakNet.connect(host, port, client: {RakNet.Packet.Handler,
  [set: ..., router: ...]})`.

  Per message, in the connection's process: `set.decode(type, body)`, then
  `RakNet.Packet.Router.dispatch/3` with the connection's `RakNet.Packet.Context`. A message
  that does not decode (an unknown id, a malformed body) is dropped, counted as
  `:decode_errors` in `RakNet.Packet.Router.stats/0` and logged (rate-limited); the
  connection carries on. When the connection ends, the router's `disconnected/2` runs.

  ## Assigns

  The context's assigns are how the rest of the game tells a connection where its packets go
  (its player id, its zone): `assign/2` from any process on any node.

      RakNet.Packet.Handler.assign(ctx.connection, zone: 3, player: 42)

  Messages from one process to the connection arrive in order, so a process that assigns and
  then answers with `RakNet.Packet.send/4` knows that every packet the client sends after
  seeing the answer is routed with the new assigns.
  """

  alias RakNet.Packet.Context

  defstruct [:set, :router, :context]

  @typedoc "The client state of a connection (its set, router and context)."
  @type t :: %__MODULE__{set: module(), router: module(), context: Context.t()}

  @doc """
  Merges `assigns` (a map or keyword list) into the context of `connection`'s handler; the
  packets it dispatches after that carry them. Asynchronous, from any node; returns `:ok`.
  """
  @spec assign(pid(), map() | keyword()) :: :ok
  def assign(connection, assigns) when is_pid(connection) do
    send(connection, {:raknet_packet_assign, Map.new(assigns)})
    :ok
  end

  @doc false
  def new(handler, connection, opts) do
    opts = Map.new(opts)

    set = Map.fetch!(opts, :set)
    router = Map.fetch!(opts, :router)
    context = %Context{connection: connection, assigns: Map.new(Map.get(opts, :assigns, %{}))}
    Code.ensure_loaded(router)

    context =
      if function_exported?(router, :connected, 1), do: router.connected(context), else: context

    %{handler | set: set, router: router, context: context}
  end

  @doc false
  def receive(%__MODULE__{set: set} = h, type, body) do
    case set.decode(type, body) do
      {:ok, packet} ->
        RakNet.Packet.Router.dispatch(h.router, packet, h.context)

      {:error, reason} ->
        RakNet.Packet.Stats.incident(
          :decode_errors,
          fn ->
            "#{inspect(set)} cannot decode a message of type #{type} (#{byte_size(body)} bytes) from #{inspect(h.context.connection)}: #{inspect(reason, limit: 8)}"
          end,
          %{router: h.router, packet: nil, type: type, connection: h.context.connection}
        )

        {:error, reason}
    end
  end

  @doc false
  def disconnect(%__MODULE__{router: router, context: context}, reason) do
    if function_exported?(router, :disconnected, 2), do: router.disconnected(context, reason)
    :ok
  end

  @doc false
  def handle_info(%__MODULE__{context: ctx} = h, {:raknet_packet_assign, assigns}),
    do: {:noreply, %{h | context: %{ctx | assigns: Map.merge(ctx.assigns, assigns)}}}

  def handle_info(h, _other), do: {:noreply, h}
end

defimpl RakNet.Client, for: RakNet.Packet.Handler do
  defdelegate new(handler, connection, opts), to: RakNet.Packet.Handler

  def receive(handler, type, body, _transit_time),
    do: RakNet.Packet.Handler.receive(handler, type, body)

  def got_ack(_handler, _receipt_id), do: :ok
  def disconnect(handler), do: RakNet.Packet.Handler.disconnect(handler, :unknown)
  defdelegate disconnect(handler, reason), to: RakNet.Packet.Handler
  defdelegate handle_info(handler, message), to: RakNet.Packet.Handler
end
