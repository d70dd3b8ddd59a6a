defmodule RakNet.ConfigDefaultsTest do
  # The defaults of the engine's options are written once, in Rust
  # (raknet_proto::EndpointConfig::default(), which the NIF fills in for any option left out
  # and reports through RakNet.Native.engine_defaults/0). RakNet.Server.Config holds nil for
  # them and takes the engine's in new/3; its typedoc and docs/options.md state them for the
  # reader, and are checked against the engine here.
  use ExUnit.Case, async: true

  import Bitwise

  alias RakNet.Server.Config

  @options_md Path.expand("../../docs/options.md", __DIR__)

  test "the struct restates no engine default; new/3 fills in the engine's" do
    engine = RakNet.Native.engine_defaults()
    struct = struct(Config, client_module: nil, port: 0)
    config = Config.new(MyGame.Player, 0, [])

    assert map_size(Config.engine_owned()) >= 25

    for {field, name} <- Config.engine_owned() do
      assert Map.fetch!(struct, field) == nil, "#{field} restated in the struct"
      # The engine's 0 messages a second is no limit, which the option says with nil.
      expected =
        case Map.fetch!(engine, name) do
          0 when name == :max_messages_per_sec -> nil
          value -> value
        end

      assert Map.fetch!(config, field) == expected, "#{field}"
    end

    # What the caller gives, nil included, is kept.
    config = Config.new(MyGame.Player, 0, max_messages_per_sec: nil, max_connections: 8)
    assert {config.max_messages_per_sec, config.max_connections} == {nil, 8}
  end

  test "the typedoc states each engine default as the engine has it" do
    {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(Config)
    [text] = for {{:type, :option, 0}, _, _, %{"en" => text}, _} <- docs, do: text
    bullets = text |> String.split(~r/\n\s*\* /) |> Enum.drop(1)
    engine = RakNet.Native.engine_defaults()

    for {field, name} <- Config.engine_owned() do
      bullet =
        Enum.find(
          bullets,
          &(&1 |> String.split(" - ", parts: 2) |> hd() =~ "`#{inspect(field)}`")
        ) ||
          flunk("no bullet for #{inspect(field)}")

      assert stated?(bullet, Map.fetch!(engine, name)),
             "#{inspect(field)}: the engine's default is #{inspect(engine[name])}:\n#{bullet}"
    end
  end

  test "docs/options.md states each engine default as the engine has it" do
    rows = @options_md |> File.read!() |> String.split("\n") |> Enum.filter(&(&1 =~ ~r/^\| `:/))
    engine = RakNet.Native.engine_defaults()

    for {field, name} <- Config.engine_owned() do
      row =
        Enum.find(rows, &(&1 |> String.split("|") |> Enum.at(1) =~ "`#{inspect(field)}`")) ||
          flunk("no row for #{inspect(field)} in docs/options.md")

      default_column = row |> String.split("|") |> Enum.at(2)

      assert stated?(default_column, Map.fetch!(engine, name)),
             "#{inspect(field)}: the engine's default is #{inspect(engine[name])}:\n#{row}"
    end
  end

  # Whether `text` says `value` in backquotes (`1_000` and `1000` alike; the engine's 0 "no
  # limit" may read `nil`), or a size as "4 MiB".
  defp stated?(text, value) do
    plain = String.replace(text, ~r/(\d)_(\d)/, "\\1\\2")
    forms = if value == 0, do: ["0", "nil"], else: [inspect(value)]

    Enum.any?(forms, &String.contains?(plain, "`#{&1}`")) or
      Enum.any?(sizes(value), &String.contains?(plain, &1))
  end

  defp sizes(value) when is_integer(value) and value >= 1024 do
    for {unit, size} <- [{"KiB", 1 <<< 10}, {"MiB", 1 <<< 20}, {"GiB", 1 <<< 30}],
        rem(value, size) == 0,
        do: "#{div(value, size)} #{unit}"
  end

  defp sizes(_value), do: []
end
