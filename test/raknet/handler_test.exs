defmodule RakNet.HandlerTest do
  # `use RakNet.Handler`: a connection process that is a real GenServer with its own state,
  # and RakNet.Connection.close/2 whose reason reaches the handler.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  import RakNet.Test.Monitor

  @moduletag timeout: 60_000

  defmodule Counter do
    # Counts messages in its state; answers calls and casts of the application's own.
    use RakNet.Handler

    @impl RakNet.Handler
    def handle_connect(info, test) do
      send(test, {:connected, self(), info})
      {:ok, %{test: test, count: 0, bytes: 0}}
    end

    @impl RakNet.Handler
    def handle_message(0x86, "stop " <> why, _transit, state),
      do: {:stop, {:asked, why}, state}

    def handle_message(0x86, "receipt", _transit, state) do
      {:ok, id} = Connection.send(self(), :reliable_ack_receipt, <<0x86, "with receipt">>)
      send(state.test, {:sent_receipt, id})
      {:noreply, state}
    end

    def handle_message(0x86, "crash", _transit, _state), do: raise("handler crash")

    def handle_message(0x86, "quiet", _transit, state) do
      send(state.test, {:quiet, self(), state.count + 1})
      {:noreply, %{state | count: state.count + 1}}
    end

    def handle_message(0x86, payload, _transit, state) do
      count = state.count + 1
      Connection.send(self(), :reliable_ordered, <<0x86, "#{count}">>)
      {:noreply, %{state | count: count, bytes: state.bytes + byte_size(payload)}}
    end

    @impl RakNet.Handler
    def handle_receipt(id, fate, state) do
      send(state.test, {:receipt, id, fate})
      {:noreply, state}
    end

    @impl RakNet.Handler
    def handle_call(:count, _from, state), do: {:reply, state.count, state}
    def handle_call(:kick, _from, state), do: {:stop, :kicked, :bye, state}

    @impl RakNet.Handler
    def handle_cast({:add, n}, state), do: {:noreply, %{state | count: state.count + n}}

    @impl RakNet.Handler
    def handle_info({:ping, from}, state) do
      send(from, {:pong, state.count})
      {:noreply, state, {:continue, :after_ping}}
    end

    @impl RakNet.Handler
    def handle_continue(:after_ping, state) do
      send(state.test, :continued)
      {:noreply, state}
    end

    @impl RakNet.Handler
    def handle_disconnect(reason, state) do
      send(state.test, {:disconnected, self(), reason, state.count})
    end
  end

  defmodule Refuser do
    use RakNet.Handler

    @impl RakNet.Handler
    def handle_connect(_info, test) do
      send(test, {:refusing, self()})
      {:stop, :not_today}
    end

    @impl RakNet.Handler
    def handle_message(_type, _payload, _transit, state), do: {:noreply, state}
  end

  defp start_server(module, opts \\ []), do: RakNet.Test.Server.start!(module, opts)

  defmodule Stopper do
    # Stops its own server when asked (an admin's command); when it leaves, tells the test
    # which connections its server lists then.
    use RakNet.Handler

    @impl RakNet.Handler
    def handle_connect(info, test) do
      send(test, {:connected, self(), info})
      {:ok, %{test: test, server: info.server}}
    end

    @impl RakNet.Handler
    def handle_message(0x86, "stop the server", _transit, state) do
      send(state.test, {:stop_returned, RakNet.Server.stop(state.server, 0)})
      {:noreply, state}
    end

    def handle_message(0x86, "stop me", _transit, _state), do: Connection.stop(self())

    def handle_message(0x86, "stop it when I leave", _transit, state),
      do: {:noreply, Map.put(state, :stop_on_leave, true)}

    def handle_message(_type, _payload, _transit, state), do: {:noreply, state}

    @impl RakNet.Handler
    def handle_disconnect(:shutdown, state) do
      # The connection is still open: a goodbye sent to it by pid, from another process
      # (a send from this one would find its handle in its own dictionary), goes out.
      me = self()
      goodbye = Task.async(fn -> Connection.send(me, :reliable_ordered, <<0x86, "bye">>) end)
      send(state.test, {:goodbye, Task.await(goodbye)})
      send(state.test, {:stopper_down, self(), :shutdown})
    end

    def handle_disconnect(reason, state) do
      listed = for %{pid: pid} <- RakNet.Server.connections(state.server), do: pid
      send(state.test, {:left, self(), listed})

      if state[:stop_on_leave],
        do: send(state.test, {:stop_returned, RakNet.Server.stop(state.server, 0)})

      send(state.test, {:stopper_down, self(), reason})
    end
  end

  defmodule Shout do
    use RakNet.Packet, id: 0xA0
    field(:text, {:string, :uint8})
  end

  defmodule Shouts do
    use RakNet.Packet.Set, packets: [RakNet.HandlerTest.Shout]
  end

  defmodule Shouter do
    # Packets, not bytes: answers each Shout in capitals; reports what does not decode.
    use RakNet.Handler, packets: RakNet.HandlerTest.Shouts

    @impl RakNet.Handler
    def handle_connect(_info, test), do: {:ok, test}

    @impl RakNet.Handler
    def handle_packet(%Shout{text: text}, transit, test) do
      send(test, {:packet, transit})

      {:ok, nil} =
        RakNet.Packet.send(self(), :reliable_ordered, %Shout{text: String.upcase(text)})

      {:noreply, test}
    end

    @impl RakNet.Handler
    def handle_bad_packet(type, payload, reason, test) do
      send(test, {:bad_packet, type, payload, reason})
      {:noreply, test}
    end
  end

  # Packets and handlers did not meet: a RakNet.Handler decoded by hand.
  test "use RakNet.Handler, packets: decodes through the set into handle_packet/3" do
    {_server, port} = start_server(Shouter)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    {:ok, nil} = RakNet.Packet.send(conn, :reliable_ordered, %Shout{text: "hi"})
    assert_receive {:raknet, ^conn, 0xA0, body, _}, 5_000
    assert {:ok, %Shout{text: "HI"}} = RakNet.Packet.decode(Shouts, 0xA0, body)
    assert_receive {:packet, transit} when is_integer(transit)

    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0xA0, 5, "ab">>)
    assert_receive {:bad_packet, 0xA0, <<5, "ab">>, _reason}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0xA1>>)
    assert_receive {:bad_packet, 0xA1, "", {:unknown_packet, 0xA1}}, 5_000

    assert_raise ArgumentError, ~r/takes only :packets/, fn ->
      Code.compile_string("defmodule BadUse do use RakNet.Handler, pakets: X end")
    end
  end

  defmodule Goodbye do
    # Says goodbye from handle_shutdown/2, and reports what its server answers meanwhile.
    use RakNet.Handler

    @impl RakNet.Handler
    def handle_connect(info, test) do
      send(test, {:connected, self(), info})
      {:ok, %{test: test, server: info.server}}
    end

    @impl RakNet.Handler
    def handle_message(_type, _payload, _transit, state), do: {:noreply, state}

    @impl RakNet.Handler
    def handle_shutdown(reason, state) do
      {:ok, nil} = Connection.send(self(), :reliable_ordered, <<0x86, "restarting">>)
      send(state.test, {:shutdown, self(), reason, RakNet.Server.info(state.server)})
      {:noreply, state}
    end

    @impl RakNet.Handler
    def handle_disconnect(reason, state) do
      send(state.test, {:disconnected, self(), reason, RakNet.Server.suspend(state.server)})
    end
  end

  # There was no place for a goodbye that every way of stopping honours: handle_shutdown/2
  # runs on the open connection before the server closes it.
  test "handle_shutdown/2 runs while the connection is open; the stopping server answers {:error, :stopping}" do
    {server, port} = start_server(Goodbye, restart: :temporary)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:connected, pid, _}, 5_000

    :ok = RakNet.Server.stop(server)
    assert_receive {:shutdown, ^pid, :shutdown, {:error, :stopping}}, 1_000
    assert_receive {:disconnected, ^pid, :shutdown, {:error, :stopping}}, 5_000
    # The goodbye arrived before the disconnection notification.
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000
    assert_received {:raknet, ^conn, 0x86, "restarting", _}
  end

  # The stop ends the calling process itself, which waited for it until it was killed.
  test "a handler may stop its own server" do
    {server, port} = start_server(Stopper, restart: :temporary)
    ref = Process.monitor(server)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:connected, pid, _}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "stop the server">>)
    assert_receive {:stop_returned, :ok}, 1_000
    assert_receive {:stopper_down, ^pid, :shutdown}, 5_000
    assert_receive {:DOWN, ^ref, :process, ^server, _}, 5_000
    assert_receive {:raknet_disconnect, ^conn, _}, 5_000
  end

  # A connection stopped while open (Connection.stop/1, a supervisor's shutdown) runs its
  # disconnect callback with the connection still there: a goodbye sent by pid goes out.
  test "a goodbye sent by pid from the disconnect callback of a stopped connection arrives" do
    {_server, port} = start_server(Stopper)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:connected, pid, _}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "stop me">>)
    assert_receive {:stopper_down, ^pid, :shutdown}, 5_000
    assert_receive {:goodbye, {:ok, nil}}
    assert_receive {:raknet, ^conn, 0x86, "bye", _}, 5_000
  end

  # From its disconnect callback too (the last player leaves): it is no longer listed there.
  test "a handler may stop its own server when its player leaves" do
    {server, port} = start_server(Stopper, restart: :temporary)
    ref = Process.monitor(server)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:connected, pid, _}, 5_000
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "stop it when I leave">>)
    # Ordered behind it: the flag is set when this comes.
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "ping">>)
    Connection.close(conn)
    assert_receive {:stop_returned, :ok}, 1_000
    assert_receive {:stopper_down, ^pid, :peer_closed}, 1_000
    assert_receive {:DOWN, ^ref, :process, ^server, _}, 5_000
  end

  # What a handler tells the others when it leaves ("X left") agrees with what the server
  # answers them: a connection is no longer listed when its disconnect callback runs (it
  # was until its process ended, and a player asking for the list then still saw it).
  test "a connection is no longer listed when its disconnect callback runs" do
    {_server, port} = start_server(Stopper)
    {:ok, stays} = RakNet.connect("127.0.0.1", port)
    assert_receive {:connected, _, _}, 5_000
    {:ok, leaves} = RakNet.connect("127.0.0.1", port)
    assert_receive {:connected, pid, _}, 5_000
    Connection.close(leaves)
    assert_receive {:left, ^pid, listed}, 5_000
    refute pid in listed
    assert length(listed) == 1
    Connection.close(stays)
  end

  # The server-side process is the one whose peer is this connection's socket: a stray
  # {:connected, ...} (a connection the server saw that is not this one) is not taken for it.
  defp connect(port) do
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    {:ok, %{local_address: {_, local_port}}} = Connection.info(conn)
    assert_receive {:connected, pid, %{address: {_, ^local_port}} = info}, 5_000
    {conn, pid, info}
  end

  test "the handler keeps its state across messages, calls, casts and infos" do
    {server, port} = start_server(Counter)
    {conn, pid, info} = connect(port)

    assert %{role: :server, server: ^server, address: {{127, 0, 0, 1}, _}, guid: guid} = info
    assert is_integer(guid) and is_integer(info.connected_at) and info.protocol in [6, 10, 11]

    for i <- 1..3 do
      {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "hello">>)
      expected = "#{i}"
      assert_receive {:raknet, ^conn, 0x86, ^expected, _}, 5_000
    end

    assert GenServer.call(pid, :count) == 3
    GenServer.cast(pid, {:add, 10})
    assert GenServer.call(pid, :count) == 13
    send(pid, {:ping, self()})
    assert_receive {:pong, 13}, 5_000
    assert_receive :continued, 5_000
  end

  test "receipts reach handle_receipt/3 with their fate" do
    {_server, port} = start_server(Counter)
    {conn, _pid, _info} = connect(port)
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "receipt">>)
    assert_receive {:sent_receipt, id}, 5_000
    assert_receive {:raknet, ^conn, 0x86, "with receipt", _}, 5_000
    assert_receive {:receipt, ^id, :acked}, 5_000
  end

  test "{:stop, reason, state} closes the connection and handle_disconnect/2 gets the reason" do
    {_server, port} = start_server(Counter)
    {conn, pid, _info} = connect(port)
    ref = monitor!(pid)
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "one">>)
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "stop now">>)
    # What the peer sends after the message the handler stopped on is not delivered (a
    # failed login's followers, say): the count stays 1, and no echo of a second message.
    # (On a busy machine the server's close may reach this side first: :closed.)
    for text <- ["two", "three"] do
      assert Connection.send(conn, :reliable_ordered, <<0x86, text::binary>>) in [
               {:ok, nil},
               {:error, :closed}
             ]
    end

    assert_receive {:disconnected, ^pid, {:asked, "now"}, 1}, 5_000
    refute_received {:raknet, ^conn, 0x86, "2", _}
    assert_receive {:DOWN, ^ref, :process, ^pid, {:shutdown, {:asked, "now"}}}, 5_000
    # The peer is told: a disconnection notification, not a timeout.
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
  end

  test "a call may stop the connection after replying" do
    {_server, port} = start_server(Counter)
    {conn, pid, _info} = connect(port)
    assert GenServer.call(pid, :kick) == :bye
    assert_receive {:disconnected, ^pid, :kicked, 0}, 5_000
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
  end

  test "close/2 from another process reaches handle_disconnect/2 and the exit reason" do
    {_server, port} = start_server(Counter)
    {conn, pid, _info} = connect(port)
    ref = monitor!(pid)

    assert :ok = Connection.close(pid, {:kicked, "spamming chat"})
    assert_receive {:disconnected, ^pid, {:kicked, "spamming chat"}, 0}, 5_000
    assert_receive {:DOWN, ^ref, :process, ^pid, {:shutdown, {:kicked, "spamming chat"}}}, 5_000
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    # Closed: closing again is :ok, sending is an error.
    assert :ok = Connection.close(pid, :again)
    assert {:error, :closed} = Connection.send(pid, :reliable, <<0x86>>)
  end

  test "close/2 on a raw handle tells its owner the reason" do
    {_server, port} = start_server(Counter)
    {conn, pid, _info} = connect(port)
    assert :ok = Connection.close(conn, {:moving_to, "zone 7"})
    assert_receive {:raknet_disconnect, ^conn, {:moving_to, "zone 7"}}, 5_000
    assert_receive {:disconnected, ^pid, :peer_closed, 0}, 5_000
    assert_raise ArgumentError, fn -> Connection.close(conn, :binary.copy("x", 70_000)) end
  end

  test "handle_connect/2 may refuse: the connection closes without handle_disconnect/2" do
    {_server, port} = start_server(Refuser)
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:refusing, pid}, 5_000
    ref = Process.monitor(pid)
    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    assert_receive {:DOWN, ^ref, :process, ^pid, reason}, 5_000
    assert reason in [{:shutdown, :not_today}, :noproc]
  end

  @tag :capture_log
  test "a crash in a callback ends only that connection, without handle_disconnect/2" do
    {server, port} = start_server(Counter)
    {conn, pid, _info} = connect(port)
    {other, _other_pid, _} = connect(port)
    ref = monitor!(pid)
    {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, "crash">>)

    assert_receive {:DOWN, ^ref, :process, ^pid, {%RuntimeError{message: "handler crash"}, _}},
                   5_000

    assert_receive {:raknet_disconnect, ^conn, :peer_closed}, 5_000
    refute_received {:disconnected, ^pid, _, _}
    {:ok, nil} = Connection.send(other, :reliable_ordered, <<0x86, "still here">>)
    assert_receive {:raknet, ^other, 0x86, "1", _}, 5_000
    assert RakNet.Server.info(server).connections == 1
  end

  test "a handler runs the client side of RakNet.connect/3" do
    {_server, port} = start_server(RakNet.Test.EchoClient)
    {:ok, pid} = RakNet.connect("127.0.0.1", port, client: {Counter, self()})
    assert_receive {:connected, ^pid, %{role: :client, server: nil, address: {_, ^port}}}, 5_000
    assert_receive {:client_new, _server_side}, 5_000
    # The echo server sends back what it gets; the handler counts the echoes.
    {:ok, nil} = Connection.send(pid, :reliable_ordered, <<0x86, "quiet">>)
    assert_receive {:client_received, _, 0x86, 5, _}, 5_000
    assert_receive {:quiet, ^pid, 1}, 5_000
    assert GenServer.call(pid, :count) == 1
    :ok = Connection.stop(pid)
    assert_receive {:disconnected, ^pid, :shutdown, _}, 5_000
  end

  test "a server refuses a module that is neither a handler nor a RakNet.Client struct" do
    assert_raise ArgumentError, ~r/use RakNet.Handler/, fn ->
      RakNet.Server.start_link(String, 0, ip: {127, 0, 0, 1})
    end
  end

  test "a misspelt callback is a compile-time warning" do
    code = """
    defmodule RakNet.HandlerTest.Misspelt do
      use RakNet.Handler
      @impl RakNet.Handler
      def handle_mesage(_type, _payload, _transit, state), do: {:noreply, state}
    end
    """

    warnings = ExUnit.CaptureIO.capture_io(:stderr, fn -> Code.compile_string(code) end)

    assert warnings =~ "handle_mesage/4"
    assert warnings =~ "handle_message/4"
  after
    :code.purge(RakNet.HandlerTest.Misspelt)
    :code.delete(RakNet.HandlerTest.Misspelt)
  end
end
