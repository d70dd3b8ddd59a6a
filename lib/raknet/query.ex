defmodule RakNet.Query do
  @moduledoc """
  GameSpy4 (UT3) Query, as Minecraft servers answer it: the UDP status protocol that server
  lists and monitoring tools poll to show a server's name, map, player count and player names.
  Bedrock servers answer it on the game port, beside RakNet: a query datagram starts with
  `0xFE 0xFD`, which RakNet would read as a connected datagram's flags, so the server looks
  for it first, in datagrams from addresses without a RakNet session.

  This module is the protocol alone, pure functions and no process: `handle/5` takes one
  datagram and says what to answer.

  ## The exchange

    1. Handshake: the client sends `FE FD 09 <session id>`; the server answers
       `09 <session id> <token>\\0`, the token an integer in ASCII decimal.
    2. Stat: the client sends `FE FD 00 <session id> <token>`, the token as a 32-bit big-endian
       integer, and gets the basic stat (name, game type, map, player counts, address); sent
       with 4 more bytes of padding, the request gets the full stat (key/value pairs, then the
       player names).

  The session id is the client's own 4 bytes, echoed in every reply.

  A stat reply can be a hundred times bigger than its request, and UDP source addresses can be
  forged: answering anyone would make the server a reflector that floods whatever address an
  attacker writes into its requests. The token closes that: it is only sent to the address
  asking for it, so a client that sends it back proves it receives what is sent to that
  address. A handshake reply is barely bigger than its request.

  Tokens are not stored: `token/3` derives one from a secret, the client's address and port,
  and the current 30-second period; a stat request's token is taken if it is the one of the
  current period or of the one before, so a token lives 30 to 60 seconds.

  ## With a server

  Start `RakNet.Server` with `query: true` and keep what it answers current with
  `RakNet.Server.set_query_info/2`, e.g. when a player joins or leaves:

      {:ok, server} = RakNet.Server.start_link(MyGame.Player, 19_132, query: true)
      :ok = RakNet.Server.set_query_info(server, %{motd: "My server", players: ["Steve"]})

  The server hands a datagram starting with `0xFE 0xFD` from an address without a RakNet
  session to `handle/5`, with a secret of its own and the current time, and sends the reply
  from the game port.

  ## The info map

  Every key is optional; a missing key or a value of another type takes the default.

  | Key            | Type           | Default               | Sent as                     |
  | -------------- | -------------- | --------------------- | --------------------------- |
  | `:motd`        | `String.t()`   | `"A RakNet server"`   | `hostname`                  |
  | `:gametype`    | `String.t()`   | `"SMP"`               | `gametype`                  |
  | `:game_id`     | `String.t()`   | `"MINECRAFTPE"`       | `game_id` (full stat only)  |
  | `:version`     | `String.t()`   | `""`                  | `version` (full stat only)  |
  | `:plugins`     | `String.t()`   | `""`                  | `plugins` (full stat only)  |
  | `:map`         | `String.t()`   | `"world"`             | `map`                       |
  | `:players`     | `[String.t()]` | `[]`                  | the player list (full stat) |
  | `:num_players` | `integer()`    | length of `:players`  | `numplayers`                |
  | `:max_players` | `integer()`    | `20`                  | `maxplayers`                |
  | `:host_port`   | `0..65535`     | `19132`               | `hostport`                  |
  | `:host_ip`     | `String.t()`   | `"0.0.0.0"`           | `hostip`                    |

  A text field may also be given as an integer, and a count as a string. The protocol ends
  each string with a NUL byte, so NULs are removed from every value; a value is cut to its
  first 255 bytes (not in the middle of a UTF-8 character), an empty player name is left out,
  and a reply is kept within 1,400 bytes, one datagram on any path: player names that do not
  fit are left out of the full stat (`numplayers` still gives the true count), and should the
  values themselves not fit, the longest are shortened.

      iex> addr = {{127, 0, 0, 1}, 50_000}
      iex> hello = <<0xFE, 0xFD, 0x09, 0, 0, 0, 1>>
      iex> {:reply, <<9, 0, 0, 0, 1, text::binary>>, :handshake} =
      ...>   RakNet.Query.handle(hello, addr, %{}, "secret", 1_000)
      iex> token = String.to_integer(String.trim_trailing(text, <<0>>))
      iex> token == RakNet.Query.token("secret", addr, div(1_000, 30))
      true
      iex> basic = <<0xFE, 0xFD, 0x00, 0, 0, 0, 1, token::32>>
      iex> RakNet.Query.handle(basic, addr, %{motd: "Hi", players: ["Steve"]}, "secret", 1_010)
      {:reply, <<0, 0, 0, 0, 1, "Hi", 0, "SMP", 0, "world", 0, "1", 0, "20", 0, 19_132::little-16,
        "0.0.0.0", 0>>, :stat}
      iex> RakNet.Query.handle(basic, addr, %{}, "another secret", 1_010)
      :ignore

  ## Wire format

  As the wiki.vg "Query" page describes it and PocketMine-MP's `QueryHandler` and `QueryInfo`
  send it:

      handshake request  FE FD 09 <session:4> (up to 16 further bytes, ignored)
      handshake reply    09 <session:4> <token, ASCII decimal> 00
      basic request      FE FD 00 <session:4> <token:int32 BE>                 (11 bytes)
      full request       FE FD 00 <session:4> <token:int32 BE> <padding:4>     (15 bytes)
      basic reply        00 <session:4> hostname 00 gametype 00 map 00 numplayers 00
                         maxplayers 00 <hostport:uint16 LE> hostip 00
      full reply         00 <session:4> "splitnum" 00 80 00
                         (key 00 value 00) x 10, 00
                         01 "player_" 00 00 (name 00) x N, 00

  The full reply's keys, in order: `hostname`, `gametype`, `game_id`, `version`, `plugins`,
  `map`, `numplayers`, `maxplayers`, `hostport`, `hostip`.
  """

  import Bitwise

  @typedoc "What a server answers with; see the moduledoc for the keys."
  @type info :: %{optional(atom()) => term()}

  @typedoc "A client's address and port."
  @type address :: {:inet.ip_address(), :inet.port_number()}

  @handshake 0x09
  @stat 0x00

  # A token's period, in seconds.
  @period 30
  # PocketMine-MP takes a handshake with any number of bytes after the session id; a few are
  # taken here, not a datagram of any size.
  @max_handshake_extra 16
  @max_value 255
  @max_reply 1_400

  @defaults %{
    motd: "A RakNet server",
    gametype: "SMP",
    game_id: "MINECRAFTPE",
    version: "",
    plugins: "",
    map: "world",
    max_players: 20,
    host_port: 19_132,
    host_ip: "0.0.0.0"
  }

  # Bytes of a reply besides the values. Basic: the type and session (5), a NUL after each of
  # its 6 values, the port (2). Full: the type and session (5), "splitnum" 00 80 00 (11), each
  # key with its NUL and a NUL after each value, the empty key (1), 01 "player_" 00 00 (10),
  # the NUL closing the player list (1).
  @full_keys ~w(hostname gametype game_id version plugins map) ++
               ~w(numplayers maxplayers hostport hostip)
  @basic_overhead 5 + 6 + 2
  @full_overhead 5 + 11 + Enum.sum(Enum.map(@full_keys, &(byte_size(&1) + 2))) + 1 + 10 + 1

  @doc """
  Whether a datagram is a query one: it starts with `0xFE 0xFD`.

      iex> RakNet.Query.query?(<<0xFE, 0xFD, 0x09, 0, 0, 0, 1>>)
      true
      iex> RakNet.Query.query?(<<0x01, 0, 0, 0, 0, 0, 0, 0, 1>>)
      false
  """
  @spec query?(binary()) :: boolean()
  def query?(<<0xFE, 0xFD, _::binary>>), do: true
  def query?(_datagram), do: false

  @doc """
  What to answer `datagram` from `address`, given the server's `info`, its `secret` and the
  time `now_s` in seconds (any clock that does not go back, the same one from call to call).

  Returns `{:reply, reply, :handshake}` for a handshake, `{:reply, reply, :stat}` for a basic
  or full stat request with a token that `address` was given in the last 30 to 60 seconds, and
  `:ignore` for anything else: a stat request with a wrong or old token, one of another
  length, another type, a datagram cut short. Never raises, whatever the datagram.
  """
  @spec handle(binary(), address(), info(), secret :: binary(), now_s :: integer()) ::
          {:reply, binary(), :handshake | :stat} | :ignore
  def handle(datagram, address, info, secret, now_s)

  def handle(
        <<0xFE, 0xFD, @handshake, session::binary-4, extra::binary>>,
        address,
        _info,
        secret,
        now_s
      )
      when byte_size(extra) <= @max_handshake_extra do
    token = token(secret, address, period(now_s))
    {:reply, <<@handshake, session::binary, Integer.to_string(token)::binary, 0>>, :handshake}
  end

  # The full stat request's 4 bytes of padding are not looked at: wiki.vg sends 00 00 00 00,
  # the UT3 description FF FF FF 01, and PocketMine-MP and Minecraft check the length only.
  def handle(
        <<0xFE, 0xFD, @stat, session::binary-4, sent::32, padding::binary>>,
        address,
        info,
        secret,
        now_s
      )
      when byte_size(padding) in [0, 4] do
    period = period(now_s)

    # Clients send the token as a signed 32-bit integer; ours are below 2^31, so it reads the
    # same unsigned.
    if sent == token(secret, address, period) or sent == token(secret, address, period - 1) do
      stat = if padding == <<>>, do: basic_stat(info), else: full_stat(info)
      {:reply, <<@stat, session::binary, stat::binary>>, :stat}
    else
      :ignore
    end
  end

  def handle(_datagram, _address, _info, _secret, _now_s), do: :ignore

  @doc """
  The token `address` is given in the 30-second period `period` (`div(now_s, 30)`): the first
  31 bits of an HMAC-SHA256, keyed with `secret`, of the IP address (4 or 16 bytes), the port
  (16 bits) and the period (64 bits, signed), all big-endian.

      iex> t = RakNet.Query.token("secret", {{127, 0, 0, 1}, 50_000}, 33)
      iex> t in 0..0x7FFFFFFF
      true
      iex> t == RakNet.Query.token("secret", {{127, 0, 0, 1}, 50_001}, 33)
      false
  """
  @spec token(secret :: binary(), address(), period :: integer()) :: non_neg_integer()
  def token(secret, {ip, port}, period)
      when is_binary(secret) and is_integer(port) and is_integer(period) do
    data = <<ip_bytes(ip)::binary, port::16, period::signed-64>>
    <<token::32, _::binary>> = :crypto.mac(:hmac, :sha256, secret, data)
    token &&& 0x7FFFFFFF
  end

  defp ip_bytes({a, b, c, d}), do: <<a, b, c, d>>

  defp ip_bytes({a, b, c, d, e, f, g, h}),
    do: <<a::16, b::16, c::16, d::16, e::16, f::16, g::16, h::16>>

  # Floored, so that a negative clock does not make two periods of zero.
  defp period(now_s) when is_integer(now_s), do: Integer.floor_div(now_s, @period)

  ## Replies

  # The port is little-endian, the one such field: wiki.vg's example has `DD 63` for 25565,
  # PocketMine-MP writes it with `writeLShort`.
  defp basic_stat(info) do
    v = values(info)
    texts = [v.motd, v.gametype, v.map, v.num_players, v.max_players, v.host_ip]
    [motd, gametype, map, num, max, ip] = fit(texts, @max_reply - @basic_overhead)

    <<motd::binary, 0, gametype::binary, 0, map::binary, 0, num::binary, 0, max::binary, 0,
      v.host_port::little-16, ip::binary, 0>>
  end

  defp full_stat(info) do
    v = values(info)

    texts =
      fit(
        [
          v.motd,
          v.gametype,
          v.game_id,
          v.version,
          v.plugins,
          v.map,
          v.num_players,
          v.max_players,
          Integer.to_string(v.host_port),
          v.host_ip
        ],
        @max_reply - @full_overhead
      )

    pairs = Enum.zip_with(@full_keys, texts, &[&1, 0, &2, 0])
    room = @max_reply - @full_overhead - Enum.sum(Enum.map(texts, &byte_size/1))
    names = names_that_fit(v.players, room, [])

    # The two fixed runs are wiki.vg's "padding" of the full stat response, 11 bytes
    # ("splitnum" 00 80 00) before the pairs and 10 (01 "player_" 00 00) after their closing
    # empty key, as PocketMine-MP's `QueryInfo::getLongQuery` sends them too.
    IO.iodata_to_binary([
      ["splitnum", 0, 0x80, 0],
      pairs,
      0,
      [1, "player_", 0, 0],
      names,
      0
    ])
  end

  # The names, in order, as long as each (and its NUL) fits in `room` bytes.
  defp names_that_fit([name | rest], room, acc) when byte_size(name) + 1 <= room,
    do: names_that_fit(rest, room - byte_size(name) - 1, [acc, name, 0])

  defp names_that_fit(_names, _room, acc), do: acc

  # `values` as they are sent, their NULs included, within `budget` bytes: unchanged when they
  # fit, else the longest cut to one length, the greatest that fits.
  defp fit(values, budget) do
    sizes = Enum.map(values, &byte_size/1)

    if Enum.sum(sizes) <= budget do
      values
    else
      limit =
        Enum.find(@max_value..0//-1, 0, fn limit ->
          Enum.sum(Enum.map(sizes, &min(&1, limit))) <= budget
        end)

      Enum.map(values, &cut(&1, limit))
    end
  end

  ## The info map

  # Every field as the text it is sent as (the port excepted), NULs stripped, cut to 255
  # bytes; the player names without the empty ones.
  defp values(info) do
    info = if is_map(info), do: info, else: %{}
    players = info |> Map.get(:players) |> list()
    names = players |> Enum.map(&text(&1, "")) |> Enum.reject(&(&1 == ""))
    num_players = text(Map.get(info, :num_players), Integer.to_string(length(players)))

    host_port =
      case Map.get(info, :host_port) do
        port when is_integer(port) and port in 0..65_535 -> port
        _ -> @defaults.host_port
      end

    texts =
      for key <- [:motd, :gametype, :game_id, :version, :plugins, :map, :max_players, :host_ip],
          into: %{},
          do: {key, text(Map.get(info, key), text(@defaults[key], ""))}

    Map.merge(texts, %{players: names, num_players: num_players, host_port: host_port})
  end

  # A proper list of what `value` holds: itself if it is one, the elements before an improper
  # tail, or none.
  defp list(value) when is_list(value), do: proper(value, [])
  defp list(_value), do: []

  defp proper([head | tail], acc), do: proper(tail, [head | acc])
  defp proper(_tail, acc), do: Enum.reverse(acc)

  defp text(value, _default) when is_binary(value),
    do: value |> :binary.replace(<<0>>, <<>>, [:global]) |> cut(@max_value)

  defp text(value, _default) when is_integer(value),
    do: value |> Integer.to_string() |> cut(@max_value)

  defp text(_value, default), do: default

  # The first `max` bytes of `text`, fewer when the cut would split a UTF-8 character (by at
  # most 3, so that a text that is not UTF-8 loses no more).
  defp cut(text, max) when byte_size(text) <= max, do: text
  defp cut(text, max), do: binary_part(text, 0, boundary(text, max, 3))

  defp boundary(text, at, tries) when at > 0 and tries > 0 do
    if (:binary.at(text, at) &&& 0xC0) == 0x80, do: boundary(text, at - 1, tries - 1), else: at
  end

  defp boundary(_text, at, _tries), do: at
end
