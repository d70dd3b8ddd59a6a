defmodule RakNet.Interop.ThirdPartyTest do
  @moduledoc """
  Against third-party RakNet clients from the package registries, each with quirks official
  RakNet tolerates (`make npm` installs them in `_build/npm`). A defence that refuses one of
  them on a calm server is a compatibility bug.

  jsp-raknet 2.2 (npm, protocol 10) sends its connection request (0x09) in an unreliable
  frame, cannot read an open-connection-reply-1 that carries a cookie, and sends its
  disconnection notification unreliable.
  """
  use ExUnit.Case, async: false
  @moduletag :interop
  @moduletag timeout: 60_000

  alias RakNet.Test.EchoClient

  @peers Path.expand("peers", __DIR__)
  @node_modules Path.expand("../../_build/npm/node_modules", __DIR__)

  defp start_server(opts \\ []), do: RakNet.Test.Server.start!(EchoClient, opts)

  # Runs the jsp-raknet client against `port` and returns its lines.
  defp jsp_raknet(port, count, size, timeout_ms \\ 20_000) do
    unless File.dir?(Path.join(@node_modules, "jsp-raknet")) do
      raise "jsp-raknet is missing from #{@node_modules}: run `make npm` (make test does)"
    end

    node = System.find_executable("node") || raise "node is missing: run `make npm`"
    script = Path.join(@peers, "jsp_raknet_client.js")
    args = [script, "127.0.0.1", Integer.to_string(port), "#{count}", "#{size}", "#{timeout_ms}"]

    peer =
      Port.open({:spawn_executable, node}, [
        :binary,
        :exit_status,
        {:line, 4096},
        args: args,
        env: [{~c"NODE_PATH", String.to_charlist(@node_modules)}]
      ])

    collect(peer, [])
  end

  defp collect(peer, lines) do
    receive do
      {^peer, {:data, {:eol, line}}} -> collect(peer, [line | lines])
      {^peer, {:exit_status, status}} -> {status, Enum.reverse(lines)}
    after
      30_000 ->
        Port.close(peer)
        {:timeout, Enum.reverse(lines)}
    end
  end

  test "jsp-raknet connects to a default server and every message comes back in order" do
    {server, port} = start_server()
    assert {0, ["CONNECTED", "ECHOED 20 IN_ORDER yes"]} = jsp_raknet(port, 20, 100)
    assert_receive {:client_new, _}, 5_000
    # Its handshake did not echo our time: it is one of the server's unproven connections.
    %{endpoints: [%{stats: stats}]} = RakNet.Server.info(server)
    assert stats.strict == 0
  end

  test "jsp-raknet's split messages (5 KB, four fragments) come back whole and in order" do
    {_server, port} = start_server()
    assert {0, ["CONNECTED", "ECHOED 10 IN_ORDER yes"]} = jsp_raknet(port, 10, 5_000)
  end

  test "with use_cookies: true jsp-raknet cannot connect (it cannot read a cookie)" do
    {_server, port} = start_server(use_cookies: true)
    # It tries 5 times, 1.5 s apart.
    assert {1, lines} = jsp_raknet(port, 1, 100, 9_000)
    refute "CONNECTED" in lines
  end
end
