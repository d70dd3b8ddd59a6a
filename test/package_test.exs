defmodule RakNet.PackageTest do
  # A Hex package holds only the files `package: [files: ...]` names (Hex's default list
  # would leave out native/ and the Cargo files). Copy exactly those to an empty directory and
  # build there: the NIF must compile and load from the copy alone.
  use ExUnit.Case, async: false

  @root Path.expand("..", __DIR__)

  @tag timeout: 900_000
  test "the package's files are enough to build and load the NIF" do
    files = package_files()
    assert "mix.exs" in files and "Cargo.lock" in files and "LICENSE" in files
    assert "native/raknet-nif/src/lib.rs" in files
    # Nothing built or local slips in.
    refute Enum.any?(files, &String.contains?(&1, ["target/", "_build/", "fuzz/"]))

    dir = Path.join(System.tmp_dir!(), "raknet_package_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(dir) end)

    for file <- files do
      dest = Path.join(dir, file)
      File.mkdir_p!(Path.dirname(dest))
      File.cp!(Path.join(@root, file), dest)
    end

    {output, status} = mix(dir, ["compile"])
    assert status == 0, "mix compile failed in a copy of the package:\n#{output}"

    {output, status} = mix(dir, ["run", "--no-compile", "-e", "IO.inspect(RakNet.build_info())"])
    assert status == 0, output
    assert output =~ ~s(version: "#{Mix.Project.config()[:version]}")
  end

  test "every guide the docs list is in the package" do
    files = package_files()

    for extra <- Mix.Project.config()[:docs][:extras] do
      assert extra in files, "#{extra} is listed in docs: [extras: ...] but not packaged"
    end
  end

  # Every file under the entries of `package: [files: ...]`, as Hex expands them (a
  # directory is taken whole); an entry that matches nothing fails the test.
  defp package_files do
    for entry <- Mix.Project.config()[:package][:files],
        file <- expand(entry, Path.join(@root, entry)) do
      Path.relative_to(file, @root)
    end
  end

  defp expand(entry, path) do
    cond do
      File.regular?(path) ->
        [path]

      File.dir?(path) ->
        path |> Path.join("**") |> Path.wildcard() |> Enum.filter(&File.regular?/1)

      true ->
        flunk("package file #{entry} does not exist")
    end
  end

  # A user's build: prod. Cargo builds into this checkout's target directory, so only the
  # workspace's own crates compile again.
  defp mix(dir, args) do
    target = System.get_env("CARGO_TARGET_DIR") || Path.join(@root, "target")
    RakNet.Test.MixProject.mix(dir, args, [{"MIX_ENV", "prod"}, {"CARGO_TARGET_DIR", target}])
  end
end
