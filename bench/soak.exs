# `make soak`: many connections through a lossy, duplicating, reordering relay to an echoing
# RakNet.Server, for minutes; not part of CI (its 30 s, 100-connection variant is, in
# test/raknet/soak_test.exs).
#
#   mix run bench/soak.exs     (after `cargo build --release -p raknet-bench`)
#
# Environment: SOAK_CONNECTIONS (1000), SOAK_SECONDS (600), SOAK_RATE (5 ticks/s per connection,
# each sending one reliable_ordered and one unreliable_sequenced message), SOAK_SEED (1),
# SOAK_SAMPLE_MS (5000). Prints the server every sample, then the report; exits 1 when a
# reliable message was lost, duplicated or reordered, an unreliable-sequenced one came out of
# sequence, a connection failed or ended early, the server's memory was not flat (±10 %)
# after the warm-up, or the Rust heap's least-squares slope over the last two thirds of the
# run passed 1 KB per connection per hour.

Logger.configure(level: :warning)
env = fn name, default -> name |> System.get_env(default) |> String.to_integer() end

opts = [
  connections: env.("SOAK_CONNECTIONS", "1000"),
  seconds: env.("SOAK_SECONDS", "600"),
  rate: env.("SOAK_RATE", "5"),
  seed: env.("SOAK_SEED", "1"),
  sample_ms: env.("SOAK_SAMPLE_MS", "5000"),
  progress: &IO.puts/1
]

IO.puts(
  "== make soak: #{opts[:connections]} connections for #{opts[:seconds]} s on " <>
    "#{System.schedulers_online()} cores, OTP #{System.otp_release()} =="
)

result = Bench.Soak.run(opts)
IO.puts("\nraknet-load summary:\n" <> result.summary)
Enum.each(Bench.Soak.report(result), &IO.puts/1)

growth = Bench.Soak.native_growth_per_connection_hour(result)

failures =
  Bench.Soak.failures(result) ++
    if(result.memory && result.memory.flat,
      do: [],
      else: ["server memory not flat after warm-up"]
    ) ++
    if(growth && growth <= Bench.Soak.max_native_growth(),
      do: [],
      else: [
        "the Rust heap grows #{growth && round(growth)} B per connection per hour " <>
          "(at most #{Bench.Soak.max_native_growth()})"
      ]
    )

case failures do
  [] ->
    IO.puts("soak: PASSED")

  _ ->
    Enum.each(failures, &IO.puts("soak: FAILED: " <> &1))
    System.halt(1)
end
