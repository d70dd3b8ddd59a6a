defmodule RakNet.FixtureAppTest do
  # Builds test/fixtures/consumer_app, which depends on raknet with `path: "../../.."`, in a
  # separate `mix` process: the NIF must build and load for a dependent app too, where Mix
  # compiles raknet as a dependency into the app's own _build.
  use ExUnit.Case, async: false

  @fixture Path.expand("fixtures/consumer_app", __DIR__)

  @tag timeout: 300_000
  test "an app depending on raknet by path compiles the NIF and calls it" do
    {output, status} = mix(["compile"])
    assert status == 0, "mix compile failed in #{@fixture}:\n#{output}"

    assert File.regular?(
             Path.join(@fixture, "_build/dev/lib/raknet/priv/native/libraknet_nif.so")
           )

    {output, status} = mix(["run", "-e", "IO.puts(ConsumerApp.describe())"])
    assert status == 0, "mix run failed in #{@fixture}:\n#{output}"
    assert output =~ "raknet 0.1.0 nif 2.15 protocols 6,10,11"
  end

  defp mix(args) do
    mix = System.find_executable("mix") || flunk("`mix` is not on the PATH")

    System.cmd(mix, args,
      cd: @fixture,
      stderr_to_stdout: true,
      # The fixture is a separate project: drop this run's Mix settings (MIX_ENV=test and any
      # build or deps path overrides) so that it builds as a user's app would, into its own _build.
      env: [
        {"MIX_ENV", "dev"},
        {"MIX_BUILD_PATH", nil},
        {"MIX_BUILD_ROOT", nil},
        {"MIX_DEPS_PATH", nil},
        {"MIX_EXS", nil},
        {"MIX_LOCKFILE", nil},
        {"MIX_TARGET", nil}
      ]
    )
  end
end
