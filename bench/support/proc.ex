defmodule Bench.Proc do
  @moduledoc """
  What the benchmarks and the soak read about processes and tools' output: CPU time from
  `/proc` (Linux; 0 elsewhere or once a process is gone) and numbers from a report.
  """

  @doc "utime + stime of OS process `pid` (or `\"pid/task/tid\"`), in clock ticks (100 a second)."
  @spec cpu_ticks(non_neg_integer() | String.t()) :: non_neg_integer()
  def cpu_ticks(pid) do
    case File.read("/proc/#{pid}/stat") do
      {:ok, stat} ->
        fields = stat |> String.split(") ") |> List.last() |> String.split()
        String.to_integer(Enum.at(fields, 11)) + String.to_integer(Enum.at(fields, 12))

      {:error, _} ->
        0
    end
  end

  @doc """
  CPU ticks of the threads of OS process `pid` named `name`, or `name-0`, `name-1`, ... (a
  server's endpoint threads), summed; 0 if none.
  """
  @spec thread_ticks(non_neg_integer() | String.t(), String.t()) :: non_neg_integer()
  def thread_ticks(pid, name), do: pid |> threads_ticks(name) |> Map.values() |> Enum.sum()

  @doc "`thread_ticks/2` per thread: `%{thread_name => ticks}`."
  @spec threads_ticks(non_neg_integer() | String.t(), String.t()) :: %{
          String.t() => non_neg_integer()
        }
  def threads_ticks(pid, name) do
    case File.ls("/proc/#{pid}/task") do
      {:ok, tids} ->
        for tid <- tids,
            {:ok, comm} <- [File.read("/proc/#{pid}/task/#{tid}/comm")],
            comm = String.trim(comm),
            comm == name or String.starts_with?(comm, name <> "-"),
            into: %{},
            do: {comm, cpu_ticks("#{pid}/task/#{tid}")}

      {:error, _} ->
        %{}
    end
  end

  @doc "The number `re`'s one group captures in `out` (a float if it has a dot), or nil."
  @spec num(String.t(), Regex.t()) :: number() | nil
  def num(out, re) do
    case Regex.run(re, out) do
      [_, v] -> if String.contains?(v, "."), do: String.to_float(v), else: String.to_integer(v)
      _ -> nil
    end
  end
end
