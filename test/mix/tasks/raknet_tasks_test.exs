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

  defp start_server(opts) do
    args =
      [ip: {127, 0, 0, 1}, open_ipv6_socket: false, client_data: self()]
      |> Keyword.merge(opts)

    server = start_supervised!({RakNet.Server, [RakNet.Test.EchoClient, 0 | args]})
    RakNet.Server.info(server).ipv4_port
  end

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

  test "raknet.load exits non-zero on a bad option" do
    {output, status} = mix("raknet.load", ~w(--connections many))
    assert status != 0, output
    assert output =~ "bad value for --connections: many"
  end
end
