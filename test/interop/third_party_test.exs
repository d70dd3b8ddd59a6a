defmodule RakNet.Interop.ThirdPartyTest do
  @moduledoc """
  Against third-party RakNet clients from the package registries, each with quirks official
  RakNet tolerates (`make npm` installs the npm ones in `_build/npm`, `make rust-peers` builds
  the crates.io ones in `_build/rust-peers`). A defence that refuses one of them on a calm
  server is a compatibility bug.

  - jsp-raknet 2.2 (npm, protocol 10) sends its connection request (0x09) in an unreliable
    frame, cannot read an open-connection-reply-1 that carries a cookie, and sends its
    disconnection notification unreliable.
  - rust-raknet 1.4 (crates.io) cannot read a cookie either, its 0x13 carries its own 0x09
    time where the server's 0x10 time belongs, and it sends its 0x09 reliable-ordered (so its
    0x13 has ordering index 1).
  - rak-rs 0.3 (crates.io, protocol 10) cannot read a cookie, echoes its own time, numbers its
    datagrams anew after the handshake, and reads 0x10 outside its ordering (an ordered 0x10,
    as official sends it, leaves it waiting for ever on channel 0). It sends no message larger
    than its MTU, so the split messages are the server's replies.

  Each prints `CONNECTED`, then `ECHOED n IN_ORDER yes|no` once every message came back.
  """
  use ExUnit.Case, async: false
  @moduletag :interop
  @moduletag timeout: 60_000

  alias RakNet.Test.EchoClient

  @peers Path.expand("peers", __DIR__)
  @node_modules Path.expand("../../_build/npm/node_modules", __DIR__)
  @rust_peers Path.expand("../../_build/rust-peers/release/rust-peers", __DIR__)

  defmodule Replier do
    @moduledoc false
    # Answers each request of test/interop/peers/rust (0xFE 0xEE, index, size) with a
    # message of the size it asks for that starts as it did.
    use RakNet.Handler

    @impl true
    def handle_connect(_info, test) do
      send(test, {:client_new, self()})
      {:ok, test}
    end

    @impl true
    def handle_message(0xFE, <<0xEE, index::16, size::16, _::binary>>, _transit, test) do
      header = <<0xFE, 0xEE, index::16, size::16>>
      reply = header <> :binary.copy(<<0x55>>, size - byte_size(header))
      {:ok, _} = RakNet.Connection.send(self(), :reliable_ordered, reply)
      {:noreply, test}
    end
  end

  defp start_server(opts \\ []), do: RakNet.Test.Server.start!(EchoClient, opts)

  # Runs a third-party client against `port` and returns its exit status and lines.
  defp peer(library, port, count, size, timeout_ms \\ 20_000)

  defp peer(:jsp_raknet, port, count, size, timeout_ms) do
    unless File.dir?(Path.join(@node_modules, "jsp-raknet")) do
      raise "jsp-raknet is missing from #{@node_modules}: run `make npm` (make test does)"
    end

    node = System.find_executable("node") || raise "node is missing: run `make npm`"
    script = Path.join(@peers, "jsp_raknet_client.js")
    env = [{~c"NODE_PATH", String.to_charlist(@node_modules)}]
    run(node, [script | args(port, count, size, timeout_ms)], env)
  end

  defp peer(library, port, count, size, timeout_ms) when library in [:rust_raknet, :rak_rs] do
    unless File.exists?(@rust_peers) do
      raise "#{@rust_peers} is missing: run `make rust-peers` (make test does)"
    end

    name = library |> Atom.to_string() |> String.replace("_", "-")
    run(@rust_peers, [name | args(port, count, size, timeout_ms)], [])
  end

  defp args(port, count, size, timeout_ms),
    do: ["127.0.0.1", Integer.to_string(port), "#{count}", "#{size}", "#{timeout_ms}"]

  defp run(executable, args, env) do
    peer =
      Port.open({:spawn_executable, executable}, [
        :binary,
        :exit_status,
        {:line, 4096},
        args: args,
        env: env
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
    assert {0, ["CONNECTED", "ECHOED 20 IN_ORDER yes"]} = peer(:jsp_raknet, port, 20, 100)
    assert_receive {:client_new, _}, 5_000
    # Its handshake did not echo our time: it is one of the server's unproven connections.
    %{endpoints: [%{stats: stats}]} = RakNet.Server.info(server)
    assert stats.strict == 0
  end

  test "jsp-raknet's split messages (5 KB, four fragments) come back whole and in order" do
    {_server, port} = start_server()
    assert {0, ["CONNECTED", "ECHOED 10 IN_ORDER yes"]} = peer(:jsp_raknet, port, 10, 5_000)
  end

  test "with use_cookies: true jsp-raknet cannot connect (it cannot read a cookie)" do
    {_server, port} = start_server(use_cookies: true)
    # It tries 5 times, 1.5 s apart.
    assert {1, lines} = peer(:jsp_raknet, port, 1, 100, 9_000)
    refute "CONNECTED" in lines
  end

  for library <- [:rust_raknet, :rak_rs] do
    test "#{library} connects to a default server and gets every reply, split or not, in order" do
      {server, port} = RakNet.Test.Server.start!(Replier)
      assert {0, ["CONNECTED", "ECHOED 20 IN_ORDER yes"]} = peer(unquote(library), port, 20, 100)

      assert {0, ["CONNECTED", "ECHOED 10 IN_ORDER yes"]} =
               peer(unquote(library), port, 10, 5_000)

      assert_receive {:client_new, _}, 5_000
      # Calm throughout: their handshakes, which do not echo our time, made no pressure.
      %{endpoints: [%{stats: stats}]} = RakNet.Server.info(server)
      assert stats.strict == 0
    end

    test "with use_cookies: true #{library} cannot connect (it cannot read a cookie)" do
      {_server, port} = RakNet.Test.Server.start!(Replier, use_cookies: true)
      assert {1, lines} = peer(unquote(library), port, 1, 100, 9_000)
      refute "CONNECTED" in lines
    end
  end
end
