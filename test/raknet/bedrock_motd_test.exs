defmodule RakNet.Bedrock.MotdTest do
  use ExUnit.Case, async: true

  alias RakNet.Bedrock.Motd

  doctest RakNet.Bedrock.Motd

  test "the bytes of a known MOTD" do
    motd = %Motd{
      motd: "Hi",
      protocol: 390,
      version: "1.14.60",
      players: 1,
      max_players: 10,
      server_guid: 7,
      sub_motd: "w"
    }

    # 52 bytes: MCPE; (5) Hi; (3) 390; (4) 1.14.60; (8) 1; (2) 10; (3) 7; (2) w; (2)
    # Survival; (9) 1; (2) 19132; (6) 19133; (6).
    text = "MCPE;Hi;390;1.14.60;1;10;7;w;Survival;1;19132;19133;"
    assert byte_size(text) == 52
    assert Motd.encode(motd) == <<0x00, 0x34>> <> text
    assert Motd.encode(Map.to_list(Map.from_struct(motd))) == Motd.encode(motd)
  end

  test "encode and decode round trip, with or without the length prefix" do
    for motd <- [
          %Motd{},
          %Motd{edition: "MCEE", motd: "Classroom", players: 0, max_players: 30},
          %Motd{motd: "§aGreen §rserver", sub_motd: "Überwelt", players: 19, max_players: 20},
          # A GUID above 2^63, as servers print their unsigned 64-bit GUID.
          %Motd{server_guid: 13_253_860_892_328_930_865, port_v4: 1, port_v6: 65_535}
        ] do
      <<_len::16, text::binary>> = payload = Motd.encode(motd)
      assert Motd.decode(payload) == {:ok, motd}
      assert Motd.decode(text) == {:ok, motd}
    end
  end

  test "the default MOTD fits the default :pong_amplification, with room for a long name" do
    config = RakNet.Server.Config.new(MyGame.Player, 0, [])
    assert RakNet.Server.Config.pong_fits?(config, Motd.encode(%Motd{}))
    name = String.duplicate("x", 163 - byte_size(Motd.encode(%Motd{motd: ""})))
    assert RakNet.Server.Config.pong_fits?(config, Motd.encode(motd: name))
    refute RakNet.Server.Config.pong_fits?(config, Motd.encode(motd: name <> "x"))
  end

  test "decodes what real servers send, fewer fields included" do
    # A dedicated server: all twelve.
    assert {:ok, %Motd{} = bds} =
             Motd.decode(
               <<0, 97,
                 "MCPE;Dedicated Server;390;1.14.60;0;10;13253860892328930865;Bedrock level;Survival;1;19132;19133;">>
             )

    assert {bds.motd, bds.sub_motd, bds.server_guid, bds.port_v6} ==
             {"Dedicated Server", "Bedrock level", 13_253_860_892_328_930_865, 19_133}

    # Older servers stop after the player counts, with or without a closing `;`.
    for text <- ["MCPE;Steadfast2;34;0.12.1;2;20", "MCPE;Steadfast2;34;0.12.1;2;20;"] do
      assert {:ok, old} = Motd.decode(<<byte_size(text)::16, text::binary>>)

      assert old == %Motd{
               motd: "Steadfast2",
               protocol: 34,
               version: "0.12.1",
               players: 2,
               max_players: 20,
               server_guid: nil,
               sub_motd: nil,
               game_mode: nil,
               game_mode_id: nil,
               port_v4: nil,
               port_v6: nil
             }
    end

    # Stopping after the game mode; a version that is not a number stays a string; fields
    # after the twelfth are ignored.
    assert {:ok, %Motd{version: "1", game_mode: "Creative", game_mode_id: nil}} =
             Motd.decode("MCPE;CubeCraft;390;1;12000;55000;0;CubeCraft;Creative")

    assert {:ok, %Motd{port_v6: 19_133}} =
             Motd.decode("MCPE;x;1;v;0;1;0;s;Survival;1;19132;19133;0;extra;")
  end

  test "a semicolon in a name does not shift the fields" do
    payload = Motd.encode(motd: "Build; fight; survive", sub_motd: "a;b", game_mode: "Sur;vival")
    assert {:ok, motd} = Motd.decode(payload)
    assert motd.motd == "Build, fight, survive"
    assert motd.sub_motd == "a,b"
    assert motd.game_mode == "Sur,vival"
    assert {motd.players, motd.max_players, motd.port_v6} == {0, 20, 19_133}
    assert {:ok, fields} = Motd.fields(payload)
    assert length(Enum.reject(fields, &is_nil/1)) == 12

    # A trailing backslash would escape the separator after it, as the client reads `\;`.
    assert Motd.encode(motd: "C:\\\\") == Motd.encode(motd: "C:")

    # Servers that escape their semicolons instead.
    assert {:ok, %Motd{motd: "a;b", protocol: 1, max_players: 3}} =
             Motd.decode(~S"MCPE;a\;b;1;v;2;3;")

    assert RakNet.Ping.parse_motd(~S"MCPE;a\;b;1;v;2;3;").motd == "a;b"
  end

  test "put_players sets the online count of a struct or of a payload" do
    motd = %Motd{motd: "Live", max_players: 50}
    assert Motd.put_players(motd, 12) == %{motd | players: 12}

    payload = Motd.encode(motd)
    assert Motd.put_players(payload, 12) == Motd.encode(%{motd | players: 12})
    assert Motd.put_players(payload, 1_000) |> Motd.decode() == {:ok, %{motd | players: 1_000}}

    # Every other byte as it was, the framing too: a short MOTD stays short, an escape stays.
    assert Motd.put_players(<<0, 14, "MCPE;a;1;v;2;3">>, 10) == <<0, 15, "MCPE;a;1;v;10;3">>
    assert Motd.put_players(~S"MCPE;a\;b;1;v;;3;x;", 4) == ~S"MCPE;a\;b;1;v;4;3;x;"

    assert_raise ArgumentError, ~r/not a Bedrock MOTD/, fn ->
      Motd.put_players("RakNet Server", 1)
    end

    assert_raise FunctionClauseError, fn -> Motd.put_players(motd, -1) end
  end

  test "garbage is an error, not a crash" do
    assert Motd.decode("") == {:error, :not_a_motd}
    assert Motd.decode("RakNet Server") == {:error, :not_a_motd}
    assert Motd.decode(<<0, 5, "hello">>) == {:error, :not_a_motd}
    assert Motd.decode(<<0, 4, "MCPE">>) == {:error, :too_few_fields}
    assert Motd.decode("mcpe;a;1;v;2;3;") == {:error, :not_a_motd}
    assert Motd.decode("MCPE;a;1;v") == {:error, :too_few_fields}
    assert Motd.decode(<<"MCPE;", 0xFF, ";1;v;2;3;">>) == {:error, :invalid_utf8}
    assert Motd.decode("MCPE;a;x;v;2;3;") == {:error, {:invalid_integer, :protocol}}
    assert Motd.decode("MCPE;a;1;v;2;3;4;s;g;one;") == {:error, {:invalid_integer, :game_mode_id}}
    # A prefix longer than what follows it is not taken as one.
    assert Motd.decode(<<0, 99, "MCPE;a;1;v;2;3;">>) == {:error, :not_a_motd}

    for _ <- 1..2_000 do
      garbage = :crypto.strong_rand_bytes(:rand.uniform(64))
      assert {:error, _} = Motd.decode(garbage)
      assert {:error, _} = Motd.decode("MCPE;" <> garbage)
    end
  end

  test "encode refuses what it cannot write" do
    assert_raise ArgumentError, ~r/edition/, fn -> Motd.encode(edition: "XBOX") end

    assert_raise ArgumentError, ~r/:players must be an integer/, fn ->
      Motd.encode(players: "3")
    end

    assert_raise ArgumentError, ~r/:motd must be a string/, fn -> Motd.encode(motd: :name) end
    assert_raise KeyError, fn -> Motd.encode(player_count: 3) end

    assert_raise ArgumentError, ~r/at most 65535 bytes/, fn ->
      Motd.encode(motd: String.duplicate("x", 65_536))
    end
  end
end
