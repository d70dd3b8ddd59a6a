defmodule Bench.NetherNet do
  @moduledoc """
  Scenario 11: one NetherNet client (`nethernet-load`, a `str0m` WebRTC peer in Rust) against
  a `RakNet.Server` started with `:nethernet`, the same handler as scenario 1's: 64 B
  reliable messages one way and echoed, and the echo round trip at 1,000 msg/s; beside
  scenario 1's and 4's RakNet figures from the same run.
  """

  @bin Path.expand("../../target/release/nethernet-load", __DIR__)

  @doc """
  Runs `nethernet-load` with `args` against a fresh server started by `with_server`
  (`Bench.with_server/2`); the numbers it reports.
  """
  @spec run([String.t()], boolean(), function()) :: map()
  def run(args, echo, with_server) do
    dir =
      Path.join(System.tmp_dir!(), "raknet-bench-nethernet-#{System.unique_integer([:positive])}")

    key_file = Path.join(dir, "operator.pem")

    try do
      with_server.([echo: echo, nethernet: [port: 0, key_file: key_file]], fn server ->
        http = RakNet.Server.info(server.sup).nethernet_port

        {out, status} =
          System.cmd(@bin, ["--url", "http://127.0.0.1:#{http}" | args], stderr_to_stdout: true)

        if status != 0, do: raise("nethernet-load exited with #{status}: #{String.trim(out)}")
        out |> String.split("\n", trim: true) |> Enum.each(&IO.puts("   " <> &1))

        %{
          messages_per_s: Bench.Proc.num(out, ~r/= (\d+) messages\/s/),
          p50_ms: Bench.Proc.num(out, ~r/round trip p50 ([\d.]+) ms/),
          p99_ms: Bench.Proc.num(out, ~r/p99 ([\d.]+) ms over/)
        }
      end)
    after
      File.rm_rf(dir)
    end
  end
end
