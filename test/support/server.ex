defmodule RakNet.Test.Server do
  @moduledoc """
  Starts a `RakNet.Server` for a test, under the test's supervisor (stopped with the test):
  loopback IPv4 only, port 0, the test process as `:client_data`, unless `opts` say otherwise.
  """

  import ExUnit.Callbacks, only: [start_supervised!: 1]

  @doc """
  Options for a server that many clients of this machine connect to at once: they all come
  from one address, which the per-IP new-connection rate (20 a second, for the internet)
  would slow to a trickle, and whose share of half-open handshakes (64) would push out the
  oldest of more than 64 at once.
  """
  @spec crowd() :: keyword()
  def crowd, do: [new_connections_per_ip_per_sec: 100_000, max_half_open_per_ip: 4_096]

  @doc """
  Options for a server that takes bursts of more small messages from one peer than the
  default `:max_messages_per_sec` (1,000 a second) lets through.
  """
  @spec bulk() :: keyword()
  def bulk, do: [max_messages_per_sec: nil]

  @doc """
  Starts a server of `module` and returns `{server, ipv4_port}`. `restart: :temporary` keeps
  the test's supervisor from restarting a server the test stops itself.
  """
  @spec start!(module(), keyword()) :: {pid(), :inet.port_number()}
  def start!(module, opts \\ []) do
    {restart, opts} = Keyword.pop(opts, :restart, :permanent)

    opts = Keyword.merge([ip: {127, 0, 0, 1}, open_ipv6_socket: false, client_data: self()], opts)

    spec = RakNet.Server.child_spec([module, 0 | opts])
    server = start_supervised!(%{spec | id: make_ref(), restart: restart})
    {server, RakNet.Server.info(server).ipv4_port}
  end

  @doc """
  The pid of the server's child `id` (`RakNet.Server.Listener` or `DynamicSupervisor`, the
  connection processes' supervisor), or nil.
  """
  @spec child(pid(), module()) :: pid() | nil
  def child(server, id) do
    Enum.find_value(Supervisor.which_children(server), fn
      {^id, pid, _, _} when is_pid(pid) -> pid
      _ -> nil
    end)
  end
end

defmodule RakNet.Test.Mailbox do
  @moduledoc "Reading a test process's mailbox."

  @doc """
  Every `{:raknet, conn, 0x86, payload, _}` that arrives within `ms` of the last one, as
  `{conn, payload}`, newest first.
  """
  @spec echoes(non_neg_integer()) :: [{reference(), binary()}]
  def echoes(ms, acc \\ []) do
    receive do
      {:raknet, conn, 0x86, payload, _} -> echoes(ms, [{conn, payload} | acc])
    after
      ms -> acc
    end
  end
end

defmodule RakNet.Test.Monitor do
  @moduledoc """
  Monitors that are in place before the test goes on.

  `Process.monitor/1` only sends a signal. A connection process keeps its mailbox off its
  heap, and the runtime (OTP 25) then takes in signals from different senders through
  separate buffers: a message an endpoint thread delivers after the monitor was sent (the
  peer's disconnection, a message the handler stops on) can be handled first. If it ends the
  process, the monitor's DOWN says `:noproc` instead of the exit reason.
  """

  @doc """
  Monitors the GenServer `pid` and returns the monitor's reference once the monitor is set:
  a call from this process is ordered after its monitor signal, so the reply means the
  process has taken the monitor in.
  """
  @spec monitor!(pid()) :: reference()
  def monitor!(pid) do
    ref = Process.monitor(pid)
    _ = :sys.get_state(pid)
    ref
  end
end

defmodule RakNet.Test.Wait do
  @moduledoc "Waiting for a condition that no message announces."

  @doc """
  Polls `fun` every 10 ms until it returns true (`:ok`) or `tries` polls have failed
  (`:timeout`).
  """
  @spec until((() -> boolean()), non_neg_integer()) :: :ok | :timeout
  def until(fun, tries \\ 100) do
    cond do
      fun.() ->
        :ok

      tries == 0 ->
        :timeout

      true ->
        receive do
        after
          10 -> until(fun, tries - 1)
        end
    end
  end
end

defmodule RakNet.Test.MixProject do
  @moduledoc """
  Runs `mix` in another project (a fixture app, a copy of the package) as a user's shell
  would: none of this run's Mix settings (MIX_ENV=test, build or deps path overrides), so it
  builds into its own _build; `env` adds to that.
  """

  import ExUnit.Assertions, only: [flunk: 1]

  @spec mix(Path.t(), [String.t()], [{String.t(), String.t() | nil}]) ::
          {String.t(), non_neg_integer()}
  def mix(dir, args, env \\ []) do
    mix = System.find_executable("mix") || flunk("`mix` is not on the PATH")
    cleared = ~w(MIX_BUILD_PATH MIX_BUILD_ROOT MIX_DEPS_PATH MIX_EXS MIX_LOCKFILE MIX_TARGET)
    defaults = Map.new([{"MIX_ENV", "dev"} | Enum.map(cleared, &{&1, nil})])
    env = defaults |> Map.merge(Map.new(env)) |> Enum.to_list()
    System.cmd(mix, args, cd: dir, stderr_to_stdout: true, env: env)
  end
end
