defmodule RakNet.Test.Official do
  @moduledoc """
  Official RakNet 4.081 (the C++ library, PyPI `raknet` in the `.venv` that `make venv`
  creates) as a test peer: small Python scripts in `test/interop/peers/`, run over a Port.
  The OS process exits when the Port closes (the scripts watch stdin) or after 60 s.
  """

  @peers Path.expand("../interop/peers", __DIR__)

  @doc "The interpreter with `raknet` installed (`RAKNET_PYTHON` or `.venv/bin/python`)."
  @spec python() :: String.t()
  def python do
    python = System.get_env("RAKNET_PYTHON") || Path.expand("../../.venv/bin/python", __DIR__)

    unless File.exists?(python) do
      raise "#{python} is missing: run `make venv` (make test does) or set RAKNET_PYTHON"
    end

    python
  end

  @doc "Starts `official_server.py` (an echo server) and returns `{port, udp_port}`."
  @spec start_server(6 | 10 | 11, String.t() | nil) :: {port(), :inet.port_number()}
  def start_server(protocol, motd \\ nil) do
    args =
      [Path.join(@peers, "official_server.py"), Integer.to_string(protocol)] ++ List.wrap(motd)

    port =
      Port.open({:spawn_executable, python()}, [:binary, :exit_status, {:line, 4096}, args: args])

    receive do
      {^port, {:data, {:eol, "PORT " <> udp_port}}} -> {port, String.to_integer(udp_port)}
      {^port, {:exit_status, status}} -> raise "official server exited with #{status}"
    after
      10_000 -> raise "official server did not start"
    end
  end

  @doc """
  Runs `official_sender.py burst`: the official client queues `count` numbered messages of
  `size` bytes at once and reads the echoes; returns its summary line
  (`"ECHOED n IN_ORDER yes|no RATE r CLOSED yes|no"`).
  """
  @spec burst(:inet.port_number(), pos_integer(), pos_integer()) :: String.t()
  def burst(udp_port, count, size) do
    args = [
      Path.join(@peers, "official_sender.py"),
      "burst",
      "127.0.0.1",
      Integer.to_string(udp_port),
      Integer.to_string(count),
      Integer.to_string(size)
    ]

    {out, _status} = System.cmd(python(), args, stderr_to_stdout: true)
    out |> String.split("\n", trim: true) |> List.last()
  end

  @doc """
  Runs `official_client.py` (connects, sends every reliability at 16 B..100 KB, expects every
  message echoed) against `port` and returns its summary line.
  """
  @spec run_client(:inet.port_number(), 6 | 10 | 11) :: String.t()
  def run_client(udp_port, protocol) do
    script = Path.join(@peers, "official_client.py")
    args = [script, "127.0.0.1", Integer.to_string(udp_port), Integer.to_string(protocol)]
    {out, _status} = System.cmd(python(), args, stderr_to_stdout: true)
    out |> String.split("\n", trim: true) |> List.last()
  end

  @doc "Runs `official_ping.py` against `port`; returns the pong payload or `:no_pong`."
  @spec ping(:inet.port_number()) :: binary() | :no_pong
  def ping(udp_port) do
    script = Path.join(@peers, "official_ping.py")
    {out, _} = System.cmd(python(), [script, "127.0.0.1", Integer.to_string(udp_port)])

    case String.trim(out) do
      "PONG " <> hex -> Base.decode16!(hex, case: :lower)
      _ -> :no_pong
    end
  end

  @doc "Starts `official_connect_and_hang.py` against `port` and waits until it is connected."
  @spec start_hanging_client(:inet.port_number()) :: port()
  def start_hanging_client(udp_port) do
    script = Path.join(@peers, "official_connect_and_hang.py")
    args = [script, "127.0.0.1", Integer.to_string(udp_port)]

    port =
      Port.open({:spawn_executable, python()}, [:binary, :exit_status, {:line, 4096}, args: args])

    receive do
      {^port, {:data, {:eol, "CONNECTED"}}} -> port
    after
      10_000 -> raise "official client did not connect"
    end
  end

  @doc "Kills a peer's OS process with SIGKILL (no disconnection notification)."
  @spec kill(port()) :: :ok
  def kill(port) do
    {:os_pid, os_pid} = Port.info(port, :os_pid)
    System.cmd("kill", ["-9", Integer.to_string(os_pid)])
    :ok
  end

  @doc "Closes a peer's Port (the script exits when its stdin closes)."
  @spec stop(port()) :: :ok
  def stop(port) do
    if Port.info(port), do: Port.close(port)
    :ok
  end
end
