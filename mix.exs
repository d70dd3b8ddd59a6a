defmodule RakNet.MixProject do
  use Mix.Project

  @version "0.1.0"
  # Where the repository is to be published: nothing is yet (no package has been), so this
  # address is the one to confirm, or change, before the first `mix hex.publish`.
  @source_url "https://github.com/raknet-ex/raknet"

  # The NIF compiler (first in `compilers:`) must exist before Mix compiles anything, so it cannot
  # come from compiling lib/. Mix evaluates this file first, also when raknet is a dependency of
  # another app, so the compiler is loaded from source here. It is build tooling rather than
  # part of the :raknet app: elixirc_paths leaves lib/mix out, which also keeps the Elixir
  # compiler from defining the module a second time ("redefining module" warning).
  Code.require_file("lib/mix/tasks/compile.raknet_native.ex", __DIR__)

  def project do
    [
      app: :raknet,
      version: @version,
      elixir: "~> 1.14",
      compilers: [:raknet_native] ++ Mix.compilers(),
      elixirc_paths: elixirc_paths(Mix.env()),
      start_permanent: Mix.env() == :prod,
      # Scripts such as examples/*.exs implement RakNet.Client at run time; consolidated
      # protocols would ignore them. Test, bench and prod builds consolidate as usual.
      consolidate_protocols: Mix.env() != :dev,
      deps: [],
      description: "RakNet (UDP game networking protocol) for Elixir, backed by a Rust NIF",
      name: "raknet",
      source_url: @source_url,
      homepage_url: @source_url,
      package: package(),
      docs: docs()
    ]
  end

  # What a Hex package holds: everything `mix compile` needs to build the NIF in a copy made
  # from it (test/package_test.exs checks that), and the guides. Cargo loads every member of
  # the workspace (Cargo.toml) before it builds one, so the benchmark and simulator crates'
  # sources come along, not their tests; the fuzz crate is no member.
  defp package do
    crates = ~w(raknet-proto raknet-udp raknet-nif raknet-netsim raknet-bench raknet-nethernet)

    [
      licenses: ["Apache-2.0"],
      links: %{"Source" => @source_url, "Changelog" => @source_url <> "/blob/main/CHANGELOG.md"},
      files:
        ~w(lib/raknet.ex lib/raknet lib/mix mix.exs .formatter.exs Cargo.toml Cargo.lock
           README.md LICENSE CHANGELOG.md docs) ++
          Enum.flat_map(crates, &["native/#{&1}/Cargo.toml", "native/#{&1}/src"])
    ]
  end

  defp docs do
    [
      main: "readme",
      source_ref: "v#{@version}",
      extras:
        ["README.md", "CHANGELOG.md"] ++
          Enum.map(
            ~w(getting-started usage game-servers bedrock nethernet xplane-migration cluster
                      security options proxies performance interoperability architecture
                      nif-contract),
            &"docs/#{&1}.md"
          ),
      groups_for_extras: [
        Guides:
          ~r{docs/(getting-started|usage|game-servers|bedrock|nethernet|xplane-migration|cluster)},
        Operations: ~r{docs/(security|options|proxies|performance)},
        Internals: ~r{docs/(interoperability|architecture|nif-contract)}
      ],
      groups_for_modules: [
        Servers: [RakNet.Server, RakNet.Server.Config, RakNet.Connection, RakNet.Group],
        Handlers: [
          RakNet.Client,
          RakNet.Handler,
          RakNet.Message,
          RakNet.ReliabilityLayer.Reliability
        ],
        Packets: ~r/RakNet\.Packet/,
        Bedrock: ~r/RakNet\.Bedrock/,
        Tools: [RakNet.Ping, RakNet.Telemetry, RakNet.Top]
      ]
    ]
  end

  def application do
    # :ssl for NetherNet signaling over HTTPS (`:nethernet` option `:tls`).
    [extra_applications: [:logger, :crypto, :ssl], mod: {RakNet.Application, []}]
  end

  # bench/support (the soak run shared by `make soak` and its short variant in `mix test`, and
  # `make bench`'s handler) is compiled in dev, test and bench only: apps that depend on raknet
  # build it in prod, without it. `make bench` runs in the bench environment: consolidated
  # protocols, as in a release, with bench/support.
  defp elixirc_paths(:test), do: elixirc_paths(:prod) ++ ["bench/support", "test/support"]

  defp elixirc_paths(env) when env in [:dev, :bench],
    do: elixirc_paths(:prod) ++ ["bench/support"]

  defp elixirc_paths(_env), do: ["lib/raknet.ex", "lib/raknet"]
end
