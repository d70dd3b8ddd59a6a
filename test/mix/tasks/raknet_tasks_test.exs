defmodule Mix.Tasks.Raknet.TasksTest do
  # Runs the Mix tasks as a user does: a separate OS process, against a live server.
  use ExUnit.Case, async: false

  # raknet.load builds its Rust binary (release) on first use.
  @moduletag timeout: 600_000

  defp mix(args), do: mix("raknet.ping", args)

  defp mix(task, args) do
    System.cmd("mix", [task | args],
      env: [{"MIX_ENV", "test"}],
      stderr_to_stdout: true,
      cd: File.cwd!()
    )
  end

  defp start_server(opts), do: RakNet.Test.Server.start!(RakNet.Test.EchoClient, opts) |> elem(1)

  test "raknet.ping prints the pong of a live server and exits 0" do
    port =
      start_server(
        offline_ping_response: "MCPE;Task test;594;1.20.0;0;10;1;Ping;Survival;1;19132;19133;"
      )

    {output, status} = mix(["127.0.0.1", "#{port}"])

    assert status == 0, output
    assert output =~ "pong from 127.0.0.1:#{port} in "
    assert output =~ "Task test"
  end

  test "raknet.ping exits 1 when nothing answers" do
    # A bound socket that never answers: the ping goes nowhere.
    {:ok, silent} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(silent)
    on_exit(fn -> :gen_udp.close(silent) end)

    {output, status} = mix(["127.0.0.1", "#{port}", "--timeout", "300"])

    assert status == 1, output
    assert output =~ "no pong from 127.0.0.1:#{port} within 300 ms"
  end

  test "raknet.ping exits 1 with the usage on bad arguments" do
    {output, status} = mix(["127.0.0.1"])
    assert status == 1, output
    assert output =~ "usage: mix raknet.ping HOST PORT"
  end

  test "raknet.load connects, sends, reports the echoes and exits 0" do
    port = start_server([])

    {output, status} =
      mix("raknet.load", ~w(--port #{port} --connections 3 --rate 20 --duration 1))

    assert status == 0, output
    assert output =~ "connections   3 ok, 0 failed"
    assert output =~ ~r/round trip    p50 [\d.]+ ms/
  end

  test "raknet.load takes the host and port first, as raknet.ping does" do
    port = start_server([])

    {output, status} =
      mix("raknet.load", ~w(127.0.0.1 #{port} --connections 2 --rate 20 --duration 1))

    assert status == 0, output
    assert output =~ "connections   2 ok, 0 failed"

    assert Mix.Tasks.Raknet.Load.args(~w(::1)) == ~w(--host ::1)
    assert Mix.Tasks.Raknet.Load.args(~w(::1 --rate 5)) == ~w(--host ::1 --rate 5)
    assert Mix.Tasks.Raknet.Load.args(~w(--port 1 --rate 5)) == ~w(--port 1 --rate 5)
    # A flag without a value is an option, not a host.
    assert Mix.Tasks.Raknet.Load.args(~w(--verify --port 1)) == ~w(--verify --port 1)
  end

  test "raknet.load exits non-zero on a bad option" do
    {output, status} = mix("raknet.load", ~w(--connections many))
    assert status != 0, output
    assert output =~ "bad value for --connections: many"
  end

  # raknet.top attaches to a node: this test node, made distributed for the occasion.
  defp distributed! do
    unless Node.alive?() do
      {_, 0} = System.cmd("epmd", ["-daemon"])

      {:ok, _} =
        :net_kernel.start([:"raknet_test_#{System.unique_integer([:positive])}", :shortnames])

      on_exit(fn -> :net_kernel.stop() end)
    end

    {Atom.to_string(node()), Atom.to_string(Node.get_cookie())}
  end

  test "raknet.top attaches to a node and draws its servers" do
    {node, cookie} = distributed!()
    port = start_server([])
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x86, "hi">>)
    assert_receive {:client_new, _}, 5_000

    {output, status} =
      mix("raknet.top", ["--node", node, "--cookie", cookie, "--frames", "2", "--interval", "100"])

    assert status == 0, output
    assert output =~ "raknet top - #{node}"
    assert output =~ ~r/udp #{port}\n/
    assert output =~ ~r/connections +1 /
    assert output =~ "msgs in/s"
  end

  test "raknet.top attaches to a node with a long name" do
    if Node.alive?(), do: :net_kernel.stop()
    {_, 0} = System.cmd("epmd", ["-daemon"])

    {:ok, _} =
      :net_kernel.start([
        :"raknet_long_#{System.unique_integer([:positive])}@127.0.0.1",
        :longnames
      ])

    on_exit(fn -> :net_kernel.stop() end)
    port = start_server([])

    {output, status} =
      mix("raknet.top", [
        "--node",
        Atom.to_string(node()),
        "--cookie",
        Atom.to_string(Node.get_cookie()),
        "--frames",
        "1"
      ])

    assert status == 0, output
    assert output =~ ~r/udp #{port}\n/
  end

  test "raknet.top exits 1 when the node cannot be reached" do
    {output, status} =
      mix("raknet.top", ["--node", "nobody@localhost", "--cookie", "x", "--frames", "1"])

    assert status == 1, output
    assert output =~ "cannot connect to nobody@localhost"
  end
end
