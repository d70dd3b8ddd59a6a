# Used by "mix format". Fixture apps' build output and fetched deps are not ours to format.
excluded = ~r{^(deps|test/fixtures/[^/]+/(_build|deps))/}

# The RakNet.Packet DSL, written without parentheses (`field :x, :uint8`); exported so that an
# application with `import_deps: [:raknet]` formats its packets the same way.
locals_without_parens = [field: 2, field: 3]

[
  inputs:
    ["{mix,.formatter}.exs", "{config,lib,test,examples,bench}/**/*.{ex,exs}"]
    # Expanded the way `mix format` expands globs (match_dot), minus the exclusions above.
    |> Enum.flat_map(&Path.wildcard(&1, match_dot: true))
    |> Enum.reject(&(&1 =~ excluded)),
  locals_without_parens: locals_without_parens,
  export: [locals_without_parens: locals_without_parens]
]
