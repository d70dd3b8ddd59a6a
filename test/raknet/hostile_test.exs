defmodule RakNet.HostileTest do
  # The hostile internet, on loopback: many 127.x.y.z addresses stand for many hosts.
  use ExUnit.Case, async: false

  @moduletag timeout: 120_000
  @magic <<0, 255, 255, 0, 254, 254, 254, 254, 253, 253, 253, 253, 18, 52, 86, 120>>

  defp start_server(opts \\ []), do: RakNet.Test.Server.start!(RakNet.Test.EchoClient, opts)

  defp udp(ip) do
    {:ok, socket} = :gen_udp.open(0, [:binary, active: false, ip: ip])
    on_exit(fn -> :gen_udp.close(socket) end)
    socket
  end

  defp ping(time), do: <<0x01, time::64, @magic::binary, 42::64>>

  # Open connection request 2 naming the server at 127.0.0.1:port, MTU 1492, a client GUID.
  defp ocr2(port, guid) do
    <<0x07, @magic::binary, 4, 0x80, 0xFF, 0xFF, 0xFE, port::16, 1492::16, guid::64>>
  end

  defp drain(socket, acc \\ []) do
    case :gen_udp.recv(socket, 0, 50) do
      {:ok, {_ip, _port, data}} -> drain(socket, [data | acc])
      {:error, :timeout} -> Enum.reverse(acc)
    end
  end

  test "a spoofed open-connection-request-2 flood locks nobody out and holds no connection" do
    # 100 slots: ten times fewer than spoofed sources (before, each spoofed OCR2 took one).
    {server, port} = start_server(max_connections: 100)
    sockets = for a <- 1..4, b <- 1..250, do: udp({127, 1, a, b})

    # 1,000 sources, five spoofed OCR2s each: the attack that used to fill max_connections.
    for round <- 1..5, {socket, i} <- Enum.with_index(sockets) do
      :ok = :gen_udp.send(socket, {127, 0, 0, 1}, port, ocr2(port, round * 10_000 + i))
    end

    # A real client (protocol 11, the Bedrock-style one, with its cookie) connects at once.
    assert {:ok, conn} = RakNet.connect("127.0.0.1", port, timeout: 2_000)
    {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x86, "still here">>)
    assert_receive {:raknet, ^conn, 0x86, "still here", _}, 5_000

    %{connections: 1, endpoints: [%{stats: stats}]} = RakNet.Server.info(server)
    # Nothing was allocated for the spoofed sources but half-open records made while the
    # server was calm (`use_cookies: :auto`): 128 unproven handshakes started in a second (64
    # per endpoint thread) turned it strict, and every later OCR2 without a cookie was
    # dropped. Each spoofed OCR2 is one or the other.
    assert stats.strict_entered >= 1
    assert stats.half_open <= 128
    assert stats.half_open + stats.bad_cookies == 5_000
    assert stats.connections == 1
  end

  test "5,000 pings from one source get at most its pong budget; other sources still get pongs" do
    {server, port} = start_server(pongs_per_ip_per_sec: 16)
    flooder = udp({127, 2, 0, 1})

    for t <- 1..5_000, do: :ok = :gen_udp.send(flooder, {127, 0, 0, 1}, port, ping(t))
    pongs = drain(flooder)
    # A burst of 16 and 16 a second: the flood lasts well under 2 s.
    assert length(pongs) in 1..48
    assert Enum.all?(pongs, &match?(<<0x1C, _::binary>>, &1))

    other = udp({127, 2, 0, 2})
    :ok = :gen_udp.send(other, {127, 0, 0, 1}, port, ping(1))
    assert {:ok, {_, ^port, <<0x1C, 1::64, _::binary>>}} = :gen_udp.recv(other, 0, 2_000)

    %{endpoints: [%{stats: stats}]} = RakNet.Server.info(server)
    assert stats.pongs_rate_limited >= 4_900
  end

  test "a spoofed ping flood that spends the pong budget does not hide the server from its players" do
    # Two endpoint threads: the player's IP, learnt by the thread that took its connection, is
    # known to both (the ping below may land on either).
    {server, port} = start_server(pong_bytes_per_sec: 400, endpoint_threads: 2)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
    :ok = RakNet.Connection.close(conn)

    # 200 strangers, 5 pings each: both threads' budgets (200 bytes each, 4 pongs) are spent.
    sockets = for b <- 1..200, do: udp({127, 3, 0, b})

    for t <- 1..5,
        socket <- sockets,
        do: :ok = :gen_udp.send(socket, {127, 0, 0, 1}, port, ping(t))

    # The player, from a new socket (its server list's), still gets its pong.
    player = udp({127, 0, 0, 1})
    :ok = :gen_udp.send(player, {127, 0, 0, 1}, port, ping(7))
    assert {:ok, {_, ^port, <<0x1C, 7::64, _::binary>>}} = :gen_udp.recv(player, 0, 2_000)

    # The other thread may still be working through its share of the flood.
    stats = fn ->
      %{endpoints: [%{stats: stats}]} = RakNet.Server.info(server)
      stats
    end

    assert :ok == RakNet.Test.Wait.until(fn -> stats.().pongs_budget_exhausted >= 900 end, 300)
    assert stats.().pongs_to_known_ips >= 1
  end

  @tag :capture_log
  test ":max_messages_per_sec disconnects a peer over the rate, not one within it" do
    {_server, port} =
      RakNet.Test.Server.start!(RakNet.Test.ReasonClient, max_messages_per_sec: 100)

    {:ok, polite} = RakNet.connect("127.0.0.1", port)
    assert_receive {:reason_new, polite_pid}, 5_000
    {:ok, flood} = RakNet.connect("127.0.0.1", port)
    assert_receive {:reason_new, flood_pid}, 5_000

    # A burst within twice the rate passes.
    for _ <- 1..150, do: {:ok, nil} = RakNet.Connection.send(polite, :reliable, <<0x86>>)
    # 1,000 at once is ten seconds' worth.
    # (It may be closed before the last of them: those sends say :closed.)
    for _ <- 1..1_000, do: RakNet.Connection.send(flood, :reliable, <<0x86>>)

    assert_receive {:disconnect_2, ^flood_pid, {:limit_exceeded, :message_rate}}, 5_000
    assert_receive {:raknet_disconnect, ^flood, :peer_closed}, 5_000

    # The polite one's 150 all came, and it is still there.
    taken = fn ->
      {:ok, %{stats: stats}} = RakNet.Connection.info(polite_pid)
      stats.messages_in >= 150
    end

    assert RakNet.Test.Wait.until(taken, 500) == :ok
    refute_received {:disconnect_2, ^polite_pid, _}
  end

  test ":max_message_bytes bounds what a peer may send, and what may be sent to it" do
    {_server, port} =
      RakNet.Test.Server.start!(RakNet.Test.ReasonClient, max_message_bytes: 10_000)

    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:reason_new, pid}, 5_000
    {:ok, server_conn} = RakNet.Connection.conn_ref(pid)

    assert RakNet.Connection.send(pid, :reliable, :binary.copy(<<0x86>>, 10_001)) ==
             {:error, :too_large}

    assert {:ok, nil} = RakNet.Connection.send(pid, :reliable, :binary.copy(<<0x86>>, 10_000))
    assert_receive {:raknet, ^conn, 0x86, _, _}, 5_000

    assert RakNet.broadcast([pid], :reliable, :binary.copy(<<0x86>>, 10_001)) ==
             {:error, :too_large}

    # A longer message from the peer (its split header announces it) ends the connection.
    {:ok, nil} = RakNet.Connection.send(conn, :reliable, :binary.copy(<<0x86>>, 20_000))
    assert_receive {:disconnect_2, ^pid, {:limit_exceeded, :message_bytes}}, 5_000
    assert RakNet.Connection.send(server_conn, :reliable, <<0x86>>) == {:error, :closed}
  end

  # Values the runtime cannot take raised in the listener, which took every connection down.
  test "a huge ban duration or connection limit is clamped, not a crash of the listener" do
    {server, _port} = start_server()
    listener = RakNet.Test.Server.child(server, RakNet.Server.Listener)
    assert :ok = RakNet.Server.ban(server, "10.0.0.1", 2 ** 70)
    assert :ok = RakNet.Server.set_max_connections(server, 2 ** 70)
    assert [{{10, 0, 0, 1}, left}] = RakNet.Server.banned(server)
    assert left > 100 * 365 * 24 * 3_600_000
    assert RakNet.Test.Server.child(server, RakNet.Server.Listener) == listener
  end

  test "bans: refused while banned, connections closed, lifted by unban or by time" do
    {server, port} = start_server()
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000

    assert :ok = RakNet.Server.ban(server, "127.0.0.1")
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    assert [{{127, 0, 0, 1}, :infinity}] = RakNet.Server.banned(server)
    assert RakNet.connect("127.0.0.1", port, timeout: 3_000) == {:error, :banned}

    assert :ok = RakNet.Server.unban(server, {127, 0, 0, 1})
    assert RakNet.Server.banned(server) == []
    assert {:ok, _} = RakNet.connect("127.0.0.1", port)

    assert :ok = RakNet.Server.ban(server, {127, 0, 0, 1}, 300)
    assert [{{127, 0, 0, 1}, left}] = RakNet.Server.banned(server)
    assert left in 1..300
    # Expired bans lift by themselves: a connect started after 300 ms succeeds.
    receive do
    after
      400 -> :ok
    end

    assert {:ok, _} = RakNet.connect("127.0.0.1", port)
    assert RakNet.Server.ban(server, "not an address") == {:error, :einval}
  end

  test "an IPv6 ban covers its /64: a ban of ::5 closes and refuses ::1" do
    {server, _} =
      start_server(ip: {127, 0, 0, 1}, open_ipv6_socket: true, ipv6_ip: {0, 0, 0, 0, 0, 0, 0, 1})

    %{ipv6_port: port6} = RakNet.Server.info(server)
    {:ok, conn} = RakNet.connect("::1", port6)
    assert_receive {:client_new, _}, 5_000

    assert :ok = RakNet.Server.ban(server, "::5")
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    assert [{{0, 0, 0, 0, 0, 0, 0, 0}, :infinity}] = RakNet.Server.banned(server)
    assert RakNet.connect("::1", port6, timeout: 3_000) == {:error, :banned}
    assert :ok = RakNet.Server.unban(server, "::7")
    assert {:ok, _} = RakNet.connect("::1", port6)
  end

  test "a network ban (an IPv4 /8, an IPv6 /48) refuses and closes every address in it" do
    {server, _} =
      start_server(ip: {127, 0, 0, 1}, open_ipv6_socket: true, ipv6_ip: {0, 0, 0, 0, 0, 0, 0, 1})

    %{ipv4_port: port, ipv6_port: port6} = RakNet.Server.info(server)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:client_new, _}, 5_000
    {:ok, conn6} = RakNet.connect("::1", port6)
    assert_receive {:client_new, _}, 5_000

    assert :ok = RakNet.Server.ban(server, "127.200.0.0/8")
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    assert :ok = RakNet.Server.ban(server, {{0, 0, 0, 0xFFFF, 0, 0, 0, 9}, 48}, 60_000)
    assert_receive {:raknet_disconnect, ^conn6, :peer_closed}, 5_000

    assert [{{{127, 0, 0, 0}, 8}, :infinity}, {{{0, 0, 0, 0, 0, 0, 0, 0}, 48}, left}] =
             Enum.sort(RakNet.Server.banned(server))

    assert left in 1..60_000
    assert RakNet.connect("127.0.0.1", port, timeout: 3_000) == {:error, :banned}
    assert RakNet.connect("::1", port6, timeout: 3_000) == {:error, :banned}

    assert :ok = RakNet.Server.unban(server, "127.0.0.0/8")
    assert :ok = RakNet.Server.unban(server, {"::", 48})
    assert RakNet.Server.banned(server) == []
    assert {:ok, _} = RakNet.connect("127.0.0.1", port)
    assert {:ok, _} = RakNet.connect("::1", port6)

    for bad <- ["127.0.0.1/33", {{127, 0, 0, 1}, 40}, "::/129", "::1/x", "1.2.3.4/8/9"] do
      assert RakNet.Server.ban(server, bad) == {:error, :einval}, inspect(bad)
    end
  end

  @tag :capture_log
  test "a MOTD whose pong would exceed :pong_amplification is refused by clients' pings, with a warning" do
    long = String.duplicate("x", 150)

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        {_server, port} = start_server(offline_ping_response: long, pong_amplification: 3)
        send(self(), {:port, port})
      end)

    assert log =~ "makes pongs larger than :pong_amplification (3) times a ping"
    assert_received {:port, port}
    assert RakNet.Ping.ping("127.0.0.1", port, timeout: 300) == {:error, :timeout}

    {_server, port} = start_server(offline_ping_response: long)
    assert {:ok, %{data: ^long}} = RakNet.Ping.ping("127.0.0.1", port)
  end
end
