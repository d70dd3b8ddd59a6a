# Used by "mix format". Fixture apps' build output and fetched deps are not ours to format.
excluded = ~r{^(deps|test/fixtures/[^/]+/(_build|deps))/}

[
  inputs:
    ["{mix,.formatter}.exs", "{config,lib,test,examples,bench}/**/*.{ex,exs}"]
    # Expanded the way `mix format` expands globs (match_dot), minus the exclusions above.
    |> Enum.flat_map(&Path.wildcard(&1, match_dot: true))
    |> Enum.reject(&(&1 =~ excluded))
]
