defmodule RakNet.Test.EchoClient do
  @moduledoc """
  A `RakNet.Client` in the style of X-Plane's README: it tells the test process (its
  `client_data`) about every callback and echoes each message back, reliable-ordered.
  Messages of type 0x99 make it crash (to test isolation).
  """
  defstruct connection: nil, test: nil
end

defimpl RakNet.Client, for: RakNet.Test.EchoClient do
  def new(client, connection_pid, test_pid) do
    send(test_pid, {:client_new, connection_pid})
    %{client | connection: connection_pid, test: test_pid}
  end

  def receive(_client, 0x99, _buffer, _transit), do: raise("crash requested by the test")

  def receive(client, type, buffer, transit) do
    send(client.test, {:client_received, client.connection, type, byte_size(buffer), transit})

    # The peer may have left while this message waited in the mailbox (a test ending with
    # traffic in flight): then there is nobody to echo to. Any other error is a bug.
    case RakNet.Connection.send(client.connection, :reliable_ordered, <<type, buffer::binary>>) do
      {:ok, _} -> :ok
      {:error, :closed} -> :ok
    end
  end

  def got_ack(client, receipt_id),
    do: send(client.test, {:client_ack, client.connection, receipt_id})

  def disconnect(client), do: send(client.test, {:client_disconnect, client.connection})
end

defmodule RakNet.Test.ReasonClient do
  @moduledoc "A `RakNet.Client` that also defines the optional `disconnect/2` and `got_loss/2`."
  defstruct connection: nil, test: nil
end

defimpl RakNet.Client, for: RakNet.Test.ReasonClient do
  def new(client, connection_pid, test_pid) do
    send(test_pid, {:reason_new, connection_pid})
    %{client | connection: connection_pid, test: test_pid}
  end

  def receive(_client, _type, _buffer, _transit), do: :ok
  def got_ack(_client, _id), do: :ok
  def disconnect(client), do: send(client.test, {:disconnect_1, client.connection})

  def disconnect(client, reason),
    do: send(client.test, {:disconnect_2, client.connection, reason})

  def got_loss(client, id), do: send(client.test, {:loss, id})
end

defmodule RakNet.Test.CallsServerClient do
  @moduledoc """
  A `RakNet.Client` that calls back into its server, as a game updating its MOTD's player
  count does: in `new/3`, and in `disconnect/1`, which tells the test what the call returned
  (`{:disconnect_called_server, result}`; an exit as `{:exit, reason}`).
  """
  defstruct [:test, :server_fun]
end

defimpl RakNet.Client, for: RakNet.Test.CallsServerClient do
  def new(client, connection_pid, {test, server_fun}) do
    :ok = RakNet.Server.set_offline_ping_response(server_fun.(), "one player")
    send(test, {:client_new, connection_pid})
    %{client | test: test, server_fun: server_fun}
  end

  def receive(_client, _type, _buffer, _transit), do: :ok
  def got_ack(_client, _id), do: :ok

  def disconnect(client) do
    result =
      try do
        RakNet.Server.set_offline_ping_response(client.server_fun.(), "no players")
      catch
        :exit, reason -> {:exit, reason}
      end

    send(client.test, {:disconnect_called_server, result})
  end
end

defmodule RakNet.Test.XPlaneState do
  @moduledoc """
  The client state of X-Plane's README (`MmoServer.Client.State`), with its `@enforce_keys`:
  the server builds the first argument of `new/3` with `struct/1`, which does not enforce
  them. `client_data` is the test process, told about every callback.
  """
  @enforce_keys [:session_id, :connection_pid]
  defstruct session_id: -1,
            connection_pid: nil,
            test: nil
end

