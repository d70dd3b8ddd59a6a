defmodule RakNet.MemoryBudgetTest do
  # The server-wide budget of buffered peer data (`:max_buffered_bytes`), through the NIF:
  # a peer whose message does not fit holds at most its share and the open half, everyone
  # else's share stays theirs, and a gap left open closes the peer that holds it.
  use ExUnit.Case, async: false

  alias RakNet.Connection
  alias RakNet.Test.EchoClient

  @moduletag timeout: 60_000

  @budget 1_048_576

  test "a message over what the budget leaves open never takes more; others' messages arrive" do
    # Shares of 1 MiB / 2 / 4 = 128 KiB each; the other 512 KiB open to anyone.
    {server, port} =
      RakNet.Test.Server.start!(EchoClient,
        max_buffered_bytes: @budget,
        max_connections: 4,
        client_timeout_ms: 2_000
      )

    {:ok, hog} = RakNet.connect("127.0.0.1", port)
    {:ok, player} = RakNet.connect("127.0.0.1", port)
    for _ <- 1..2, do: assert_receive({:client_new, _}, 5_000)

    # 4 MiB: more than the budget. Beyond its 128 KiB share the hog may take only what keeps
    # the total within the open half: it fills that, and no more.
    {:ok, nil} =
      Connection.send(hog, :reliable_ordered, <<0x86, 0::size(4 * 1024 * 1024)-unit(8)>>)

    await_buffered(server, &(&1 > @budget / 2 - 4_096))
    assert buffered(server) <= @budget / 2

    # The player's 100 KB message fits in its own share and is echoed meanwhile.
    body = :binary.copy(<<7>>, 100_000)
    {:ok, nil} = Connection.send(player, :reliable_ordered, <<0x86, body::binary>>)
    assert_receive {:raknet, ^player, 0x86, ^body, _}, 10_000
    assert buffered(server) <= @budget

    # The hog's message can never complete: its gap stays open for the timeout, and the
    # server closes it; what it held is free again.
    assert_receive {:raknet_disconnect, ^hog, _}, 10_000
    refute_received {:raknet, ^hog, 0x86, _, _}
    assert await_buffered(server, &(&1 == 0)) == 0
    assert Process.alive?(server)
  end

  defp buffered(server) do
    RakNet.Server.info(server).endpoints |> Enum.map(& &1.stats.buffered_bytes) |> Enum.max()
  end

  # The buffered bytes once `pred` holds for them (polled: the figure is the runtime's).
  defp await_buffered(server, pred, tries \\ 500) do
    bytes = buffered(server)

    cond do
      pred.(bytes) ->
        bytes

      tries == 0 ->
        flunk("buffered bytes stayed at #{bytes}")

      true ->
        receive do
        after
          10 -> await_buffered(server, pred, tries - 1)
        end
    end
  end
end
