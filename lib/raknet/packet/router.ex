defmodule RakNet.Packet.Router do
  @moduledoc """
  Turns a decoded packet into the process that handles it, anywhere in the cluster, and
  delivers it there with `GenServer.cast/2`.

      defmodule MyGame.Router do
        use RakNet.Packet.Router

        @impl true
        def target(:world, _packet, _ctx), do: :world
        def target(:session, _packet, ctx), do: {:session, ctx.connection}
        def target(:zone, _packet, %{assigns: %{zone: zone}}), do: {:zone, zone}
        def target(_kind, _packet, _ctx), do: nil
      end

  `target/3` gets the packet module's `dispatch_to/0` (`:session`, `:zone`, ...), the packet
  and the `RakNet.Packet.Context` of its connection, and returns a name registered in the
  router's registry (by default `RakNet.Packet.Registry`, on `:pg`), a pid, or `nil` when the
  packet has nowhere to go (a move before the player is in a zone, say). The target process
  gets `{:raknet_packet, packet, context}` as a cast:

      def handle_cast({:raknet_packet, %MyGame.Packets.Move{} = move, ctx}, zone), do: ...

  `dispatch/3` runs in the caller (the connection's process, with `RakNet.Packet.Handler`):
  a call to `target/3`, a registry read (ETS, no process asked) and a send. No process sits
  in the middle, so connections dispatch in parallel, to local and remote targets alike.

  ## When the target is not there

  A name that resolves to no process (its node went down, the process stopped) or a `nil`
  target is not an error anyone has to handle: the packet is dropped, counted
  (`stats/0`: `:missed`, `:unrouted`) and logged with `Logger.warning/2`, at most one line
  per kind a second (`config :raknet, packet_log_interval_ms: 1_000`) carrying the count so
  far. Dispatch resumes by itself once a process registers the name again.

  ## Options of `use RakNet.Packet.Router`

    * `:registry` - the `:via` module names are resolved with (default
      `RakNet.Packet.Registry`); any module with `whereis_name/1` works, for example
      `:global`.
    * `:max_mailbox` - the most messages a local target's mailbox may hold for a packet
      still to be cast to it (default `10_000`); `:infinity` casts whatever the mailbox holds.
      Reading a running process's mailbox length makes the sender wait for the target's
      scheduler, so a process dispatching to a target reads it again only after one packet
      per 32 free places it saw, and before every packet near the limit: one sender stops at
      the limit exactly, and each of several casting at once can pass it by a 32nd of it.

  ## Optional callbacks

    * `connected(context)` - the connection's `RakNet.Packet.Handler` started; returns the
      context to use (with assigns, say). Default: unchanged.
    * `disconnected(context, reason)` - the connection ended (`reason` as in
      `RakNet.Client`'s `disconnect/2`); tell the session, say. Default: nothing.
  """

  alias RakNet.Packet.{Context, Stats}

  @doc "The name (or pid) of the process that handles `packet`, or `nil`."
  @callback target(kind :: atom(), packet :: struct(), context :: Context.t()) ::
              term() | pid() | nil

  @doc "The connection started; returns its context."
  @callback connected(context :: Context.t()) :: Context.t()

  @doc "The connection ended."
  @callback disconnected(context :: Context.t(), reason :: term()) :: any()

  @optional_callbacks connected: 1, disconnected: 2

  @doc false
  defmacro __using__(opts) do
    registry = Keyword.get(opts, :registry, RakNet.Packet.Registry)
    max_mailbox = Keyword.get(opts, :max_mailbox, 10_000)

    unless max_mailbox == :infinity or (is_integer(max_mailbox) and max_mailbox > 0) do
      raise ArgumentError,
            "use RakNet.Packet.Router: :max_mailbox must be a positive integer or :infinity, " <>
              "got: #{inspect(max_mailbox)}"
    end

    quote do
      @behaviour RakNet.Packet.Router

      @doc false
      def __registry__, do: unquote(registry)

      @doc false
      def __max_mailbox__, do: unquote(max_mailbox)
    end
  end

  @typedoc "What `stats/0` returns."
  @type stats :: %{
          dispatched: non_neg_integer(),
          missed: non_neg_integer(),
          unrouted: non_neg_integer(),
          overloaded: non_neg_integer(),
          decode_errors: non_neg_integer(),
          logged: non_neg_integer()
        }

  @doc """
  Routes `packet` and casts `{:raknet_packet, packet, context}` to its target.

  Returns `:ok`, `{:error, :unrouted}` (`target/3` returned `nil`),
  `{:error, {:no_process, name}}` or `{:error, {:overloaded, target}}` (its mailbox is full,
  see the moduledoc); never raises for a missing target, and every error is counted and
  logged (see the moduledoc).
  """
  @spec dispatch(module(), struct(), Context.t()) ::
          :ok | {:error, :unrouted | {:no_process, term()} | {:overloaded, term()}}
  def dispatch(router, %module{} = packet, context) do
    case router.target(module.dispatch_to(), packet, context) do
      pid when is_pid(pid) ->
        cast(router, pid, pid, module, packet, context)

      nil ->
        Stats.incident(
          :unrouted,
          fn ->
            "#{inspect(router)} has no target for #{inspect(module)} (dispatch_to #{inspect(module.dispatch_to())})"
          end,
          %{router: router, packet: module, target: nil}
        )

        {:error, :unrouted}

      name ->
        # GenServer.cast({:via, registry, name}, ...) would resolve the name the same way, but
        # swallow the miss; resolving first lets the miss be counted here.
        case router.__registry__().whereis_name(name) do
          pid when is_pid(pid) ->
            cast(router, pid, name, module, packet, context)

          :undefined ->
            Stats.incident(
              :missed,
              fn -> "no process registered as #{inspect(name)} for #{inspect(module)}" end,
              %{router: router, packet: module, target: name}
            )

            {:error, {:no_process, name}}
        end
    end
  end

  defp cast(router, pid, target, module, packet, context) do
    if overloaded?(pid, router.__max_mailbox__()) do
      Stats.incident(
        :overloaded,
        fn ->
          "#{inspect(target)} has #{router.__max_mailbox__()} messages waiting or more: " <>
            "#{inspect(module)} dropped"
        end,
        %{router: router, packet: module, target: target}
      )

      {:error, {:overloaded, target}}
    else
      GenServer.cast(pid, {:raknet_packet, packet, context})
      Stats.dispatched(router, module, target)
    end
  end

  # Reading another process's mailbox length is a signal round trip, which waits for the
  # target's scheduler: ~1.5 µs while the target runs, 20 µs and more when its scheduler has
  # to wake (0.14 µs while the target waits in `receive`), against 0.25 µs for the cast. So
  # after a read, a dispatching process casts to that target once per 32 free places in its
  # mailbox without reading again, and reads before every cast within 32 of the limit: one
  # sender stops at the limit exactly, and each sender casting at once can pass it by at most
  # a 32nd of it. The credits live in this process's dictionary, for at most `@tracked`
  # targets at once.
  @per_credit 32
  @tracked 8
  @credits {__MODULE__, :credits}

  defp overloaded?(_pid, :infinity), do: false

  defp overloaded?(pid, limit) when node(pid) == node() do
    credits = Process.get(@credits, %{})

    case credits do
      %{^pid => n} when n > 0 ->
        Process.put(@credits, %{credits | pid => n - 1})
        false

      _ ->
        case Process.info(pid, :message_queue_len) do
          {:message_queue_len, len} ->
            n = max(div(limit - len, @per_credit), 0)
            Process.put(@credits, credit(credits, pid, n))
            len >= limit

          nil ->
            Process.put(@credits, Map.delete(credits, pid))
            false
        end
    end
  end

  defp overloaded?(_pid, _limit), do: false

  defp credit(credits, pid, n) when is_map_key(credits, pid) or map_size(credits) < @tracked,
    do: Map.put(credits, pid, n)

  defp credit(_credits, pid, n), do: %{pid => n}

  @doc """
  This node's dispatch counters: packets `:dispatched`, `:missed` (the name resolved to no
  process), `:unrouted` (`target/3` returned `nil`), `:overloaded` (the target's mailbox was
  full), `:decode_errors` (messages that did not
  decode: unknown ids, malformed bodies; see `RakNet.Packet.Handler`) and `:logged` (warning
  lines written about them).
  """
  @spec stats() :: stats()
  def stats, do: Stats.get()
end
