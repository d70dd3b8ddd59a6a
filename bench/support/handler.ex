defmodule Bench.Handler do
  @moduledoc """
  The server side of every scenario: counts messages into a `:counters` slot, echoes them when
  `echo` is set, and reports the end-of-run marker (0x87) and bulk messages (0x88).

  Compiled rather than defined in `bench/run.exs`: `make bench` runs in the `bench` Mix
  environment, which consolidates protocols as a release does, and a consolidated
  `RakNet.Client` only dispatches to implementations compiled with the project. Unconsolidated
  (the `dev` environment), each message's dispatch looks the implementation up at run time,
  which cost about 20 % of scenario 1's rate on a 2-core machine: a cost a game server's
  release does not pay.
  """
  defstruct [:connection, :opts]
end

defimpl RakNet.Client, for: Bench.Handler do
  def new(h, connection, opts), do: %{h | connection: connection, opts: opts}

  # The official sender's end-of-run marker: note the time and hang up, which ends the sender.
  def receive(h, 0x87, _buffer, _transit) do
    :ets.insert(h.opts.marks, {:marker, System.monotonic_time(:microsecond)})
    RakNet.Connection.close(h.connection)
  end

  def receive(h, 0x88, buffer, _transit),
    do: send(h.opts.notify, {:bulk, byte_size(buffer) + 1, System.monotonic_time(:microsecond)})

  def receive(h, type, buffer, _transit) do
    counter = h.opts.counter

    if :counters.get(counter, 1) == 0,
      do: :ets.insert(h.opts.marks, {:first, System.monotonic_time(:microsecond)})

    :counters.add(counter, 1, 1)

    if h.opts.echo,
      do: RakNet.Connection.send(h.connection, :reliable_ordered, <<type, buffer::binary>>)
  end

  def got_ack(_h, _id), do: :ok
  def disconnect(_h), do: :ok
end

defmodule Bench.MmoHandler do
  @moduledoc """
  The server side of the MMO scenario (9): each connection joins the zone of its arrival
  order (`zone_size` per zone) and broadcasts every position it gets to the other players of
  its zone with `RakNet.Group.broadcast/4`. A module of its own, so that the other scenarios'
  handler dispatch stays what it was.
  """
  defstruct [:connection, :zone, :counter]
end

defimpl RakNet.Client, for: Bench.MmoHandler do
  def new(h, connection, %{mmo: size, arrivals: arrivals, counter: counter}) do
    zone = {:bench_zone, div(:atomics.add_get(arrivals, 1, 1) - 1, size)}
    :ok = RakNet.Group.join(connection, zone)
    %{h | connection: connection, zone: zone, counter: counter}
  end

  def receive(h, type, buffer, _transit) do
    :counters.add(h.counter, 1, 1)

    RakNet.Group.broadcast(h.zone, :unreliable_sequenced, <<type, buffer::binary>>,
      except: [h.connection]
    )
  end

  def got_ack(_h, _id), do: :ok
  def disconnect(_h), do: :ok
end
