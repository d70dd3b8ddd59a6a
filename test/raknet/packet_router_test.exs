defmodule RakNet.PacketRouterTest.Hello do
  use RakNet.Packet, id: 0x90, dispatch_to: :world
  field(:name, {:string, :uint8})
end

defmodule RakNet.PacketRouterTest.Step do
  use RakNet.Packet, id: 0x91, dispatch_to: :zone
  field(:dx, :int8)
end

defmodule RakNet.PacketRouterTest.Note do
  use RakNet.Packet, id: 0x92
  field(:text, {:string, :uint8})
end

defmodule RakNet.PacketRouterTest.Set do
  use RakNet.Packet.Set,
    packets: [
      RakNet.PacketRouterTest.Hello,
      RakNet.PacketRouterTest.Step,
      RakNet.PacketRouterTest.Note
    ]
end

defmodule RakNet.PacketRouterTest.Router do
  use RakNet.Packet.Router

  @impl true
  def target(:world, _packet, ctx), do: {:world, ctx.assigns.test}
  def target(:zone, _packet, %{assigns: %{zone: zone} = a}), do: {:zone, a.test, zone}
  def target(_kind, _packet, _ctx), do: nil

  @impl true
  def connected(ctx), do: %{ctx | assigns: Map.put(ctx.assigns, :connected, true)}

  @impl true
  def disconnected(ctx, reason), do: send(ctx.assigns.owner, {:disconnected, ctx, reason})
end

defmodule RakNet.PacketRouterTest.SmallRouter do
  use RakNet.Packet.Router, max_mailbox: 5

  @impl true
  def target(:world, _packet, ctx), do: {:world, ctx.assigns.test}
  def target(_kind, _packet, _ctx), do: nil
end

defmodule RakNet.PacketRouterTest.MidRouter do
  use RakNet.Packet.Router, max_mailbox: 1_000

  @impl true
  def target(:world, _packet, ctx), do: {:world, ctx.assigns.test}
  def target(_kind, _packet, _ctx), do: nil
end

