defmodule RakNet.Examples.ChatServerTest do
  # examples/chat_server.exs, driven by raw RakNet clients as players.
  use ExUnit.Case, async: false

  alias RakNet.Connection

  @moduletag timeout: 60_000

  setup_all do
    System.put_env("RAKNET_EXAMPLE_LIBRARY", "1")
    Code.require_file("examples/chat_server.exs", File.cwd!())
    System.delete_env("RAKNET_EXAMPLE_LIBRARY")
    :ok
  end

  defp join(port, nick) do
    {:ok, conn} = RakNet.connect("127.0.0.1", port)
    assert_receive {:raknet, ^conn, 0x86, "welcome, guest" <> _, _}, 5_000
    say(conn, "/nick " <> nick)
    conn
  end

  defp say(conn, text),
    do: {:ok, nil} = Connection.send(conn, :reliable_ordered, <<0x86, text::binary>>)

  test "nicknames, broadcast to the others, private messages, /who and a kick" do
    # Defined by the script at run time: called through a variable, so the compiler does not
    # look for it.
    chat = ChatServer
    {:ok, server} = chat.start(0)
    port = RakNet.Server.info(server).ipv4_port

    ann = join(port, "ann")
    bob = join(port, "bob")
    assert_receive {:raknet, ^ann, 0x86, "guest" <> rest, _}, 5_000
    assert rest =~ "is now bob"
    cat = join(port, "cat")
    assert_receive {:raknet, ^ann, 0x86, "guest" <> _, _}, 5_000
    assert_receive {:raknet, ^bob, 0x86, "guest" <> _, _}, 5_000

    # A nickname is unique.
    say(cat, "/nick ann")
    assert_receive {:raknet, ^cat, 0x86, "ann is taken", _}, 5_000

    # Said to everyone but the speaker.
    say(ann, "hello all")
    assert_receive {:raknet, ^bob, 0x86, "ann: hello all", _}, 5_000
    assert_receive {:raknet, ^cat, 0x86, "ann: hello all", _}, 5_000
    refute_received {:raknet, ^ann, 0x86, "ann: hello all", _}

    # Found by name.
    say(bob, "/msg cat psst")
    assert_receive {:raknet, ^cat, 0x86, "(bob) psst", _}, 5_000
    refute_received {:raknet, ^ann, 0x86, "(bob) psst", _}
    say(bob, "/who")
    assert_receive {:raknet, ^bob, 0x86, "players: ann, bob, cat", _}, 5_000

    # A kick: the kicked player is disconnected, the others hear why.
    say(ann, "/kick cat")
    assert_receive {:raknet_disconnect, ^cat, :peer_closed}, 5_000
    assert_receive {:raknet, ^bob, 0x86, "cat was kicked by ann", _}, 5_000
    say(bob, "/who")
    assert_receive {:raknet, ^bob, 0x86, "players: ann, bob", _}, 5_000

    Supervisor.stop(server)
  end
end
