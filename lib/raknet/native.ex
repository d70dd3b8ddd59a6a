defmodule RakNet.Native do
  @moduledoc false
  # The NIF functions of native/raknet-nif (`rustler::init!("Elixir.RakNet.Native")`).
  #
  # Loading happens in @on_load. If it fails, the error is logged and returned, so the module
  # itself does not load and callers get an UndefinedFunctionError rather than a half-working
  # module; an already loaded (older) version keeps running. The stubs below only run if the
  # NIF library lacks a function.

  require Logger

  @on_load :load_nif

  @nif_file "native/libraknet_nif"

  @typedoc "What `build_info/0` returns; see `RakNet.build_info/0`."
  @type build_info :: %{
          version: String.t(),
          nif_version: String.t(),
          protocol_versions: [non_neg_integer()]
        }

  @doc false
  @spec load_nif() :: :ok | {:error, String.t()}
  def load_nif do
    with {:ok, path} <- nif_path(),
         :ok <- :erlang.load_nif(String.to_charlist(path), 0) do
      :ok
    else
      {:error, reason} ->
        message = error_message(reason)
        Logger.error(message)
        {:error, message}
    end
  end

  @doc false
  @spec build_info() :: build_info()
  def build_info, do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec native_memory() :: non_neg_integer()
  def native_memory, do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec engine_defaults() :: map()
  def engine_defaults, do: :erlang.nif_error(:nif_not_loaded)

  # The runtime; see docs/nif-contract.md for every function and message.

  @doc false
  @spec endpoint_start(map(), pid()) :: {:ok, reference()} | {:error, term()}
  def endpoint_start(_opts, _owner), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_start_group(map(), pid(), pos_integer()) ::
          {:ok, [reference(), ...]} | {:error, term()}
  def endpoint_start_group(_opts, _owner, _count), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_info(reference()) :: map() | {:error, :closed}
  def endpoint_info(_endpoint), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # How many connections the endpoint holds, connecting ones included (never blocks).
  @spec endpoint_load(reference()) :: non_neg_integer()
  def endpoint_load(_endpoint), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # Whether the endpoint has a connection out to host:port, or is connecting (never blocks).
  @spec endpoint_connected_to(reference(), String.t(), :inet.port_number()) :: boolean()
  def endpoint_connected_to(_endpoint, _host, _port), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_set_offline_ping_response(reference(), binary()) :: :ok | {:error, :too_large}
  def endpoint_set_offline_ping_response(_endpoint, _data), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_ban(reference(), binary(), non_neg_integer() | nil) ::
          :ok | {:error, :einval | :closed}
  def endpoint_ban(_endpoint, _ip, _duration_ms), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_unban(reference(), binary()) :: :ok | {:error, :einval | :closed}
  def endpoint_unban(_endpoint, _ip), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_ban_guid(reference(), non_neg_integer(), boolean(), non_neg_integer() | nil) ::
          :ok | {:error, :closed}
  def endpoint_ban_guid(_endpoint, _guid, _ban, _duration_ms),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # The engine's key of a ban (what `endpoint_banned/1` lists it as).
  @spec ban_key(binary()) :: {:ok, binary()} | {:error, :einval}
  def ban_key(_ip), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_banned(reference()) ::
          [{binary() | {:guid, non_neg_integer()}, non_neg_integer() | nil}] | {:error, :closed}
  def endpoint_banned(_endpoint), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_connect(reference(), binary(), :inet.port_number(), pid(), map()) ::
          {:ok, reference()} | {:error, term()}
  def endpoint_connect(_endpoint, _host, _port, _owner, _opts),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  def endpoint_connect(endpoint, host, port, owner),
    do: endpoint_connect(endpoint, host, port, owner, %{})

  @doc false
  # Answer a NetherNet offer on the endpoint hosting the server's sessions; the answer comes
  # as {:raknet_nethernet_answer, tag, {:ok, sdp} | {:error, reason}} to `reply_to`. `peer`:
  # who sent it, for its address's share of negotiations.
  @spec endpoint_nethernet_offer(
          reference(),
          binary(),
          String.t() | nil,
          String.t() | nil,
          pid(),
          non_neg_integer()
        ) ::
          :ok | {:error, atom()}
  def endpoint_nethernet_offer(_endpoint, _sdp, _candidate, _peer, _reply_to, _tag),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # A NetherNet session to a server, as a client: its offer, for the caller to take to the
  # server's signaling; the answer goes to conn_nethernet_answer/2.
  @spec endpoint_nethernet_connect(
          reference(),
          String.t(),
          String.t(),
          :inet.port_number(),
          pid(),
          %{identity: map() | nil, batch_header: 0..255 | nil}
        ) :: {:ok, reference(), binary()} | {:error, term()}
  def endpoint_nethernet_connect(_endpoint, _local_ip, _host, _port, _owner, _opts),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec conn_nethernet_answer(reference(), binary()) :: :ok | {:error, atom()}
  def conn_nethernet_answer(_conn, _answer), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec nethernet_generate_key() :: binary()
  def nethernet_generate_key, do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec nethernet_key_jwk(binary()) :: {:ok, String.t()} | {:error, :invalid_key}
  def nethernet_key_jwk(_pem), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_send_raw(reference(), binary(), :inet.port_number(), binary(), boolean()) ::
          :ok | {:error, atom()}
  def endpoint_send_raw(_endpoint, _host, _port, _data, _proven),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_ping(reference(), binary(), :inet.port_number(), pid()) :: :ok | {:error, atom()}
  def endpoint_ping(_endpoint, _host, _port, _owner), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_set_suspended(reference(), boolean()) :: :ok
  def endpoint_set_suspended(_endpoint, _suspended), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec endpoint_set_max_connections(reference(), pos_integer()) :: :ok
  def endpoint_set_max_connections(_endpoint, _max), do: :erlang.nif_error(:nif_not_loaded)

  # Stops the endpoint, waiting up to `linger_ms` for its peers to acknowledge their
  # disconnection; `{:raknet_endpoint, endpoint, :stopped}` follows once its socket is closed.
  @doc false
  @spec endpoint_stop(reference(), non_neg_integer()) :: :ok
  def endpoint_stop(endpoint, linger_ms \\ 2_000)
  def endpoint_stop(_endpoint, _linger_ms), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec broadcast([reference()], atom(), integer(), atom(), binary()) ::
          {:ok, non_neg_integer()} | {:error, atom()}
  def broadcast(_conns, _reliability, _channel, _priority, _data),
    do: :erlang.nif_error(:nif_not_loaded)

  # Tests only: crash the endpoint's thread (it must have been started with
  # `fault_injection: true`).
  @doc false
  @spec endpoint_inject_fault(reference()) :: :ok | {:error, :not_enabled}
  def endpoint_inject_fault(_endpoint), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec conn_set_owner(reference(), pid()) :: :ok | {:error, :closed}
  def conn_set_owner(_conn, _pid), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec conn_send(reference(), atom(), non_neg_integer(), atom(), binary()) ::
          {:ok, nil | pos_integer()} | {:error, atom()}
  def conn_send(_conn, _reliability, _channel, _priority, _data),
    do: :erlang.nif_error(:nif_not_loaded)

  # conn_send/5 on a dirty scheduler, for a large message (its copy takes a while).
  @doc false
  @spec conn_send_dirty(reference(), atom(), non_neg_integer(), atom(), binary()) ::
          {:ok, nil | pos_integer()} | {:error, atom()}
  def conn_send_dirty(_conn, _reliability, _channel, _priority, _data),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec conn_close(reference()) :: :ok
  def conn_close(_conn), do: :erlang.nif_error(:nif_not_loaded)

  # The owner is told `reason` (`:erlang.term_to_binary/1` of it, at most 64 KiB) instead of
  # `:local_close`.
  @doc false
  @spec conn_close_with(reference(), binary()) :: :ok
  def conn_close_with(_conn, _reason), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec conn_info(reference()) :: {:ok, map()} | {:error, :closed}
  def conn_info(_conn), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec conn_delivered(reference(), non_neg_integer(), non_neg_integer()) :: :ok
  def conn_delivered(_conn, _count, _bytes), do: :erlang.nif_error(:nif_not_loaded)

  # `:erlang.load_nif/2` takes the path without its extension and appends .so (on every Unix,
  # macOS included). `:code.priv_dir/1` is Application.app_dir(:raknet, "priv"), without raising
  # when :raknet is not in the code path.
  defp nif_path do
    case :code.priv_dir(:raknet) do
      {:error, :bad_name} -> {:error, :no_app_dir}
      priv -> {:ok, Path.join(List.to_string(priv), @nif_file)}
    end
  end

  @build_hint "Build it with `mix compile` (or `make build` in the raknet checkout); " <>
                "that runs cargo, so it needs Rust: https://rustup.rs"

  defp error_message(:no_app_dir) do
    "could not load the raknet NIF: the :raknet application is not in the code path. " <>
      @build_hint
  end

  defp error_message({:upgrade, text}) do
    "could not load the raknet NIF into a new version of #{inspect(__MODULE__)} " <>
      "(#{text}); the previous version stays in use. Restart the VM to load a new NIF build."
  end

  defp error_message({reason, text}) do
    "could not load the raknet NIF from #{nif_file_for_message()} (#{reason}: #{text}). " <>
      @build_hint
  end

  defp nif_file_for_message do
    case nif_path() do
      {:ok, path} -> path <> ".so"
      {:error, _} -> @nif_file <> ".so"
    end
  end
end
