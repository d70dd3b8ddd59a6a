defmodule RakNet.PingTest do
  use ExUnit.Case, async: true

  alias RakNet.Test.Official

  # A server endpoint: the client endpoint's options, accepting connections on 127.0.0.1.
  @endpoint_opts RakNet.ClientEndpoint.native_opts(:inet)
                 |> Map.merge(%{
                   host: "127.0.0.1",
                   accept_incoming: true,
                   max_connections: 10,
                   offline_ping_response: <<0, 15, "MCPE;a;1;v;2;3;">>,
                   guid: 42,
                   shared_thread: false
                 })

  test "pings one of our endpoints and parses its Bedrock MOTD" do
    {:ok, endpoint} = RakNet.Native.endpoint_start(@endpoint_opts, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(endpoint) end)
    port = RakNet.Native.endpoint_info(endpoint).port

    assert {:ok, pong} = RakNet.Ping.ping("localhost", port)
    assert pong.guid == 42
    assert pong.address == {{127, 0, 0, 1}, port}
    assert pong.motd.players_online == "2"
    assert pong.motd.max_players == "3"
    assert pong.rtt_us < 1_000_000
  end

  test "pings over IPv6" do
    {:ok, endpoint} = RakNet.Native.endpoint_start(%{@endpoint_opts | host: "::1"}, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(endpoint) end)
    port = RakNet.Native.endpoint_info(endpoint).port

    assert {:ok, %{address: {{0, 0, 0, 0, 0, 0, 0, 1}, ^port}}} = RakNet.Ping.ping("::1", port)
  end

  test "one dual-stack socket answers IPv4 and IPv6" do
    opts = @endpoint_opts |> Map.put(:host, "::") |> Map.put(:dual_stack, true)
    {:ok, endpoint} = RakNet.Native.endpoint_start(opts, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(endpoint) end)
    port = RakNet.Native.endpoint_info(endpoint).port

    assert {:ok, %{address: {{127, 0, 0, 1}, ^port}}} = RakNet.Ping.ping("127.0.0.1", port)
    assert {:ok, %{address: {{0, 0, 0, 0, 0, 0, 0, 1}, ^port}}} = RakNet.Ping.ping("::1", port)
  end

  test "times out when nothing answers" do
    # A bound UDP socket that never answers.
    {:ok, silent} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(silent)
    assert RakNet.Ping.ping("127.0.0.1", port, timeout: 300) == {:error, :timeout}
    :gen_udp.close(silent)
  end

  test "unresolvable names are an error" do
    assert {:error, _} = RakNet.Ping.ping("no-such-host.invalid", 19_132, timeout: 300)
  end

  @tag :interop
  test "pings an official RakNet server and reads its MOTD" do
    {peer, port} =
      Official.start_server(11, "MCPE;official;390;1.14.60;0;10;0;peer;Survival;1;1;2;")

    on_exit(fn -> Official.stop(peer) end)

    assert {:ok, pong} = RakNet.Ping.ping("127.0.0.1", port)
    assert pong.motd.motd == "official"
    assert pong.motd.version_name == "1.14.60"
  end

  test "mix raknet.ping prints the MOTD and fails loudly when nothing answers" do
    {:ok, endpoint} = RakNet.Native.endpoint_start(@endpoint_opts, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(endpoint) end)
    port = RakNet.Native.endpoint_info(endpoint).port

    Mix.shell(Mix.Shell.Process)
    on_exit(fn -> Mix.shell(Mix.Shell.IO) end)
    Mix.Tasks.Raknet.Ping.run(["127.0.0.1", Integer.to_string(port)])
    assert_received {:mix_shell, :info, ["pong from 127.0.0.1:" <> _]}
    assert_received {:mix_shell, :info, ["  players_online 2"]}

    {:ok, silent} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, silent_port} = :inet.port(silent)

    assert catch_exit(
             Mix.Tasks.Raknet.Ping.run([
               "127.0.0.1",
               Integer.to_string(silent_port),
               "--timeout",
               "200"
             ])
           ) == {:shutdown, 1}

    assert_received {:mix_shell, :error, ["no pong from 127.0.0.1:" <> _]}
    :gen_udp.close(silent)
  end
end
