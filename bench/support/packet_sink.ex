defmodule Bench.PacketSink do
  @moduledoc """
  The receiving end of `bench/packet.exs`: a process registered under some names in a
  registry (`RakNet.Packet.Registry` or `:global`) that counts the messages it gets and tells
  `report_to` when it has `expected` of them. Compiled (bench/support) so that `:peer` nodes
  load it from the bench node's code paths.
  """

  @doc "Starts a sink registered as each of `names` with `registry`; returns its pid."
  def start(names, registry, report_to) do
    parent = self()

    pid =
      spawn(fn ->
        for name <- names, do: :yes = registry.register_name(name, self())
        send(parent, {:sink_ready, self()})
        loop(report_to, 0, nil)
      end)

    receive do
      {:sink_ready, ^pid} -> pid
    end
  end

  # Send {:expect, n} before a run (from the process that then casts, so it comes first):
  # the sink reports {:sink_done, pid, n} after the n-th message.
  defp loop(report_to, n, expected) do
    receive do
      {:expect, count} ->
        loop(report_to, 0, count)

      {:"$gen_cast", _message} when n + 1 == expected ->
        send(report_to, {:sink_done, self(), expected})
        loop(report_to, 0, nil)

      {:"$gen_cast", _message} ->
        loop(report_to, n + 1, expected)

      :stop ->
        :ok
    end
  end
end
