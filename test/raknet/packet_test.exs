defmodule RakNet.PacketTest.Vec3 do
  use RakNet.Packet

  field(:x, :float32_le)
  field(:y, :float32_le)
  field(:z, :float32_le)
end

defmodule RakNet.PacketTest.Empty do
  use RakNet.Packet
end

defmodule RakNet.PacketTest.Item do
  use RakNet.Packet

  field(:kind, :uint16_be)
  field(:count, :varuint32)
  field(:label, {:string, :uint8}, max: 16)
end

# Every field type once, fixed-size runs split by variable-size fields.
defmodule RakNet.PacketTest.Everything do
  use RakNet.Packet, id: 0x90, dispatch_to: :world

  field(:u8, :uint8)
  field(:i8, :int8)
  field(:u16le, :uint16_le)
  field(:u16be, :uint16_be)
  field(:i16le, :int16_le)
  field(:i16be, :int16_be)
  field(:u32le, :uint32_le)
  field(:u32be, :uint32_be)
  field(:i32le, :int32_le)
  field(:i32be, :int32_be)
  field(:u64le, :uint64_le)
  field(:u64be, :uint64_be)
  field(:i64le, :int64_le)
  field(:i64be, :int64_be)
  field(:f32le, :float32_le)
  field(:f32be, :float32_be)
  field(:f64le, :float64_le)
  field(:f64be, :float64_be)
  field(:flag, :bool)
  field(:name, {:fixed_string, 24})
  field(:vu32, :varuint32)
  field(:flag2, :bool)
  field(:vu64, :varuint64)
  field(:vi32, :varint32)
  field(:vi64, :varint64)
  field(:text, {:string, :uint16_le})
  field(:blob, {:binary, :varuint32}, max: 300)
  field(:pos, RakNet.PacketTest.Vec3)
  field(:items, {:list, :uint8, RakNet.PacketTest.Item}, max: 5)
  field(:scores, {:list, :varuint32, :int32_be}, max: 20)
  field(:empties, {:list, :uint8, {:struct, RakNet.PacketTest.Empty}}, max: 3)
  field(:last, :uint8)
end

defmodule RakNet.PacketTest.Flags do
  use RakNet.Packet, id: 0x91

  field(:a, :uint8)
  field(:b, :bool)
  field(:c, :bool)
end

defmodule RakNet.PacketTest.Move do
  use RakNet.Packet, id: 0x0102, message_type: 0x86, dispatch_to: :zone

  field(:x, :float32_le)
  field(:y, :float32_le)
  field(:seq, :uint16_le)
end

# The types game protocols add: 24-bit integers, fixed-size bytes, arrays, optional values and
# the rest of the message; the id is 24-bit too.
defmodule RakNet.PacketTest.Extended do
  use RakNet.Packet, id: 0x0A0B0C, message_type: 0x86, id_type: :uint24_le

  field(:seq, :uint24_le)
  field(:u24be, :uint24_be)
  field(:i24le, :int24_le)
  field(:i24be, :int24_be)
  field(:guid, {:bytes, 4})
  field(:pos, {:array, 3, :int16_le})
  field(:flags, {:array, 2, :bool})
  field(:items, {:array, 2, RakNet.PacketTest.Item})
  field(:name, {:optional, {:string, :uint8}}, max: 8)
  field(:target, {:optional, :uint32_be})
  field(:payload, :rest, max: 64)
end

defmodule RakNet.PacketTest.ExtendedSet do
  use RakNet.Packet.Set, packets: [RakNet.PacketTest.Extended, RakNet.PacketTest.Flags]
end

# Ends with :rest: it can be nested only as the last field.
defmodule RakNet.PacketTest.Tail do
  use RakNet.Packet

  field(:kind, :uint8)
  field(:data, :rest)
end

defmodule RakNet.PacketTest.Wrapper do
  use RakNet.Packet, id: 0x93

  field(:a, :uint8)
  field(:tail, {:optional, RakNet.PacketTest.Tail})
end

