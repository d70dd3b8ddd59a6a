defmodule RakNet.ConfigDefaultsTest do
  # A server option's default is the engine's (raknet_proto::EndpointConfig::default(), which
  # the NIF fills in for any option left out). RakNet.Server.Config restates them for its
  # docs and the per-thread shares it computes: this keeps the two from drifting apart.
  use ExUnit.Case, async: true

  # Server options whose name differs from the NIF's.
  @renamed %{client_timeout_ms: :timeout_ms}

  test "RakNet.Server.Config's defaults are the engine's" do
    engine = RakNet.Native.engine_defaults()
    config = struct(RakNet.Server.Config, client_module: nil, port: 0)

    restated =
      for {field, value} <- Map.from_struct(config),
          key = Map.get(@renamed, field, field),
          Map.has_key?(engine, key),
          do: {field, value, Map.fetch!(engine, key)}

    # Every default the engine has, but these, is restated here.
    assert length(restated) >= 20, inspect(restated)

    differ = for {field, ours, theirs} <- restated, ours != theirs, do: {field, ours, theirs}
    assert differ == []
  end
end
