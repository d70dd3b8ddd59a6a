defmodule RakNetTest do
  use ExUnit.Case, async: true

  doctest RakNet
end

defmodule RakNet.DocTest do
  use ExUnit.Case, async: true
  doctest RakNet.Ping
  doctest RakNet.ReliabilityLayer.Reliability
  doctest RakNet.Server.Config
end
