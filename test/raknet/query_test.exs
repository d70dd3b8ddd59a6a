defmodule RakNet.QueryTest do
  use ExUnit.Case, async: true

  import Bitwise

  alias RakNet.Query

  doctest RakNet.Query

  @secret "test secret"
  @addr {{192, 168, 1, 20}, 54_321}
  # The first second of the period 33,334 (`div(@now, 30)`).
  @now 1_000_020
  @session <<0xDE, 0xAD, 0xBE, 0xEF>>

  defp handshake(addr \\ @addr, now \\ @now, secret \\ @secret) do
    {:reply, <<9, @session, text::binary>>, :handshake} =
      Query.handle(<<0xFE, 0xFD, 9, @session::binary>>, addr, %{}, secret, now)

    size = byte_size(text) - 1
    <<digits::binary-size(size), 0>> = text
    String.to_integer(digits)
  end

  defp basic(token), do: <<0xFE, 0xFD, 0, @session::binary, token::signed-32>>
  defp full(token, padding \\ <<0, 0, 0, 0>>), do: basic(token) <> padding

  # The full stat's key/value pairs and player names; raises unless it is framed as one.
  defp parse_full(<<0, @session, "splitnum", 0, 0x80, 0, rest::binary>>) do
    {pairs, <<1, "player_", 0, 0, rest::binary>>} = pairs(rest, [])
    {names, <<>>} = cstrings(rest, [])
    {pairs, names}
  end

  defp pairs(bin, acc) do
    case cstring(bin) do
      {"", rest} ->
        {Enum.reverse(acc), rest}

      {key, rest} ->
        {value, rest} = cstring(rest)
        pairs(rest, [{key, value} | acc])
    end
  end

  defp cstrings(bin, acc) do
    case cstring(bin) do
      {"", rest} -> {Enum.reverse(acc), rest}
      {text, rest} -> cstrings(rest, [text | acc])
    end
  end

  defp cstring(bin) do
    [text, rest] = :binary.split(bin, <<0>>)
    {text, rest}
  end

  # Whether `datagram` is a stat request carrying a token `@addr` holds at `@now`.
  defp valid_stat_request?(datagram) do
    period = div(@now, 30)
    valid = [Query.token(@secret, @addr, period), Query.token(@secret, @addr, period - 1)]

    case datagram do
      <<0xFE, 0xFD, 0, _::binary-4, token::32, padding::binary>> ->
        byte_size(padding) in [0, 4] and token in valid

      _ ->
        false
    end
  end

  defp mutate(datagram) do
    size = byte_size(datagram)

    case :rand.uniform(5) do
      1 ->
        at = :rand.uniform(size) - 1
        <<head::binary-size(at), byte, tail::binary>> = datagram
        <<head::binary, bxor(byte, :rand.uniform(255)), tail::binary>>

      2 ->
        binary_part(datagram, 0, :rand.uniform(size + 1) - 1)

      3 ->
        datagram <> :rand.bytes(:rand.uniform(20))

      4 ->
        at = :rand.uniform(size + 1) - 1
        <<head::binary-size(at), tail::binary>> = datagram
        <<head::binary, :rand.uniform(256) - 1, tail::binary>>

      5 ->
        datagram
    end
  end

  describe "query?/1" do
    test "is true for what starts with FE FD only" do
      assert Query.query?(<<0xFE, 0xFD>>)
      assert Query.query?(<<0xFE, 0xFD, 9, 1, 2, 3, 4>>)
      refute Query.query?(<<>>)
      refute Query.query?(<<0xFE>>)
      refute Query.query?(<<0xFD, 0xFE, 9>>)
      # An unconnected ping.
      refute Query.query?(<<0x01, 0::64, 0x00FFFF00FEFEFEFEFDFDFDFD12345678::128, 0::64>>)
    end
  end

  describe "handshake" do
    test "is answered with the session id and the token in decimal, NUL-terminated" do
      request = <<0xFE, 0xFD, 0x09, 0xDE, 0xAD, 0xBE, 0xEF>>
      token = Query.token(@secret, @addr, div(@now, 30))
      digits = Integer.to_string(token)

      assert Query.handle(request, @addr, %{}, @secret, @now) ==
               {:reply, <<0x09, 0xDE, 0xAD, 0xBE, 0xEF>> <> digits <> <<0x00>>, :handshake}

      assert handshake() == token
    end

    test "takes a few bytes after the session id, not more, and not fewer than 4 bytes of id" do
      reply = Query.handle(<<0xFE, 0xFD, 9, @session::binary>>, @addr, %{}, @secret, @now)

      for extra <- [<<0>>, <<0, 0, 0, 0>>, :binary.copy(<<0xFF>>, 16)] do
        request = <<0xFE, 0xFD, 9, @session::binary, extra::binary>>
        assert Query.handle(request, @addr, %{}, @secret, @now) == reply
      end

      request = <<0xFE, 0xFD, 9, @session::binary, 0::8*17>>
      assert Query.handle(request, @addr, %{}, @secret, @now) == :ignore
      assert Query.handle(<<0xFE, 0xFD, 9, 1, 2, 3>>, @addr, %{}, @secret, @now) == :ignore
      assert Query.handle(<<0xFE, 0xFD, 9>>, @addr, %{}, @secret, @now) == :ignore
    end
  end

  describe "token/3" do
    test "is the first 31 bits of an HMAC-SHA256 of the address, port and period" do
      <<t4::32, _::binary>> =
        :crypto.mac(:hmac, :sha256, @secret, <<192, 168, 1, 20, 54_321::16, 33_334::64>>)

      assert Query.token(@secret, @addr, 33_334) == (t4 &&& 0x7FFFFFFF)

      v6 = {{0x2001, 0xDB8, 0, 0, 0, 0, 0, 1}, 19_132}

      <<t6::32, _::binary>> =
        :crypto.mac(
          :hmac,
          :sha256,
          @secret,
          <<0x2001::16, 0xDB8::16, 0::16, 0::16, 0::16, 0::16, 0::16, 1::16, 19_132::16,
            33_334::64>>
        )

      assert Query.token(@secret, v6, 33_334) == (t6 &&& 0x7FFFFFFF)
    end

    test "stays within 31 bits" do
      for port <- 1..2_000 do
        assert Query.token(@secret, {{10, 0, 0, 1}, port}, 7) in 0..0x7FFFFFFF
      end
    end
  end

  describe "tokens" do
    test "are taken in the period they were given and the next, not later" do
      # Given in the last second of a period, used up to the last second of the next.
      given = 1_000_019
      token = handshake(@addr, given)

      for now <- [given, given + 1, given + 30], request <- [basic(token), full(token)] do
        assert {:reply, _, :stat} = Query.handle(request, @addr, %{}, @secret, now)
      end

      for now <- [given + 31, given + 60, given + 90, given - 30, given - 31] do
        assert Query.handle(basic(token), @addr, %{}, @secret, now) == :ignore
        assert Query.handle(full(token), @addr, %{}, @secret, now) == :ignore
      end
    end

    test "are another address's, another port's or another secret's" do
      token = handshake()
      {ip, port} = @addr
      assert {:reply, _, :stat} = Query.handle(basic(token), @addr, %{}, @secret, @now)

      for {addr, secret} <- [
            {{ip, port + 1}, @secret},
            {{{192, 168, 1, 21}, port}, @secret},
            {{{0, 0, 0, 0, 0, 0xFFFF, 0xC0A8, 0x0114}, port}, @secret},
            {@addr, "another secret"}
          ] do
        assert Query.handle(basic(token), addr, %{}, secret, @now) == :ignore
        assert Query.handle(full(token), addr, %{}, secret, @now) == :ignore
        assert handshake(addr, @now, secret) != token
      end
    end

    test "are compared on all 32 bits" do
      token = handshake()
      assert Query.handle(basic(token ||| 0x80000000), @addr, %{}, @secret, @now) == :ignore
      assert Query.handle(basic(token + 1), @addr, %{}, @secret, @now) == :ignore
      assert Query.handle(basic(0), @addr, %{}, @secret, @now) == :ignore
      assert Query.handle(basic(-1), @addr, %{}, @secret, @now) == :ignore
    end
  end

  describe "stat" do
    @info %{
      motd: "My server",
      gametype: "SMP",
      version: "1.21.50",
      plugins: "raknet 1.0",
      map: "Bedrock level",
      players: ["Steve", "Alex"],
      max_players: 10,
      host_port: 19_133,
      host_ip: "192.168.1.2"
    }

    test "basic: five strings, the port little-endian, the address" do
      expected =
        <<0x00, 0xDE, 0xAD, 0xBE, 0xEF>> <>
          <<"My server", 0x00, "SMP", 0x00, "Bedrock level", 0x00, "2", 0x00, "10", 0x00>> <>
          <<0xBD, 0x4A>> <> <<"192.168.1.2", 0x00>>

      assert Query.handle(basic(handshake()), @addr, @info, @secret, @now) ==
               {:reply, expected, :stat}
    end

    test "basic, with the defaults" do
      expected =
        <<0x00, 0xDE, 0xAD, 0xBE, 0xEF>> <>
          <<"A RakNet server", 0x00, "SMP", 0x00, "world", 0x00, "0", 0x00, "20", 0x00>> <>
          <<0xBC, 0x4A>> <> <<"0.0.0.0", 0x00>>

      assert Query.handle(basic(handshake()), @addr, %{}, @secret, @now) ==
               {:reply, expected, :stat}
    end

    test "full: splitnum, ten key/value pairs in Minecraft's order, then the players" do
      expected =
        <<0x00, 0xDE, 0xAD, 0xBE, 0xEF>> <>
          <<"splitnum", 0x00, 0x80, 0x00>> <>
          <<"hostname", 0x00, "My server", 0x00>> <>
          <<"gametype", 0x00, "SMP", 0x00>> <>
          <<"game_id", 0x00, "MINECRAFTPE", 0x00>> <>
          <<"version", 0x00, "1.21.50", 0x00>> <>
          <<"plugins", 0x00, "raknet 1.0", 0x00>> <>
          <<"map", 0x00, "Bedrock level", 0x00>> <>
          <<"numplayers", 0x00, "2", 0x00>> <>
          <<"maxplayers", 0x00, "10", 0x00>> <>
          <<"hostport", 0x00, "19133", 0x00>> <>
          <<"hostip", 0x00, "192.168.1.2", 0x00>> <>
          <<0x00>> <>
          <<0x01, "player_", 0x00, 0x00>> <>
          <<"Steve", 0x00, "Alex", 0x00>> <>
          <<0x00>>

      assert Query.handle(full(handshake()), @addr, @info, @secret, @now) ==
               {:reply, expected, :stat}
    end

    test "full, with the defaults and no players" do
      expected =
        <<0x00, 0xDE, 0xAD, 0xBE, 0xEF, "splitnum", 0x00, 0x80, 0x00>> <>
          <<"hostname", 0x00, "A RakNet server", 0x00, "gametype", 0x00, "SMP", 0x00>> <>
          <<"game_id", 0x00, "MINECRAFTPE", 0x00, "version", 0x00, 0x00>> <>
          <<"plugins", 0x00, 0x00, "map", 0x00, "world", 0x00>> <>
          <<"numplayers", 0x00, "0", 0x00, "maxplayers", 0x00, "20", 0x00>> <>
          <<"hostport", 0x00, "19132", 0x00, "hostip", 0x00, "0.0.0.0", 0x00, 0x00>> <>
          <<0x01, "player_", 0x00, 0x00, 0x00>>

      assert Query.handle(full(handshake()), @addr, %{}, @secret, @now) ==
               {:reply, expected, :stat}
    end

    test "the full stat's padding may hold anything; other lengths are not stat requests" do
      token = handshake()
      {:reply, reply, :stat} = Query.handle(full(token), @addr, @info, @secret, @now)

      for padding <- [<<0xFF, 0xFF, 0xFF, 0x01>>, <<1, 2, 3, 4>>] do
        assert Query.handle(full(token, padding), @addr, @info, @secret, @now) ==
                 {:reply, reply, :stat}
      end

      for padding <- [<<0>>, <<0, 0>>, <<0, 0, 0>>, <<0, 0, 0, 0, 0>>, <<0::8*12>>] do
        assert Query.handle(basic(token) <> padding, @addr, @info, @secret, @now) == :ignore
      end

      <<short::binary-10, _>> = basic(token)
      assert Query.handle(short, @addr, @info, @secret, @now) == :ignore
    end

    test "the session id is echoed as sent" do
      token = handshake()

      for session <- [<<0, 0, 0, 0>>, <<0xFF, 0xFF, 0xFF, 0xFF>>, <<0x0F, 0x0F, 0x0F, 0x0F>>] do
        request = <<0xFE, 0xFD, 0, session::binary, token::32>>

        assert {:reply, <<0, ^session::binary-4, _::binary>>, :stat} =
                 Query.handle(request, @addr, @info, @secret, @now)
      end
    end

    test "an unknown type is ignored, token or not" do
      token = handshake()

      for type <- [1, 2, 8, 0x0A, 0x17, 0xFF] do
        request = <<0xFE, 0xFD, type, @session::binary, token::32>>
        assert Query.handle(request, @addr, @info, @secret, @now) == :ignore
      end
    end
  end

  describe "the info map" do
    test "NUL bytes are stripped so that they cannot break the framing" do
      info = %{
        motd: "My\0 server\0",
        map: <<0, 0>>,
        host_ip: "1.2.3.4\0",
        players: ["St\0eve", "\0", "", "Alex"]
      }

      token = handshake()
      {:reply, reply, :stat} = Query.handle(full(token), @addr, info, @secret, @now)
      {pairs, names} = parse_full(reply)

      assert length(pairs) == 10
      assert {"hostname", "My server"} in pairs
      assert {"map", ""} in pairs
      assert {"hostip", "1.2.3.4"} in pairs
      # The count is the list's; the names left empty are not sent.
      assert {"numplayers", "4"} in pairs
      assert names == ["Steve", "Alex"]

      {:reply, basic, :stat} = Query.handle(basic(token), @addr, info, @secret, @now)

      assert basic ==
               <<0, @session::binary, "My server", 0, "SMP", 0, 0, "4", 0, "20", 0,
                 19_132::little-16, "1.2.3.4", 0>>
    end

    test "500 long player names: the full stat keeps within 1,400 bytes, the count is true" do
      names = for i <- 1..500, do: "player_#{String.pad_leading(to_string(i), 3, "0")}_" <> "x"
      names = Enum.map(names, &String.pad_trailing(&1, 32, "x"))
      info = %{motd: "Busy server", players: names}

      {:reply, reply, :stat} = Query.handle(full(handshake()), @addr, info, @secret, @now)
      assert byte_size(reply) <= 1_400
      {pairs, sent} = parse_full(reply)
      assert {"numplayers", "500"} in pairs
      assert {"hostname", "Busy server"} in pairs

      # The first names, as many as fit: the next one (and its NUL) would not.
      assert sent == Enum.take(names, length(sent))
      assert length(sent) > 30
      assert byte_size(reply) + 33 > 1_400

      # An explicit count wins over the list's length.
      info = Map.put(info, :num_players, 612)
      {:reply, reply, :stat} = Query.handle(full(handshake()), @addr, info, @secret, @now)
      assert {"numplayers", "612"} in elem(parse_full(reply), 0)
    end

    test "a value is cut to 255 bytes, not in a UTF-8 character; replies stay within 1,400" do
      long = String.duplicate("é", 500)
      keys = [:motd, :gametype, :game_id, :version, :plugins, :map, :host_ip]
      info = Map.new(keys, &{&1, long}) |> Map.put(:players, [long, "Steve"])
      token = handshake()

      {:reply, reply, :stat} = Query.handle(full(token), @addr, info, @secret, @now)
      assert byte_size(reply) <= 1_400
      {pairs, names} = parse_full(reply)

      for {_key, value} <- pairs do
        assert byte_size(value) <= 255
        assert String.valid?(value)
      end

      # Seven long values do not fit in 1,400 bytes at 255 each: they are shortened alike.
      assert pairs |> Enum.map(&byte_size(elem(&1, 1))) |> Enum.max() < 255
      assert names == []

      {:reply, reply, :stat} = Query.handle(basic(token), @addr, info, @secret, @now)
      assert byte_size(reply) <= 1_400

      # One long value alone is cut to 254 bytes (127 two-byte characters) rather than 255.
      {:reply, reply, :stat} = Query.handle(full(token), @addr, %{motd: long}, @secret, @now)
      assert {"hostname", String.duplicate("é", 127)} in elem(parse_full(reply), 0)

      {:reply, reply, :stat} =
        Query.handle(full(token), @addr, %{players: [long, "Steve"]}, @secret, @now)

      assert elem(parse_full(reply), 1) == [String.duplicate("é", 127), "Steve"]

      # Bytes that are not UTF-8 are cut at 255.
      info = %{motd: :binary.copy(<<0xFF>>, 300)}
      {:reply, reply, :stat} = Query.handle(full(token), @addr, info, @secret, @now)
      assert {"hostname", :binary.copy(<<0xFF>>, 255)} in elem(parse_full(reply), 0)
    end

    test "values of the wrong type take the defaults" do
      info = %{
        motd: {:not, :text},
        map: 42,
        max_players: "50",
        host_port: 70_000,
        host_ip: nil,
        players: [:steve, "Alex", 7 | :improper],
        num_players: :many
      }

      token = handshake()
      {:reply, reply, :stat} = Query.handle(full(token), @addr, info, @secret, @now)
      {pairs, names} = parse_full(reply)

      assert Map.new(pairs) == %{
               "hostname" => "A RakNet server",
               "gametype" => "SMP",
               "game_id" => "MINECRAFTPE",
               "version" => "",
               "plugins" => "",
               "map" => "42",
               "numplayers" => "3",
               "maxplayers" => "50",
               "hostport" => "19132",
               "hostip" => "0.0.0.0"
             }

      assert names == ["Alex", "7"]

      for info <- [nil, [], %{players: "Steve"}, %{players: nil}] do
        assert {:reply, _, :stat} = Query.handle(full(token), @addr, info, @secret, @now)
        assert {:reply, _, :stat} = Query.handle(basic(token), @addr, info, @secret, @now)
      end
    end
  end

  describe "any datagram" do
    test "is answered or ignored, never raises; a stat reply needs a valid token" do
      :rand.seed(:exsss, {20, 11, 7})
      token = handshake()
      info = %{players: ["Steve", "Alex"], motd: "Fuzz"}

      valid = [
        <<0xFE, 0xFD, 9, @session::binary>>,
        basic(token),
        full(token),
        full(token, <<0xFF, 0xFF, 0xFF, 0x01>>)
      ]

      random =
        for _ <- 1..10_000 do
          bytes = :rand.bytes(:rand.uniform(65) - 1)

          # Half of them look like a query: FE FD, then a type of either kind or any.
          case :rand.uniform(4) do
            1 -> bytes
            2 -> <<0xFE, 0xFD>> <> bytes
            3 -> <<0xFE, 0xFD, 0>> <> bytes
            4 -> <<0xFE, 0xFD, 9>> <> bytes
          end
        end

      mutated = for _ <- 1..10_000, do: valid |> Enum.random() |> mutate()

      results =
        for datagram <- valid ++ random ++ mutated do
          result = Query.handle(datagram, @addr, info, @secret, @now)

          case result do
            :ignore ->
              :ignore

            {:reply, <<9, session::binary-4, _::binary>> = reply, :handshake} ->
              assert <<0xFE, 0xFD, 9, ^session::binary-4, _::binary>> = datagram
              assert byte_size(reply) <= 16
              :handshake

            {:reply, <<0, session::binary-4, _::binary>> = reply, :stat} ->
              assert valid_stat_request?(datagram), "a stat reply to #{inspect(datagram)}"
              assert <<0xFE, 0xFD, 0, ^session::binary-4, _::binary>> = datagram
              assert byte_size(reply) <= 1_400
              :stat
          end
        end

      # Each outcome happened, so the loop exercised them all.
      frequencies = Enum.frequencies(results)
      assert frequencies[:ignore] > 5_000
      assert frequencies[:handshake] > 100
      assert frequencies[:stat] > 100

      # And every valid stat request of the mutations was answered.
      for datagram <- mutated, valid_stat_request?(datagram) do
        assert {:reply, _, :stat} = Query.handle(datagram, @addr, info, @secret, @now)
      end
    end
  end
end
