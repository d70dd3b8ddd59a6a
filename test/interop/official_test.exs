defmodule RakNet.Interop.OfficialTest do
  @moduledoc """
  Against official RakNet 4.081 (the C++ library, from PyPI `raknet`): both roles, at
  protocols 6 (official) and 11 (Minecraft Bedrock).
  """
  use ExUnit.Case, async: false
  @moduletag :interop
  @moduletag timeout: 120_000

  alias RakNet.Test.{EchoClient, Official}

  defp start_server(opts), do: RakNet.Test.Server.start!(EchoClient, opts)

  test "the official client's burst is echoed completely, in order, through back-pressure" do
    # A tiny delivery budget: the handler's mailbox passes it many times, so the server has
    # to pause the official client (leave its datagrams unacknowledged) instead of dropping
    # it; every message must still come back in order and the connection must stay up.
    # This is the default path toward an official peer: the echoes go out on the default
    # in-flight window (1,024 reliable frames), which the 100 KB tests below cannot use.
    {_server, port} =
      start_server(
        [max_pending_deliveries: 64, max_pending_bytes: 65_536] ++ RakNet.Test.Server.bulk()
      )

    summary = Official.burst(port, 20_000, 64)
    # CLOSED no: the server never hung up on it (the client disconnects itself at the end).
    assert summary =~ ~r/^ECHOED 20000 IN_ORDER yes RATE \d+ CLOSED no$/, summary
    assert_receive {:client_new, _server_side}, 5_000
  end

  # With cookies (the default) the official client's open-connection-request-2 must echo the
  # cookie, at protocol 6 too, or it is dropped; without, its address is proven at its 0x13.
  for protocol <- [6, 11], cookies <- [true, false] do
    test "the official client exchanges every reliability with RakNet.Server at protocol #{protocol}, use_cookies: #{cookies}" do
      # The server's 100 KB echoes are held to 32 reliable frames in flight, for the reason
      # given in the client endpoint test below.
      Application.put_env(:raknet, :max_reliable_in_flight, 32)
      on_exit(fn -> Application.delete_env(:raknet, :max_reliable_in_flight) end)
      {_server, port} = start_server(use_cookies: unquote(cookies))
      summary = Official.run_client(port, unquote(protocol))
      # 32 messages: 8 reliabilities x 16 B, 1 KB, 5 KB, 100 KB, each echoed intact, plus the
      # 12 ack receipts of the receipt kinds.
      assert summary =~ ~r/^OK: protocol #{unquote(protocol)} sent 32 echoed 32/, summary
      assert_receive {:client_new, server_side}, 5_000
      # The official client disconnects cleanly at the end.
      assert_receive {:client_disconnect, ^server_side}, 10_000
    end
  end

  for protocol <- [6, 11] do
    test "RakNet.connect connects to an official server at protocol #{protocol} and exchanges messages" do
      {peer, port} = Official.start_server(unquote(protocol))
      on_exit(fn -> Official.stop(peer) end)
      assert {:ok, conn} = RakNet.connect("127.0.0.1", port)
      assert {:ok, %{protocol: unquote(protocol)}} = RakNet.Connection.info(conn)

      for {reliability, n} <- Enum.with_index(RakNet.ReliabilityLayer.Reliability.all()) do
        assert {:ok, _} = RakNet.Connection.send(conn, reliability, <<0x86, n, "hello">>)
      end

      for n <- 0..7, do: assert_receive({:raknet, ^conn, 0x86, <<^n, "hello">>, _}, 10_000)
      :ok = RakNet.Connection.close(conn)
      assert_receive {:raknet_disconnect, ^conn, :local_close}, 5_000
    end

    test "a client endpoint exchanges every reliability and size with an official server at protocol #{protocol}" do
      {peer, port} = Official.start_server(unquote(protocol))
      on_exit(fn -> Official.stop(peer) end)

      # Official 4.081 joins a split message's fragments in the order they arrive, so
      # fragments we resend after its small socket buffer (256 KiB) dropped some would come
      # back mis-assembled: keep at most 32 reliable frames in flight towards it, which that
      # buffer always holds (the bug is official's; the test must not fail by chance).
      opts =
        RakNet.ClientEndpoint.native_opts(:inet)
        |> Map.merge(%{max_reliable_in_flight: 32, shared_thread: false})

      {:ok, endpoint} = RakNet.Native.endpoint_start(opts, self())
      {:ok, conn} = RakNet.Native.endpoint_connect(endpoint, "127.0.0.1", port, self())
      assert_receive {:raknet_connected, ^conn, %{protocol: unquote(protocol)}}, 10_000

      sent =
        for {size, s} <- Enum.with_index([16, 1_024, 5 * 1_024, 100 * 1_024]),
            {reliability, r} <- Enum.with_index(RakNet.ReliabilityLayer.Reliability.all()),
            into: %{} do
          n = s * 8 + r
          # Non-periodic: every 4-byte word differs, so a mis-assembly shows.
          body = for(w <- 0..div(size, 4), into: <<>>, do: <<w::32>>) |> binary_part(0, size - 2)
          payload = <<n, body::binary>>

          assert {:ok, receipt} =
                   RakNet.Connection.send(conn, reliability, <<0x86, payload::binary>>,
                     channel: rem(n, 4)
                   )

          {n, {payload, reliability, size, receipt}}
        end

      for {n, {payload, _, _, _}} <- sent do
        assert_receive {:raknet, ^conn, 0x86, <<^n, _::binary>> = echoed, _}, 10_000
        assert echoed == payload, "message #{n} corrupted"
      end

      # Exactly one fate per receipt. Reliable and split messages are acknowledged; a
      # single-datagram unreliable one may be reported lost only when we declared its
      # datagram lost (a starved peer acknowledged it after our retransmission timeout).
      receipts = for {_, {_, rel, size, id}} <- sent, id != nil, do: {id, {rel, size}}
      assert length(receipts) == 12

      for {id, {reliability, size}} <- receipts do
        assert_receive {:raknet_receipt, ^conn, ^id, fate}, 10_000

        if fate == :lost do
          assert reliability == :unreliable_ack_receipt and size < 1_400
          {:ok, %{stats: stats}} = RakNet.Connection.info(conn)
          assert stats.datagrams_lost > 0
        end
      end

      refute_received {:raknet_receipt, ^conn, _, _}
      :ok = RakNet.Connection.close(conn)
      assert_receive {:raknet_disconnect, ^conn, :local_close}, 5_000
    end
  end

  test "an official unconnected ping gets our MOTD" do
    motd = "MCPE;raknet interop;527;1.19.1;0;10;1;raknet;Survival;1;19132;19133;"
    {_server, port} = start_server(offline_ping_response: <<byte_size(motd)::16, motd::binary>>)
    assert Official.ping(port) == <<byte_size(motd)::16, motd::binary>>
  end
end
