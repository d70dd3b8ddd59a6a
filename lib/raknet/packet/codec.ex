defmodule RakNet.Packet.Codec do
  @moduledoc """
  Encoders and decoders for every `RakNet.Packet.Type`, one value at a time.

  Modules that `use RakNet.Packet` call these only for the fields a binary pattern cannot
  express (strings, varints, lists, arrays, optional values, `:rest`) and, when their
  generated fast path fails, to find out which field is wrong and why (`encode_fields/2`,
  `decode_fields/2`). They are public because they are also useful on their own, in
  hand-written packet modules:

      iex> RakNet.Packet.Codec.encode(RakNet.Packet.Type.normalize(:varint32), -3)
      {:ok, <<5>>}
      iex> RakNet.Packet.Codec.decode(RakNet.Packet.Type.normalize(:varuint32), <<0xAC, 0x02, 7>>)
      {:ok, 300, <<7>>}

  Nothing here raises on input: decoding returns `{:error, reason}` for malformed bytes and
  encoding returns `{:error, reason}` for a value the type cannot hold.

  Decode reasons: `:truncated`, `:not_finite` (a NaN or infinite float), `{:invalid_bool,
  byte}` (a `:bool`, or the flag of an `:optional`), `:invalid_utf8`, `:varint_too_long` (more
  than 5 bytes for a 32-bit varint, 10 for a 64-bit one), `:varint_overflow` (the value does
  not fit its bits), `{:too_long, length, max}` (a string, a binary, `:rest`), `{:too_many,
  count, max}`, `{:element, index, reason}` (in a list or an array) and, for a nested struct,
  the nested `{module, field, reason}`. The reason for an `:optional` value that is there is
  the value's own.

  Encode reasons: `{:out_of_range, value}`, `{:invalid, value}` (not a value of the type at
  all, an improper list included), `{:too_long, size, max}` (for `{:bytes, n}`, more than `n`
  bytes), `{:too_short, size, n}` (fewer than `n` bytes for `{:bytes, n}`), `{:too_many,
  count, max}` (for `{:array, n, _}`, more than `n` elements), `{:too_few, count, n}` (fewer
  than `n` elements for an array), `:contains_nul` (a fixed string), `:invalid_utf8`,
  `{:element, index, reason}` and a nested `{module, field, reason}`.
  """

  import Bitwise

  alias RakNet.Packet.Type

  @max_float32 3.4028234663852886e38
  @max_float64 1.7976931348623157e308

  @typedoc "Why a value could not be encoded or decoded (see the moduledoc)."
  @type reason :: term()

  # ---- encoding ------------------------------------------------------------------

  @doc "Encodes `value` as `type`."
  @spec encode(Type.t(), term()) :: {:ok, binary()} | {:error, reason()}
  def encode({:int, bits, sign, endian}, value) do
    {min, max} = int_range(bits, sign)

    cond do
      not is_integer(value) -> {:error, {:invalid, value}}
      value < min or value > max -> {:error, {:out_of_range, value}}
      endian == :little -> {:ok, <<value::size(bits)-little>>}
      true -> {:ok, <<value::size(bits)-big>>}
    end
  end

  def encode({:float, bits, endian}, value) do
    max = if bits == 32, do: @max_float32, else: @max_float64

    cond do
      not is_number(value) -> {:error, {:invalid, value}}
      value < -max or value > max -> {:error, {:out_of_range, value}}
      endian == :little -> {:ok, <<value::float-size(bits)-little>>}
      true -> {:ok, <<value::float-size(bits)-big>>}
    end
  end

  def encode(:bool, true), do: {:ok, <<1>>}
  def encode(:bool, false), do: {:ok, <<0>>}
  def encode(:bool, value), do: {:error, {:invalid, value}}

  def encode({:fixed_string, n}, value) when is_binary(value) do
    cond do
      byte_size(value) > n -> {:error, {:too_long, byte_size(value), n}}
      :binary.match(value, <<0>>) != :nomatch -> {:error, :contains_nul}
      not String.valid?(value) -> {:error, :invalid_utf8}
      true -> {:ok, <<value::binary, 0::size((n - byte_size(value)) * 8)>>}
    end
  end

  def encode({:bytes, n}, value) when is_binary(value) do
    case byte_size(value) do
      ^n -> {:ok, value}
      size when size > n -> {:error, {:too_long, size, n}}
      size -> {:error, {:too_short, size, n}}
    end
  end

  def encode({kind, prefix, max}, value) when kind in [:string, :binary] and is_binary(value) do
    size = byte_size(value)

    cond do
      size > max -> {:error, {:too_long, size, max}}
      kind == :string and not String.valid?(value) -> {:error, :invalid_utf8}
      true -> with {:ok, len} <- encode(prefix, size), do: {:ok, <<len::binary, value::binary>>}
    end
  end

  def encode({:varint, bits, :unsigned}, value) when is_integer(value) do
    if value >= 0 and value < 1 <<< bits,
      do: {:ok, varuint(value, <<>>)},
      else: {:error, {:out_of_range, value}}
  end

  def encode({:varint, bits, :zigzag}, value) when is_integer(value) do
    half = 1 <<< (bits - 1)

    if value >= -half and value < half,
      do: {:ok, varuint(zigzag(value), <<>>)},
      else: {:error, {:out_of_range, value}}
  end

  def encode({:list, count, element, max}, value) when is_list(value) do
    case proper_length(value) do
      nil ->
        {:error, {:invalid, value}}

      n when n > max ->
        {:error, {:too_many, n, max}}

      n ->
        with {:ok, prefix} <- encode(count, n), do: encode_elements(element, value, 0, [prefix])
    end
  end

  def encode({:array, n, element}, value) when is_list(value) do
    case proper_length(value) do
      ^n -> encode_elements(element, value, 0, [])
      nil -> {:error, {:invalid, value}}
      count when count > n -> {:error, {:too_many, count, n}}
      count -> {:error, {:too_few, count, n}}
    end
  end

  def encode({:optional, _type}, nil), do: {:ok, <<0>>}

  def encode({:optional, type}, value) do
    case encode(type, value) do
      {:ok, bin} -> {:ok, <<1, bin::binary>>}
      error -> error
    end
  end

  def encode({:rest, max}, value) when is_binary(value) do
    if max != nil and byte_size(value) > max,
      do: {:error, {:too_long, byte_size(value), max}},
      else: {:ok, value}
  end

  def encode({:struct, module}, %{__struct__: module} = value), do: module.build(value)
  def encode(_type, value), do: {:error, {:invalid, value}}

  defp encode_elements(_element, [], _i, acc),
    do: {:ok, acc |> Enum.reverse() |> IO.iodata_to_binary()}

  defp encode_elements(element, [value | rest], i, acc) do
    case encode(element, value) do
      {:ok, bin} -> encode_elements(element, rest, i + 1, [bin | acc])
      {:error, reason} -> {:error, {:element, i, reason}}
    end
  end

  # length/1 raises on an improper list: a value to refuse, not a crash.
  defp proper_length(list) do
    length(list)
  rescue
    ArgumentError -> nil
  end

  defp varuint(value, acc) when value < 0x80, do: <<acc::binary, value>>
  defp varuint(value, acc), do: varuint(value >>> 7, <<acc::binary, 1::1, value::7>>)

  defp zigzag(value) when value >= 0, do: value <<< 1
  defp zigzag(value), do: (-value <<< 1) - 1

  defp unzigzag(value) when (value &&& 1) == 0, do: value >>> 1
  defp unzigzag(value), do: -((value + 1) >>> 1)

  @doc false
  def int_range(bits, :unsigned), do: {0, (1 <<< bits) - 1}
  def int_range(bits, :signed), do: {-(1 <<< (bits - 1)), (1 <<< (bits - 1)) - 1}

  @doc false
  def float_max(32), do: @max_float32
  def float_max(64), do: @max_float64

  # ---- decoding ------------------------------------------------------------------

  @doc "Decodes one `type` value from the front of `binary`: `{:ok, value, rest}`."
  @spec decode(Type.t(), binary()) :: {:ok, term(), binary()} | {:error, reason()}
  def decode({:int, bits, :unsigned, :little}, bin) do
    case bin do
      <<v::size(bits)-little, rest::binary>> -> {:ok, v, rest}
      _ -> {:error, :truncated}
    end
  end

  def decode({:int, bits, :unsigned, :big}, bin) do
    case bin do
      <<v::size(bits)-big, rest::binary>> -> {:ok, v, rest}
      _ -> {:error, :truncated}
    end
  end

  def decode({:int, bits, :signed, :little}, bin) do
    case bin do
      <<v::size(bits)-signed-little, rest::binary>> -> {:ok, v, rest}
      _ -> {:error, :truncated}
    end
  end

  def decode({:int, bits, :signed, :big}, bin) do
    case bin do
      <<v::size(bits)-signed-big, rest::binary>> -> {:ok, v, rest}
      _ -> {:error, :truncated}
    end
  end

  def decode({:float, bits, endian}, bin) do
    # A float pattern does not match NaN or infinities: tell those apart from truncation.
    case {endian, bin} do
      {:little, <<v::float-size(bits)-little, rest::binary>>} -> {:ok, v, rest}
      {:big, <<v::float-size(bits)-big, rest::binary>>} -> {:ok, v, rest}
      _ when byte_size(bin) >= div(bits, 8) -> {:error, :not_finite}
      _ -> {:error, :truncated}
    end
  end

  def decode(:bool, <<0, rest::binary>>), do: {:ok, false, rest}
  def decode(:bool, <<1, rest::binary>>), do: {:ok, true, rest}
  def decode(:bool, <<b, _::binary>>), do: {:error, {:invalid_bool, b}}
  def decode(:bool, _bin), do: {:error, :truncated}

  def decode({:fixed_string, n}, bin) do
    case bin do
      <<raw::binary-size(n), rest::binary>> ->
        # The string ends at the first NUL; what follows it (normally zeros) is ignored, as
        # C clients that fill the buffer with strncpy leave whatever was there.
        [string | _] = :binary.split(raw, <<0>>)
        if String.valid?(string), do: {:ok, string, rest}, else: {:error, :invalid_utf8}

      _ ->
        {:error, :truncated}
    end
  end

  def decode({:bytes, n}, bin) do
    case bin do
      <<data::binary-size(n), rest::binary>> -> {:ok, data, rest}
      _ -> {:error, :truncated}
    end
  end

  def decode({kind, prefix, max}, bin) when kind in [:string, :binary] do
    with {:ok, len, rest} <- decode(prefix, bin) do
      case rest do
        _ when len > max ->
          {:error, {:too_long, len, max}}

        <<data::binary-size(len), rest::binary>> ->
          if kind == :binary or String.valid?(data),
            do: {:ok, data, rest},
            else: {:error, :invalid_utf8}

        _ ->
          {:error, :truncated}
      end
    end
  end

  def decode({:varint, bits, :unsigned}, bin), do: varuint(bin, bits, 0, 0)

  def decode({:varint, bits, :zigzag}, bin) do
    with {:ok, v, rest} <- varuint(bin, bits, 0, 0), do: {:ok, unzigzag(v), rest}
  end

  def decode({:list, count, element, max}, bin) do
    with {:ok, n, rest} <- decode(count, bin) do
      if n > max,
        do: {:error, {:too_many, n, max}},
        else: decode_elements(element, rest, 0, n, [])
    end
  end

  # Integers cannot be malformed: all the elements as one binary, then a comprehension.
  def decode({:array, n, {:int, bits, sign, endian}}, bin) do
    size = div(bits, 8)

    case bin do
      <<data::binary-size(n * size), rest::binary>> ->
        {:ok, int_elements(data, bits, sign, endian), rest}

      _ ->
        {:error, {:element, div(byte_size(bin), size), :truncated}}
    end
  end

  def decode({:array, n, element}, bin), do: decode_elements(element, bin, 0, n, [])

  def decode({:optional, _type}, <<0, rest::binary>>), do: {:ok, nil, rest}
  def decode({:optional, type}, <<1, rest::binary>>), do: decode(type, rest)
  def decode({:optional, _type}, <<b, _::binary>>), do: {:error, {:invalid_bool, b}}
  def decode({:optional, _type}, _bin), do: {:error, :truncated}

  def decode({:rest, max}, bin) when is_integer(max) and byte_size(bin) > max,
    do: {:error, {:too_long, byte_size(bin), max}}

  def decode({:rest, _max}, bin) when is_binary(bin), do: {:ok, bin, <<>>}
  def decode({:rest, _max}, _bin), do: {:error, :truncated}

  def decode({:struct, module}, bin) do
    case module.__parse__(bin) do
      {:ok, _value, _rest} = ok -> ok
      :error -> decode_fields(module, bin)
    end
  end

  defp int_elements(data, bits, :unsigned, :little),
    do: for(<<v::size(bits)-little <- data>>, do: v)

  defp int_elements(data, bits, :unsigned, :big), do: for(<<v::size(bits)-big <- data>>, do: v)

  defp int_elements(data, bits, :signed, :little),
    do: for(<<v::size(bits)-signed-little <- data>>, do: v)

  defp int_elements(data, bits, :signed, :big),
    do: for(<<v::size(bits)-signed-big <- data>>, do: v)

  defp decode_elements(_element, rest, n, n, acc), do: {:ok, Enum.reverse(acc), rest}

  defp decode_elements(element, bin, i, n, acc) do
    case decode(element, bin) do
      {:ok, v, rest} -> decode_elements(element, rest, i + 1, n, [v | acc])
      {:error, reason} -> {:error, {:element, i, reason}}
    end
  end

  # 7 bits a byte, least significant group first; a 32-bit varint has at most 5 bytes and a
  # 64-bit one 10 (Bedrock's ReadVarInt/ReadVarLong reject longer ones).
  defp varuint(<<1::1, b::7, rest::binary>>, bits, shift, acc) do
    if shift + 7 >= bits,
      do: {:error, :varint_too_long},
      else: varuint(rest, bits, shift + 7, acc ||| b <<< shift)
  end

  defp varuint(<<0::1, b::7, rest::binary>>, bits, shift, acc) do
    v = acc ||| b <<< shift
    if v < 1 <<< bits, do: {:ok, v, rest}, else: {:error, :varint_overflow}
  end

  defp varuint(<<>>, _bits, _shift, _acc), do: {:error, :truncated}

  # ---- whole structs, field by field -------------------------------------------------

  @doc """
  Encodes the fields of `struct` (a `module` struct) one by one: the reference the generated
  `build/1` agrees with, and what it calls to name the field when its fast path fails.
  """
  @spec encode_fields(module(), term()) ::
          {:ok, binary()} | {:error, {module(), atom(), reason()}}
  def encode_fields(module, %{__struct__: module} = struct) do
    module.__packet__(:fields)
    |> Enum.reduce_while({:ok, []}, fn {name, type, _opts}, {:ok, acc} ->
      case encode(type, Map.get(struct, name)) do
        {:ok, bin} -> {:cont, {:ok, [acc | bin]}}
        {:error, reason} -> {:halt, {:error, {module, name, reason}}}
      end
    end)
    |> case do
      {:ok, iodata} -> {:ok, IO.iodata_to_binary(iodata)}
      error -> error
    end
  end

  def encode_fields(module, other), do: {:error, {module, nil, {:not_a_struct, other}}}

  @doc """
  Decodes the fields of `module` from the front of `binary` one by one: `{:ok, struct, rest}`
  or `{:error, {module, field, reason}}` for the first field that fails.
  """
  @spec decode_fields(module(), binary()) ::
          {:ok, struct(), binary()} | {:error, {module(), atom(), reason()}}
  def decode_fields(module, bin) do
    Enum.reduce_while(module.__packet__(:fields), {:ok, [], bin}, fn {name, type, _},
                                                                     {:ok, acc, bin} ->
      case decode(type, bin) do
        {:ok, value, rest} -> {:cont, {:ok, [{name, value} | acc], rest}}
        {:error, reason} -> {:halt, {:error, {module, name, reason}}}
      end
    end)
    |> case do
      {:ok, values, rest} -> {:ok, struct(module, values), rest}
      error -> error
    end
  end
end
