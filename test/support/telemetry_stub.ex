defmodule :telemetry do
  # A test-only stand-in for the `telemetry` package (hex.pm cannot be reached here), with
  # the part of its API raknet's tests use: attach/4, attach_many/4, detach/1, execute/3.
  # As the real one, handlers run in the process that emits, and a handler that raises, throws
  # or exits is detached. It is compiled in the test environment only: the library itself never depends
  # on it (RakNet.Telemetry looks the module up at run time).
  @moduledoc false

  @key {__MODULE__, :handlers}

  def attach(id, event, fun, config), do: attach_many(id, [event], fun, config)

  def attach_many(id, events, fun, config) do
    handlers = :persistent_term.get(@key, [])

    if List.keymember?(handlers, id, 0) do
      {:error, :already_exists}
    else
      :persistent_term.put(@key, [{id, events, fun, config} | handlers])
      :ok
    end
  end

  def detach(id) do
    :persistent_term.put(@key, List.keydelete(:persistent_term.get(@key, []), id, 0))
    :ok
  end

  def execute(event, measurements, metadata) do
    for {id, events, fun, config} <- :persistent_term.get(@key, []), event in events do
      try do
        fun.(event, measurements, metadata, config)
      catch
        _kind, _reason -> detach(id)
      end
    end

    :ok
  end
end
