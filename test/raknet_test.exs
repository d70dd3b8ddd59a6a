defmodule RakNetTest do
  use ExUnit.Case, async: true

  doctest RakNet
end

defmodule RakNet.DocTest do
  use ExUnit.Case, async: true
  doctest RakNet.Ping
  doctest RakNet.ReliabilityLayer.Reliability
  doctest RakNet.Server.Config
  doctest RakNet.Message
  doctest RakNet.Top, only: [sparkline: 1]
  doctest RakNet.Server, only: [timestamp: 1, make_unique_id: 0, child_spec: 1]
end

defmodule RakNet.NativeMemoryTest do
  # Not async: the counter covers every endpoint of the VM, so no other test may run meanwhile.
  use ExUnit.Case, async: false

  test "native_memory/0 counts what the engines hold for connections" do
    {:ok, server} =
      RakNet.Server.start_link(RakNet.Test.EchoClient, 0,
        ip: "127.0.0.1",
        open_ipv6_socket: false,
        client_data: self()
      )

    port = RakNet.Server.info(server).ipv4_port
    before = RakNet.native_memory()

    conns =
      for _ <- 1..20 do
        {:ok, conn} = RakNet.connect("127.0.0.1", port)
        conn
      end

    # 40 connections (both ends live in this VM) hold windows, queues and buffers.
    grown = RakNet.native_memory() - before
    assert grown > 40 * 1024, "grew by #{grown} bytes"

    Enum.each(conns, &RakNet.Connection.close/1)
    :ok = RakNet.Server.stop(server)
  end
end
