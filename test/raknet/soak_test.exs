defmodule RakNet.SoakTest do
  # `make soak` in small: 100 connections for 30 s through a relay with 5 % loss, 2 %
  # duplication and 5 % reordering, to an echoing RakNet.Server (Bench.Soak, shared with
  # bench/soak.exs). Not async: it measures the VM's memory and CPU, and loads the machine.
  use ExUnit.Case, async: false

  @connections 100
  @seconds 30

  # About 35 s of run; the first test of the run may also build raknet-load and raknet-relay.
  @moduletag timeout: 300_000

  setup_all do
    Bench.Soak.build!()
  end

  test "through loss, duplication and reordering, reliable echoes come back exactly once and in order, sequenced ones in sequence, and memory stays bounded" do
    r =
      Bench.Soak.run(
        connections: @connections,
        seconds: @seconds,
        rate: 10,
        sample_ms: 1_000,
        warmup_s: 10,
        drain_s: 10
      )

    report = Enum.join(Bench.Soak.report(r), "\n")

    # Every count that must be zero is zero (connections up, reliable lost / duplicated / out
    # of order, sequenced out of sequence), and traffic really flowed both ways.
    assert Bench.Soak.failures(r) == [], report
    assert r.reliable.sent >= @connections * 10 * (@seconds - 5), report
    assert r.sequenced.echoed > 0, report

    # Memory is bounded: after the warm-up, the server's total (BEAM + Rust) never grows past
    # twice its first steady sample. Generous, so that GC timing on a loaded machine cannot
    # fail it; a leak per message (~6,000 echoes/s here) or per datagram would.
    assert r.steady_samples >= 5, report
    assert r.memory.max < 2 * r.memory.first, report
    assert r.native_memory.max < 2 * r.native_memory.first + 4 * 1_048_576, report
  end
end
