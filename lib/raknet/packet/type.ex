defmodule RakNet.Packet.Type do
  @moduledoc """
  The field types of `RakNet.Packet`, as written in a `field` declaration.

  | type                                                | wire format                                   | Elixir value                   |
  |-----------------------------------------------------|-----------------------------------------------|--------------------------------|
  | `:uint8`, `:int8`                                   | 1 byte                                        | integer in range               |
  | `:uint16_le`, `:uint16_be`, `:int16_le`, `:int16_be` | 2 bytes, little or big endian                 | integer in range               |
  | `:uint24_le`, `:uint24_be`, `:int24_le`, `:int24_be` | 3 bytes, little or big endian (RakNet's sequence numbers are `:uint24_le`) | integer in range |
  | `:uint32_*`, `:int32_*`, `:uint64_*`, `:int64_*`    | 4 / 8 bytes (`_le` or `_be`)                  | integer in range               |
  | `:float32_le`, `:float32_be`, `:float64_le`, `:float64_be` | IEEE 754                               | float (finite; NaN and infinities are malformed) |
  | `:bool`                                             | 1 byte, 0 or 1 (anything else is malformed)   | `true` / `false`               |
  | `{:fixed_string, n}`                                | exactly `n` bytes, zero-padded                | UTF-8 string of at most `n` bytes, no NUL |
  | `{:bytes, n}`                                       | exactly `n` bytes, as they are                | binary of exactly `n` bytes    |
  | `{:string, prefix}`                                 | length (a `prefix` value), then the bytes     | UTF-8 string                   |
  | `{:binary, prefix}`                                 | length (a `prefix` value), then the bytes     | binary                         |
  | `:varuint32`, `:varuint64`                          | Bedrock unsigned varint, 7 bits a byte, at most 5 / 10 bytes | non-negative integer < 2^32 / 2^64 |
  | `:varint32`, `:varint64`                            | zig-zag encoded, then as above (Bedrock `VarInt` / `VarLong`) | integer in the signed 32 / 64-bit range |
  | `{:list, count, element}`                           | element count (a `count` value), then the elements | list                      |
  | `{:array, n, element}`                              | exactly `n` elements, no count                | list of exactly `n` elements   |
  | `{:optional, type}`                                 | 1 byte, 0 or 1 (anything else is malformed), then a `type` value if 1 | `nil`, or a `type` value |
  | `:rest`                                             | every byte left in the message (the last field only) | binary                  |
  | `Module` or `{:struct, Module}`                     | the fields of another `RakNet.Packet` module, inline | that module's struct    |

  `prefix` and `count` are any unsigned integer type above (`:uint8`, `:uint16_le`,
  `:uint24_le`, ...) or `:varuint32`; `n` is a positive integer. A field may also say `max: n`:
  at most `n` bytes for strings, binaries and `:rest`, `n` elements for lists (parsing checks
  it before reading the data, so a peer cannot make the parser walk or allocate more); in an
  `{:optional, type}` field it applies to `type`. Without `max`, strings, binaries and lists
  are bounded by their prefix type and, when parsing, by the bytes actually received, and
  `:rest` by the bytes received; lists of elements that can take zero bytes (nested structs
  without fields) need `max`, and default to 65,536. Give lists a `max`: bounded by the bytes
  received alone, a list of one-byte elements decoded from a 20 MB message is 20 million list
  cells (320 MB), and one of small structs more still. The server's `:max_message_bytes`
  bounds the message itself. Arrays and `{:bytes, n}` are bounded by their `n`.

  `:rest` takes the rest of the message, so it can only be the last field of a packet; so can
  the types that end with it (`{:optional, :rest}`, a nested packet whose last field is one),
  and none of them can be the element of a list or an array. Declaring a field after one of
  them, or a list or array of one, raises `ArgumentError` at compile time. A `:rest` field
  parses to a part of the received message, as binaries do: `:binary.copy/1` it to keep it
  long after the message without keeping the whole message.

  A Bedrock-style packet with several of them:

      defmodule MyGame.Packets.Chunk do
        use RakNet.Packet, id: 0x3A
        field :x, :varint32
        field :z, :varint32
        field :section_mask, {:bytes, 2}
        field :heights, {:array, 16, :uint8}
        field :biome, {:optional, :uint8}
        field :data, :rest, max: 65_536
      end

  This module normalizes declarations at compile time; the encoders and decoders are in
  `RakNet.Packet.Codec`.
  """

  import Bitwise, only: [<<<: 2]

  @typedoc "A field type as declared (see the table in the moduledoc)."
  @type declared :: atom() | tuple()

  @typedoc "A field type after `normalize/2`: what `RakNet.Packet.Codec` works with."
  @type t ::
          {:int, 8 | 16 | 24 | 32 | 64, :signed | :unsigned, :little | :big}
          | {:float, 32 | 64, :little | :big}
          | :bool
          | {:fixed_string, pos_integer()}
          | {:bytes, pos_integer()}
          | {:string | :binary, t(), non_neg_integer()}
          | {:varint, 32 | 64, :unsigned | :zigzag}
          | {:list, t(), t(), non_neg_integer()}
          | {:array, pos_integer(), t()}
          | {:optional, t()}
          | {:rest, non_neg_integer() | nil}
          | {:struct, module()}

  @ints for bits <- [16, 24, 32, 64],
            {sign, s} <- [{:unsigned, "uint"}, {:signed, "int"}],
            {endian, e} <- [{:little, "le"}, {:big, "be"}],
            into: %{uint8: {:int, 8, :unsigned, :big}, int8: {:int, 8, :signed, :big}},
            do: {:"#{s}#{bits}_#{e}", {:int, bits, sign, endian}}

  @floats %{
    float32_le: {:float, 32, :little},
    float32_be: {:float, 32, :big},
    float64_le: {:float, 64, :little},
    float64_be: {:float, 64, :big}
  }

  @varints %{
    varuint32: {:varint, 32, :unsigned},
    varuint64: {:varint, 64, :unsigned},
    varint32: {:varint, 32, :zigzag},
    varint64: {:varint, 64, :zigzag}
  }

  # A list of nested structs that may take zero bytes each is bounded by this many elements.
  @default_zero_size_max 65_536

  @doc """
  Normalizes a declared type (and the field's `:max` option); raises `ArgumentError` with a
  readable message for anything that is not a type.
  """
  @spec normalize(declared(), keyword()) :: t()
  def normalize(type, opts \\ []) do
    max = Keyword.get(opts, :max)

    if max != nil and not (is_integer(max) and max >= 0),
      do: raise(ArgumentError, ":max must be a non-negative integer, got: #{inspect(max)}")

    do_normalize(type, max)
  end

  defp do_normalize(type, _max) when is_map_key(@ints, type), do: Map.fetch!(@ints, type)
  defp do_normalize(type, _max) when is_map_key(@floats, type), do: Map.fetch!(@floats, type)
  defp do_normalize(type, _max) when is_map_key(@varints, type), do: Map.fetch!(@varints, type)
  defp do_normalize(:bool, _max), do: :bool

  defp do_normalize({:fixed_string, n}, _max) when is_integer(n) and n > 0,
    do: {:fixed_string, n}

  defp do_normalize({:bytes, n}, _max) when is_integer(n) and n > 0, do: {:bytes, n}

  defp do_normalize({kind, n}, _max) when kind in [:fixed_string, :bytes] do
    raise ArgumentError,
          "the size of #{inspect(kind)} must be a positive integer, got: #{inspect(n)}"
  end

  defp do_normalize({kind, prefix}, max) when kind in [:string, :binary] do
    prefix = length_type!(prefix, "#{kind} length prefix")
    {kind, prefix, min(max || max_value(prefix), max_value(prefix))}
  end

  defp do_normalize({:list, count, element}, max) do
    count = length_type!(count, "list count")
    element = element!(element, "a list")
    default = if min_size(element) == 0, do: @default_zero_size_max, else: max_value(count)
    {:list, count, element, min(max || default, max_value(count))}
  end

  defp do_normalize({:array, n, element}, _max) when is_integer(n) and n > 0,
    do: {:array, n, element!(element, "an array")}

  defp do_normalize({:array, n, _element}, _max) do
    raise ArgumentError,
          "the length of an :array must be a positive integer, got: #{inspect(n)}"
  end

  defp do_normalize({:optional, type}, max) do
    case do_normalize(type, max) do
      {:optional, _} ->
        raise ArgumentError,
              "an :optional type cannot be optional itself (nil would be ambiguous): #{inspect({:optional, type})}"

      inner ->
        {:optional, inner}
    end
  end

  defp do_normalize(:rest, max), do: {:rest, max}

  defp do_normalize({:struct, module}, _max) when is_atom(module), do: {:struct, module}

  defp do_normalize(module, max) when is_atom(module) do
    if match?("Elixir." <> _, Atom.to_string(module)),
      do: {:struct, module},
      else: bad_type!(module, max)
  end

  defp do_normalize(type, max), do: bad_type!(type, max)

  defp bad_type!(type, _max) do
    raise ArgumentError,
          "unknown field type #{inspect(type)}; see RakNet.Packet.Type for the types"
  end

  defp element!(type, container) do
    element = do_normalize(type, nil)

    if rest?(element),
      do:
        raise(
          ArgumentError,
          "#{inspect(type)} takes the rest of the message and cannot be the element of #{container}"
        )

    element
  end

  defp length_type!(type, what) do
    case do_normalize(type, nil) do
      {:int, _, :unsigned, _} = t ->
        t

      {:varint, 32, :unsigned} = t ->
        t

      _ ->
        raise ArgumentError, "a #{what} must be an unsigned integer type, got: #{inspect(type)}"
    end
  end

  @doc "The largest value of an unsigned length type."
  @spec max_value(t()) :: non_neg_integer()
  def max_value({:int, bits, :unsigned, _}), do: (1 <<< bits) - 1
  def max_value({:varint, bits, :unsigned}), do: (1 <<< bits) - 1

  @doc "Whether the type has a fixed size that a binary pattern can match directly."
  @spec fixed?(t()) :: boolean()
  def fixed?({:int, _, _, _}), do: true
  def fixed?({:float, _, _}), do: true
  def fixed?(:bool), do: true
  def fixed?({:bytes, _}), do: true
  def fixed?(_type), do: false

  @doc """
  Whether the type takes the rest of the message (`:rest`, an optional one, a nested packet
  whose last field does), so that nothing can follow it. A nested module not compiled yet
  counts as not.
  """
  @spec rest?(t()) :: boolean()
  def rest?(type), do: rest?(type, [])

  defp rest?({:rest, _max}, _seen), do: true
  defp rest?({:optional, type}, seen), do: rest?(type, seen)

  defp rest?({:struct, module}, seen) do
    # `seen`: a module that ends with itself (`{:optional, __MODULE__}`) does not loop.
    with false <- module in seen,
         true <- packet_module?(module),
         {_name, type, _opts} <- List.last(module.__packet__(:fields)) do
      rest?(type, [module | seen])
    else
      _ -> false
    end
  end

  defp rest?(_type, _seen), do: false

  @doc "The fewest bytes a value of the type can take (0 only for `:rest` and empty structs)."
  @spec min_size(t()) :: non_neg_integer()
  def min_size(type), do: min_size(type, [])

  defp min_size({:int, bits, _, _}, _seen), do: div(bits, 8)
  defp min_size({:float, bits, _}, _seen), do: div(bits, 8)
  defp min_size(:bool, _seen), do: 1
  defp min_size({:fixed_string, n}, _seen), do: n
  defp min_size({:bytes, n}, _seen), do: n
  defp min_size({:array, n, element}, seen), do: n * min_size(element, seen)
  defp min_size({:optional, _type}, _seen), do: 1
  defp min_size({:rest, _max}, _seen), do: 0
  defp min_size({:varint, _, _}, _seen), do: 1

  defp min_size({kind, prefix, _max}, seen) when kind in [:string, :binary],
    do: min_size(prefix, seen)

  defp min_size({:list, count, _el, _max}, seen), do: min_size(count, seen)

  defp min_size({:struct, module}, seen) do
    # A nested module compiled before this one knows its size; one not yet compiled (or a
    # cycle) counts as possibly empty, which only makes lists of it bounded by default.
    if module not in seen and packet_module?(module) do
      module.__packet__(:fields)
      |> Enum.map(fn {_, t, _} -> min_size(t, [module | seen]) end)
      |> Enum.sum()
    else
      0
    end
  end

  defp packet_module?(module) do
    Code.ensure_compiled(module) == {:module, module} and
      function_exported?(module, :__packet__, 1)
  end
end
