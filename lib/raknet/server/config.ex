defmodule RakNet.Server.Config do
  @moduledoc """
  The options of `RakNet.Server`, validated at start.

  X-Plane's options keep their names and defaults; unknown options raise `ArgumentError`
  except X-Plane's `:custom_packets`, `:custom_types` and `:send`, which are accepted and
  ignored.

  | option | default | meaning |
  |---|---|---|
  | `:host` | `{0, 0, 0, 0}` | IPv4 address to bind (tuple or string); `:ipv6_host` for IPv6 |
  | `:ipv6_host` | `{0, 0, 0, 0, 0, 0, 0, 0}` | IPv6 address to bind |
  | `:open_ipv4_socket` | `true` | open the IPv4 socket |
  | `:open_ipv6_socket` | `SEPARATE_IPV6_PORT != "false"` | open a separate IPv6 socket |
  | `:ipv6_port` | the IPv4 port (`0` picks another free port) | the IPv6 socket's port |
  | `:client_timeout_ms` | `10_000` | close a connection after this long without traffic |
  | `:include_timestamp_with_datagrams` | `false` | official RakNet's UDT build (X-Plane's client) |
  | `:client_data` | `%{}` | third argument of `RakNet.Client.new/3` |
  | `:offline_ping_response` | `"RakNet Server"` | unconnected pong payload (a Bedrock MOTD, say) |
  | `:server_identifier` | random | the server GUID: a 64-bit integer or an 8-byte binary |
  | `:max_number_of_internal_ids` | `10` | internal addresses in 0x10 for protocol 6 (10/11 use 20) |
  | `:max_connections` | `1024` | connections per socket; more get "no free incoming connections" |
  | `:protocol_versions` | `[11, 10, 6]` | accepted RakNet protocol versions (first is preferred) |
  | `:min_mtu` / `:max_mtu` | `400` / `1492` | MTU bounds |
  | `:use_cookies` | `false` | anti-spoofing cookie (Bedrock clients accept it, official 4.081 clients do not) |
  | `:max_pending_deliveries` | `10_000` | messages a connection process may fall behind before `:overloaded` |
  """

  @enforce_keys [:client_module, :port]
  defstruct client_module: nil,
            port: 0,
            host: {0, 0, 0, 0},
            ipv6_host: {0, 0, 0, 0, 0, 0, 0, 0},
            open_ipv4_socket: true,
            open_ipv6_socket: true,
            ipv6_port: nil,
            client_timeout_ms: 10_000,
            include_timestamp_with_datagrams: false,
            client_data: %{},
            offline_ping_response: "RakNet Server",
            server_identifier: nil,
            max_number_of_internal_ids: 10,
            max_connections: 1024,
            protocol_versions: [11, 10, 6],
            min_mtu: 400,
            max_mtu: 1492,
            use_cookies: false,
            max_pending_deliveries: 10_000

  @typedoc "A validated configuration."
  @type t :: %__MODULE__{}

  @ignored [:custom_packets, :custom_types, :send]

  @doc """
  Validates `opts` for a server of `client_module` on `port`; raises `ArgumentError` naming
  the bad option.

      iex> RakNet.Server.Config.new(RakNet.Server.Config, 0, max_mtu: 1400).max_mtu
      1400
  """
  @spec new(module(), :inet.port_number(), keyword()) :: t()
  def new(client_module, port, opts) when is_list(opts) do
    unless is_atom(client_module),
      do: raise(ArgumentError, "client module must be a module, got: #{inspect(client_module)}")

    check(:port, port, is_integer(port) and port in 0..65_535, "an integer in 0..65535")

    defaults = %__MODULE__{
      client_module: client_module,
      port: port,
      open_ipv6_socket: System.get_env("SEPARATE_IPV6_PORT") != "false"
    }

    opts
    |> Keyword.drop(@ignored)
    |> Enum.reduce(defaults, fn {key, value}, config ->
      unless Map.has_key?(defaults, key) and key not in [:client_module, :port] do
        raise ArgumentError, "unknown option #{inspect(key)} for RakNet.Server"
      end

      Map.put(config, key, validate(key, value))
    end)
    |> check_relations()
  end

  defp validate(key, value) when key in [:host, :ipv6_host] do
    case parse_ip(value) do
      {:ok, ip} ->
        ip

      :error ->
        raise ArgumentError,
              "#{inspect(key)} must be an IP address (tuple or string), got: #{inspect(value)}"
    end
  end

  defp validate(key, value)
       when key in [
              :open_ipv4_socket,
              :open_ipv6_socket,
              :include_timestamp_with_datagrams,
              :use_cookies
            ],
       do: check(key, value, is_boolean(value), "a boolean")

  defp validate(:ipv6_port, value),
    do:
      check(
        :ipv6_port,
        value,
        is_nil(value) or (is_integer(value) and value in 0..65_535),
        "nil or an integer in 0..65535"
      )

  defp validate(:client_timeout_ms, value),
    do:
      check(
        :client_timeout_ms,
        value,
        is_integer(value) and value >= 100,
        "an integer >= 100 (milliseconds)"
      )

  defp validate(:client_data, value), do: value

  defp validate(:offline_ping_response, value),
    do:
      check(
        :offline_ping_response,
        value,
        is_binary(value) and byte_size(value) < 65_536,
        "a binary"
      )

  defp validate(:server_identifier, value) do
    case value do
      nil ->
        nil

      <<id::64>> ->
        id

      id when is_integer(id) and id in 0..0xFFFF_FFFF_FFFF_FFFF ->
        id

      _ ->
        raise ArgumentError,
              ":server_identifier must be a 64-bit integer or an 8-byte binary, got: #{inspect(value)}"
    end
  end

  defp validate(:max_number_of_internal_ids, value),
    do:
      check(
        :max_number_of_internal_ids,
        value,
        is_integer(value) and value in 1..64,
        "an integer in 1..64"
      )

  defp validate(:max_connections, value),
    do: check(:max_connections, value, is_integer(value) and value > 0, "a positive integer")

  defp validate(:protocol_versions, value),
    do:
      check(
        :protocol_versions,
        value,
        is_list(value) and value != [] and Enum.all?(value, &(is_integer(&1) and &1 in 0..255)),
        "a non-empty list of integers in 0..255"
      )

  defp validate(key, value) when key in [:min_mtu, :max_mtu],
    do: check(key, value, is_integer(value) and value in 400..1500, "an integer in 400..1500")

  defp validate(:max_pending_deliveries, value),
    do:
      check(:max_pending_deliveries, value, is_integer(value) and value >= 16, "an integer >= 16")

  defp check(_key, value, true, _expected), do: value

  defp check(key, value, false, expected),
    do: raise(ArgumentError, "#{inspect(key)} must be #{expected}, got: #{inspect(value)}")

  defp check_relations(config) do
    if config.min_mtu > config.max_mtu,
      do:
        raise(
          ArgumentError,
          ":min_mtu (#{config.min_mtu}) must not exceed :max_mtu (#{config.max_mtu})"
        )

    if not config.open_ipv4_socket and not config.open_ipv6_socket,
      do:
        raise(
          ArgumentError,
          "at least one of :open_ipv4_socket and :open_ipv6_socket must be true"
        )

    config
  end

  @doc false
  @spec parse_ip(term()) :: {:ok, :inet.ip_address()} | :error
  def parse_ip(value) when is_tuple(value) do
    if :inet.is_ip_address(value), do: {:ok, value}, else: :error
  end

  def parse_ip(value) when is_binary(value) or is_list(value) do
    case :inet.parse_address(to_charlist(value)) do
      {:ok, ip} -> {:ok, ip}
      {:error, _} -> :error
    end
  end

  def parse_ip(_value), do: :error

  @doc "The `endpoint_start` options (docs/nif-contract.md) for the socket of `family`."
  @spec to_native(t(), :inet | :inet6) :: map()
  def to_native(%__MODULE__{} = c, family) do
    {host, port} =
      case family do
        :inet -> {c.host, c.port}
        :inet6 -> {c.ipv6_host, c.ipv6_port || c.port}
      end

    %{
      host: host |> :inet.ntoa() |> to_string(),
      port: port,
      accept_incoming: true,
      max_connections: c.max_connections,
      protocol_versions: c.protocol_versions,
      min_mtu: c.min_mtu,
      max_mtu: c.max_mtu,
      timeout_ms: c.client_timeout_ms,
      include_timestamp_with_datagrams: c.include_timestamp_with_datagrams,
      offline_ping_response: c.offline_ping_response,
      max_number_of_internal_ids: c.max_number_of_internal_ids,
      use_cookies: c.use_cookies,
      guid: c.server_identifier,
      max_pending_deliveries: c.max_pending_deliveries
    }
  end
end
