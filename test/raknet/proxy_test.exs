defmodule RakNet.ProxyTest do
  # Issue #32: a server behind UDP proxies. Each client here speaks as a proxy would
  # (`RakNet.connect/3`'s `:proxy_header`): its socket on 127.0.0.1 is the proxy's flow, and
  # its header names a real client address. The server trusts 127.0.0.1 as its proxy.
  use ExUnit.Case, async: true

  alias RakNet.Test.Server

  @trusted ["127.0.0.1", "::1"]

  defp start(mode, opts \\ []) do
    opts =
      Keyword.merge(
        [proxy_protocol: [mode: mode, trusted: @trusted], max_connections_per_ip: 1],
        opts
      )

    Server.start!(RakNet.Test.EchoClient, Server.crowd() ++ opts)
  end

  # Each in a /24 of its own: the per-IP limit also caps an IPv4 /24 (at four times it).
  defp real(i), do: {{198, 18, i, 7}, 40_000 + i}

  defp connect_as(port, mode, {ip, p}, opts \\ []) do
    RakNet.connect("127.0.0.1", port, [proxy_header: [mode: mode, source: {ip, p}]] ++ opts)
  end

  defp stats(server), do: hd(RakNet.Server.info(server).endpoints).stats

  defp listed(server), do: Enum.map(RakNet.Server.connections(server), & &1.address)

  for mode <- [:v2_first, :v2_every, :spectrum] do
    @mode mode
    test "#{mode}: clients behind the proxy are known by their real addresses, each with its own per-IP limits" do
      {server, port} = start(@mode)
      count = 100

      # A client straight to the server, beside them. (First: a socket of this node that
      # spoke as the proxy is a proxy flow for the server, for a while after.)
      {:ok, direct} = RakNet.connect("127.0.0.1", port)

      # One after another, from this process: a connection belongs to the process that
      # opened it, and closes when that process ends.
      conns = for i <- 1..count, do: connect_as(port, @mode, real(i))
      assert Enum.all?(conns, &match?({:ok, _}, &1)), inspect(conns)
      conns = Enum.map(conns, fn {:ok, c} -> c end)

      expected = MapSet.new(Enum.map(1..count, &real/1))

      assert :ok ==
               RakNet.Test.Wait.until(fn -> length(listed(server)) == count + 1 end, 500)

      proxied = server |> listed() |> Enum.reject(&match?({{127, 0, 0, 1}, _}, &1))
      assert MapSet.new(proxied) == expected

      # Each real address is its own IP for the limits: a second client at 198.18.1.7
      # (another port) is over its limit of one, although every client shares the proxy's.
      assert {:error, :no_free_incoming_connections} =
               connect_as(port, @mode, {{198, 18, 1, 7}, 50_000})

      # Messages go both ways through the proxy; lookup finds the real address.
      conn = hd(conns)
      {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x86, "via proxy">>)
      assert_receive {:raknet, ^conn, 0x86, "via proxy", _}, 5_000

      assert {:ok, %{address: {{198, 18, 1, 7}, 40_001}}} =
               RakNet.Server.lookup(server, :address, real(1))

      assert :error == RakNet.Server.lookup(server, :address, {{127, 0, 0, 1}, port})

      assert stats(server).proxied > 0
      assert stats(server).proxy_flows >= count
      assert stats(server).proxy_untrusted_header == 0

      for c <- [direct | conns], do: RakNet.Connection.close(c)
    end
  end

  test "a header from an untrusted source is dropped; its datagrams without one are a direct client's" do
    {server, port} =
      Server.start!(RakNet.Test.EchoClient,
        proxy_protocol: [mode: :v2_first, trusted: ["10.0.0.0/8"]]
      )

    assert {:error, :timeout} = connect_as(port, :v2_first, real(1), timeout: 1_000)
    assert stats(server).proxy_untrusted_header > 0
    assert listed(server) == []

    {:ok, direct} = RakNet.connect("127.0.0.1", port)
    assert :ok == RakNet.Test.Wait.until(fn -> length(listed(server)) == 1 end)
    assert [{{127, 0, 0, 1}, _}] = listed(server)
    RakNet.Connection.close(direct)
  end

  test "required: a trusted source's datagrams without a header are dropped" do
    {server, port} =
      start(:v2_every, proxy_protocol: [mode: :v2_every, trusted: @trusted, required: true])

    assert {:error, :timeout} = RakNet.connect("127.0.0.1", port, timeout: 1_000)
    assert stats(server).proxy_missing_header > 0
  end

  test "a ban of one real address closes only that client" do
    {server, port} = start(:v2_every)
    {:ok, banned} = connect_as(port, :v2_every, real(1))
    {:ok, other} = connect_as(port, :v2_every, real(2))
    assert :ok == RakNet.Test.Wait.until(fn -> length(listed(server)) == 2 end)

    :ok = RakNet.Server.ban(server, "198.18.1.7")
    assert_receive {:raknet_disconnect, ^banned, _reason}, 5_000
    assert :ok == RakNet.Test.Wait.until(fn -> listed(server) == [real(2)] end)

    {:ok, nil} = RakNet.Connection.send(other, :reliable_ordered, <<0x86, "still here">>)
    assert_receive {:raknet, ^other, 0x86, "still here", _}, 5_000

    # The banned address cannot come back through the proxy either.
    assert {:error, :banned} = connect_as(port, :v2_every, {{198, 18, 1, 7}, 1})
    RakNet.Connection.close(other)
  end

  test "cookies work through the proxy" do
    {server, port} = start(:v2_first, use_cookies: true)
    {:ok, conn} = connect_as(port, :v2_first, real(7))
    assert :ok == RakNet.Test.Wait.until(fn -> listed(server) == [real(7)] end)
    assert stats(server).bad_cookies == 0
    RakNet.Connection.close(conn)
  end

  test "options are checked" do
    for bad <- [
          [mode: :v1, trusted: ["10.0.0.0/8"]],
          [mode: :v2_first, trusted: []],
          [mode: :v2_first, trusted: ["10.0.0.0/33"]],
          [mode: :v2_first, trusted: ["not an address"]],
          [mode: :v2_first, trusted: ["::ffff:10.0.0.0/95"]],
          [mode: :v2_first, trusted: ["10.0.0.0/8"], required: :yes],
          [mode: :v2_first, trusted: ["10.0.0.0/8"], max_flows: 0],
          [mode: :v2_first, trusted: ["10.0.0.0/8"], typo: 1],
          :v2_first
        ] do
      assert_raise ArgumentError, ~r/:proxy_protocol must be/, fn ->
        RakNet.Server.Config.new(RakNet.Test.EchoClient, 0, proxy_protocol: bad)
      end
    end

    config =
      RakNet.Server.Config.new(RakNet.Test.EchoClient, 0,
        proxy_protocol: [
          mode: :spectrum,
          trusted: ["10.1.2.3/8", {192, 0, 2, 1}, "2001:db8::/32", "::ffff:10.0.0.0/104"]
        ]
      )

    assert config.proxy_protocol.trusted ==
             ["10.1.2.3/8", "192.0.2.1/32", "2001:db8::/32", "10.0.0.0/8"]

    assert_raise ArgumentError, ~r/:proxy_header must be/, fn ->
      RakNet.connect("127.0.0.1", 1, proxy_header: [mode: :v2_first, source: :nowhere])
    end
  end
end
