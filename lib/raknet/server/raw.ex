defmodule RakNet.Server.Raw do
  @moduledoc false
  # The process that answers a server's non-RakNet datagrams (`:query`, `:raw_handler`):
  # the listener forwards each datagram its endpoints offer, and this process calls
  # RakNet.Query or the application's handler and sends the reply through the endpoint. A
  # process of its own, so that a slow handler never holds up the listener (which accepts
  # connections and answers the operator's calls); an offer it reaches later than the
  # endpoint would take its reply (5 s) is skipped. Linked to the listener: each ends with
  # the other.

  require Logger

  alias RakNet.Native
  alias RakNet.Server.Config

  # The endpoint takes a reply within 5 s of the offer; later ones are skipped here.
  @stale_ms 4_500

  @doc "Starts the process for `config`'s server bound to `port`, linked to the caller."
  @spec start_link(Config.t(), map(), :inet.port_number() | nil) :: pid()
  def start_link(%Config{} = config, query_info, port) do
    state = %{
      config: config,
      query_info: query_info,
      query_secret: :crypto.strong_rand_bytes(32),
      port: port
    }

    spawn_link(fn -> loop(state) end)
  end

  @doc "Offers `data` from `from` (an endpoint's `:raw` message, received at `at` ms)."
  @spec offer(pid(), reference(), {:inet.ip_address(), :inet.port_number()}, binary()) :: :ok
  def offer(pid, endpoint, from, data) do
    send(pid, {:offer, endpoint, from, data, System.monotonic_time(:millisecond)})
    :ok
  end

  @doc "Replaces what Query answers with."
  @spec set_query_info(pid(), map()) :: :ok
  def set_query_info(pid, info) do
    send(pid, {:query_info, info})
    :ok
  end

  defp loop(state) do
    receive do
      {:offer, endpoint, from, data, at} ->
        if System.monotonic_time(:millisecond) - at <= @stale_ms,
          do: answer(state, endpoint, from, data)

        loop(state)

      {:query_info, info} ->
        loop(%{state | query_info: info})

      _other ->
        loop(state)
    end
  end

  defp answer(state, endpoint, {ip, port} = from, data) do
    case reply(state, data, from) do
      {:reply, bytes, proven} ->
        Native.endpoint_send_raw(endpoint, ip |> :inet.ntoa() |> to_string(), port, bytes, proven)

      :noreply ->
        :ok
    end
  end

  defp reply(%{config: %Config{query: query}} = state, data, from) when query != false do
    info = Map.put_new(state.query_info, :host_port, state.port)

    case RakNet.Query.handle(data, from, info, state.query_secret, System.os_time(:second)) do
      {:reply, reply, :stat} -> {:reply, reply, true}
      {:reply, reply, :handshake} -> {:reply, reply, false}
      :ignore -> :noreply
    end
  end

  defp reply(%{config: %Config{raw_handler: {module, arg}}} = state, data, from) do
    case module.handle_datagram(data, from, arg) do
      :noreply ->
        :noreply

      {:reply, reply} ->
        {:reply, IO.iodata_to_binary(reply), false}

      {:reply, reply, :proven} ->
        {:reply, IO.iodata_to_binary(reply), true}

      other ->
        raise ArgumentError, "expected :noreply or {:reply, iodata}, got: #{inspect(other)}"
    end
  catch
    kind, reason ->
      Logger.error(
        "raknet: #{inspect(module)}.handle_datagram/3 failed: " <>
          Exception.format(kind, reason, __STACKTRACE__),
        raknet_port: state.config.port
      )

      :noreply
  end

  defp reply(_state, _data, _from), do: :noreply
end
