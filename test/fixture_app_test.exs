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

  defp mix(args), do: RakNet.Test.MixProject.mix(@fixture, args)
end