defmodule RakNet.PacketTest do
  use ExUnit.Case, async: true

  import Bitwise

  alias RakNet.Packet.{Codec, Type}

  alias RakNet.PacketTest.{
    Empty,
    Everything,
    Extended,
    ExtendedSet,
    Flags,
    Item,
    Move,
    Tail,
    Vec3,
    Wrapper
  }

  @runs 400

  doctest RakNet.Packet.Codec

  # ---- hand-rolled generators over a seeded :rand state ---------------------------

  defp seed(n), do: :rand.seed_s(:exsss, {n, n * 7 + 1, n * 13 + 2})

  defp int(st, lo, hi) do
    # Bias towards the edges: they are where encodings break.
    {pick, st} = :rand.uniform_s(10, st)

    case pick do
      1 -> {lo, st}
      2 -> {hi, st}
      3 -> {max(lo, min(hi, 0)), st}
      _ -> uniform(st, lo, hi)
    end
  end

  defp uniform(st, lo, hi) do
    span = hi - lo + 1
    # :rand.uniform_s is limited to 2^58-ish ranges at full precision: build wide ones.
    {a, st} = :rand.uniform_s(1 <<< 32, st)
    {b, st} = :rand.uniform_s(1 <<< 32, st)
    {c, st} = :rand.uniform_s(1 <<< 32, st)
    {lo + rem((a - 1) <<< 64 ||| (b - 1) <<< 32 ||| c - 1, span), st}
  end

  defp float(st, bits) do
    {raw, st} = uniform(st, 0, (1 <<< bits) - 1)

    case <<raw::size(bits)>> do
      <<f::float-size(bits)>> -> {f, st}
      # NaN or an infinity: not a value a packet can hold.
      _ -> float(st, bits)
    end
  end

  defp utf8(st, max_bytes, allow_nul \\ true) do
    {len, st} = :rand.uniform_s(max_bytes + 1, st)
    utf8_chars(st, len - 1, allow_nul, <<>>)
  end

  defp utf8_chars(st, budget, allow_nul, acc) do
    {kind, st} = :rand.uniform_s(4, st)

    {cp, st} =
      case kind do
        1 -> uniform(st, if(allow_nul, do: 0, else: 1), 0x7F)
        2 -> uniform(st, 0x80, 0x7FF)
        3 -> uniform(st, 0xE000, 0xFFFD)
        4 -> uniform(st, 0x10000, 0x10FFFF)
      end

    char = <<cp::utf8>>

    if byte_size(acc) + byte_size(char) > budget,
      do: {acc, st},
      else: utf8_chars(st, budget, allow_nul, acc <> char)
  end

  defp bytes(st, max) do
    {len, st} = :rand.uniform_s(max + 1, st)

    list_of(
      st,
      len - 1,
      fn st -> :rand.uniform_s(256, st) end,
      &IO.iodata_to_binary(for b <- &1, do: b - 1)
    )
  end

  defp list_of(st, n, gen, finish \\ & &1) do
    {items, st} = Enum.map_reduce(List.duplicate(nil, n), st, fn _, st -> gen.(st) end)

    {finish.(items), st}
  end

  @doc false
  # A random value of a normalized type.
  def value(st, {:int, bits, sign, _}) do
    {lo, hi} = Codec.int_range(bits, sign)
    int(st, lo, hi)
  end

  def value(st, {:float, bits, _}), do: float(st, bits)
  def value(st, :bool), do: (fn {n, st} -> {n == 1, st} end).(:rand.uniform_s(2, st))
  def value(st, {:fixed_string, n}), do: utf8(st, n, false)
  def value(st, {:string, prefix, max}), do: utf8(st, min(max, min(Type.max_value(prefix), 300)))
  def value(st, {:binary, prefix, max}), do: bytes(st, min(max, min(Type.max_value(prefix), 300)))
  def value(st, {:varint, bits, :unsigned}), do: int(st, 0, (1 <<< bits) - 1)

  def value(st, {:varint, bits, :zigzag}),
    do: int(st, -(1 <<< (bits - 1)), (1 <<< (bits - 1)) - 1)

  def value(st, {:list, _count, element, max}) do
    {n, st} = :rand.uniform_s(min(max, 8) + 1, st)
    list_of(st, n - 1, &value(&1, element))
  end

  def value(st, {:bytes, n}),
    do:
      list_of(
        st,
        n,
        fn st -> :rand.uniform_s(256, st) end,
        &IO.iodata_to_binary(for b <- &1, do: b - 1)
      )

  def value(st, {:array, n, element}), do: list_of(st, n, &value(&1, element))

  def value(st, {:optional, type}) do
    case :rand.uniform_s(3, st) do
      {1, st} -> {nil, st}
      {_, st} -> value(st, type)
    end
  end

  def value(st, {:rest, max}), do: bytes(st, min(max || 300, 300))

  def value(st, {:struct, mod}) do
    {pairs, st} =
      Enum.map_reduce(mod.__packet__(:fields), st, fn {name, type, _}, st ->
        {v, st} = value(st, type)
        {{name, v}, st}
      end)

    {struct(mod, pairs), st}
  end

  @field_types [
    :uint8,
    :int8,
    :uint16_le,
    :uint16_be,
    :int16_le,
    :int16_be,
    :uint32_le,
    :uint32_be,
    :int32_le,
    :int32_be,
    :uint64_le,
    :uint64_be,
    :int64_le,
    :int64_be,
    :float32_le,
    :float32_be,
    :float64_le,
    :float64_be,
    :bool,
    {:fixed_string, 1},
    {:fixed_string, 24},
    {:string, :uint8},
    {:string, :uint16_le},
    {:string, :varuint32},
    {:binary, :uint32_be},
    {:binary, :varuint32},
    :varuint32,
    :varuint64,
    :varint32,
    :varint64,
    {:list, :uint8, :int16_le},
    {:list, :varuint32, {:string, :uint8}},
    {:list, :uint16_le, Vec3},
    {:list, :uint8, {:list, :uint8, :bool}},
    Vec3,
    Item,
    Empty,
    :uint24_le,
    :uint24_be,
    :int24_le,
    :int24_be,
    {:string, :uint24_le},
    {:bytes, 1},
    {:bytes, 16},
    {:array, 1, :bool},
    {:array, 4, :uint8},
    {:array, 3, :int24_be},
    {:array, 2, :uint64_le},
    {:array, 3, :float32_be},
    {:array, 2, Vec3},
    {:array, 2, {:string, :uint8}},
    {:array, 3, Empty},
    {:array, 2, {:array, 2, :int16_be}},
    {:list, :uint8, {:array, 2, :bool}},
    {:optional, :uint24_le},
    {:optional, :bool},
    {:optional, {:string, :varuint32}},
    {:optional, {:bytes, 3}},
    {:optional, Vec3},
    {:optional, {:list, :uint8, :bool}},
    {:list, :uint8, {:optional, :int8}},
    {:array, 3, {:optional, :uint16_le}},
    :rest,
    {:optional, :rest},
    Tail
  ]

  # ---- round trips -------------------------------------------------------------------

  for declared <- @field_types do
    test "every #{inspect(declared)} value round-trips through encode and decode" do
      type = Type.normalize(unquote(Macro.escape(declared)))

      Enum.reduce(1..@runs, seed(:erlang.phash2(unquote(Macro.escape(declared)))), fn i, st ->
        {v, st} = value(st, type)
        assert {:ok, bin} = Codec.encode(type, v), "run #{i}: #{inspect(v)}"
        assert Codec.decode(type, bin) == {:ok, v, <<>>}, "run #{i}: #{inspect(v)}"

        # With bytes after it, exactly those bytes are left (a type that takes the rest of
        # the message has none after it).
        unless Type.rest?(type),
          do: assert(Codec.decode(type, bin <> <<0xAB, 0xCD>>) == {:ok, v, <<0xAB, 0xCD>>})

        st
      end)
    end
  end

  test "generated packets round-trip and agree byte for byte with the field-by-field reference" do
    type = {:struct, Everything}

    Enum.reduce(1..@runs, seed(1), fn i, st ->
      {p, st} = value(st, type)
      assert {:ok, body} = Everything.build(p), "run #{i}: #{inspect(p)}"
      assert Everything.parse(body) == {:ok, p}, "run #{i}"
      assert Codec.encode_fields(Everything, p) == {:ok, body}
      assert Codec.decode_fields(Everything, body) == {:ok, p, <<>>}
      assert RakNet.Packet.encode(p) == {:ok, <<0x90, body::binary>>}
      st
    end)
  end

  test "packets of the new types round-trip and agree with the field-by-field reference" do
    for mod <- [Extended, Wrapper] do
      Enum.reduce(1..@runs, seed(:erlang.phash2(mod)), fn i, st ->
        {p, st} = value(st, {:struct, mod})
        assert {:ok, body} = mod.build(p), "run #{i}: #{inspect(p)}"
        assert mod.parse(body) == {:ok, p}, "run #{i}"
        assert Codec.encode_fields(mod, p) == {:ok, body}
        assert Codec.decode_fields(mod, body) == {:ok, p, <<>>}
        st
      end)
    end

    {p, _} = value(seed(9), {:struct, Extended})
    assert {:ok, <<0x86, 0x0C, 0x0B, 0x0A, body::binary>> = message} = RakNet.Packet.encode(p)
    assert Extended.build(p) == {:ok, body}
    assert RakNet.Packet.decode(ExtendedSet, message) == {:ok, p}
    assert ExtendedSet.module_for({0x86, 0x0A0B0C}) == Extended

    assert RakNet.Packet.decode(ExtendedSet, <<0x86, 0x0C, 0x0B>>) ==
             {:error, {:truncated_id, 0x86}}
  end

  test "exact bytes of a packet with every new type" do
    p = %Extended{
      seq: 0x010203,
      u24be: 0x010203,
      i24le: -2,
      i24be: -8_388_608,
      guid: <<0xDE, 0xAD, 0xBE, 0xEF>>,
      pos: [1, -1, 256],
      flags: [true, false],
      items: [%Item{kind: 0x0102, count: 300, label: "a"}, %Item{}],
      name: "bob",
      target: nil,
      payload: "xyz"
    }

    body =
      <<3, 2, 1, 1, 2, 3, 0xFE, 0xFF, 0xFF, 0x80, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF>> <>
        <<1, 0, 0xFF, 0xFF, 0, 1>> <>
        <<1, 0>> <>
        <<1, 2, 0xAC, 0x02, 1, "a", 0, 0, 0, 0>> <>
        <<1, 3, "bob">> <>
        <<0>> <>
        "xyz"

    assert Extended.build(p) == {:ok, body}
    assert Extended.parse(body) == {:ok, p}
    assert RakNet.Packet.encode!(p) == <<0x86, 0x0C, 0x0B, 0x0A>> <> body

    q = %{p | target: 0xAABBCCDD, name: nil, payload: ""}
    # The same up to name: then an absent name, a present target, an empty payload.
    q_body = binary_part(body, 0, byte_size(body) - 9) <> <<0, 1, 0xAA, 0xBB, 0xCC, 0xDD>>
    assert Extended.build(q) == {:ok, q_body}
    assert Extended.parse(q_body) == {:ok, q}

    # The defaults build: n zero bytes, n default elements, nil, "".
    assert %Extended{guid: <<0, 0, 0, 0>>, pos: [0, 0, 0], flags: [false, false]} = %Extended{}
    assert %Extended{}.name == nil and %Extended{}.payload == ""
    assert %Extended{}.items == [nil, nil]
    assert Extended.build(%{%Extended{} | items: [%Item{}, %Item{}]}) |> elem(0) == :ok

    enc = fn t, v -> Codec.encode(Type.normalize(t), v) end
    assert enc.(:uint24_le, 0x123456) == {:ok, <<0x56, 0x34, 0x12>>}
    assert enc.(:uint24_be, 0xFFFFFF) == {:ok, <<0xFF, 0xFF, 0xFF>>}
    assert enc.(:int24_le, -1) == {:ok, <<0xFF, 0xFF, 0xFF>>}
    assert enc.(:int24_be, 8_388_607) == {:ok, <<0x7F, 0xFF, 0xFF>>}
    assert enc.({:optional, :uint8}, nil) == {:ok, <<0>>}
    assert enc.({:optional, :uint8}, 0) == {:ok, <<1, 0>>}
    assert enc.({:array, 2, {:string, :uint8}}, ["a", ""]) == {:ok, <<1, "a", 0>>}
    assert enc.({:bytes, 2}, <<0, 0>>) == {:ok, <<0, 0>>}
    assert enc.(:rest, "") == {:ok, ""}

    # A nested packet that ends with :rest, as the last field.
    assert Wrapper.build(%Wrapper{a: 1, tail: %Tail{kind: 2, data: "zz"}}) ==
             {:ok, <<1, 1, 2, "zz">>}

    assert Wrapper.parse(<<1, 1, 2, "zz">>) ==
             {:ok, %Wrapper{a: 1, tail: %Tail{kind: 2, data: "zz"}}}

    assert Wrapper.parse(<<1, 0>>) == {:ok, %Wrapper{a: 1, tail: nil}}
    assert Wrapper.parse(<<1, 0, 9>>) == {:error, {Wrapper, nil, {:trailing_bytes, 1}}}
  end

  test "the new types validate values on build, naming the field" do
    {p, _} = value(seed(10), {:struct, Extended})
    err = fn field, reason -> {:error, {Extended, field, reason}} end

    assert Extended.build(%{p | seq: 1 <<< 24}) == err.(:seq, {:out_of_range, 1 <<< 24})
    assert Extended.build(%{p | seq: -1}) == err.(:seq, {:out_of_range, -1})
    assert Extended.build(%{p | i24le: -8_388_609}) == err.(:i24le, {:out_of_range, -8_388_609})
    assert Extended.build(%{p | i24be: 8_388_608}) == err.(:i24be, {:out_of_range, 8_388_608})
    assert Extended.build(%{p | u24be: 1.0}) == err.(:u24be, {:invalid, 1.0})

    assert Extended.build(%{p | guid: <<1, 2, 3>>}) == err.(:guid, {:too_short, 3, 4})
    assert Extended.build(%{p | guid: <<1, 2, 3, 4, 5>>}) == err.(:guid, {:too_long, 5, 4})
    assert Extended.build(%{p | guid: <<1::31>>}) == err.(:guid, {:invalid, <<1::31>>})
    assert Extended.build(%{p | guid: 7}) == err.(:guid, {:invalid, 7})

    assert Extended.build(%{p | pos: [1, 2]}) == err.(:pos, {:too_few, 2, 3})
    assert Extended.build(%{p | pos: [1, 2, 3, 4]}) == err.(:pos, {:too_many, 4, 3})
    assert Extended.build(%{p | pos: []}) == err.(:pos, {:too_few, 0, 3})
    assert Extended.build(%{p | pos: [1, 2 | 3]}) == err.(:pos, {:invalid, [1, 2 | 3]})
    assert Extended.build(%{p | pos: {1, 2, 3}}) == err.(:pos, {:invalid, {1, 2, 3}})

    assert Extended.build(%{p | pos: [1, 40_000, 3]}) ==
             err.(:pos, {:element, 1, {:out_of_range, 40_000}})

    assert Extended.build(%{p | flags: [true, nil]}) ==
             err.(:flags, {:element, 1, {:invalid, nil}})

    assert Extended.build(%{p | items: [%Item{}, %Item{kind: -1}]}) ==
             err.(:items, {:element, 1, {Item, :kind, {:out_of_range, -1}}})

    assert Extended.build(%{p | name: "123456789"}) == err.(:name, {:too_long, 9, 8})
    assert Extended.build(%{p | name: <<0xFF>>}) == err.(:name, :invalid_utf8)
    assert Extended.build(%{p | target: -1}) == err.(:target, {:out_of_range, -1})
    assert Extended.build(%{p | target: false}) == err.(:target, {:invalid, false})

    assert Extended.build(%{p | payload: :binary.copy("x", 65)}) ==
             err.(:payload, {:too_long, 65, 64})

    assert Extended.build(%{p | payload: nil}) == err.(:payload, {:invalid, nil})
    assert Extended.build(%{p | payload: :binary.copy("x", 64)}) |> elem(0) == :ok

    # The list type refuses an improper list too, rather than raising.
    assert Codec.encode(Type.normalize({:list, :uint8, :uint8}), [1 | 2]) ==
             {:error, {:invalid, [1 | 2]}}

    assert_raise ArgumentError, ~r/too_few/, fn -> Extended.build!(%{p | flags: [true]}) end
  end

  test "malformed input of the new types is an error, never a raise" do
    {p, _} = value(seed(11), {:struct, Extended})
    p = %{p | name: "n", target: 5, payload: "end"}
    {:ok, body} = Extended.build(p)
    err = fn field, reason -> {:error, {Extended, field, reason}} end
    # Offsets in the body: 16 fixed bytes, pos (6), flags (2), items, name, target, payload.
    {:ok, items} = Codec.encode(Type.normalize({:array, 2, Item}), p.items)
    at_items = 16 + 6 + 2
    at_name = at_items + byte_size(items)
    at_target = at_name + 3
    at_payload = at_target + 5
    part = fn n -> binary_part(body, 0, n) end

    replace = fn at, byte ->
      <<part.(at)::binary, byte, binary_part(body, at + 1, byte_size(body) - at - 1)::binary>>
    end

    # Truncated: 24-bit integers, bytes, arrays (fast integer path and element by element),
    # an optional flag, an optional value.
    assert Extended.parse(<<>>) == err.(:seq, :truncated)
    assert Extended.parse(part.(2)) == err.(:seq, :truncated)
    assert Extended.parse(part.(5)) == err.(:u24be, :truncated)
    assert Extended.parse(part.(8)) == err.(:i24le, :truncated)
    assert Extended.parse(part.(11)) == err.(:i24be, :truncated)
    assert Extended.parse(part.(15)) == err.(:guid, :truncated)
    assert Extended.parse(part.(16)) == err.(:pos, {:element, 0, :truncated})
    assert Extended.parse(part.(21)) == err.(:pos, {:element, 2, :truncated})
    assert Extended.parse(part.(23)) == err.(:flags, {:element, 1, :truncated})
    assert {:error, {Extended, :items, {:element, 0, _}}} = Extended.parse(part.(at_items + 1))
    assert Extended.parse(part.(at_name)) == err.(:name, :truncated)
    assert Extended.parse(part.(at_name + 2)) == err.(:name, :truncated)
    assert Extended.parse(part.(at_target)) == err.(:target, :truncated)
    assert Extended.parse(part.(at_target + 4)) == err.(:target, :truncated)

    # Every truncation before the payload fails; inside it, the payload is shorter.
    for n <- 0..(at_payload - 1) do
      assert {:error, {Extended, field, _}} = Extended.parse(part.(n))
      assert field in Map.keys(Map.from_struct(p))
    end

    assert Extended.parse(part.(at_payload)) == {:ok, %{p | payload: ""}}
    assert Extended.parse(part.(at_payload + 2)) == {:ok, %{p | payload: "en"}}

    # Bad flags: a bool in an array, the flag of an optional value.
    assert Extended.parse(replace.(23, 2)) == err.(:flags, {:element, 1, {:invalid_bool, 2}})
    assert Extended.parse(replace.(at_name, 2)) == err.(:name, {:invalid_bool, 2})
    assert Extended.parse(replace.(at_target, 0xFF)) == err.(:target, {:invalid_bool, 0xFF})
    # An optional string over its max, or not UTF-8.
    assert Extended.parse(replace.(at_name + 1, 9)) == err.(:name, {:too_long, 9, 8})

    assert Extended.parse(replace.(at_name + 2, 0xFF)) == err.(:name, :invalid_utf8)

    # :rest over its max; at its max.
    assert Extended.parse(part.(at_payload) <> :binary.copy("x", 65)) ==
             err.(:payload, {:too_long, 65, 64})

    assert {:ok, %Extended{payload: <<_::binary-size(64)>>}} =
             Extended.parse(part.(at_payload) <> :binary.copy("x", 64))

    # The Codec alone.
    dec = fn t, bin -> Codec.decode(Type.normalize(t), bin) end
    assert dec.(:uint24_le, <<1, 2>>) == {:error, :truncated}
    assert dec.(:int24_be, <<0xFF, 0xFF, 0xFE, 9>>) == {:ok, -2, <<9>>}
    assert dec.({:bytes, 3}, <<1, 2>>) == {:error, :truncated}
    assert dec.({:bytes, 3}, <<1, 2, 3, 4>>) == {:ok, <<1, 2, 3>>, <<4>>}

    assert dec.({:array, 2, :uint32_le}, <<1, 0, 0, 0, 2, 0, 0>>) ==
             {:error, {:element, 1, :truncated}}

    assert dec.({:array, 2, :float32_le}, <<0, 0, 0xC0, 0x7F>>) ==
             {:error, {:element, 0, :not_finite}}

    assert dec.({:array, 2, :bool}, <<1, 3>>) == {:error, {:element, 1, {:invalid_bool, 3}}}
    assert dec.({:optional, :uint8}, <<>>) == {:error, :truncated}
    assert dec.({:optional, :uint8}, <<1>>) == {:error, :truncated}
    assert dec.({:optional, :uint8}, <<2, 0>>) == {:error, {:invalid_bool, 2}}
    assert dec.({:optional, :uint8}, <<0, 7>>) == {:ok, nil, <<7>>}
    assert dec.({:optional, Vec3}, <<1, 0, 0>>) == {:error, {Vec3, :x, :truncated}}
    assert Codec.decode(Type.normalize(:rest, max: 2), <<1, 2, 3>>) == {:error, {:too_long, 3, 2}}
    assert Codec.decode(Type.normalize(:rest, max: 2), <<1, 2>>) == {:ok, <<1, 2>>, <<>>}
    assert Codec.decode(Type.normalize(:rest, max: 0), <<>>) == {:ok, <<>>, <<>>}
    assert Codec.encode(Type.normalize(:rest, max: 2), <<1, 2, 3>>) == {:error, {:too_long, 3, 2}}

    assert Codec.decode(Type.normalize({:optional, :rest}, max: 1), <<1, 1, 2>>) ==
             {:error, {:too_long, 2, 1}}

    assert Wrapper.parse(<<1, 2>>) == {:error, {Wrapper, :tail, {:invalid_bool, 2}}}
    assert Wrapper.parse(<<1, 1>>) == {:error, {Wrapper, :tail, {Tail, :kind, :truncated}}}
  end

  test "random bytes and bit flips in packets of the new types never raise" do
    garble(seed(12), [Extended, Wrapper, Tail], Extended)
  end

  test "the new types are checked at compile time" do
    assert_raise ArgumentError,
                 ~r/:after is declared after :payload.*must be the last field/,
                 fn ->
                   Code.compile_string("""
                   defmodule RakNet.PacketTest.RestNotLast do
                     use RakNet.Packet
                     field :payload, :rest
                     field :after, :uint8
                   end
                   """)
                 end

    assert_raise ArgumentError, ~r/:b is declared after :a.*must be the last field/, fn ->
      defmodule OptionalRestNotLast do
        use RakNet.Packet
        field(:a, {:optional, :rest})
        field(:b, :uint8)
      end
    end

    # A nested packet that ends with :rest takes the rest too.
    assert_raise ArgumentError, ~r/:b is declared after :a.*must be the last field/, fn ->
      defmodule NestedRestNotLast do
        use RakNet.Packet
        field(:a, RakNet.PacketTest.Tail)
        field(:b, :uint8)
      end
    end

    for type <- [
          {:list, :uint8, :rest},
          {:array, 2, :rest},
          {:array, 2, Tail},
          {:list, :uint8, {:optional, Tail}}
        ] do
      assert_raise ArgumentError, ~r/cannot be the element of/, fn -> Type.normalize(type) end
    end

    for {type, message} <- [
          {{:bytes, 0}, ~r/size of :bytes must be a positive integer/},
          {{:bytes, :n}, ~r/size of :bytes must be a positive integer/},
          {{:array, 0, :uint8}, ~r/length of an :array must be a positive integer/},
          {{:array, -1, :uint8}, ~r/length of an :array must be a positive integer/},
          {{:array, 2, :uint17}, ~r/unknown field type/},
          {{:optional, {:optional, :uint8}}, ~r/cannot be optional itself/},
          {{:optional, :nope}, ~r/unknown field type/},
          {{:string, :int24_le}, ~r/unsigned integer type/},
          {{:string, :rest}, ~r/unsigned integer type/}
        ] do
      assert_raise ArgumentError, message, fn -> Type.normalize(type) end
    end

    assert_raise ArgumentError, ~r/:max must be a non-negative integer/, fn ->
      Type.normalize(:rest, max: -1)
    end

    # :rest as the last field, alone or nested, is fine.
    assert {:rest, nil} = Type.normalize(:rest)
    assert {:optional, {:rest, 5}} = Type.normalize({:optional, :rest}, max: 5)
    assert {:optional, {:string, _, 5}} = Type.normalize({:optional, {:string, :uint8}}, max: 5)
    assert Type.rest?(Type.normalize({:optional, Tail}))
    refute Type.rest?(Type.normalize({:array, 2, :uint8}))
  end

  test "the formatter keeps the DSL without parentheses, here and in apps that import it" do
    {formatter, _} = Code.eval_file(".formatter.exs")

    macros =
      for {name, arity} <- RakNet.Packet.__info__(:macros),
          not String.starts_with?(Atom.to_string(name), "__"),
          do: {name, arity}

    assert Enum.sort(formatter[:export][:locals_without_parens]) == Enum.sort(macros)
    assert formatter[:locals_without_parens] == formatter[:export][:locals_without_parens]

    source = """
    defmodule P do
      use RakNet.Packet, id: 0x90
      field :x, :uint24_le
      field :y, {:string, :uint8}, max: 16
      field(:z, :rest)
    end
    """

    assert IO.iodata_to_binary(Code.format_string!(source, formatter)) <> "\n" == source
  end

  test "a packet with a wider id inside a message type" do
    p = %Move{x: 1.5, y: -2.0, seq: 7}
    assert Move.build(p) == {:ok, <<0, 0, 192, 63, 0, 0, 0, 192, 7, 0>>}

    assert RakNet.Packet.encode(p) ==
             {:ok, <<0x86, 0x02, 0x01, 0, 0, 192, 63, 0, 0, 0, 192, 7, 0>>}

    assert Move.packet_id() == 0x0102
    assert Move.dispatch_to() == :zone
    assert Move.id_format() == {0x86, {:int, 16, :unsigned, :little}}
    assert RakNet.Packet.header(Move) == <<0x86, 0x02, 0x01>>
    assert %Move{} == %Move{x: 0.0, y: 0.0, seq: 0}
  end

  test "byte-exact encodings of varints (Bedrock's vectors) and fixed strings" do
    enc = fn t, v -> Codec.encode(Type.normalize(t), v) end
    assert enc.(:varuint32, 0) == {:ok, <<0>>}
    assert enc.(:varuint32, 300) == {:ok, <<0xAC, 0x02>>}
    assert enc.(:varuint32, 0xFFFFFFFF) == {:ok, <<0xFF, 0xFF, 0xFF, 0xFF, 0x0F>>}
    assert enc.(:varint32, -1) == {:ok, <<1>>}
    assert enc.(:varint32, 1) == {:ok, <<2>>}
    assert enc.(:varint32, -2_147_483_648) == {:ok, <<0xFF, 0xFF, 0xFF, 0xFF, 0x0F>>}

    assert enc.(:varint64, 9_223_372_036_854_775_807) ==
             {:ok, <<0xFE>> <> :binary.copy(<<0xFF>>, 8) <> <<1>>}

    assert enc.({:fixed_string, 6}, "bob") == {:ok, "bob\0\0\0"}
  end

  # ---- validation on build -------------------------------------------------------

  test "build/1 returns an error naming the field for a value out of range, never raises" do
    p = %Move{x: 1.0, y: 2.0, seq: 0}
    assert Move.build(%{p | seq: 65_536}) == {:error, {Move, :seq, {:out_of_range, 65_536}}}
    assert Move.build(%{p | seq: -1}) == {:error, {Move, :seq, {:out_of_range, -1}}}
    assert Move.build(%{p | x: 1.0e39}) == {:error, {Move, :x, {:out_of_range, 1.0e39}}}
    assert Move.build(%{p | y: "2"}) == {:error, {Move, :y, {:invalid, "2"}}}
    assert Move.build(%{a: 1}) == {:error, {Move, nil, {:not_a_struct, %{a: 1}}}}
    assert_raise ArgumentError, ~r/out_of_range/, fn -> Move.build!(%{p | seq: 70_000}) end

    {e, _} = value(seed(3), {:struct, Everything})

    assert Everything.build(%{e | name: String.duplicate("a", 25)}) ==
             {:error, {Everything, :name, {:too_long, 25, 24}}}

    assert Everything.build(%{e | name: "a\0b"}) == {:error, {Everything, :name, :contains_nul}}
    assert Everything.build(%{e | text: <<0xFF>>}) == {:error, {Everything, :text, :invalid_utf8}}

    assert Everything.build(%{e | vi32: 1 <<< 31}) ==
             {:error, {Everything, :vi32, {:out_of_range, 1 <<< 31}}}

    assert Everything.build(%{e | blob: :binary.copy("x", 301)}) ==
             {:error, {Everything, :blob, {:too_long, 301, 300}}}

    assert Everything.build(%{e | pos: %Vec3{x: 1.0, y: :up, z: 0.0}}) ==
             {:error, {Everything, :pos, {Vec3, :y, {:invalid, :up}}}}

    assert Everything.build(%{e | items: [%Item{}, %Item{kind: -1}]}) ==
             {:error, {Everything, :items, {:element, 1, {Item, :kind, {:out_of_range, -1}}}}}

    assert Everything.build(%{e | scores: Enum.to_list(1..21)}) ==
             {:error, {Everything, :scores, {:too_many, 21, 20}}}
  end

  # ---- malformed input -----------------------------------------------------------

  test "every truncation of a valid packet is an error naming the packet and a field" do
    Enum.reduce(1..50, seed(4), fn _, st ->
      {p, st} = value(st, {:struct, Everything})
      {:ok, body} = Everything.build(p)

      for n <- 0..(byte_size(body) - 1) do
        assert {:error, {Everything, field, _reason}} = Everything.parse(binary_part(body, 0, n))
        assert field in Map.keys(Map.from_struct(p))
      end

      assert Everything.parse(body <> "x") == {:error, {Everything, nil, {:trailing_bytes, 1}}}
      st
    end)
  end

  test "random bytes and bit flips never raise, for every packet and set" do
    garble(seed(5), [Everything, Move, Vec3, Item, Empty, Flags], Everything)
  end

  # 3,000 rounds: random bytes parsed by each of `modules`, and a valid `flip` packet with one
  # bit flipped. The generated fast path must say what the field-by-field reference says,
  # and what parses must build and parse back to the same packet (not necessarily the same
  # bytes: a varint need not be the shortest, a fixed string may hide bytes after its NUL).
  defp garble(seed, modules, flip) do
    Enum.reduce(1..3_000, seed, fn _, st ->
      {bin, st} = bytes(st, 120)
      for mod <- modules, do: parses_consistently(mod, bin)

      {p, st} = value(st, {:struct, flip})
      {:ok, body} = flip.build(p)
      {pos, st} = :rand.uniform_s(byte_size(body), st)
      {bit, st} = :rand.uniform_s(8, st)
      <<pre::binary-size(pos - 1), b, post::binary>> = body
      parses_consistently(flip, <<pre::binary, bxor(b, 1 <<< (bit - 1)), post::binary>>)
      st
    end)
  end

  defp parses_consistently(mod, bin) do
    assert mod.parse(bin) == RakNet.Packet.__explain__(mod, bin)

    case mod.parse(bin) do
      {:ok, p} -> assert mod.parse(mod.build!(p)) == {:ok, p}
      {:error, {^mod, _field, _reason}} -> :ok
    end
  end

  test "malformed values are named precisely" do
    vu32 = Type.normalize(:varuint32)

    assert Codec.decode(vu32, <<0x80, 0x80, 0x80, 0x80, 0x80, 0x01>>) ==
             {:error, :varint_too_long}

    assert Codec.decode(vu32, <<0xFF, 0xFF, 0xFF, 0xFF, 0x1F>>) == {:error, :varint_overflow}
    assert Codec.decode(vu32, <<0x80, 0x80>>) == {:error, :truncated}

    assert Codec.decode(Type.normalize(:varuint64), :binary.copy(<<0x80>>, 10) <> <<0>>) ==
             {:error, :varint_too_long}

    assert Codec.decode(:bool, <<2>>) == {:error, {:invalid_bool, 2}}
    assert Flags.parse(<<7, 1, 0>>) == {:ok, %Flags{a: 7, b: true, c: false}}
    assert Flags.parse(<<7, 2, 0>>) == {:error, {Flags, :b, {:invalid_bool, 2}}}
    assert Flags.parse(<<7, 0, 255>>) == {:error, {Flags, :c, {:invalid_bool, 255}}}

    assert Codec.decode(Type.normalize(:float32_le), <<0, 0, 0xC0, 0x7F>>) ==
             {:error, :not_finite}

    assert Codec.decode(Type.normalize(:float64_be), <<0x7F, 0xF0, 0, 0, 0, 0, 0, 0>>) ==
             {:error, :not_finite}

    assert Codec.decode(Type.normalize({:string, :uint8}), <<2, 0xC3, 0x28>>) ==
             {:error, :invalid_utf8}

    assert Codec.decode(Type.normalize({:fixed_string, 2}), <<0xC3, 0x28>>) ==
             {:error, :invalid_utf8}

    assert Codec.decode(Type.normalize({:fixed_string, 4}), <<"ab", 0, "z">>) == {:ok, "ab", <<>>}

    assert Codec.decode(
             Type.normalize({:binary, :uint32_le}, max: 10),
             <<0xFF, 0xFF, 0xFF, 0xFF>>
           ) ==
             {:error, {:too_long, 0xFFFFFFFF, 10}}

    # A count past the bytes: the elements run out, nothing is allocated up front.
    assert Codec.decode(
             Type.normalize({:list, :uint32_le, :uint8}),
             <<0xFF, 0xFF, 0xFF, 0xFF, 1>>
           ) ==
             {:error, {:element, 1, :truncated}}

    # Elements that take no bytes are bounded by default.
    assert Codec.decode(Type.normalize({:list, :uint32_le, Empty}), <<0xFF, 0xFF, 0xFF, 0xFF>>) ==
             {:error, {:too_many, 0xFFFFFFFF, 65_536}}

    assert Everything.parse(:nope) == {:error, {Everything, nil, {:not_a_binary, :nope}}}
  end

  test "declarations are checked at compile time" do
    assert_raise ArgumentError, ~r/unknown field type/, fn ->
      defmodule BadType do
        use RakNet.Packet
        field(:x, :uint17)
      end
    end

    assert_raise ArgumentError, ~r/declared twice/, fn ->
      defmodule Twice do
        use RakNet.Packet
        field(:x, :uint8)
        field(:x, :uint8)
      end
    end

    assert_raise ArgumentError, ~r/message type byte/, fn ->
      defmodule WideNoType do
        use RakNet.Packet, id: 300
      end
    end

    assert_raise ArgumentError, ~r/unsigned integer type/, fn ->
      defmodule BadPrefix do
        use RakNet.Packet
        field(:s, {:string, :int8})
      end
    end
  end
end
