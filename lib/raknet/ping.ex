defmodule RakNet.Ping do
  @moduledoc """
  Unconnected pings: ask any RakNet server (official RakNet, Minecraft Bedrock, ours) for its
  pong without connecting.

  A Bedrock server's pong carries its MOTD (`MCPE;motd;protocol;version;players;max;...`);
  `ping/3` parses it into a map when it is one and returns the raw bytes otherwise.

      {:ok, pong} = RakNet.Ping.ping("127.0.0.1", 19132)
      pong.motd.players_online
  """

  @typedoc "A parsed Bedrock MOTD."
  @type motd :: %{
          edition: String.t(),
          motd: String.t(),
          protocol_version: String.t(),
          version_name: String.t(),
          players_online: String.t(),
          max_players: String.t(),
          server_guid: String.t(),
          sub_motd: String.t(),
          game_mode: String.t(),
          game_mode_numeric: String.t(),
          port_v4: String.t(),
          port_v6: String.t()
        }

  @typedoc "What a server answered."
  @type pong :: %{
          address: {:inet.ip_address(), :inet.port_number()},
          guid: non_neg_integer(),
          data: binary(),
          motd: motd() | nil,
          rtt_us: non_neg_integer()
        }

  @motd_fields [
    :edition,
    :motd,
    :protocol_version,
    :version_name,
    :players_online,
    :max_players,
    :server_guid,
    :sub_motd,
    :game_mode,
    :game_mode_numeric,
    :port_v4,
    :port_v6
  ]

  @doc "The fields of a Bedrock MOTD, in wire order."
  @spec motd_fields() :: [atom()]
  def motd_fields, do: @motd_fields

  @doc """
  Pings `host:port` and waits for the pong.

  `host` is a name, an address string (`"127.0.0.1"`, `"::1"`, `"localhost"`) or an address
  tuple (`{127, 0, 0, 1}`). Options:
  `:timeout` in ms (default 3000). An unknown option raises `ArgumentError`, as in
  `RakNet.connect/3`.

  Returns `{:ok, pong}`, `{:error, :timeout}` when nothing answers, or `{:error, reason}` when
  the host does not resolve or no socket can be opened.
  """
  @spec ping(String.t() | charlist() | :inet.ip_address(), :inet.port_number(), keyword()) ::
          {:ok, pong()} | {:error, term()}
  def ping(host, port, opts \\ []) when is_integer(port) and port in 1..65_535 do
    timeout = opts |> Keyword.validate!(timeout: 3000) |> Keyword.fetch!(:timeout)

    with {:ok, ip} <- resolve(host),
         {:ok, endpoint} <- RakNet.ClientEndpoint.any(ip) do
      # Waited for in a process of its own: a pong that comes after the timeout goes to a
      # process that is gone, not into the caller's mailbox.
      fn -> await_pong(endpoint, ip, port, timeout) end
      |> Task.async()
      |> Task.await(:infinity)
    end
  end

  defp await_pong(endpoint, ip, port, timeout) do
    address = ip |> :inet.ntoa() |> to_string()

    with :ok <- RakNet.Native.endpoint_ping(endpoint, address, port, self()) do
      receive do
        {:raknet_pong, ^endpoint, {^ip, ^port} = from, guid, data, rtt_us} ->
          {:ok, %{address: from, guid: guid, data: data, motd: parse_motd(data), rtt_us: rtt_us}}
      after
        timeout -> {:error, :timeout}
      end
    end
  end

  @doc """
  Parses a Bedrock MOTD pong payload (see `RakNet.Bedrock.Motd.fields/1`) into the strings
  sent, `""` for fields not sent; `nil` when the payload is not one.
  `RakNet.Bedrock.Motd.decode/1` reads the numbers as integers.

      iex> RakNet.Ping.parse_motd(<<0, 15, "MCPE;a;1;v;2;3;">>).players_online
      "2"
      iex> RakNet.Ping.parse_motd("official-motd")
      nil
  """
  @spec parse_motd(binary()) :: motd() | nil
  def parse_motd(data) when is_binary(data) do
    case RakNet.Bedrock.Motd.fields(data) do
      {:ok, fields} -> @motd_fields |> Enum.zip(Enum.map(fields, &(&1 || ""))) |> Map.new()
      {:error, _} -> nil
    end
  end

  def parse_motd(_data), do: nil

  defp resolve(ip) when is_tuple(ip), do: {:ok, ip}

  defp resolve(host) do
    host = to_charlist(host)

    case :inet.getaddr(host, :inet) do
      {:ok, ip} -> {:ok, ip}
      {:error, _} -> :inet.getaddr(host, :inet6)
    end
  end
end
