defmodule RakNet do
  @moduledoc """
  RakNet, the UDP game networking protocol, for Elixir.

  The protocol engine is written in Rust and runs in a NIF (`native/raknet-nif`), which
  `mix compile` builds with cargo; Elixir applications see plain processes and messages.

  ## Status

  Foundation: the build system (a Mix compiler that builds and loads the NIF) and the wire codec
  are in place. The server, connection and client API — `RakNet.Server`, `RakNet.Connection`
  and the `RakNet.Client` protocol — comes later; until then `build_info/0` is the only public
  function.
  """

  @typedoc """
  A description of the loaded native library:

    * `:version` - the version of the `raknet-nif` crate, which matches this library's version
    * `:nif_version` - the Erlang NIF API version the library was built against; any VM whose
      `:erlang.system_info(:nif_version)` is this or newer can load it
    * `:protocol_versions` - the RakNet protocol versions the server side accepts
  """
  @type build_info :: %{
          version: String.t(),
          nif_version: String.t(),
          protocol_versions: [non_neg_integer()]
        }

  @doc """
  Returns a description of the loaded native library; see `t:build_info/0`.

  Calling it is also the quickest check that the NIF was built and loads.

  ## Examples

      iex> RakNet.build_info()
      %{version: "0.1.0", nif_version: "2.15", protocol_versions: [6, 10, 11]}

  """
  @spec build_info() :: build_info()
  defdelegate build_info(), to: RakNet.Native
end
