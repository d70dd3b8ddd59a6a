defmodule RakNet.QueryServerTest do
  # Issue #32: GameSpy4 Query on the game port, beside RakNet, and the raw-datagram hook.
  use ExUnit.Case, async: true

  alias RakNet.Test.Server

  defmodule Answer do
    @moduledoc false
    # A raw handler: answers `FE FD <n>` with n bytes, the `:proven` way when n > 100.
    def handle_datagram(<<0xFE, 0xFD, n::16>>, _from, test) do
      send(test, :offered)
      reply = :binary.copy(<<7>>, n)
      if n > 100, do: {:reply, reply, :proven}, else: {:reply, reply}
    end

    def handle_datagram(<<0xFE, 0xFD, "crash">>, _from, _test), do: raise("handler bug")
    def handle_datagram(<<0xFE, 0xFD, "bad">>, _from, _test), do: {:reply, :not_iodata}
    def handle_datagram(_data, _from, _test), do: :noreply
  end

  defp udp do
    {:ok, sock} = :gen_udp.open(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    on_exit(fn -> :gen_udp.close(sock) end)
    sock
  end

  defp ask(sock, port, data) do
    :ok = :gen_udp.send(sock, {127, 0, 0, 1}, port, data)

    case :gen_udp.recv(sock, 0, 2_000) do
      {:ok, {_ip, ^port, reply}} -> reply
      {:error, :timeout} -> :none
    end
  end

  defp stats(server), do: hd(RakNet.Server.info(server).endpoints).stats

  test "a Query client gets the token, the basic and the full stat while RakNet clients connect" do
    {server, port} =
      Server.start!(RakNet.Test.EchoClient, query: %{motd: "Elixir Bedrock", max_players: 50})

    {:ok, player} = RakNet.connect("127.0.0.1", port)

    :ok =
      RakNet.Server.set_query_info(server, %{
        motd: "Elixir Bedrock",
        max_players: 50,
        players: ["Steve", "Alex"],
        map: "overworld"
      })

    sock = udp()
    session = <<0, 0, 0, 42>>

    # Before the token round trip nothing bigger than the request is sent: a stat request
    # with a made-up token gets nothing.
    assert :none == ask(sock, port, <<0xFE, 0xFD, 0x00, session::binary, 1234::32>>)

    <<0x09, ^session::binary-size(4), token_text::binary>> =
      ask(sock, port, <<0xFE, 0xFD, 0x09, session::binary>>)

    {token, <<0>>} = Integer.parse(token_text)

    basic = ask(sock, port, <<0xFE, 0xFD, 0x00, session::binary, token::32>>)

    assert <<0x00, ^session::binary-size(4), rest::binary>> = basic

    assert [motd, "SMP", "overworld", "2", "50", <<^port::little-16, host::binary>>, ""] =
             :binary.split(rest, <<0>>, [:global])

    assert motd == "Elixir Bedrock"
    assert host == "0.0.0.0"

    full = ask(sock, port, <<0xFE, 0xFD, 0x00, session::binary, token::32, 0::32>>)
    assert <<0x00, ^session::binary-size(4), "splitnum", 0, 0x80, 0, _::binary>> = full
    assert full =~ "hostname\0Elixir Bedrock\0"
    assert full =~ "hostport\0#{port}\0"
    assert full =~ <<1, "player_", 0, 0, "Steve", 0, "Alex", 0, 0>>

    # The RakNet player was never bothered.
    {:ok, nil} = RakNet.Connection.send(player, :reliable_ordered, <<0x86, "still">>)
    assert_receive {:raknet, ^player, 0x86, "still", _}, 5_000

    s = stats(server)
    assert s.raw_offered == 4
    assert s.raw_replies == 3
    assert s.malformed + s.unknown_peer == 0
    RakNet.Connection.close(player)
  end

  test "without :query the server stays silent to Query" do
    {_server, port} = Server.start!(RakNet.Test.EchoClient)
    assert :none == ask(udp(), port, <<0xFE, 0xFD, 0x09, 0, 0, 0, 1>>)
  end

  test "a raw handler answers within the amplification rule; a crash in it is logged, not fatal" do
    {server, port} = Server.start!(RakNet.Test.EchoClient, raw_handler: {Answer, self()})
    sock = udp()

    # 4 bytes asked: up to 12 answered.
    assert :binary.copy(<<7>>, 12) == ask(sock, port, <<0xFE, 0xFD, 12::16>>)
    assert_received :offered
    assert :none == ask(sock, port, <<0xFE, 0xFD, 13::16>>)
    assert stats(server).raw_replies_refused == 1
    # Proven: up to 4,096.
    assert byte_size(ask(sock, port, <<0xFE, 0xFD, 1_000::16>>)) == 1_000

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        assert :none == ask(sock, port, <<0xFE, 0xFD, "crash">>)
      end)

    assert log =~ "handler bug"

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        assert :none == ask(sock, port, <<0xFE, 0xFD, "bad">>)
      end)

    assert log =~ "not_iodata"
    # The listener survived: the server still answers and accepts.
    assert :binary.copy(<<7>>, 3) == ask(sock, port, <<0xFE, 0xFD, 3::16>>)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    RakNet.Connection.close(conn)
  end

  test "options are checked" do
    assert_raise ArgumentError, ~r/exclusive/, fn ->
      RakNet.Server.Config.new(RakNet.Test.EchoClient, 0, query: true, raw_handler: {Answer, 1})
    end

    assert_raise ArgumentError, ~r/:raw_prefixes must be/, fn ->
      RakNet.Server.Config.new(RakNet.Test.EchoClient, 0, raw_prefixes: [""])
    end

    # A prefix that would take RakNet's own pings or handshakes away from it.
    assert_raise ArgumentError, ~r/:raw_prefixes must be/, fn ->
      RakNet.Server.Config.new(RakNet.Test.EchoClient, 0, raw_prefixes: [<<0x05>>])
    end

    assert_raise ArgumentError, ~r/:raw_handler must be/, fn ->
      RakNet.Server.Config.new(RakNet.Test.EchoClient, 0, raw_handler: Answer)
    end
  end
end
