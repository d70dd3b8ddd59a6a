defmodule RakNet.PacketSetTest.Hello do
  use RakNet.Packet, id: 0x90, dispatch_to: :world
  field(:name, {:fixed_string, 16})
end

defmodule RakNet.PacketSetTest.Ping do
  use RakNet.Packet, id: 0x91
  field(:t, :uint64_be)
end

defmodule RakNet.PacketSetTest.Walk do
  use RakNet.Packet, id: 0x0001, message_type: 0x86, dispatch_to: :zone
  field(:dx, :int8)
  field(:dy, :int8)
end

defmodule RakNet.PacketSetTest.Say do
  use RakNet.Packet, id: 0x0200, message_type: 0x86, dispatch_to: :session
  field(:text, {:string, :uint8})
end

defmodule RakNet.PacketSetTest.Other do
  use RakNet.Packet, id: 0x0200, message_type: 0x87, id_type: :uint32_be
  field(:n, :varint32)
end

defmodule RakNet.PacketSetTest.Mixed do
  use RakNet.Packet.Set,
    packets: [
      RakNet.PacketSetTest.Hello,
      RakNet.PacketSetTest.Ping,
      RakNet.PacketSetTest.Walk,
      RakNet.PacketSetTest.Say,
      RakNet.PacketSetTest.Other
    ]
end

defmodule RakNet.PacketSetTest.Wide do
  use RakNet.Packet.Set,
    id_format: {0x86, :uint16_le},
    packets: [RakNet.PacketSetTest.Walk, RakNet.PacketSetTest.Say]
end

defmodule RakNet.PacketSetTest do
  use ExUnit.Case, async: true

  alias RakNet.Packet
  alias RakNet.PacketSetTest.{Hello, Mixed, Other, Ping, Say, Walk, Wide}

  test "every packet of a set encodes and decodes back, through both decode forms" do
    packets = [
      %Hello{name: "ann"},
      %Ping{t: 123_456_789},
      %Walk{dx: -1, dy: 1},
      %Say{text: "hi all"},
      %Other{n: -5}
    ]

    for p <- packets do
      assert {:ok, <<type, body::binary>> = message} = Packet.encode(p)
      assert Packet.decode(Mixed, message) == {:ok, p}
      assert Packet.decode(Mixed, type, body) == {:ok, p}
    end

    assert Packet.encode!(%Walk{dx: 2, dy: 3}) == <<0x86, 1, 0, 2, 3>>
    assert Packet.encode!(%Say{text: "a"}) == <<0x86, 0, 2, 1, "a">>
    assert Packet.encode!(%Other{n: 1}) == <<0x87, 0, 0, 2, 0, 2>>
    assert Packet.decode(Wide, <<0x86, 1, 0, 2, 3>>) == {:ok, %Walk{dx: 2, dy: 3}}
  end

  test "unknown ids, truncated ids and bad bodies are error values" do
    assert Packet.decode(Mixed, <<0x99, 1, 2>>) == {:error, {:unknown_packet, 0x99}}
    assert Packet.decode(Mixed, <<0x86, 9, 9, 1>>) == {:error, {:unknown_packet, {0x86, 0x0909}}}
    assert Packet.decode(Mixed, <<0x86, 1>>) == {:error, {:truncated_id, 0x86}}
    assert Packet.decode(Mixed, <<0x87, 0, 0, 2>>) == {:error, {:truncated_id, 0x87}}
    assert Packet.decode(Mixed, <<>>) == {:error, :empty}
    assert Packet.decode(Mixed, <<0x86, 1, 0, 2>>) == {:error, {Walk, :dy, :truncated}}

    assert Packet.decode(Mixed, <<0x91, 1, 2, 3, 4, 5, 6, 7, 8, 9>>) ==
             {:error, {Ping, nil, {:trailing_bytes, 1}}}

    assert Packet.decode(Wide, <<0x90, "ann">>) == {:error, {:unknown_packet, 0x90}}
    assert Packet.encode(:not_a_packet) == {:error, {:not_a_packet, :not_a_packet}}
  end

  test "random messages never raise" do
    st = :rand.seed_s(:exsss, {1, 2, 3})

    Enum.reduce(1..5_000, st, fn _, st ->
      {len, st} = :rand.uniform_s(24, st)

      {bytes, st} =
        Enum.map_reduce(1..len, st, fn _, st ->
          {b, st} = :rand.uniform_s(256, st)
          {b - 1, st}
        end)

      # Mostly messages of the set's types, so that the bodies get exercised too.
      bytes =
        case bytes do
          [_ | rest] when rem(len, 2) == 0 ->
            [Enum.at([0x86, 0x87, 0x90, 0x91], rem(len, 4)) | rest]

          _ ->
            bytes
        end

      case Packet.decode(Mixed, :erlang.list_to_binary(bytes)) do
        {:ok, %mod{} = p} -> assert mod in Mixed.packets() and is_struct(p)
        {:error, _reason} -> :ok
      end

      st
    end)
  end

  test "module_for/1 and packets/0" do
    assert Mixed.module_for(0x90) == Hello
    assert Mixed.module_for({0x86, 0x0200}) == Say
    assert Mixed.module_for({0x87, 0x0200}) == Other
    assert Mixed.module_for(0x86) == nil
    assert Wide.packets() == [Walk, Say]
  end

  test "a set with a duplicate id, a conflicting message type or a broken id_format does not compile" do
    assert_raise CompileError, ~r/message type 144 is used by/, fn ->
      defmodule Dup.Hello2 do
        use RakNet.Packet, id: 0x90
      end

      defmodule Dup do
        use RakNet.Packet.Set, packets: [RakNet.PacketSetTest.Hello, Dup.Hello2]
      end
    end

    assert_raise CompileError, ~r/id 1 in message type 134 is used by/, fn ->
      defmodule DupWide.Walk2 do
        use RakNet.Packet, id: 1, message_type: 0x86
      end

      defmodule DupWide do
        use RakNet.Packet.Set, packets: [RakNet.PacketSetTest.Walk, DupWide.Walk2]
      end
    end

    assert_raise CompileError, ~r/both a packet's id and the type of wider ids/, fn ->
      defmodule Clash.Raw do
        use RakNet.Packet, id: 0x86
      end

      defmodule Clash do
        use RakNet.Packet.Set, packets: [RakNet.PacketSetTest.Walk, Clash.Raw]
      end
    end

    assert_raise CompileError, ~r/carries ids of different types/, fn ->
      defmodule Types.W32 do
        use RakNet.Packet, id: 5, message_type: 0x86, id_type: :uint32_le
      end

      defmodule Types do
        use RakNet.Packet.Set, packets: [RakNet.PacketSetTest.Walk, Types.W32]
      end
    end

    assert_raise CompileError, ~r/the set requires/, fn ->
      defmodule Format do
        use RakNet.Packet.Set, id_format: :byte, packets: [RakNet.PacketSetTest.Walk]
      end
    end

    assert_raise CompileError, ~r/has no id/, fn ->
      defmodule NoId.Inner do
        use RakNet.Packet
      end

      defmodule NoId do
        use RakNet.Packet.Set, packets: [NoId.Inner]
      end
    end
  end
end
