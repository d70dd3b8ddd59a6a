defmodule RakNet.NetherNet.Options do
  @moduledoc """
  The `:nethernet` option of `RakNet.Server`: NetherNet (Minecraft Bedrock's WebRTC
  transport) beside RakNet, on the same UDP ports (IPv4 and IPv6), with HTTP signaling on a
  TCP port of each family.

      {RakNet.Server,
       [MyGame.Player, 19132,
        nethernet: [
          key_file: "/var/lib/mygame/nethernet_operator.pem",
          status: %{name: "My server", protocol: 2177, version: "1.26.50"}
        ]]}

  Keys (all optional):

    * `:port` - the TCP port of HTTP signaling (`GET /v1/join`, `POST /v1/join/{id}`), on
      each address family's address. Default: the UDP port number of that family's socket
      (as Bedrock Dedicated Server does).
    * `:ip` - the address signaling listens on for its family. Default: the server's `:ip`
      (IPv4) and `:ipv6_ip` (IPv6).
    * `:public_address` - the IP address answers name for the UDP socket (a server behind
      NAT, or one reached at another address than it binds). Default: the address the client
      reached signaling at, whose family's socket then carries the session.
    * `:key_file` - the operator key (P-384, PKCS#8 PEM) that signs every answer; clients
      pin it (trust on first use over plain HTTP), so keep it: it is generated at the first
      start if the file does not exist (mode 0600). Default `"nethernet_operator.pem"` in
      the current directory.
    * `:domain` - `idp.domain` of the server's assertion (shown to players as untrusted text).
      Default `"raknet"`.
    * `:client_auth` - `:open` (anyone connects; a client's identity claims reach the handler
      marked unverified) or `{:jwks, json}`: an identity is required and its token must be
      signed by one of the JWKS's keys (the auth service's; verified claims). Default `:open`.
    * `:status` - what `GET /v1/join` answers besides the player count: `:name`, `:protocol`,
      `:version`, `:level`, `:game_type`, `:max_players` (default the server's
      `:max_connections`).
    * `:batch_header` - `0xFE` for a Bedrock server (recommended there): Bedrock sends its
      batches over NetherNet without RakNet's game-packet byte, and this puts it back in
      front of each message received and takes it off each message sent that starts with
      it, so one handler serves players of both transports unchanged. Default `nil`:
      messages as they travel.
    * `:tls` - `[certfile: path, keyfile: path]`: signaling over HTTPS (clients then trust the
      certificate and show no key prompt). Default `nil`: plain HTTP.
    * `:max_sessions` (1 024), `:max_negotiating` (128), `:max_negotiating_per_ip` (4):
      NetherNet sessions, and sessions between answer and open data channels, in all and
      for offers from one address, at most.
    * `:offers_per_ip_per_sec` (5), `:max_http_connections` (64),
      `:max_http_connections_per_ip` (8), `:http_timeout_ms` (5 000): signaling's bounds (a
      request not read in time is dropped; past a connection limit, 503). When every slot
      is taken, the request that has been arriving longest gives its slot to the new one if
      that is over `:slow_request_ms` (500), or at once when the new one comes from an
      address that holds no slot.
  """

  @enforce_keys []
  defstruct port: nil,
            ip: nil,
            public_address: nil,
            key_file: "nethernet_operator.pem",
            domain: "raknet",
            client_auth: :open,
            status: %{},
            tls: nil,
            batch_header: nil,
            max_sessions: 1024,
            max_negotiating: 128,
            max_negotiating_per_ip: 4,
            offers_per_ip_per_sec: 5,
            max_http_connections: 64,
            max_http_connections_per_ip: 8,
            slow_request_ms: 500,
            http_timeout_ms: 5_000

  @type t :: %__MODULE__{}

  @status_keys [:name, :protocol, :version, :level, :game_type, :max_players]

  @doc """
  Validates the keyword list (see the moduledoc); raises `ArgumentError` naming the key.

      iex> RakNet.NetherNet.Options.new(port: 19133).port
      19133
      iex> RakNet.NetherNet.Options.new(client_auth: :closed)
      ** (ArgumentError) :nethernet's :client_auth must be :open or {:jwks, json}, got: :closed
  """
  @spec new(keyword()) :: t()
  def new(opts) when is_list(opts) do
    unless Keyword.keyword?(opts),
      do: raise(ArgumentError, ":nethernet must be a keyword list, got: #{inspect(opts)}")

    Enum.reduce(opts, %__MODULE__{}, fn {key, value}, acc ->
      unless Map.has_key?(acc, key) and key != :__struct__,
        do: raise(ArgumentError, "unknown :nethernet option #{inspect(key)}")

      Map.put(acc, key, validate(key, value))
    end)
  end

  def new(other),
    do: raise(ArgumentError, ":nethernet must be a keyword list, got: #{inspect(other)}")

  defp validate(:port, v), do: check(:port, v, is_nil(v) or v in 0..65_535, "a port or nil")

  defp validate(key, v) when key in [:ip, :public_address] do
    case v do
      nil ->
        nil

      ip when is_tuple(ip) ->
        check(key, v, :inet.is_ip_address(ip), "an IP address")

      text when is_binary(text) ->
        case :inet.parse_strict_address(String.to_charlist(text)) do
          {:ok, ip} -> ip
          _ -> check(key, v, false, "an IP address")
        end

      _ ->
        check(key, v, false, "an IP address")
    end
  end

  defp validate(:key_file, v), do: check(:key_file, v, is_binary(v) and v != "", "a path")
  defp validate(:domain, v), do: check(:domain, v, is_binary(v), "a string")

  defp validate(:client_auth, :open), do: :open

  defp validate(:client_auth, {:jwks, json} = v) when is_binary(json), do: v

  defp validate(:client_auth, v),
    do: check(:client_auth, v, false, ":open or {:jwks, json}")

  defp validate(:status, v) do
    check(
      :status,
      v,
      is_map(v) and Enum.all?(Map.keys(v), &(&1 in @status_keys)),
      "a map of #{inspect(@status_keys)}"
    )
  end

  defp validate(:batch_header, v),
    do: check(:batch_header, v, is_nil(v) or v in 0..255, "a byte or nil")

  defp validate(:tls, nil), do: nil

  defp validate(:tls, v) do
    check(
      :tls,
      v,
      Keyword.keyword?(v) and is_binary(v[:certfile]) and is_binary(v[:keyfile]),
      "nil or [certfile: path, keyfile: path]"
    )
  end

  defp validate(key, v)
       when key in [
              :max_sessions,
              :max_negotiating,
              :max_negotiating_per_ip,
              :offers_per_ip_per_sec,
              :max_http_connections,
              :max_http_connections_per_ip,
              :http_timeout_ms
            ],
       do: check(key, v, is_integer(v) and v > 0, "a positive integer")

  defp validate(:slow_request_ms, v),
    do: check(:slow_request_ms, v, is_integer(v) and v >= 0, "a non-negative integer")

  defp check(_key, value, true, _expected), do: value

  defp check(key, value, false, expected),
    do:
      raise(
        ArgumentError,
        ":nethernet's #{inspect(key)} must be #{expected}, got: #{inspect(value)}"
      )

  @doc """
  The operator key in `:key_file`, generated (and written, mode 0600) if the file does not
  exist. Raises if it exists and is not a P-384 PKCS#8 PEM key.
  """
  @spec load_key!(t()) :: binary()
  def load_key!(%__MODULE__{key_file: path}) do
    case File.read(path) do
      {:ok, pem} ->
        case RakNet.Native.nethernet_key_jwk(pem) do
          {:ok, _jwk} -> pem
          {:error, _} -> raise ArgumentError, "#{path} is not a P-384 PKCS#8 PEM key"
        end

      {:error, :enoent} ->
        pem = RakNet.Native.nethernet_generate_key()
        File.mkdir_p!(Path.dirname(path))
        File.write!(path, pem)
        File.chmod!(path, 0o600)
        pem

      {:error, reason} ->
        raise ArgumentError, "cannot read #{path}: #{:file.format_error(reason)}"
    end
  end

  @doc false
  # The NIF's `nethernet` option map.
  @spec to_native(t(), binary()) :: map()
  def to_native(%__MODULE__{} = o, pem) do
    %{
      key_pem: pem,
      domain: o.domain,
      client_auth: o.client_auth,
      max_sessions: o.max_sessions,
      max_negotiating: o.max_negotiating,
      max_negotiating_per_ip: o.max_negotiating_per_ip,
      batch_header: o.batch_header
    }
  end
end
