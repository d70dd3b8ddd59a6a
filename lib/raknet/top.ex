defmodule RakNet.Top do
  @moduledoc """
  The data and the rendering behind `mix raknet.top`: a live view of a node's RakNet
  servers, like renet_visualizer.

  `snapshot/0` runs on the node being watched (the task calls it with `:erpc`); `render/2`
  draws one frame from the snapshots seen so far, newest first. To draw your own view (a
  LiveDashboard page, an admin command), take snapshots yourself:

      %{servers: servers} = RakNet.Top.snapshot()
      for %{ports: ports, connections: n, rates: rates} <- servers,
          do: IO.puts("\#{inspect(ports)}: \#{n} players, \#{rates.bytes_out_per_sec} B/s out")
  """

  @typedoc "One server as `snapshot/0` sees it."
  @type server :: %{
          server: pid(),
          ports: [:inet.port_number()],
          connections: non_neg_integer(),
          rates: map(),
          worst_rtt: [map()],
          worst_loss: [map()]
        }

  @typedoc "What `snapshot/0` returns: the node, the time (Unix ms) and every server."
  @type snapshot :: %{node: node(), at: integer(), servers: [server()]}

  @rate_keys [
    :messages_in_per_sec,
    :messages_out_per_sec,
    :bytes_in_per_sec,
    :bytes_out_per_sec,
    :resends_per_sec,
    :packet_loss
  ]

  @doc """
  Every RakNet server of this node with its connection count, rates over the last second
  (summed over its sockets) and worst connections by round-trip time and by loss.

      %{servers: [%{ports: [19132], connections: 12, rates: %{messages_in_per_sec: 240.0}}]} =
        RakNet.Top.snapshot()
  """
  @spec snapshot() :: snapshot()
  def snapshot do
    servers =
      for server <- RakNet.Connection.Registry.servers(),
          info = safe_info(server),
          info != nil,
          do: server_snapshot(server, info)

    %{node: node(), at: System.system_time(:millisecond), servers: servers}
  end

  defp safe_info(server) do
    RakNet.Server.info(server)
  catch
    :exit, _ -> nil
  end

  defp server_snapshot(server, info) do
    endpoints = info.endpoints
    rates = Enum.map(endpoints, &Map.get(&1, :rates, %{}))

    summed =
      Map.new(@rate_keys, fn key ->
        {key, rates |> Enum.map(&Map.get(&1, key, 0.0)) |> Enum.sum()}
      end)

    # Loss is a mean per socket; the sum of two sockets' means is not a loss.
    summed = %{summed | packet_loss: summed.packet_loss / max(length(rates), 1)}
    rtt = fn key -> rates |> Enum.map(&Map.get(&1, key, 0.0)) |> Enum.max(fn -> 0.0 end) end

    %{
      server: server,
      ports: Enum.map(endpoints, & &1.port),
      connections: info.connections,
      rates: Map.merge(summed, %{rtt_p50_ms: rtt.(:rtt_p50_ms), rtt_p99_ms: rtt.(:rtt_p99_ms)}),
      worst_rtt: worst(rates, :worst_rtt, :rtt_ms),
      worst_loss: worst(rates, :worst_loss, :packet_loss)
    }
  end

  defp worst(rates, key, by) do
    rates
    |> Enum.flat_map(&Map.get(&1, key, []))
    |> Enum.sort_by(& &1[by], :desc)
    |> Enum.take(5)
  end

  @doc """
  One frame of text from the snapshots seen so far (newest first, at most 60 are used for
  the sparklines).
  """
  @spec render([snapshot(), ...], keyword()) :: String.t()
  def render([latest | _] = history, opts \\ []) do
    width = Keyword.get(opts, :width, 60)

    time =
      latest.at
      |> DateTime.from_unix!(:millisecond)
      |> DateTime.to_time()
      |> Time.truncate(:second)

    header = [
      "raknet top - #{latest.node} - #{time} - #{length(latest.servers)} server(s)\n"
    ]

    body =
      case latest.servers do
        [] -> ["\n  no RakNet server on this node\n"]
        servers -> Enum.map(servers, &render_server(&1, history, width))
      end

    IO.iodata_to_binary([header | body])
  end

  defp render_server(s, history, width) do
    series = fn key ->
      history
      |> Enum.take(width)
      |> Enum.reverse()
      |> Enum.map(fn snap ->
        case Enum.find(snap.servers, &(&1.server == s.server)) do
          nil -> 0
          found -> value(found, key)
        end
      end)
    end

    r = s.rates

    [
      "\nserver #{inspect(s.server)}  udp #{Enum.join(s.ports, ", ")}\n",
      line("connections", "#{s.connections}", series.(:connections)),
      line("msgs in/s", number(r.messages_in_per_sec), series.(:messages_in_per_sec)),
      line("msgs out/s", number(r.messages_out_per_sec), series.(:messages_out_per_sec)),
      line("bytes in/s", bytes(r.bytes_in_per_sec), series.(:bytes_in_per_sec)),
      line("bytes out/s", bytes(r.bytes_out_per_sec), series.(:bytes_out_per_sec)),
      line("resends/s", number(r.resends_per_sec), series.(:resends_per_sec)),
      "  rtt p50 #{ms(r.rtt_p50_ms)}  p99 #{ms(r.rtt_p99_ms)}  loss #{percent(r.packet_loss)}\n",
      worst_table("worst by rtt", s.worst_rtt),
      worst_table("worst by loss", s.worst_loss)
    ]
  end

  defp value(server, :connections), do: server.connections
  defp value(server, key), do: Map.get(server.rates, key, 0.0)

  defp line(label, now, series),
    do:
      "  #{String.pad_trailing(label, 12)} #{String.pad_leading(now, 10)}  #{sparkline(series)}\n"

  defp worst_table(_title, []), do: []

  defp worst_table(title, rows) do
    [
      "  #{title}:\n"
      | for row <- rows do
          {ip, port} = row.address

          "    #{String.pad_trailing("#{:inet.ntoa(ip)}:#{port}", 40)} rtt #{ms(row.rtt_ms)}" <>
            "  loss #{percent(row.packet_loss)}\n"
        end
    ]
  end

  @bars ~w(▁ ▂ ▃ ▄ ▅ ▆ ▇ █)

  @doc """
  A sparkline of `values`, scaled to their maximum.

      iex> RakNet.Top.sparkline([0, 1, 2, 4, 8])
      "▁▂▃▅█"
  """
  @spec sparkline([number()]) :: String.t()
  def sparkline([]), do: ""

  def sparkline(values) do
    max = Enum.max(values)

    values
    |> Enum.map(fn v ->
      if max <= 0, do: hd(@bars), else: Enum.at(@bars, min(round(v / max * 7), 7))
    end)
    |> Enum.join()
  end

  defp number(v) when v >= 1_000_000, do: "#{Float.round(v / 1_000_000, 1)}M"
  defp number(v) when v >= 10_000, do: "#{Float.round(v / 1_000, 1)}k"
  defp number(v), do: "#{round(v)}"

  defp bytes(v) when v >= 1_048_576, do: "#{Float.round(v / 1_048_576, 1)} MB"
  defp bytes(v) when v >= 1_024, do: "#{Float.round(v / 1_024, 1)} KB"
  defp bytes(v), do: "#{round(v)} B"

  defp ms(v), do: "#{:erlang.float_to_binary(v / 1, decimals: 1)} ms"
  defp percent(v), do: "#{:erlang.float_to_binary(v * 100.0, decimals: 1)} %"
end
