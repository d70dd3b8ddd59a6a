defmodule Mix.Tasks.Raknet.PingTaskTest do
  # Runs `mix raknet.ping` as a user does: a separate OS process, against a live server.
  use ExUnit.Case, async: false

  @moduletag timeout: 180_000

  defp mix(args) do
    System.cmd("mix", ["raknet.ping" | args],
      env: [{"MIX_ENV", "test"}],
      stderr_to_stdout: true,
      cd: File.cwd!()
    )
  end

  test "prints the pong of a live server and exits 0" do
    spec =
      RakNet.Server.child_spec([
        RakNet.Test.EchoClient,
        0,
        ip: {127, 0, 0, 1},
        open_ipv6_socket: false,
        offline_ping_response: "MCPE;Task test;594;1.20.0;0;10;1;Ping;Survival;1;19132;19133;"
      ])

    server = start_supervised!(spec)
    port = RakNet.Server.info(server).ipv4_port

    {output, status} = mix(["127.0.0.1", "#{port}"])

    assert status == 0, output
    assert output =~ "pong from 127.0.0.1:#{port} in "
    assert output =~ "Task test"
  end

  test "exits 1 when nothing answers" do
    # A bound socket that never answers: the ping goes nowhere.
    {:ok, silent} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(silent)
    on_exit(fn -> :gen_udp.close(silent) end)

    {output, status} = mix(["127.0.0.1", "#{port}", "--timeout", "300"])

    assert status == 1, output
    assert output =~ "no pong from 127.0.0.1:#{port} within 300 ms"
  end

  test "exits 1 with the usage on bad arguments" do
    {output, status} = mix(["127.0.0.1"])
    assert status == 1, output
    assert output =~ "usage: mix raknet.ping HOST PORT"
  end
end
