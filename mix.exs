defmodule RakNet.MixProject do
  use Mix.Project

  @version "0.1.0"

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
      description: "RakNet (UDP game networking protocol) for Elixir, backed by a Rust NIF"
    ]
  end

  def application do
    [extra_applications: [:logger], mod: {RakNet.Application, []}]
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
