defmodule RakNet.BackpressureTest do
  # A handler slower than its peer slows the peer down instead of losing it.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.GateClient

  defp start_server(opts), do: GateClient |> RakNet.Test.Server.start!(opts) |> elem(1)

  # Polls `fun` every 10 ms until it returns a truthy value, for at most `ms`.
  defp eventually(fun, ms \\ 5_000) do
    deadline = System.monotonic_time(:millisecond) + ms

    Stream.repeatedly(fn ->
      receive do
      after
        10 -> fun.()
      end
    end)
    |> Enum.find(fn value -> value || System.monotonic_time(:millisecond) > deadline end)
  end

  test "a burst to a blocked handler is held back, then delivered completely and in order" do
    port =
      start_server(
        [max_pending_deliveries: 16, max_pending_bytes: 65_536] ++ RakNet.Test.Server.bulk()
      )

    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:gate_new, handler}, 5_000
    n = 3_000

    # The first message blocks the handler; then the burst.
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, 0::32, 0::800>>)
    assert_receive {:gate_blocked, ^handler}, 5_000

    for i <- 1..n do
      {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i::32, 0::800>>)
    end

    # The handler is stuck: the server stops taking the client's messages (they stay
    # unacknowledged) instead of filling the mailbox or closing the connection.
    paused =
      eventually(fn ->
        {:ok, %{stats: stats}} = Connection.info(handler)
        stats.refused_paused > 0 && stats
      end)

    assert paused, "the server never paused the connection"
    {:messages, queued} = Process.info(handler, :messages)
    assert length(queued) < 200

    send(handler, :open_gate)

    for i <- 0..n do
      assert_receive {:gate_got, 0x86, <<^i::32, _::binary>>}, 10_000
    end

    refute_received {:gate_disconnect, _, _}
    refute_received {:raknet_disconnect, ^conn, _}
    assert {:ok, %{stats: %{messages_in: messages_in}}} = Connection.info(handler)
    assert messages_in >= n + 1
  end

  test "a handler that makes no progress for the timeout is closed as overloaded" do
    port = start_server(max_pending_deliveries: 16, client_timeout_ms: 1_000)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:gate_new, handler}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, 0::32>>)
    assert_receive {:gate_blocked, ^handler}, 5_000

    # More than one receive batch of the server, so that it pauses and refuses some: the
    # client keeps resending those and is never silent (which the timeout would close as
    # :timeout instead).
    for i <- 1..3_000,
        do: {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i::32, 0::800>>)

    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    send(handler, :open_gate)
    assert_receive {:gate_disconnect, ^handler, :overloaded}, 5_000
  end

  # The connection process tells the runtime what it handled when its mailbox is empty (or
  # every 256 messages). A message of the handler's own (a game tick, a call) behind the
  # last RakNet one used to leave the count unconfirmed: a connection paused for its
  # delivery budget then got no further RakNet message to confirm on, and was closed as
  # overloaded with its handler idle.
  test "a message of the handler's own behind the last RakNet one does not stall it" do
    port = start_server(max_pending_bytes: 65_536, client_timeout_ms: 1_000)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:gate_new, handler}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, 0::32>>)
    assert_receive {:gate_blocked, ^handler}, 5_000

    # Over the budget at once: the runtime pauses the connection until it is confirmed.
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, 1::32, 0::800_000>>)
    # Delivered (waiting in its mailbox) before the tick is sent.
    delivered? = fn ->
      {:messages, queued} = Process.info(handler, :messages)
      Enum.any?(queued, &(elem(&1, 0) in [:raknet, :raknet_batch]))
    end

    assert eventually(delivered?)
    send(handler, :tick)
    send(handler, :open_gate)
    assert_receive {:gate_got, 0x86, <<0::32>>}, 5_000
    assert_receive {:gate_got, 0x86, <<1::32, _::binary>>}, 5_000

    # Taken once the runtime knows the big one was handled; past the 1 s stall timeout
    # the connection would be closed instead.
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, 2::32>>)
    assert_receive {:gate_got, 0x86, <<2::32>>}, 5_000
    refute_received {:gate_disconnect, _, _}
    refute_received {:raknet_disconnect, ^conn, _}
  end

  # A connection's messages wait for its process (started by the listener) in the runtime,
  # 1,024 at most: beyond that they were dropped, reliable ones included (acknowledged,
  # never delivered). The peer is now held back at half that, until the process is there.
  test "messages that come before the connection has its process are held back, not dropped" do
    {server, port} = RakNet.Test.Server.start!(RakNet.Test.EchoClient)
    listener = RakNet.Test.Server.child(server, RakNet.Server.Listener)
    :ok = :sys.suspend(listener)

    try do
      {:ok, conn} = RakNet.connect("127.0.0.1", port)

      # The listener has not taken the connection in: its announcement waits in its queue.
      announced = fn ->
        case Process.info(listener, :messages) do
          {:messages, [{:raknet_endpoint, _, :connected, server_conn, _}]} -> server_conn
          _ -> nil
        end
      end

      server_conn = eventually(announced)
      assert is_reference(server_conn)
      stats = fn -> elem(Connection.info(server_conn), 1).stats end

      # 600, taken (held for the process to come) up to 512 at least ...
      for i <- 1..600, do: {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i::32>>)
      assert eventually(fn -> stats.().messages_in >= 512 end)
      # ... then 600 more: the peer is held back, its messages left unacknowledged.
      for i <- 601..1_200,
          do: {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, i::32>>)

      assert eventually(fn -> stats.().refused_paused > 0 end)
      :ok = :sys.resume(listener)

      for i <- 1..1_200, do: assert_receive({:raknet, ^conn, 0x86, <<^i::32>>, _}, 5_000)
    after
      :sys.resume(listener)
    end
  end
end
