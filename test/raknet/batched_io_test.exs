defmodule RakNet.BatchedIoTest do
  # The endpoint thread reads and writes datagrams in batches (recvmmsg / sendmmsg on Linux):
  # bursts of datagrams must all arrive, in order, intact, and replies must leave from the
  # address the client sent to when the server listens on every address.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.EchoClient

  @messages 10_000
  @burst 500
  # One message per datagram: two of these do not fit one MTU.
  @size 900

  for {name, ip, host} <- [
        {"one address", {127, 0, 0, 1}, "127.0.0.1"},
        # The server answers from 127.0.0.2 only because it learned, per datagram, where each
        # one was sent (IP_PKTINFO); the client drops replies from any other address.
        {"every address, client to 127.0.0.2", {0, 0, 0, 0}, "127.0.0.2"}
      ] do
    test "#{@messages} datagrams in bursts of #{@burst} all arrive and are echoed (#{name})" do
      server =
        start_supervised!(
          {RakNet.Server,
           [
             EchoClient,
             0,
             ip: unquote(Macro.escape(ip)),
             open_ipv6_socket: false,
             client_data: self()
           ]}
        )

      %{ipv4_port: port} = RakNet.Server.info(server)
      assert {:ok, conn} = RakNet.connect(unquote(host), port)
      assert_receive {:client_new, _server_side}, 5_000

      for burst <- 0..(div(@messages, @burst) - 1) do
        for i <- (burst * @burst)..(burst * @burst + @burst - 1) do
          assert {:ok, nil} = Connection.send(conn, :reliable_ordered, payload(i))
        end

        for i <- (burst * @burst)..(burst * @burst + @burst - 1) do
          <<type, rest::binary>> = payload(i)
          assert_receive {:raknet, ^conn, ^type, ^rest, _transit}, 10_000
        end
      end

      [endpoint] = RakNet.Server.info(server).endpoints
      stats = endpoint.stats
      # Every data datagram of the client was read, and every echo written.
      assert stats.udp_datagrams_in >= @messages
      assert stats.udp_datagrams_out >= @messages

      if match?({:unix, :linux}, :os.type()) do
        # Bursts were read and written several datagrams per system call.
        assert stats.udp_datagrams_in / stats.udp_recv_calls > 1.5,
               "#{stats.udp_datagrams_in} datagrams in #{stats.udp_recv_calls} recv calls"

        assert stats.udp_datagrams_out / stats.udp_send_calls > 1.5,
               "#{stats.udp_datagrams_out} datagrams in #{stats.udp_send_calls} send calls"
      end

      {:ok, info} = Connection.info(conn)
      assert info.stats.messages_in >= @messages
      Connection.close(conn)
    end
  end

  # 0x86, the index, then filler that depends on it: a datagram mixed up with another fails.
  defp payload(i) do
    filler = :binary.copy(<<rem(i, 251)>>, @size - 5)
    <<0x86, i::32, filler::binary>>
  end
end
