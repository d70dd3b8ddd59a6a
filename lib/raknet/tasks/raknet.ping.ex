defmodule Mix.Tasks.Raknet.Ping do
  @shortdoc "Pings a RakNet server (Bedrock MOTD or raw pong) and prints the round trip"
  @moduledoc """
  Sends an unconnected ping to any RakNet server and prints its pong.

      mix raknet.ping HOST PORT [--timeout MS]

  A Minecraft Bedrock MOTD is printed field by field, anything else as raw bytes. Exits with
  status 1 when nothing answers within the timeout (default 3000 ms).
  """
  use Mix.Task

  @impl Mix.Task
  def run(argv) do
    {opts, args, _} = OptionParser.parse(argv, strict: [timeout: :integer])

    with [host, port] <- args,
         {port, ""} when port in 1..65_535 <- Integer.parse(port) do
      # The ping goes through the :raknet application's client endpoint: start it (and
      # compile first), as `mix run` would.
      Mix.Task.run("app.start")
      ping(host, port, opts)
    else
      _ -> Mix.raise("usage: mix raknet.ping HOST PORT [--timeout MS] (PORT in 1..65535)")
    end
  end

  defp ping(host, port, opts) do
    case RakNet.Ping.ping(host, port, opts) do
      {:ok, pong} ->
        {ip, p} = pong.address
        Mix.shell().info("pong from #{address(ip)}:#{p} in #{format_rtt(pong.rtt_us)}")
        Mix.shell().info("  guid #{pong.guid}")
        print_payload(pong)

      {:error, :timeout} ->
        Mix.shell().error("no pong from #{host}:#{port} within #{opts[:timeout] || 3000} ms")
        exit({:shutdown, 1})

      {:error, reason} ->
        Mix.shell().error("cannot ping #{host}:#{port}: #{inspect(reason)}")
        exit({:shutdown, 1})
    end
  end

  defp print_payload(%{motd: nil, data: data}) do
    Mix.shell().info("  data #{inspect(data)}")
  end

  defp print_payload(%{motd: motd}) do
    for key <- RakNet.Ping.motd_fields(), motd[key] != "" do
      Mix.shell().info("  #{key} #{motd[key]}")
    end
  end

  defp format_rtt(us) when us < 1000, do: "#{us} µs"
  defp format_rtt(us), do: "#{Float.round(us / 1000, 2)} ms"

  defp address({_, _, _, _, _, _, _, _} = ip), do: "[#{:inet.ntoa(ip)}]"
  defp address(ip), do: :inet.ntoa(ip)
end