defimpl RakNet.Client, for: RakNet.Test.XPlaneState do
  def new(_client_struct, connection_pid, test) do
    new_state = %RakNet.Test.XPlaneState{
      connection_pid: connection_pid,
      session_id: System.unique_integer([:positive]),
      test: test
    }

    send(test, {:xplane_new, connection_pid, new_state.session_id})
    new_state
  end

  def receive(%RakNet.Test.XPlaneState{session_id: id} = state, packet_type, packet_buffer, time) do
    send(state.test, {:xplane_packet, id, packet_type, packet_buffer, time})

    RakNet.Connection.send(
      state.connection_pid,
      :reliable,
      <<packet_type, packet_buffer::binary>>
    )
  end

  def got_ack(%RakNet.Test.XPlaneState{session_id: id} = state, send_receipt_id),
    do: send(state.test, {:xplane_ack, id, send_receipt_id})

  def disconnect(%RakNet.Test.XPlaneState{session_id: id} = state),
    do: send(state.test, {:xplane_disconnect, id})
end

defmodule RakNet.Test.GreeterClient do
  @moduledoc """
  A `RakNet.Client` for the client role: it sends a greeting from `new/3` (from inside the
  connection process) and forwards what it receives to the test process.
  """
  defstruct connection: nil, test: nil
end

defimpl RakNet.Client, for: RakNet.Test.GreeterClient do
  def new(client, connection_pid, test_pid) do
    result = RakNet.Connection.send(connection_pid, :reliable_ordered, <<0x86, "hello">>)
    send(test_pid, {:greeter_new, connection_pid, result})
    %{client | connection: connection_pid, test: test_pid}
  end

  def receive(client, type, buffer, _transit),
    do: send(client.test, {:greeter_received, client.connection, type, buffer})

  def got_ack(_client, _id), do: :ok
  def disconnect(client), do: send(client.test, {:greeter_disconnect, client.connection})
end

defmodule RakNet.Test.LinkingClient do
  @moduledoc """
  A `RakNet.Client` whose `new/3` starts a per-player process linked to the connection, as
  X-Plane's README does, and tells the test process about it.
  """
  defstruct connection: nil, test: nil, player: nil
end

defimpl RakNet.Client, for: RakNet.Test.LinkingClient do
  def new(client, connection_pid, test_pid) do
    player = spawn_link(fn -> Process.sleep(:infinity) end)
    send(test_pid, {:linking_new, connection_pid, player})
    %{client | connection: connection_pid, test: test_pid, player: player}
  end

  def receive(client, 0x86, "stop", _transit) do
    send(client.test, {:stop_result, RakNet.Connection.stop(client.connection)})
  end

  def receive(client, 0x86, "id " <> id, _transit) do
    send(client.test, {:register_result, RakNet.Connection.register_id(id)})
  end

  def receive(client, 0x86, "conn_ref", _transit) do
    send(client.test, {:conn_ref_result, RakNet.Connection.conn_ref(self())})
  end

  def receive(_client, _type, _buffer, _transit), do: :ok
  def got_ack(_client, _id), do: :ok
  def disconnect(client), do: send(client.test, {:linking_disconnect, client.connection})
end

defmodule RakNet.Test.ChatClient do
  @moduledoc """
  A chat participant: every message is relayed to every other participant through their
  connection pids (found in a `Registry`), from inside the connection process, as
  `examples/chat_server.exs` does. Send failures are reported to the test process.
  """
  defstruct connection: nil, registry: nil, test: nil
end

defimpl RakNet.Client, for: RakNet.Test.ChatClient do
  def new(client, connection_pid, {registry, test}) do
    {:ok, _} = Registry.register(registry, :players, nil)
    send(test, {:chat_joined, connection_pid})
    %{client | connection: connection_pid, registry: registry, test: test}
  end

  def receive(client, 0x86, text, _transit) do
    for {pid, _} <- Registry.lookup(client.registry, :players), pid != client.connection do
      case RakNet.Connection.send(pid, :reliable_ordered, <<0x86, text::binary>>) do
        {:ok, nil} -> :ok
        error -> send(client.test, {:chat_send_failed, error})
      end
    end
  end

  def receive(_client, _type, _buffer, _transit), do: :ok
  def got_ack(_client, _id), do: :ok
  def disconnect(_client), do: :ok
end

defmodule RakNet.Test.GateClient do
  @moduledoc """
  A handler that cannot keep up: its first message blocks it until the test process sends
  the connection process `:open_gate`; then it forwards every message to the test process.
  """
  defstruct connection: nil, test: nil
