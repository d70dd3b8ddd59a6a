# A small RakNet chat server on the game-server API: a `RakNet.Handler` per player with its
# own state, a nickname registered as the connection's application id, broadcast to everyone
# but the sender, lookup by name for private messages, and kicks whose reason reaches the
# kicked player's handler.
#
#     mix run examples/chat_server.exs [PORT]
#
# Messages are type 0x86 with UTF-8 text:
#
#     /nick NAME          take a nickname (unique on this server)
#     /msg NAME TEXT      private message
#     /kick NAME          disconnect a player (reason {:kicked, by})
#     /who                list the players
#     anything else       said to every other player
#
# Replies from the server are type 0x86 text too.

defmodule ChatServer.Player do
  @moduledoc "One chat participant: a connection process with its nickname in its state."
  use RakNet.Handler
  require Logger

  alias RakNet.{Connection, Server}

  @impl RakNet.Handler
  def handle_connect(info, _client_data) do
    name = "guest#{rem(info.guid, 10_000)}"
    :ok = Connection.register_id({:nick, name})
    say(self(), "welcome, #{name}")
    {:ok, %{server: info.server, name: name}}
  end

  @impl RakNet.Handler
  def handle_message(0x86, "/nick " <> name, _transit, state) do
    case Connection.register_id({:nick, name}) do
      :ok ->
        broadcast(state, "#{state.name} is now #{name}")
        {:noreply, %{state | name: name}}

      {:error, {:already_registered, _}} ->
        say(self(), "#{name} is taken")
        {:noreply, state}
    end
  end

  def handle_message(0x86, "/msg " <> rest, _transit, state) do
    with [name, text] <- String.split(rest, " ", parts: 2),
         {:ok, %{pid: pid}} <- Server.lookup(state.server, :id, {:nick, name}) do
      say(pid, "(#{state.name}) #{text}")
    else
      _ -> say(self(), "no such player")
    end

    {:noreply, state}
  end

  def handle_message(0x86, "/kick " <> name, _transit, state) do
    case Server.lookup(state.server, :id, {:nick, name}) do
      {:ok, %{pid: pid}} -> Connection.close(pid, {:kicked, state.name})
      :error -> say(self(), "no such player")
    end

    {:noreply, state}
  end

  def handle_message(0x86, "/who", _transit, state) do
    names = for %{id: {:nick, name}} <- Server.connections(state.server), do: name
    say(self(), "players: " <> Enum.join(Enum.sort(names), ", "))
    {:noreply, state}
  end

  def handle_message(0x86, text, _transit, state) do
    broadcast(state, "#{state.name}: #{text}")
    {:noreply, state}
  end

  def handle_message(_type, _payload, _transit, state), do: {:noreply, state}

  @impl RakNet.Handler
  def handle_disconnect({:kicked, by}, state),
    do: broadcast(state, "#{state.name} was kicked by #{by}")

  def handle_disconnect(_reason, state), do: broadcast(state, "#{state.name} left")

  # To every player of the server but this one: one NIF call, one shared copy of the text.
  defp broadcast(state, text),
    do:
      Server.broadcast(state.server, :reliable_ordered, <<0x86, text::binary>>, except: [self()])

  defp say(connection, text),
    do: Connection.send(connection, :reliable_ordered, <<0x86, text::binary>>)
end

defmodule ChatServer do
  @moduledoc "Starts the chat server."

  @doc "Starts a chat server on `port` (0: any free port); returns the server supervisor."
  def start(port) do
    RakNet.Server.start_link(ChatServer.Player, port,
      ip: "127.0.0.1",
      open_ipv6_socket: false,
      offline_ping_response: "raknet chat"
    )
  end
end

# `RAKNET_EXAMPLE_LIBRARY=1` loads the modules only (the tests use them).
unless System.get_env("RAKNET_EXAMPLE_LIBRARY") == "1" do
  port = System.argv() |> List.first("19134") |> String.to_integer()
  {:ok, server} = ChatServer.start(port)
  IO.puts("raknet chat server on udp 127.0.0.1:#{RakNet.Server.info(server).ipv4_port}")
  # The server is linked to this script's process: keep it alive.
  Process.sleep(:infinity)
end
