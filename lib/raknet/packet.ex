defmodule RakNet.Packet do
  @moduledoc """
  Game packets as modules: an id, typed fields, `build/1` and `parse/1`, and where the packet
  goes (`dispatch_to/0`).

      defmodule MyGame.Packets.Move do
        use RakNet.Packet, id: 0x02, message_type: 0x86, dispatch_to: :zone

        field :x, :float32_le
        field :y, :float32_le
        field :seq, :uint16_le
      end

      alias MyGame.Packets.Move

      {:ok, body} = Move.build(%Move{x: 1.5, y: -2.0, seq: 7})
      #=> {:ok, <<0, 0, 192, 63, 0, 0, 0, 192, 7, 0>>}
      Move.parse(body)
      #=> {:ok, %Move{x: 1.5, y: -2.0, seq: 7}}
      Move.parse(<<0, 0, 192, 63>>)
      #=> {:error, {Move, :y, :truncated}}
      Move.build(%Move{x: 1.5, y: -2.0, seq: 70_000})
      #=> {:error, {Move, :seq, {:out_of_range, 70_000}}}
      RakNet.Packet.encode(%Move{x: 1.5, y: -2.0, seq: 7})
      #=> {:ok, <<0x86, 2, 0, 0, 0, 192, 63, 0, 0, 0, 192, 7, 0>>}

  `use RakNet.Packet` defines the struct (one key per field, in order), its type `t/0` and the
  callbacks of this behaviour. `build/1` and `parse/1` are generated as binary construction
  and one binary pattern per run of fixed-size fields (integers, floats, booleans,
  `{:bytes, n}`), the code one would write by hand; strings, varints, lists, arrays, optional
  values, `:rest` and nested structs call `RakNet.Packet.Codec`. The field types are listed in
  `RakNet.Packet.Type`.

  ## Options of `use RakNet.Packet`

    * `:id` - the packet's id (an integer). Without `:message_type` it is the RakNet message
      type byte (the first byte of the message, 0..255; applications normally use 0x86
      `ID_USER_PACKET_ENUM` and above). Packets without an id can only be nested in others.
    * `:message_type` and `:id_type` - for a wider application id inside one message type:
      the message is `message_type`, then `id` as `id_type` (an unsigned fixed-size integer
      type, default `:uint16_le`), then the fields. Declare them once for a whole protocol
      with a module of your own:

          defmodule MyGame.Packet do
            defmacro __using__(opts) do
              quote do
                use RakNet.Packet, unquote([message_type: 0x86, id_type: :uint16_le] ++ opts)
              end
            end
          end

          defmodule MyGame.Packets.Chat do
            use MyGame.Packet, id: 0x0103, dispatch_to: :session
            field :text, {:string, :uint16_le}, max: 256
          end

    * `:dispatch_to` - the kind of process that handles the packet: `:session`, `:player`,
      `:zone`, `:world` or an atom of the application's; a `RakNet.Packet.Router` turns it
      into a process. `nil` (the default) for packets that only the server sends.

  ## Fields

  `field name, type, opts`: `type` as in `RakNet.Packet.Type`; options `:default` (the
  struct's default; otherwise 0, 0.0, `false`, `""`, `[]`, `n` zero bytes for `{:bytes, n}`,
  `n` default elements for `{:array, n, element}`, or `nil` for optional values and nested
  structs) and `:max` (strings, binaries, lists and `:rest`, or the type inside `:optional`;
  see `RakNet.Packet.Type`). A `:rest` field (all the bytes left) must be the last one:
  declaring another field after it raises `ArgumentError`.

      defmodule MyGame.Packets.Relay do
        use RakNet.Packet, id: 0x93

        field :sequence, :uint24_le
        field :target, {:optional, :uint32_le}
        field :payload, :rest, max: 1024
      end

  In an application's `.formatter.exs`, `import_deps: [:raknet]` keeps `field` calls without
  parentheses.

  ## Errors

  `parse/1` never raises: malformed input (truncated, too long, a bad boolean, optional flag or
  float, invalid UTF-8, an over-long varint, a count over `:max`, bytes left over) returns
  `{:error, {module, field, reason}}`, `field` being the first field that could not be read
  (`nil` for bytes after the last field: `{:trailing_bytes, n}`); a nested struct's reason
  is the nested `{module, field, reason}`. The reasons are listed in `RakNet.Packet.Codec`.

  `build/1` validates too, and does not raise either: a value its type cannot hold (an integer
  out of range, a string over its size, `{:bytes, n}` not of `n` bytes, an array not of its
  length, a float outside float32, a wrong type) returns
  `{:error, {module, field, reason}}`. `build!/1` raises `ArgumentError` instead.
  """

  alias RakNet.Packet.{Codec, Type}

  @typedoc "A packet struct: a struct of a module that implements this behaviour."
  @type t :: struct()

  @typedoc "Why `parse/1` or `build/1` failed: the packet module, the field, the reason."
  @type error :: {module(), atom() | nil, Codec.reason()}

  @typedoc "How a packet's id is written: alone as the message type byte, or inside one."
  @type id_format :: :byte | {message_type :: byte(), id_type :: Type.t()}

  @doc "The packet's id (the message type byte, or the wider id inside `:message_type`)."
  @callback packet_id() :: non_neg_integer() | nil

  @doc "Encodes the packet's fields (not its id): `{:ok, body}`."
  @callback build(packet :: t()) :: {:ok, binary()} | {:error, error()}

  @doc "Decodes the packet's fields from a body (what follows the id)."
  @callback parse(body :: binary()) :: {:ok, t()} | {:error, error()}

  @doc "The kind of process that handles the packet (see `RakNet.Packet.Router`)."
  @callback dispatch_to() :: atom() | nil

  @doc "How the id is written; `:byte` when not defined."
  @callback id_format() :: id_format()

  @optional_callbacks id_format: 0

  @doc """
  Encodes a packet struct as a whole message: its id (as its `id_format`) and its body.

      {:ok, message} = RakNet.Packet.encode(%MyGame.Packets.Move{x: 1.0, y: 2.0, seq: 1})
      RakNet.Connection.send(connection, :unreliable_sequenced, message)
  """
  @spec encode(t()) :: {:ok, binary()} | {:error, error() | {:not_a_packet, term()}}
  def encode(%module{} = packet) do
    if function_exported?(module, :encode, 1) do
      module.encode(packet)
    else
      with {:ok, body} <- module.build(packet), do: {:ok, header(module) <> body}
    end
  end

  def encode(other), do: {:error, {:not_a_packet, other}}

  @doc "As `encode/1`, but returns the message and raises `ArgumentError` on an error."
  @spec encode!(t()) :: binary()
  def encode!(packet) do
    case encode(packet) do
      {:ok, message} -> message
      {:error, reason} -> raise ArgumentError, "cannot encode packet: #{inspect(reason)}"
    end
  end

  @doc """
  Decodes a whole message (message type byte first) with a packet set; see
  `RakNet.Packet.Set`. Unknown ids are `{:error, {:unknown_packet, id}}`.
  """
  @spec decode(module(), binary()) :: {:ok, t()} | {:error, term()}
  def decode(set, message), do: set.decode(message)

  @doc """
  Decodes a message that arrived as `RakNet.Client.receive/4` gives it: the type byte and the
  rest. Saves putting the two back together.
  """
  @spec decode(module(), byte(), binary()) :: {:ok, t()} | {:error, term()}
  def decode(set, type, body), do: set.decode(type, body)

  @doc """
  Encodes `packet` and sends it on `connection` (a `RakNet.Connection` pid or handle), from
  any process on any node: `RakNet.Connection.send/4` with the encoded message, and what
  that returns (for another node's connection, see "Across the cluster" there: whatever
  handler the connection runs). A bad reliability, channel or priority, or an unknown
  option, is an error before the packet is encoded.
  """
  @spec send(RakNet.Connection.t(), atom(), t(), keyword()) ::
          RakNet.Connection.send_result() | {:error, error() | {:not_a_packet, term()}}
  def send(connection, reliability, packet, opts \\ []) do
    with {:ok, _channel, _priority} <- RakNet.Connection.check_send(reliability, opts),
         {:ok, message} <- encode(packet) do
      RakNet.Connection.send(connection, reliability, message, opts)
    end
  end

  @doc """
  Encodes `packet` once and sends it to many connections, wherever they are in the cluster:
  `RakNet.broadcast/4` with the encoded message (a remote node gets the message once, with
  its list of connections, and broadcasts it in the order the calling process sent it).

  Returns what `RakNet.broadcast/4` returns. A bad reliability (the `*_ack_receipt` ones
  included), channel or priority, or an unknown option, is an error before the packet is
  encoded.

      {:ok, _} = RakNet.Packet.broadcast(players, :unreliable_sequenced, %MyGame.Packets.Moved{...})
  """
  @spec broadcast([pid() | reference() | map()], atom(), t(), keyword()) ::
          {:ok, non_neg_integer()} | {:error, term()}
  def broadcast(connections, reliability, packet, opts \\ []) do
    with {:ok, _channel, _priority} <-
           RakNet.Connection.check_send(reliability, opts, :broadcast),
         {:ok, message} <- encode(packet) do
      RakNet.broadcast(connections, reliability, message, opts)
    end
  end

  @doc "The id bytes that start a message of `module`."
  @spec header(module()) :: binary()
  def header(module) do
    id = module.packet_id()

    if function_exported?(module, :id_format, 0) do
      case module.id_format() do
        :byte -> <<id>>
        {message_type, type} -> <<message_type, elem(Codec.encode(type, id), 1)::binary>>
      end
    else
      <<id>>
    end
  end

  # ---- the DSL ---------------------------------------------------------------------

  @doc false
  defmacro __using__(opts) do
    quote do
      @behaviour RakNet.Packet
      import RakNet.Packet, only: [field: 2, field: 3]
      Module.register_attribute(__MODULE__, :raknet_fields, accumulate: true)
      @raknet_packet_opts unquote(opts)
      @before_compile RakNet.Packet
    end
  end

  @doc """
  Declares a field: its name, its type (see `RakNet.Packet.Type`) and options (`:default`,
  `:max`). Fields are encoded in the order they are declared.
  """
  defmacro field(name, type, opts \\ []) do
    quote bind_quoted: [name: name, type: type, opts: opts] do
      unless is_atom(name), do: raise(ArgumentError, "a field name must be an atom")

      if Enum.any?(@raknet_fields, &(elem(&1, 0) == name)),
        do: raise(ArgumentError, "field #{inspect(name)} is declared twice")

      # The newest field first: one that takes the rest of the message must stay the last.
      with [{previous, previous_type, _} | _] <- @raknet_fields,
           true <- RakNet.Packet.Type.rest?(previous_type) do
        raise ArgumentError,
              "field #{inspect(name)} is declared after #{inspect(previous)}, which takes the " <>
                "rest of the message (:rest); a :rest field must be the last field of a packet"
      end

      @raknet_fields {name, RakNet.Packet.Type.normalize(type, opts), opts}
    end
  end

  @doc false
  defmacro __before_compile__(env) do
    fields = env.module |> Module.get_attribute(:raknet_fields) |> Enum.reverse()
    opts = Module.get_attribute(env.module, :raknet_packet_opts)
    id = Keyword.get(opts, :id)
    dispatch_to = Keyword.get(opts, :dispatch_to)
    id_format = id_format!(env.module, opts, id)

    header =
      case id_format do
        _ when id == nil -> nil
        :byte -> <<id>>
        {mt, type} -> <<mt, elem(Codec.encode(type, id), 1)::binary>>
      end

    defaults =
      for {name, type, fopts} <- fields, do: {name, Keyword.get(fopts, :default, default(type))}

    vars = Map.new(fields, fn {name, _, _} -> {name, Macro.var(:"v_#{name}", __MODULE__)} end)

    struct_pattern =
      {:%, [],
       [{:__MODULE__, [], nil}, {:%{}, [], Enum.map(fields, fn {n, _, _} -> {n, vars[n]} end)}]}

    field_types = Enum.map(fields, fn {n, t, _} -> {n, typespec(t)} end)
    # The fast path names the struct only to explain a failure of a variable-size field.
    packet_var =
      if Enum.all?(fields, fn {_, t, _} -> Type.fixed?(t) end),
        do: Macro.var(:_packet, __MODULE__),
        else: Macro.var(:packet, __MODULE__)

    quote do
      defstruct unquote(Macro.escape(defaults))

      @typedoc "The packet's struct."
      @type t :: %__MODULE__{unquote_splicing(field_types)}

      @doc false
      def __packet__(:fields), do: unquote(Macro.escape(fields))
      def __packet__(:header), do: unquote(header)

      @impl RakNet.Packet
      def packet_id, do: unquote(id)

      @impl RakNet.Packet
      def dispatch_to, do: unquote(dispatch_to)

      @impl RakNet.Packet
      def id_format, do: unquote(Macro.escape(id_format))

      @impl RakNet.Packet
      def build(unquote(struct_pattern) = unquote(packet_var))
          when unquote(build_guard(fields, vars)) do
        unquote(build_body(fields, vars))
      end

      def build(packet), do: RakNet.Packet.Codec.encode_fields(__MODULE__, packet)

      @doc "As `build/1`, raising `ArgumentError` for a value a field cannot hold."
      @spec build!(t()) :: binary()
      def build!(packet) do
        case build(packet) do
          {:ok, body} -> body
          {:error, reason} -> raise ArgumentError, "cannot build packet: #{inspect(reason)}"
        end
      end

      @doc "Encodes the whole message: the id bytes, then `build/1`'s body."
      @spec encode(t()) :: {:ok, binary()} | {:error, RakNet.Packet.error()}
      def encode(packet) do
        case build(packet) do
          {:ok, body} -> {:ok, <<unquote(header || "")::binary, body::binary>>}
          error -> error
        end
      end

      @impl RakNet.Packet
      def parse(body) when is_binary(body) do
        case __parse__(body) do
          {:ok, packet, <<>>} -> {:ok, packet}
          {:ok, _packet, rest} -> {:error, {__MODULE__, nil, {:trailing_bytes, byte_size(rest)}}}
          :error -> RakNet.Packet.__explain__(__MODULE__, body)
        end
      end

      def parse(other), do: {:error, {__MODULE__, nil, {:not_a_binary, other}}}

      @doc false
      # The fast path: the fields from the front of the binary, or :error (parse/1 then asks
      # RakNet.Packet.Codec which field failed and why).
      def __parse__(bin) do
        unquote(parse_steps(steps(fields), quote(do: bin), []))
      end
    end
  end

  @doc false
  def __explain__(module, body) do
    case Codec.decode_fields(module, body) do
      {:ok, packet, <<>>} -> {:ok, packet}
      {:ok, _packet, rest} -> {:error, {module, nil, {:trailing_bytes, byte_size(rest)}}}
      error -> error
    end
  end

  defp id_format!(module, opts, id) do
    unless id == nil or (is_integer(id) and id >= 0),
      do: raise(ArgumentError, "#{inspect(module)}: :id must be a non-negative integer")

    case Keyword.get(opts, :message_type) do
      nil ->
        unless id == nil or id <= 255,
          do:
            raise(
              ArgumentError,
              "#{inspect(module)}: id #{id} does not fit the message type byte; give :message_type for wider ids"
            )

        :byte

      mt when is_integer(mt) and mt in 0..255 ->
        type = Type.normalize(Keyword.get(opts, :id_type, :uint16_le))

        unless match?({:int, _, :unsigned, _}, type),
          do:
            raise(ArgumentError, "#{inspect(module)}: :id_type must be an unsigned integer type")

        unless id == nil or id <= Type.max_value(type),
          do:
            raise(
              ArgumentError,
              "#{inspect(module)}: id #{id} does not fit #{inspect(opts[:id_type])}"
            )

        {mt, type}

      other ->
        raise ArgumentError,
              "#{inspect(module)}: :message_type must be a byte, got #{inspect(other)}"
    end
  end

  defp default({:int, _, _, _}), do: 0
  defp default({:float, _, _}), do: 0.0
  defp default(:bool), do: false
  defp default({:fixed_string, _}), do: ""
  defp default({:bytes, n}), do: <<0::size(n * 8)>>
  defp default({kind, _, _}) when kind in [:string, :binary], do: ""
  defp default({:varint, _, _}), do: 0
  defp default({:list, _, _, _}), do: []
  defp default({:array, n, element}), do: List.duplicate(default(element), n)
  defp default({:optional, _}), do: nil
  defp default({:rest, _}), do: ""
  defp default({:struct, _}), do: nil

  defp typespec({:int, _, _, _}), do: quote(do: integer())
  defp typespec({:varint, _, _}), do: quote(do: integer())
  defp typespec({:float, _, _}), do: quote(do: float())
  defp typespec(:bool), do: quote(do: boolean())
  defp typespec({:fixed_string, _}), do: quote(do: String.t())
  defp typespec({:bytes, _}), do: quote(do: binary())
  defp typespec({:rest, _}), do: quote(do: binary())
  defp typespec({:array, _, el}), do: quote(do: [unquote(typespec(el))])
  defp typespec({:optional, t}), do: quote(do: unquote(typespec(t)) | nil)
  defp typespec({:string, _, _}), do: quote(do: String.t())
  defp typespec({:binary, _, _}), do: quote(do: binary())
  defp typespec({:list, _, el, _}), do: quote(do: [unquote(typespec(el))])
  defp typespec({:struct, mod}), do: quote(do: unquote(mod).t())

  # ---- build: one guard for the fixed-size fields, one binary construction ------------

  defp build_guard(fields, vars) do
    fields
    |> Enum.flat_map(fn {name, type, _} -> List.wrap(guard(type, vars[name])) end)
    |> Enum.reduce(true, fn g, acc ->
      if acc == true, do: g, else: quote(do: unquote(acc) and unquote(g))
    end)
  end

  defp guard({:int, bits, sign, _}, v) do
    {min, max} = Codec.int_range(bits, sign)

    quote(
      do: is_integer(unquote(v)) and unquote(v) >= unquote(min) and unquote(v) <= unquote(max)
    )
  end

  defp guard({:float, bits, _}, v) do
    max = Codec.float_max(bits)

    quote(
      do: is_number(unquote(v)) and unquote(v) >= unquote(-max) and unquote(v) <= unquote(max)
    )
  end

  defp guard(:bool, v), do: quote(do: is_boolean(unquote(v)))

  defp guard({:bytes, n}, v),
    do: quote(do: is_binary(unquote(v)) and byte_size(unquote(v)) == unquote(n))

  defp guard(_type, _v), do: nil

  defp build_body(fields, vars) do
    encoded = Map.new(fields, fn {name, _, _} -> {name, Macro.var(:"e_#{name}", __MODULE__)} end)

    segments =
      Enum.map(fields, fn {name, type, _} ->
        if Type.fixed?(type),
          do: segment(type, vars[name]),
          else: quote(do: unquote(encoded[name]) :: binary)
      end)

    construct = {:<<>>, [], segments}

    case for {name, type, _} <- fields, not Type.fixed?(type), do: {name, type} do
      [] ->
        quote(do: {:ok, unquote(construct)})

      variable ->
        clauses =
          Enum.map(variable, fn {name, type} ->
            call =
              case type do
                {:struct, mod} ->
                  quote(do: unquote(mod).build(unquote(vars[name])))

                _ ->
                  quote(
                    do:
                      RakNet.Packet.Codec.encode(unquote(Macro.escape(type)), unquote(vars[name]))
                  )
              end

            quote(do: {:ok, unquote(encoded[name])} <- unquote(call))
          end)

        quote do
          with unquote_splicing(clauses) do
            {:ok, unquote(construct)}
          else
            _ ->
              RakNet.Packet.Codec.encode_fields(
                __MODULE__,
                unquote(Macro.var(:packet, __MODULE__))
              )
          end
        end
    end
  end

  defp segment({:int, bits, sign, endian}, v),
    do:
      quote(
        do:
          unquote(v) ::
            size(unquote(bits)) - unquote(Macro.var(sign, nil)) - unquote(Macro.var(endian, nil))
      )

  defp segment({:float, bits, endian}, v),
    do: quote(do: unquote(v) :: float - size(unquote(bits)) - unquote(Macro.var(endian, nil)))

  defp segment(:bool, v), do: quote(do: if(unquote(v), do: 1, else: 0) :: 8)
  defp segment({:bytes, n}, v), do: quote(do: unquote(v) :: binary - size(unquote(n)))

  # ---- parse: runs of fixed-size fields as one pattern; the others one call each ---------

  defp steps(fields) do
    fields
    |> Enum.chunk_by(fn {_, type, _} -> Type.fixed?(type) end)
    |> Enum.flat_map(fn [{_, type, _} | _] = chunk ->
      if Type.fixed?(type), do: [{:fixed, chunk}], else: Enum.map(chunk, &{:call, &1})
    end)
  end

  defp parse_steps([], bin, values) do
    pairs = values |> Enum.reverse()
    quote(do: {:ok, %__MODULE__{unquote_splicing(pairs)}, unquote(bin)})
  end

  defp parse_steps([{:fixed, chunk} | steps], bin, values) do
    rest = Macro.unique_var(:rest, __MODULE__)
    vars = Enum.map(chunk, fn {name, _, _} -> Macro.var(:"p_#{name}", __MODULE__) end)
    segments = Enum.zip_with(chunk, vars, fn {_, type, _}, v -> segment_pattern(type, v) end)
    pattern = {:<<>>, [], segments ++ [quote(do: unquote(rest) :: binary)]}

    guards = for {{_, :bool, _}, v} <- Enum.zip(chunk, vars), do: quote(do: unquote(v) <= 1)

    values =
      Enum.reduce(Enum.zip(chunk, vars), values, fn
        {{name, :bool, _}, v}, acc -> [{name, quote(do: unquote(v) == 1)} | acc]
        {{name, _, _}, v}, acc -> [{name, v} | acc]
      end)

    clause =
      case guards do
        [] ->
          quote(do: (unquote(pattern) -> unquote(parse_steps(steps, rest, values))))

        _ ->
          guard = Enum.reduce(guards, fn g, acc -> quote(do: unquote(acc) and unquote(g)) end)

          quote(
            do:
              (unquote(pattern) when unquote(guard) -> unquote(parse_steps(steps, rest, values)))
          )
      end

    fallback = quote(do: (_ -> :error))
    {:case, [], [bin, [do: clause ++ fallback]]}
  end

  defp parse_steps([{:call, {name, type, _}} | steps], bin, values) do
    rest = Macro.unique_var(:rest, __MODULE__)
    v = Macro.var(:"p_#{name}", __MODULE__)

    call =
      case type do
        {:struct, mod} -> quote(do: unquote(mod).__parse__(unquote(bin)))
        _ -> quote(do: RakNet.Packet.Codec.decode(unquote(Macro.escape(type)), unquote(bin)))
      end

    quote do
      case unquote(call) do
        {:ok, unquote(v), unquote(rest)} ->
          unquote(parse_steps(steps, rest, [{name, v} | values]))

        _ ->
          :error
      end
    end
  end

  defp segment_pattern({:int, bits, sign, endian}, v),
    do:
      quote(
        do:
          unquote(v) ::
            size(unquote(bits)) - unquote(Macro.var(sign, nil)) - unquote(Macro.var(endian, nil))
      )

  defp segment_pattern({:float, bits, endian}, v),
    do: quote(do: unquote(v) :: float - size(unquote(bits)) - unquote(Macro.var(endian, nil)))

  defp segment_pattern(:bool, v), do: quote(do: unquote(v) :: 8)
  defp segment_pattern({:bytes, n}, v), do: quote(do: unquote(v) :: binary - size(unquote(n)))
end
