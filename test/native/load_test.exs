defmodule RakNet.Native.LoadTest do
  use ExUnit.Case, async: true

  test "the NIF library is loaded from the app's priv/native" do
    path = Application.app_dir(:raknet, "priv/native/libraknet_nif.so")

    assert File.regular?(path)
    # @on_load returns an error (and the module does not load) when load_nif fails.
    assert Code.ensure_loaded?(RakNet.Native)
  end

  test "build_info/0 describes the build" do
    assert RakNet.Native.build_info() == %{
             version: "0.1.0",
             nif_version: "2.15",
             protocol_versions: [6, 10, 11]
           }
  end

  test "the crate version matches the Mix project version" do
    assert RakNet.build_info().version == to_string(Application.spec(:raknet, :vsn))
  end

  test "the running VM can load the NIF version it was built for" do
    [major, minor] = RakNet.build_info().nif_version |> String.split(".")
    [vm_major, vm_minor] = :erlang.system_info(:nif_version) |> to_string() |> String.split(".")

    assert major == vm_major
    assert String.to_integer(minor) <= String.to_integer(vm_minor)
  end
end
