defmodule Mix.Tasks.Compile.RaknetNative do
  @moduledoc """
  Builds the `raknet-nif` Rust crate and installs it as `priv/native/libraknet_nif.so`.

  raknet lists this compiler first in its `:compilers`, so `mix compile` (and therefore
  `mix test`, and compiling any app that depends on raknet) builds the NIF before the Elixir
  code that loads it. The steps:

    1. If no Rust source under the raknet project root (`native/**/*.rs`, the `Cargo.toml`s,
       `Cargo.lock`) is newer than the installed library, do nothing and return `{:noop, []}`.
    2. Run `cargo build --release -p raknet-nif` in the raknet project root, streaming cargo's
       output. The artifact lands in the workspace's `target/release/`, or under
       `$CARGO_TARGET_DIR` when that is set.
    3. Copy it to `priv/native/libraknet_nif.so` of the app being built
       (`_build/ENV/lib/raknet/priv/native/`), through a temporary file in the same directory
       and a rename. The rename replaces the directory entry, so a VM that has the old library
       mapped keeps running; writing over a loaded `.so` in place would crash it.

  When cargo is missing or the build fails, the compiler prints why and returns
  `{:error, diagnostics}`, which fails `mix compile`.

  The module is build tooling, not part of the `:raknet` application: raknet's `mix.exs` loads
  it from source, because Mix needs it before it compiles anything.

  `_build/ENV/lib/raknet/priv` is either a directory of its own or, when the raknet project has
  a `priv/` directory, a symlink that Mix made to it (Mix makes it a copy instead under
  `build_embedded: true`). Writing through the `_build` path covers all three cases.

  ## Command line options

    * `--force` - run cargo and reinstall the library even when it looks up to date
  """
  use Mix.Task.Compiler

  @shortdoc "Builds the raknet NIF (Rust, via cargo) into priv/native"

  @crate "raknet-nif"
  @lib_base "libraknet_nif"
  @installed_name @lib_base <> ".so"

  @rustup_hint "Install Rust with rustup (https://rustup.rs):\n" <>
                 "    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y\n" <>
                 "then open a new shell (or `source \"$HOME/.cargo/env\"`) and run `mix compile` again."

  @impl Mix.Task.Compiler
  def run(args) do
    {opts, _argv, _invalid} = OptionParser.parse(args, switches: [force: :boolean])
    root = project_root()
    installed = installed_path()

    if opts[:force] || stale?(root, installed) do
      build_and_install(root, installed)
    else
      {:noop, []}
    end
  end

  @impl Mix.Task.Compiler
  def manifests, do: []

  @impl Mix.Task.Compiler
  def clean do
    _ = File.rm(installed_path())
    :ok
  end

  @doc false
  @spec installed_path() :: Path.t()
  def installed_path do
    Path.join([Mix.Project.app_path(), "priv", "native", @installed_name])
  end

  # The raknet checkout that holds Cargo.toml and native/: raknet's mix.exs loads this file from
  # source (Code.require_file), so __DIR__ is where the checkout is now, also when raknet is a
  # `path:` or `git:` dependency of the app being built.
  defp project_root, do: Path.expand("../../..", __DIR__)

  defp stale?(root, installed) do
    case File.stat(installed, time: :posix) do
      {:ok, %File.Stat{mtime: installed_at}} ->
        Enum.any?(rust_sources(root), &modified_after?(&1, installed_at))

      {:error, _reason} ->
        true
    end
  end

  defp rust_sources(root) do
    ["Cargo.toml", "Cargo.lock", "native/**/Cargo.toml", "native/**/*.rs"]
    |> Enum.flat_map(&Path.wildcard(Path.join(root, &1)))
    # Build output (e.g. native/fuzz/target) contains generated .rs files that are not sources.
    |> Enum.reject(&String.contains?(&1, "/target/"))
  end

  defp modified_after?(path, time) do
    case File.stat(path, time: :posix) do
      {:ok, %File.Stat{mtime: mtime}} -> mtime > time
      {:error, _reason} -> false
    end
  end

  defp build_and_install(root, installed) do
    with {:ok, cargo} <- find_cargo(),
         :ok <- cargo_build(cargo, root),
         {:ok, artifact} <- find_artifact(root) do
      install(artifact, installed)
      Mix.shell().info("Installed #{Path.relative_to_cwd(installed)}")
      {:ok, []}
    else
      {:error, message} ->
        Mix.shell().error(message)
        {:error, [diagnostic(root, message)]}
    end
  end

  # rustup puts cargo in $CARGO_HOME/bin, which is not always on the PATH of the shell running mix.
  @doc false
  @spec find_cargo() :: {:ok, Path.t()} | {:error, String.t()}
  def find_cargo do
    cargo_home = System.get_env("CARGO_HOME") || Path.expand("~/.cargo")
    rustup_cargo = Path.join([cargo_home, "bin", "cargo"])

    cond do
      path = System.find_executable("cargo") -> {:ok, path}
      File.regular?(rustup_cargo) -> {:ok, rustup_cargo}
      true -> {:error, "cargo not found; raknet needs Rust to build its NIF. " <> @rustup_hint}
    end
  end

  defp cargo_build(cargo, root) do
    args = ["build", "--release", "-p", @crate] ++ color_args()
    Mix.shell().info("Compiling #{@crate} (cargo #{Enum.join(args, " ")}) in #{root}")

    # Merged into stdout and streamed as it comes, so the user sees cargo's progress and errors.
    case System.cmd(cargo, args, cd: root, stderr_to_stdout: true, into: IO.stream()) do
      {_output, 0} ->
        :ok

      {_output, status} ->
        {:error,
         "`cargo #{Enum.join(args, " ")}` failed with exit status #{status} " <>
           "(cargo's output is above)"}
    end
  end

  defp color_args do
    if IO.ANSI.enabled?(), do: ["--color=always"], else: []
  end

  defp find_artifact(root) do
    # A relative CARGO_TARGET_DIR is relative to cargo's working directory, the project root.
    target_dir = Path.expand(System.get_env("CARGO_TARGET_DIR") || "target", root)
    artifact = Path.join([target_dir, "release", @lib_base <> dylib_extension()])

    if File.regular?(artifact) do
      {:ok, artifact}
    else
      {:error,
       "cargo reported success but #{artifact} does not exist " <>
         "(a target-dir set in a cargo config file is not supported; use CARGO_TARGET_DIR)"}
    end
  end

  defp dylib_extension do
    case :os.type() do
      {:unix, :darwin} -> ".dylib"
      {:win32, _} -> ".dll"
      {:unix, _} -> ".so"
    end
  end

  defp install(artifact, installed) do
    dir = Path.dirname(installed)
    remove_dangling_priv_link(Path.dirname(dir))
    File.mkdir_p!(dir)

    # Same directory, so the rename below is atomic and never crosses file systems. Named
    # by the OS process too: `System.unique_integer/1` is unique in one VM only, and two mix
    # commands started together (`make server` and `mix raknet.ping` on a fresh checkout)
    # wrote the same temporary file, one renaming it from under the other's copy.
    tmp =
      Path.join(
        dir,
        ".#{@installed_name}.#{System.pid()}.#{System.unique_integer([:positive])}.tmp"
      )

    try do
      File.cp!(artifact, tmp)
      File.rename!(tmp, installed)
    after
      _ = File.rm(tmp)
    end
  end

  # Mix links _build/ENV/lib/raknet/priv to the project's priv/ when that exists; if priv/ has
  # since been deleted the link dangles and mkdir_p through it would fail. Drop the link so a
  # plain directory takes its place.
  defp remove_dangling_priv_link(priv) do
    with {:ok, %File.Stat{type: :symlink}} <- File.lstat(priv),
         false <- File.exists?(priv) do
      File.rm!(priv)
    end
  end

  defp diagnostic(root, message) do
    %Mix.Task.Compiler.Diagnostic{
      compiler_name: "raknet_native",
      file: Path.join([root, "native", @crate, "Cargo.toml"]),
      message: message,
      position: nil,
      severity: :error,
      details: nil
    }
  end
end
