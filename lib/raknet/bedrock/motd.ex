defmodule RakNet.Bedrock.Motd do
  @moduledoc """
  The Minecraft Bedrock MOTD: the unconnected pong payload from which a Bedrock client's server
  list shows a server's name, version and player count.

  It is one `;`-separated string, sent prefixed by its byte length (unsigned 16-bit,
  big-endian):

      MCPE;<motd>;<protocol>;<version>;<players>;<max players>;<server guid>;<sub motd>;<game mode>;<game mode id>;<port v4>;<port v6>;

      iex> payload = RakNet.Bedrock.Motd.encode(motd: "My server", server_guid: 42)
      <<0, 59, "MCPE;My server;766;1.21.50;0;20;42;;Survival;1;19132;19133;">>
      iex> {:ok, motd} = RakNet.Bedrock.Motd.decode(RakNet.Bedrock.Motd.put_players(payload, 3))
      iex> {motd.motd, motd.players, motd.max_players}
      {"My server", 3, 20}

  A server sets it as `:offline_ping_response` and keeps the player count live by setting it
  again when the count changes:

      motd = %RakNet.Bedrock.Motd{motd: "My server", max_players: 50}
      pong = RakNet.Bedrock.Motd.encode(%{motd | players: RakNet.Server.count(server)})
      :ok = RakNet.Server.set_offline_ping_response(server, pong)

  `:protocol` and `:version` default to 1.21.50's (766): set the ones your game layer speaks,
  which the server list shows players. `:server_guid` is usually the server's RakNet GUID
  (`:server_identifier`). With the default `:pong_amplification` of 6 the
  payload may be at most 163 bytes (`RakNet.Server.Config.pong_fits?/2`); a colour code (`§a`)
  takes 3 of them.

  ## Semicolons

  `encode/1` replaces a `;` in a text field (`:motd`, `:version`, `:sub_motd`, `:game_mode`)
  with `,` and drops a text field's trailing backslashes: the Bedrock client reads `\\;` as an
  escaped semicolon, but server lists and most tools split at every `;`, so a name is kept
  free of both. `decode/1` undoes `\\;` escapes, which some servers send.
  """

  @editions ["MCPE", "MCEE"]
  # In wire order.
  @defaults [
    edition: "MCPE",
    motd: "RakNet Server",
    protocol: 766,
    version: "1.21.50",
    players: 0,
    max_players: 20,
    server_guid: 0,
    sub_motd: "",
    game_mode: "Survival",
    game_mode_id: 1,
    port_v4: 19_132,
    port_v6: 19_133
  ]
  @fields Keyword.keys(@defaults)
  @integers [:protocol, :players, :max_players, :server_guid, :game_mode_id, :port_v4, :port_v6]
  @players_index Enum.find_index(@fields, &(&1 == :players))

  defstruct @defaults

  @typedoc """
  A MOTD. Decoded, a field the server did not send is `nil`, as is an integer field it sent
  empty; `encode/1` writes `nil` as an empty field.
  """
  @type t :: %__MODULE__{
          edition: String.t(),
          motd: String.t(),
          protocol: integer() | nil,
          version: String.t(),
          players: integer() | nil,
          max_players: integer() | nil,
          server_guid: integer() | nil,
          sub_motd: String.t() | nil,
          game_mode: String.t() | nil,
          game_mode_id: integer() | nil,
          port_v4: integer() | nil,
          port_v6: integer() | nil
        }

  @typedoc "Why a payload is not a MOTD."
  @type error :: :not_a_motd | :invalid_utf8 | :too_few_fields | {:invalid_integer, atom()}

  @doc """
  The pong payload of `motd` (a struct, or a keyword list of its fields over the defaults),
  length prefix included. Raises `ArgumentError` for an unknown edition, a field of the wrong
  type or a MOTD longer than 65,535 bytes (and `KeyError` for an unknown key, as `struct!/2`).
  """
  @spec encode(t() | keyword()) :: binary()
  def encode(motd) when is_list(motd), do: encode(struct!(__MODULE__, motd))

  def encode(%__MODULE__{edition: edition} = motd) when edition in @editions do
    fields = for key <- @fields, do: field_text(key, Map.fetch!(motd, key))
    frame(join(fields ++ [""]))
  end

  def encode(%__MODULE__{edition: edition}),
    do: raise(ArgumentError, "edition must be MCPE or MCEE, got: #{inspect(edition)}")

  @doc """
  Reads a pong payload, with or without its length prefix. Servers that send fewer than the
  twelve fields (older ones stop after the player counts) decode with the rest `nil`.

      iex> RakNet.Bedrock.Motd.decode("MCPE;Old server;113;1.1.0;5;20")
      {:ok, %RakNet.Bedrock.Motd{motd: "Old server", protocol: 113, version: "1.1.0", players: 5,
        max_players: 20, server_guid: nil, sub_motd: nil, game_mode: nil, game_mode_id: nil,
        port_v4: nil, port_v6: nil}}
      iex> RakNet.Bedrock.Motd.decode("RakNet Server")
      {:error, :not_a_motd}
  """
  @spec decode(binary()) :: {:ok, t()} | {:error, error()}
  def decode(payload) do
    with {:ok, texts} <- fields(payload) do
      Enum.zip(@fields, texts)
      |> Enum.reduce_while({:ok, %__MODULE__{}}, fn {key, text}, {:ok, motd} ->
        case field_value(key, text) do
          {:ok, value} -> {:cont, {:ok, Map.put(motd, key, value)}}
          :error -> {:halt, {:error, {:invalid_integer, key}}}
        end
      end)
    end
  end

  @doc """
  The twelve fields of a pong payload (with or without its length prefix) as the strings
  sent, in wire order, `\\;` escapes undone and `nil` for those not sent: what
  `RakNet.Ping.parse_motd/1` shows. Fields after the twelfth are ignored; at least the edition
  through the player count and a `;` after it must be there.

      iex> RakNet.Bedrock.Motd.fields(<<0, 15, "MCPE;a;1;v;2;3;">>)
      {:ok, ["MCPE", "a", "1", "v", "2", "3", nil, nil, nil, nil, nil, nil]}
  """
  @spec fields(binary()) :: {:ok, [String.t() | nil]} | {:error, error()}
  def fields(payload) when is_binary(payload) do
    with {:ok, parts} <- parts(unframe(payload)) do
      # The empty part after a closing `;` is no field.
      sent = if List.last(parts) == "", do: Enum.drop(parts, -1), else: parts
      {:ok, sent |> Enum.concat(List.duplicate(nil, 12)) |> Enum.take(12)}
    end
  end

  @doc """
  Sets the online player count of a struct, or of an encoded payload (with or without its
  prefix, kept as it was, every other byte unchanged). Raises `ArgumentError` for a binary
  that is not a MOTD.

      iex> RakNet.Bedrock.Motd.put_players(<<0, 14, "MCPE;a;1;v;2;3">>, 10)
      <<0, 15, "MCPE;a;1;v;10;3">>
  """
  @spec put_players(t(), non_neg_integer()) :: t()
  @spec put_players(binary(), non_neg_integer()) :: binary()
  def put_players(%__MODULE__{} = motd, players) when is_integer(players) and players >= 0,
    do: %{motd | players: players}

  def put_players(payload, players)
      when is_binary(payload) and is_integer(players) and players >= 0 do
    # Rejoined from the parts as sent, not decoded and encoded again: fields this module
    # would write otherwise (a missing or unparsable one, a trailing `;`) stay as they were.
    text = unframe(payload)

    case parts(text) do
      {:ok, parts} ->
        parts = List.replace_at(parts, @players_index, to_string(players))
        if text == payload, do: join(parts), else: frame(join(parts))

      {:error, reason} ->
        raise ArgumentError, "not a Bedrock MOTD (#{inspect(reason)}): #{inspect(payload)}"
    end
  end

  # The prefix is taken only where a MOTD follows it: unprefixed, "MC" would be a length of
  # 19,779 bytes, more than any pong holds.
  defp unframe(<<len::16, edition::binary-4, _::binary>> = payload)
       when edition in @editions and byte_size(payload) >= len + 2,
       do: binary_part(payload, 2, len)

  defp unframe(payload), do: payload

  defp frame(text) when byte_size(text) <= 0xFFFF, do: <<byte_size(text)::16, text::binary>>

  defp frame(text),
    do: raise(ArgumentError, "a MOTD is at most 65535 bytes, got: #{byte_size(text)}")

  # At least six parts as a plain split counts them (a trailing `;` leaves an empty one), so
  # the shortest MOTD taken is "MCPE;a;1;v;2;": servers stop early, not before the count.
  defp parts(text) do
    if String.valid?(text) do
      case split(text, "", []) do
        [edition | _] = parts when edition in @editions and length(parts) >= 6 -> {:ok, parts}
        [edition | _] when edition in @editions -> {:error, :too_few_fields}
        _ -> {:error, :not_a_motd}
      end
    else
      {:error, :invalid_utf8}
    end
  end

  # Splits at each `;` that is not written `\;`, undoing those escapes.
  defp split(<<"\\;", rest::binary>>, field, acc), do: split(rest, field <> ";", acc)
  defp split(<<";", rest::binary>>, field, acc), do: split(rest, "", [field | acc])
  defp split(<<c, rest::binary>>, field, acc), do: split(rest, <<field::binary, c>>, acc)
  defp split(<<>>, field, acc), do: Enum.reverse([field | acc])

  # Escapes what `split/3` undid: a field holds a `;` only when one was decoded from `\;`.
  defp join(parts), do: Enum.map_join(parts, ";", &String.replace(&1, ";", "\\;"))

  defp field_text(_key, nil), do: ""
  defp field_text(key, value) when key in @integers and is_integer(value), do: to_string(value)

  defp field_text(key, value) when key not in @integers and is_binary(value),
    do: value |> String.replace(";", ",") |> String.trim_trailing("\\")

  defp field_text(key, value) do
    expected = if key in @integers, do: "an integer", else: "a string"
    raise ArgumentError, "#{inspect(key)} must be #{expected} or nil, got: #{inspect(value)}"
  end

  defp field_value(key, text) when key in @integers and text not in [nil, ""] do
    case Integer.parse(text) do
      {value, ""} -> {:ok, value}
      _ -> :error
    end
  end

  defp field_value(key, "") when key in @integers, do: {:ok, nil}
  defp field_value(_key, text), do: {:ok, text}
end