defmodule RakNet.PacketRouterTest do
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  @moduletag :capture_log

  alias RakNet.Packet
  alias RakNet.Packet.{Context, Registry, Router}
  alias RakNet.PacketRouterTest.{Hello, Note, Step}

  # A process registered under `name` that forwards what it gets to the test.
  defp start_target(name) do
    test = self()

    pid =
      spawn_link(fn ->
        :yes = Registry.register_name(name, self())
        send(test, {:registered, name})
        forward(test)
      end)

    assert_receive {:registered, ^name}
    pid
  end

  defp forward(test) do
    receive do
      msg -> send(test, {:target, self(), msg})
    end

    forward(test)
  end

  setup do
    # Fresh counters and rate limits for every test (node-wide state).
    RakNet.Packet.Stats.init()
    {:ok, t: make_ref()}
  end

  test "the registry is a :via module: register, look up, refuse a second, forget the dead",
       %{t: t} do
    name = {:agent, t}
    {:ok, pid} = Agent.start_link(fn -> 1 end, name: Registry.via(name))
    assert Registry.whereis_name(name) == pid
    assert Agent.get(Registry.via(name), & &1) == 1
    assert {:error, {:already_started, ^pid}} = Agent.start(fn -> 2 end, name: Registry.via(name))
    assert Registry.members(name) == [pid]

    {ref, [^pid]} = :pg.monitor(Registry, name)
    Agent.stop(pid)
    assert_receive {^ref, :leave, ^name, [^pid]}
    assert Registry.whereis_name(name) == :undefined
    # The :via contract: sending to a missing name exits; a cast is dropped (and counted).
    assert catch_exit(Registry.send(name, :hi)) == {:badarg, {name, :hi}}
    assert GenServer.cast(Registry.via(name), :hi) == :ok
    assert Router.stats().missed == 2
  end

  test "dispatch casts {:raknet_packet, packet, context} to the routed name", %{t: t} do
    world = start_target({:world, t})
    zone = start_target({:zone, t, 4})
    ctx = %Context{connection: self(), assigns: %{test: t, zone: 4}}

    assert Router.dispatch(RakNet.PacketRouterTest.Router, %Hello{name: "a"}, ctx) == :ok
    assert_receive {:target, ^world, {:"$gen_cast", {:raknet_packet, %Hello{name: "a"}, ^ctx}}}

    assert Router.dispatch(RakNet.PacketRouterTest.Router, %Step{dx: -1}, ctx) == :ok
    assert_receive {:target, ^zone, {:"$gen_cast", {:raknet_packet, %Step{dx: -1}, ^ctx}}}
    assert Router.stats().dispatched == 2
  end

  # Packet dispatch emitted no telemetry: a dashboard saw nothing of it.
  test "dispatch and drops are telemetry events", %{t: t} do
    test = self()
    id = make_ref()
    events = [[:raknet, :packet, :dispatch], [:raknet, :packet, :dropped]]

    :ok =
      :telemetry.attach_many(
        id,
        events,
        fn event, m, meta, _ -> send(test, {event, m, meta}) end,
        nil
      )

    on_exit(fn ->
      :telemetry.detach(id)
      RakNet.Telemetry.reset()
    end)

    world = start_target({:world, t})
    ctx = %Context{connection: self(), assigns: %{test: t, zone: 9}}
    router = RakNet.PacketRouterTest.Router

    :ok = Router.dispatch(router, %Hello{name: "a"}, ctx)
    assert_receive {:target, ^world, _}

    assert_received {[:raknet, :packet, :dispatch], %{count: 1},
                     %{router: ^router, packet: Hello, target: {:world, ^t}}}

    {:error, _} = Router.dispatch(router, %Step{dx: 1}, ctx)

    assert_received {[:raknet, :packet, :dropped], %{count: 1},
                     %{reason: :missed, packet: Step, target: {:zone, ^t, 9}}}
  end

  test "a missing or unroutable target is counted and logged at most once a second, never raised",
       %{t: t} do
    ctx = %Context{connection: self(), assigns: %{test: t, zone: 9}}

    log =
      capture_log(fn ->
        for _ <- 1..100 do
          assert Router.dispatch(RakNet.PacketRouterTest.Router, %Step{dx: 1}, ctx) ==
                   {:error, {:no_process, {:zone, t, 9}}}
        end

        no_zone = %{ctx | assigns: %{t: t}}

        for _ <- 1..10 do
          assert Router.dispatch(RakNet.PacketRouterTest.Router, %Step{dx: 1}, no_zone) ==
                   {:error, :unrouted}
        end
      end)

    assert %{missed: 100, unrouted: 10, dispatched: 0, logged: 2} = Router.stats()
    assert [_] = Regex.scan(~r/raknet packet missed: no process registered as \{:zone/, log)
    assert [_] = Regex.scan(~r/raknet packet unrouted: .*has no target for .*Step/, log)
  end

  test "a target whose mailbox is full gets no more: the packet is dropped and counted",
       %{t: t} do
    world = start_blocked_world(t)
    ctx = %Context{connection: self(), assigns: %{test: t}}
    router = RakNet.PacketRouterTest.SmallRouter

    log =
      capture_log(fn ->
        results = for _ <- 1..8, do: Router.dispatch(router, %Hello{name: "x"}, ctx)
        assert Enum.take(results, 5) == List.duplicate(:ok, 5)

        assert Enum.drop(results, 5) ==
                 List.duplicate({:error, {:overloaded, {:world, t}}}, 3)
      end)

    assert {:message_queue_len, 5} = Process.info(world, :message_queue_len)
    assert %{dispatched: 5, overloaded: 3} = Router.stats()
    assert log =~ "raknet packet overloaded"
    send(world, :go)
  end

  # Reading a running process's mailbox length waits for the target's scheduler (1.5 µs to
  # 20 µs and more, against 0.25 µs for a cast): a sender reads it again after one packet per
  # 32 free places it saw, and never casts past the limit on its own.
  test "a mailbox with room is read only every few packets, and one sender still stops at the limit",
       %{t: t} do
    world = start_blocked_world(t)
    ctx = %Context{connection: self(), assigns: %{test: t}}
    router = RakNet.PacketRouterTest.MidRouter

    # The test's calls of process_info/2 on the world, counted by a tracer.
    tracer = spawn_link(fn -> count_reads(world, 0) end)
    :erlang.trace_pattern({:erlang, :process_info, 2}, true, [:global])
    :erlang.trace(self(), true, [:call, {:tracer, tracer}])

    results =
      try do
        for _ <- 1..1_100, do: Router.dispatch(router, %Hello{name: "x"}, ctx)
      after
        :erlang.trace(self(), false, [:call])
        :erlang.trace_pattern({:erlang, :process_info, 2}, false, [:global])
      end

    ref = :erlang.trace_delivered(self())
    assert_receive {:trace_delivered, _, ^ref}, 5_000
    send(tracer, {:count, self()})
    assert_receive {:reads, reads}, 5_000

    assert Enum.count(results, &(&1 == :ok)) == 1_000
    assert Enum.drop(results, 1_000) == List.duplicate({:error, {:overloaded, {:world, t}}}, 100)
    assert {:message_queue_len, 1_000} = Process.info(world, :message_queue_len)
    # Every packet over the limit is read for (100); the first 1,000 took 127 reads (one for
    # each packet: 1,000).
    assert reads >= 100 and reads < 300, "#{reads} reads of the mailbox for 1,100 packets"
    send(world, :go)
  end

  # A world registered for test `t` that takes nothing until sent `:go`.
  defp start_blocked_world(t) do
    test = self()

    world =
      spawn_link(fn ->
        :yes = Registry.register_name({:world, t}, self())
        send(test, :registered)

        receive do
          :go -> :ok
        end
      end)

    assert_receive :registered
    world
  end

  defp count_reads(target, n) do
    receive do
      {:trace, _, :call, {:erlang, :process_info, [^target, :message_queue_len]}} ->
        count_reads(target, n + 1)

      {:count, to} ->
        send(to, {:reads, n})

      _other ->
        count_reads(target, n)
    end
  end

  test "use RakNet.Packet.Router refuses a :max_mailbox that is not a positive integer" do
    assert_raise ArgumentError, ~r/:max_mailbox must be a positive integer/, fn ->
      Code.compile_quoted(
        quote do
          defmodule BadRouter do
            use RakNet.Packet.Router, max_mailbox: 0
          end
        end
      )
    end
  end

  describe "RakNet.Packet.Handler on a real connection" do
    setup %{t: t} do
      opts = [
        set: RakNet.PacketRouterTest.Set,
        router: RakNet.PacketRouterTest.Router,
        assigns: %{test: t, owner: self()}
      ]

      spec =
        RakNet.Server.child_spec([
          RakNet.Packet.Handler,
          0,
          ip: {127, 0, 0, 1},
          open_ipv6_socket: false,
          client_data: opts
        ])

      server = start_supervised!(spec)
      {:ok, conn} = RakNet.connect("127.0.0.1", RakNet.Server.info(server).ipv4_port)
      world = start_target({:world, t})
      {:ok, conn: conn, world: world}
    end

    test "decodes, routes by assigns, answers, survives garbage, reports the disconnect",
         %{t: t, conn: conn, world: world} do
      {:ok, nil} =
        RakNet.Connection.send(conn, :reliable_ordered, Packet.encode!(%Hello{name: "ann"}))

      assert_receive {:target, ^world,
                      {:"$gen_cast", {:raknet_packet, %Hello{name: "ann"}, ctx}}},
                     5_000

      assert %Context{assigns: %{connected: true, test: ^t}} = ctx
      connection = ctx.connection
      assert node(connection) == node() and connection != self()

      # Before the zone is assigned, steps have nowhere to go.
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, Packet.encode!(%Step{dx: 1}))

      # Garbage: an unknown id and a malformed body, counted; the connection carries on.
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x99, 1, 2, 3>>)
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x90, 5, "ab">>)

      # A barrier: reliable_ordered, so when this reaches the world the connection has handled
      # everything before it.
      {:ok, nil} =
        RakNet.Connection.send(conn, :reliable_ordered, Packet.encode!(%Hello{name: "b"}))

      assert_receive {:target, ^world, {:"$gen_cast", {:raknet_packet, %Hello{name: "b"}, _}}},
                     5_000

      assert %{unrouted: 1, decode_errors: 2, dispatched: 2} = Router.stats()

      # The world assigns a zone and answers; later steps go to the zone.
      zone = start_target({:zone, t, 1})
      :ok = RakNet.Packet.Handler.assign(connection, zone: 1)
      {:ok, nil} = Packet.send(connection, :reliable_ordered, %Note{text: "welcome"})
      assert_receive {:raknet, ^conn, 0x92, <<7, "welcome">>, _}, 5_000

      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, Packet.encode!(%Step{dx: -3}))

      assert_receive {:target, ^zone, {:"$gen_cast", {:raknet_packet, %Step{dx: -3}, ctx}}},
                     5_000

      assert ctx.assigns.zone == 1
      assert %{unrouted: 1, decode_errors: 2, dispatched: 3} = Router.stats()
      assert Process.alive?(connection)

      # A broadcast of one packet to the connection, as a zone does.
      assert {:ok, 1} = Packet.broadcast([connection], :reliable_ordered, %Note{text: "all"})
      assert_receive {:raknet, ^conn, 0x92, <<3, "all">>, _}, 5_000

      # A misspelt option is refused here, before a connection on another node is handed the
      # message: there it could only be dropped, after an {:ok, _} here.
      remote = remote_pid(:ghost@nowhere)
      note = %Note{text: "lost"}

      for connections <- [[remote], [connection], [connection, remote]] do
        assert Packet.broadcast(connections, :reliable, note, chanel: 3) ==
                 {:error, {:unknown_option, :chanel}}
      end

      assert Packet.send(remote, :reliable, note, chanel: 3) ==
               {:error, {:unknown_option, :chanel}}

      # So are a bad reliability, channel or priority.
      for {reliability, opts, error} <- [
            {:reliable, [channel: 32], :bad_channel},
            {:sometimes, [], :bad_reliability},
            {:reliable, [priority: :top], :bad_priority}
          ] do
        assert Packet.send(remote, reliability, note, opts) == {:error, error}
        assert Packet.broadcast([remote], reliability, note, opts) == {:error, error}
        assert Packet.send(connection, reliability, note, opts) == {:error, error}
      end

      # A receipt belongs to one send: no broadcast takes a receipt reliability, remote or not.
      for connections <- [[remote], [connection], [connection, remote]] do
        assert Packet.broadcast(connections, :reliable_ack_receipt, note) ==
                 {:error, :bad_reliability}
      end

      assert Packet.send(connection, :reliable, note, chanel: 3) ==
               {:error, {:unknown_option, :chanel}}

      refute_receive {:raknet, ^conn, 0x92, _, _}, 100

      :ok = RakNet.Connection.close(conn)
      assert_receive {:disconnected, %Context{connection: ^connection}, :peer_closed}, 5_000
    end
  end

  # A pid of a node that does not exist (NEW_PID_EXT): what a process on another node looks
  # like to this one.
  defp remote_pid(node) do
    name = Atom.to_string(node)

    :erlang.binary_to_term(
      <<131, 88, 100, byte_size(name)::16, name::binary, 1::32, 0::32, 1::32>>
    )
  end
end