end

defimpl RakNet.Client, for: RakNet.Test.GateClient do
  def new(client, connection_pid, test_pid) do
    send(test_pid, {:gate_new, connection_pid})
    %{client | connection: connection_pid, test: test_pid}
  end

  def receive(client, type, buffer, _transit) do
    unless Process.get(:gate_open) do
      send(client.test, {:gate_blocked, client.connection})

      receive do
        :open_gate -> Process.put(:gate_open, true)
      end
    end

    send(client.test, {:gate_got, type, buffer})
  end

  def got_ack(_client, _id), do: :ok

  def disconnect(client, reason),
    do: send(client.test, {:gate_disconnect, client.connection, reason})

  def disconnect(client), do: disconnect(client, nil)
end

defmodule RakNet.Test.RaisingClient do
  @moduledoc """
  A handler that raises in the callback named by its `client_data` (`{test_pid, callback}`):
  `:new`, `:receive`, `:got_ack` or `:disconnect`; the other callbacks report to the test.
  """
  defstruct connection: nil, test: nil, raise_in: nil
end

defimpl RakNet.Client, for: RakNet.Test.RaisingClient do
  def new(_client, connection_pid, {test, raise_in}) do
    send(test, {:raising_new, connection_pid})
    if raise_in == :new, do: raise("raised in new/3")
    %RakNet.Test.RaisingClient{connection: connection_pid, test: test, raise_in: raise_in}
  end

  def receive(%{raise_in: :receive}, _type, _buffer, _transit), do: raise("raised in receive/4")

  def receive(client, _type, _buffer, _transit) do
    # Ask for a receipt, so that got_ack/2 runs.
    RakNet.Connection.send(client.connection, :reliable_ack_receipt, <<0x86, "ack me">>)
  end

  def got_ack(%{raise_in: :got_ack}, _id), do: raise("raised in got_ack/2")
  def got_ack(client, id), do: send(client.test, {:raising_ack, client.connection, id})
  def disconnect(%{raise_in: :disconnect}), do: raise("raised in disconnect/1")
  def disconnect(client), do: send(client.test, {:raising_disconnect, client.connection})
end

defmodule RakNet.Test.AssignClient do
  @moduledoc """
  A `RakNet.Handler` that assigns the name a 0x86 message carries (and zone 3) to its
  connection, then tells the test (`{:assigned, pid}`).
  """
  use RakNet.Handler

  @impl RakNet.Handler
  def handle_connect(_info, test) do
    send(test, {:client_new, self()})
    {:ok, test}
  end

  @impl RakNet.Handler
  def handle_message(0x86, name, _transit, test) do
    :ok = RakNet.Connection.assign(name: name, zone: 3)
    send(test, {:assigned, self()})
    {:noreply, test}
  end
end

defmodule RakNet.Test.ChannelEcho do
  @moduledoc """
  Echoes each message: `"ping"` (type `?p`, what the NetherNet client sends on its
  unreliable channel) back unreliable, the rest reliable-ordered; tells the test process of
  each connection and its info.
  """
  defstruct connection: nil, test: nil
end

defimpl RakNet.Client, for: RakNet.Test.ChannelEcho do
  def new(client, connection, test) do
    send(test, {:client_new, connection, RakNet.Connection.info(connection)})
    %{client | connection: connection, test: test}
  end

  def receive(client, ?p, "ing", _transit) do
    {:ok, _} = RakNet.Connection.send(client.connection, :unreliable, "ping")
    client
  end

  def receive(client, type, buffer, _transit) do
    send(client.test, {:client_received, client.connection, type, byte_size(buffer)})

    case RakNet.Connection.send(client.connection, :reliable_ordered, <<type, buffer::binary>>) do
      {:ok, _} -> :ok
      {:error, :closed} -> :ok
    end

    client
  end

  def got_ack(client, _receipt), do: client
  def disconnect(client), do: send(client.test, {:client_disconnect, client.connection})
end
