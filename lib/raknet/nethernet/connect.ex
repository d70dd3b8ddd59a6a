defmodule RakNet.NetherNet.Connect do
  @moduledoc false
  # The client role's signaling: `RakNet.connect(host, port, transport: :nethernet)`.
  #
  # The offer is made by the runtime for a session on a client endpoint, naming as its
  # address the one this host reaches the server's signaling from; it goes to
  # `POST /v1/join/{networkId}` and the answer back to the runtime, which checks the
  # server's identity assertion as a Minecraft client does and opens the data channels. The
  # outcome reaches `owner` as for RakNet: `{:raknet_connected, conn, info}` or
  # `{:raknet_connect_failed, conn, reason}`.

  alias RakNet.Native

  @max_answer 16 * 1024

  @doc false
  @spec open(reference(), :inet.ip_address(), :inet.port_number(), keyword(), pid(), timeout()) ::
          {:ok, reference()} | {:error, term()}
  def open(endpoint, ip, port, opts, owner, timeout) do
    http_port = Keyword.get(opts, :signaling_port, port)
    deadline = System.monotonic_time(:millisecond) + timeout

    with {:ok, tcp} <- tcp_connect(ip, http_port, timeout) do
      try do
        with {:ok, {local, _}} <- :inet.sockname(tcp),
             {:ok, conn, offer} <-
               Native.endpoint_nethernet_connect(
                 endpoint,
                 ntoa(local),
                 ntoa(ip),
                 port,
                 owner,
                 %{identity: identity(opts[:identity]), batch_header: opts[:batch_header]}
               ) do
          case post(tcp, offer, deadline) do
            {:ok, answer} ->
              :ok = Native.conn_nethernet_answer(conn, answer)
              {:ok, conn}

            {:error, _} = error ->
              discard(conn)
              error
          end
        end
      after
        :gen_tcp.close(tcp)
      end
    end
  end

  # The player's assertion for the offer: `[token: jwt, key_pem: pem, domain: string]`.
  defp identity(nil), do: nil

  defp identity(opts) when is_list(opts) do
    unless Keyword.keyword?(opts) and is_binary(opts[:token]) and is_binary(opts[:key_pem]),
      do: raise(ArgumentError, ":identity must be [token: jwt, key_pem: pem, domain: string]")

    opts |> Keyword.take([:token, :key_pem, :domain]) |> Map.new()
  end

  defp tcp_connect(ip, port, timeout) do
    case :gen_tcp.connect(ip, port, [:binary, active: false], timeout) do
      {:ok, tcp} -> {:ok, tcp}
      {:error, reason} -> {:error, {:signaling, reason}}
    end
  end

  defp post(tcp, offer, deadline) do
    id = :rand.uniform(0xFFFF_FFFF_FFFF_FFFF)

    request = [
      "POST /v1/join/#{id} HTTP/1.1\r\nhost: server\r\ncontent-type: application/sdp\r\n",
      "content-length: #{byte_size(offer)}\r\nconnection: close\r\n\r\n",
      offer
    ]

    with :ok <- :gen_tcp.send(tcp, request),
         :ok <- :inet.setopts(tcp, packet: :http_bin),
         {:ok, {:http_response, _version, status, _reason}} <- recv(tcp, 0, deadline),
         {:ok, length} <- content_length(tcp, deadline, nil),
         :ok <- :inet.setopts(tcp, packet: :raw),
         {:ok, body} <- body(tcp, length, deadline) do
      if status in 200..299, do: {:ok, body}, else: {:error, {:signaling, status, body}}
    else
      {:error, {:signaling, _} = reason} -> {:error, reason}
      {:error, reason} -> {:error, {:signaling, reason}}
      other -> {:error, {:signaling, other}}
    end
  end

  defp content_length(tcp, deadline, length) do
    case recv(tcp, 0, deadline) do
      {:ok, :http_eoh} ->
        {:ok, length}

      {:ok, {:http_header, _, :"Content-Length", _, value}} ->
        case Integer.parse(value) do
          {n, ""} when n in 0..@max_answer -> content_length(tcp, deadline, n)
          _ -> {:error, {:signaling, :bad_answer}}
        end

      {:ok, {:http_header, _, _, _, _}} ->
        content_length(tcp, deadline, length)

      {:error, reason} ->
        {:error, reason}

      {:ok, other} ->
        {:error, {:signaling, other}}
    end
  end

  defp body(_tcp, 0, _deadline), do: {:ok, ""}
  defp body(tcp, length, deadline) when is_integer(length), do: recv(tcp, length, deadline)
  # No Content-Length: the body runs to the close.
  defp body(tcp, nil, deadline), do: read_to_close(tcp, deadline, [])

  defp read_to_close(tcp, deadline, acc) do
    case recv(tcp, 0, deadline) do
      {:ok, data} when byte_size(data) + 0 <= @max_answer ->
        read_to_close(tcp, deadline, [acc, data])

      {:error, :closed} ->
        {:ok, IO.iodata_to_binary(acc)}

      other ->
        other
    end
  end

  defp recv(tcp, length, deadline),
    do: :gen_tcp.recv(tcp, length, max(deadline - System.monotonic_time(:millisecond), 0))

  defp ntoa(ip), do: ip |> :inet.ntoa() |> to_string()

  # An attempt abandoned before its answer: the close's {:raknet_connect_failed, ...} goes to
  # a process that drops it, not to the caller.
  defp discard(conn) do
    sink =
      spawn(fn ->
        receive do
          {:raknet_connect_failed, ^conn, _} -> :ok
        after
          30_000 -> :ok
        end
      end)

    _ = Native.conn_set_owner(conn, sink)
    Native.conn_close(conn)
  end
end
