defmodule RakNetTest do
  use ExUnit.Case, async: true

  doctest RakNet
end
