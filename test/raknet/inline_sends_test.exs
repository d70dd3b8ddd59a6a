defmodule RakNet.InlineSendsTest do
  # Sends made while the endpoint thread waits are carried out on the sender's scheduler
  # (`:inline_sends`); the others go through the thread. Either way, in order.
  use ExUnit.Case, async: true

  alias RakNet.Connection
  alias RakNet.Test.EchoClient

  @moduletag timeout: 60_000

  defp server_stats(server) do
    [endpoint] = RakNet.Server.info(server).endpoints
    endpoint.stats
  end

  # Sends `count` messages (4-byte counters from `first`) and checks that the echoes come
  # back in the order sent.
  defp round(conn, first, count) do
    for i <- first..(first + count - 1) do
      assert {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i::32>>)
    end

    for i <- first..(first + count - 1) do
      assert_receive {:raknet, ^conn, 0x86, got, _}, 10_000
      assert got == <<i::32>>
    end
  end

  defp flush_callbacks do
    receive do
      {:client_received, _, _, _, _} -> flush_callbacks()
    after
      0 -> :ok
    end
  end

  test "replies to one message at a time leave from the handler's scheduler" do
    {server, port} = RakNet.Test.Server.start!(EchoClient, endpoint_threads: 1)
    assert {:ok, conn} = RakNet.connect("127.0.0.1", port)

    for i <- 1..50, do: round(conn, i, 1)

    stats = server_stats(server)
    # The echo handler's send found the endpoint thread waiting (it delivered the message
    # and went back to sleep) at least some of the time.
    assert stats.inline_sends >= 1, inspect(stats)
    assert stats.inline_sends <= 50
    Connection.close(conn)
    flush_callbacks()
  end

  test "bursts mix both paths and stay in order" do
    {server, port} = RakNet.Test.Server.start!(EchoClient, endpoint_threads: 1)
    assert {:ok, conn} = RakNet.connect("127.0.0.1", port)

    # Each burst's echoes are sent back to back by the handler: the first may go inline, the
    # rest are a burst that must queue behind it.
    for burst <- 0..19, do: round(conn, burst * 100, 100)

    stats = server_stats(server)
    assert stats.inline_sends >= 1, inspect(stats)
    assert stats.commands >= 1_000, inspect(stats)
    Connection.close(conn)
    flush_callbacks()
  end

  test "inline_sends: false sends everything through the endpoint thread" do
    {server, port} =
      RakNet.Test.Server.start!(EchoClient, endpoint_threads: 1, inline_sends: false)

    assert {:ok, conn} = RakNet.connect("127.0.0.1", port)

    for i <- 1..20, do: round(conn, i, 1)

    stats = server_stats(server)
    assert stats.inline_sends == 0
    assert stats.commands >= 20
    Connection.close(conn)
    flush_callbacks()
  end

  test "a bad :inline_sends is refused" do
    assert_raise ArgumentError, ~r/inline_sends/, fn ->
      RakNet.Server.Config.new(EchoClient, 0, inline_sends: :yes)
    end
  end
end
