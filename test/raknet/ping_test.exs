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

  test "a server's IPv4 and IPv6 sockets answer with one GUID" do
    {server, _} =
      RakNet.Test.Server.start!(RakNet.Test.EchoClient, open_ipv6_socket: true, ipv6_ip: "::1")

    %{ipv4_port: v4, ipv6_port: v6} = RakNet.Server.info(server)
    assert {:ok, a} = RakNet.Ping.ping("127.0.0.1", v4)
    assert {:ok, b} = RakNet.Ping.ping("::1", v6)
    assert a.guid == b.guid
  end

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

    # A misspelt option is not ignored.
    assert_raise ArgumentError, ~r/unknown keys \[:timout\]/, fn ->
      RakNet.Ping.ping("localhost", port, timout: 10)
    end
  end

  # The runtime kept one pinger per address (a second ping replaced the first, which timed
  # out), and a pong after the timeout was left in the caller's mailbox.
  test "concurrent pings of one address all get the pong; a late one leaves nothing behind" do
    {:ok, endpoint} = RakNet.Native.endpoint_start(@endpoint_opts, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(endpoint) end)
    port = RakNet.Native.endpoint_info(endpoint).port

    # Two pings of one address at once: a plain socket plays the server, answering only
    # once both pings are in, with one pong.
    {:ok, sock} = :gen_udp.open(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    on_exit(fn -> :gen_udp.close(sock) end)
    {:ok, fake} = :inet.port(sock)
    pings = for _ <- 1..2, do: Task.async(fn -> RakNet.Ping.ping("127.0.0.1", fake) end)
    {:ok, {ip, from, <<id, time::64, _::binary>>}} = :gen_udp.recv(sock, 0, 5_000)
    assert id in [0x01, 0x02]
    {:ok, {^ip, ^from, <<_, _::binary>>}} = :gen_udp.recv(sock, 0, 5_000)
    magic = Base.decode16!("00FFFF00FEFEFEFEFDFDFDFD12345678")
    :ok = :gen_udp.send(sock, ip, from, <<0x1C, time::64, 7::64, magic::binary, 0::16>>)
    assert [{:ok, %{guid: 7}}, {:ok, %{guid: 7}}] = Task.await_many(pings, 5_000)

    # A ping given up on; its pong comes later, while the next ping waits for its own.
    assert {:error, :timeout} = RakNet.Ping.ping("127.0.0.1", fake, timeout: 100)
    {:ok, {^ip, ^from, <<_, time::64, _::binary>>}} = :gen_udp.recv(sock, 0, 5_000)
    :ok = :gen_udp.send(sock, ip, from, <<0x1C, time::64, 8::64, magic::binary, 0::16>>)
    assert {:ok, %{guid: 42}} = RakNet.Ping.ping("127.0.0.1", port)
    refute_receive {:raknet_pong, _, _, _, _, _}, 200
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
    # An address tuple works as RakNet.connect/3 takes it.
    assert {:ok, %{address: {{127, 0, 0, 1}, ^port}}} = RakNet.Ping.ping({127, 0, 0, 1}, port)
  end

  # The kernel's preferred source for loopback is 127.0.0.1: an answer to a ping sent to
  # 127.0.0.3 comes from 127.0.0.3 only if the endpoint chose it.
  test "a socket bound to every address answers from the address the ping was sent to" do
    ping = <<0x01, 7::64, RakNet.Message.offline_msg_id()::binary, 99::64>>

    for {host, dual_stack, family, target} <- [
          {"0.0.0.0", false, :inet, {127, 0, 0, 3}},
          {"::", true, :inet, {127, 0, 0, 3}},
          {"::", true, :inet6, {0, 0, 0, 0, 0, 0, 0, 1}},
          {"::", false, :inet6, {0, 0, 0, 0, 0, 0, 0, 1}}
        ] do
      opts = %{@endpoint_opts | host: host} |> Map.put(:dual_stack, dual_stack)
      {:ok, endpoint} = RakNet.Native.endpoint_start(opts, self())
      port = RakNet.Native.endpoint_info(endpoint).port

      {:ok, udp} = :gen_udp.open(0, [:binary, family, active: true])
      :ok = :gen_udp.send(udp, target, port, ping)
      assert_receive {:udp, ^udp, source, ^port, <<0x1C, 7::64, 42::64, _::binary>>}, 5_000
      assert {host, dual_stack, source} == {host, dual_stack, target}

      :gen_udp.close(udp)
      RakNet.Native.endpoint_stop(endpoint)
    end
  end

  test "a connection to a socket bound to every address reports the address it came to" do
    {:ok, server} = RakNet.Native.endpoint_start(%{@endpoint_opts | host: "0.0.0.0"}, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(server) end)
    port = RakNet.Native.endpoint_info(server).port

    client_opts = RakNet.ClientEndpoint.native_opts(:inet) |> Map.put(:shared_thread, false)
    {:ok, client} = RakNet.Native.endpoint_start(client_opts, self())
    on_exit(fn -> RakNet.Native.endpoint_stop(client) end)
    {:ok, conn} = RakNet.Native.endpoint_connect(client, "127.0.0.3", port, self())
    assert_receive {:raknet_connected, ^conn, _}, 5_000
    assert_receive {:raknet_endpoint, ^server, :connected, accepted, _}, 5_000

    assert {:ok, %{local_address: {{127, 0, 0, 3}, ^port}}} = RakNet.Native.conn_info(accepted)
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

    # A bad port is a usage error, not a stack trace.
    for bad <- ["notaport", "70000", "0"] do
      assert_raise Mix.Error, ~r/usage: mix raknet.ping/, fn ->
        Mix.Tasks.Raknet.Ping.run(["127.0.0.1", bad])
      end
    end

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
