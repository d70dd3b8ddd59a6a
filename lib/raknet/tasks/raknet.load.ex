defmodule Mix.Tasks.Raknet.Load do
  @shortdoc "Load-tests a RakNet server: N connections at a given rate"
  @moduledoc """
  Opens N RakNet connections to any server, sends at a rate, and reports messages/s each way,
  round-trip p50/p99 (when the server echoes, as `make server` does), loss and connect failures.

      mix raknet.load [--host 127.0.0.1] [--port 19132] [--connections 100] [--rate 20]
                      [--size 64] [--reliability reliable_ordered] [--channel 0]
                      [--duration 10] [--protocol 11]

  The host and port may also come first, as `mix raknet.ping` takes them:

      mix raknet.load 127.0.0.1 19132 --connections 200

  The work is done by the `raknet-load` Rust binary (one engine per simulated player, all on
  one thread), which this task builds with cargo (release) and runs, forwarding the options.
  """
  use Mix.Task

  @impl Mix.Task
  def run(argv) do
    root = Path.expand("../../..", __DIR__)
    build(root)
    binary = Path.join([target_dir(root), "release", "raknet-load"])

    port =
      Port.open({:spawn_executable, binary}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: args(argv)
      ])

    stream(port)
  end

  # `HOST [PORT]` before the options, as mix raknet.ping takes them, become --host and --port;
  # the binary checks the values.
  @doc false
  @spec args([String.t()]) :: [String.t()]
  def args(["--" <> _ | _] = argv), do: argv
  def args([host, "--" <> _ = option | rest]), do: ["--host", host, option | rest]
  def args([host]), do: ["--host", host]
  def args([host, port | rest]), do: ["--host", host, "--port", port | rest]
  def args([]), do: []

  # The same cargo the NIF's compiler finds (rustup's is not always on the PATH).
  defp build(root) do
    cargo =
      case Mix.Tasks.Compile.RaknetNative.find_cargo() do
        {:ok, cargo} -> cargo
        {:error, message} -> Mix.raise(message)
      end

    args = ["build", "--release", "--quiet", "-p", "raknet-bench", "--bin", "raknet-load"]

    case System.cmd(cargo, args, cd: root, into: IO.stream(:stdio, :line), stderr_to_stdout: true) do
      {_, 0} -> :ok
      {_, status} -> Mix.raise("building raknet-load failed (cargo exited with #{status})")
    end
  end

  defp target_dir(root), do: System.get_env("CARGO_TARGET_DIR") || Path.join(root, "target")

  defp stream(port) do
    receive do
      {^port, {:data, data}} ->
        IO.write(data)
        stream(port)

      {^port, {:exit_status, 0}} ->
        :ok

      {^port, {:exit_status, status}} ->
        exit({:shutdown, status})
    end
  end
end
