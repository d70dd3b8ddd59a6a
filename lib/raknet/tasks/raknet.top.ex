defmodule Mix.Tasks.Raknet.Top do
  @shortdoc "Live view of a running node's RakNet servers (connections, rates, worst RTT/loss)"
  @moduledoc """
  Attaches to a running node and shows its RakNet servers, refreshed every second: ports,
  connections, messages and bytes per second in and out, resends, round-trip time
  percentiles and loss, the worst connections by round-trip time and by loss, and a
  sparkline of the last minute for each rate.

      mix raknet.top --node game@myhost --cookie SECRET [--interval MS] [--frames N]

  The node must run `:raknet` and be started distributed (`iex --sname game --cookie
  SECRET -S mix`, or a release). `--sname`/`--name` style is taken from the node name (a
  name with a dot in its host part is a long name). `--frames N` stops after N frames (for
  scripts); without it, it runs until interrupted (Ctrl-C twice). Exits with status 1 when
  the node cannot be reached.
  """
  use Mix.Task

  @switches [node: :string, cookie: :string, interval: :integer, frames: :integer]

  @impl Mix.Task
  def run(argv) do
    {opts, _args, _} = OptionParser.parse(argv, strict: @switches)
    Mix.Task.run("compile")
    node = opts[:node] || Mix.raise("usage: mix raknet.top --node NAME [--cookie COOKIE]")
    node = String.to_atom(node)
    connect!(node, opts[:cookie])
    loop(node, Keyword.get(opts, :interval, 1_000), opts[:frames], [])
  end

  defp connect!(node, cookie) do
    [_name, host] =
      case String.split(Atom.to_string(node), "@") do
        [_, _] = parts -> parts
        _ -> Mix.raise("--node must be name@host, got: #{node}")
      end

    mode = if String.contains?(host, "."), do: :longnames, else: :shortnames
    # Named by the OS process: two `mix raknet.top` at once must not take the same name.
    me = "raknet_top_#{System.pid()}"

    # A long name needs a host part: the loopback address for a node on this machine by
    # address, else the one Erlang derives from the host's name and domain.
    me =
      case {mode, :inet.parse_address(String.to_charlist(host))} do
        {:longnames, {:ok, {127, _, _, _}}} -> :"#{me}@127.0.0.1"
        {:longnames, {:ok, {0, 0, 0, 0, 0, 0, 0, 1}}} -> :"#{me}@::1"
        _ -> String.to_atom(me)
      end

    unless Node.alive?() do
      case :net_kernel.start([me, mode]) do
        {:ok, _} ->
          :ok

        {:error, reason} ->
          fail("cannot start distribution (is epmd running?): #{inspect(reason)}")
      end
    end

    if cookie, do: Node.set_cookie(node, String.to_atom(cookie))

    unless Node.connect(node) == true do
      fail("cannot connect to #{node} (wrong cookie, or not running?)")
    end
  end

  defp loop(_node, _interval, 0, _history), do: :ok

  defp loop(node, interval, frames, history) do
    history = [snapshot!(node) | Enum.take(history, 59)]
    # Clear the screen and draw from the top-left corner.
    IO.write(["\e[H\e[2J", RakNet.Top.render(history)])
    frames = if frames, do: frames - 1
    if frames != 0, do: Process.sleep(interval)
    loop(node, interval, frames, history)
  end

  defp snapshot!(node) do
    :erpc.call(node, RakNet.Top, :snapshot, [], 5_000)
  catch
    kind, reason -> fail("lost #{node}: #{Exception.format_banner(kind, reason)}")
  end

  defp fail(message) do
    Mix.shell().error(message)
    exit({:shutdown, 1})
  end
end
