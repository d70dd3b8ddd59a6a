defmodule RakNet.ReliabilityLayer.Reliability do
  @moduledoc """
  The eight RakNet reliabilities, named as X-Plane's `elixir-raknet` names them (values from
  official RakNet's `PacketPriority.h`).

  | atom | value | guarantee |
  |---|---|---|
  | `:unreliable` | 0 | may be lost or arrive out of order |
  | `:unreliable_sequenced` | 1 | may be lost; never older than one already delivered on its channel |
  | `:reliable` | 2 | exactly once, any order |
  | `:reliable_ordered` | 3 | exactly once, in order per channel |
  | `:reliable_sequenced` | 4 | reliable, only the newest on its channel is delivered |
  | `:unreliable_ack_receipt` | 5 | `:unreliable`, and the sender learns whether it arrived |
  | `:reliable_ack_receipt` | 6 | `:reliable`, and the sender learns when it arrived |
  | `:reliable_ordered_ack_receipt` | 7 | `:reliable_ordered`, and the sender learns when it arrived |

      iex> RakNet.ReliabilityLayer.Reliability.binary(:reliable_ordered)
      3
      iex> RakNet.ReliabilityLayer.Reliability.name(7)
      :reliable_ordered_ack_receipt
      iex> RakNet.ReliabilityLayer.Reliability.from_integer(6)
      {:ok, :reliable_ack_receipt}
      iex> RakNet.ReliabilityLayer.Reliability.receipt?(:reliable_ack_receipt)
      true

  `name/1`, `binary/1`, `valid?/1`, `is_reliable?/1`, `is_ordered?/1`, `is_sequenced?/1` and
  `needs_client_ack?/1` are X-Plane's functions; `to_integer/1`, `from_integer/1` and
  `receipt?/1` are the same with Elixir-style names and results. One difference: X-Plane's
  `is_ordered?/1` answers `false` for `:reliable_ordered_ack_receipt` (7), which is delivered
  in order like `:reliable_ordered`; here it answers `true`.
  """

  @typedoc "A reliability atom."
  @type t ::
          :unreliable
          | :unreliable_sequenced
          | :reliable
          | :reliable_ordered
          | :reliable_sequenced
          | :unreliable_ack_receipt
          | :reliable_ack_receipt
          | :reliable_ordered_ack_receipt

  @names [
    :unreliable,
    :unreliable_sequenced,
    :reliable,
    :reliable_ordered,
    :reliable_sequenced,
    :unreliable_ack_receipt,
    :reliable_ack_receipt,
    :reliable_ordered_ack_receipt
  ]

  @doc "All eight reliabilities, in numeric order."
  @spec all() :: [t()]
  def all, do: @names

  @doc "The reliability with numeric value `value`, or `:error`."
  @spec name(integer()) :: t() | :error
  def name(value) when value in 0..7, do: Enum.at(@names, value)
  def name(_value), do: :error

  @doc "The numeric value of a reliability."
  @spec binary(t()) :: 0..7
  def binary(reliability),
    do:
      Enum.find_index(@names, &(&1 == reliability)) ||
        raise(ArgumentError, "unknown reliability #{inspect(reliability)}")

  @doc """
  The numeric value of a reliability (`binary/1` by another name); raises `ArgumentError` for
  anything else.

      iex> RakNet.ReliabilityLayer.Reliability.to_integer(:unreliable_sequenced)
      1
  """
  @spec to_integer(t()) :: 0..7
  def to_integer(reliability), do: binary(reliability)

  @doc """
  The reliability with numeric value `value`: `{:ok, reliability}` or `:error`.

      iex> RakNet.ReliabilityLayer.Reliability.from_integer(0)
      {:ok, :unreliable}
      iex> RakNet.ReliabilityLayer.Reliability.from_integer(8)
      :error
  """
  @spec from_integer(integer()) :: {:ok, t()} | :error
  def from_integer(value) when value in 0..7, do: {:ok, Enum.at(@names, value)}
  def from_integer(_value), do: :error

  @doc """
  Whether sends with `reliability` return a receipt id (`{:ok, receipt_id}`) whose fate is
  reported (`RakNet.Client.got_ack/2`, or `{:raknet_receipt, conn, id, :acked | :lost}`):
  the three `*_ack_receipt` reliabilities. `needs_client_ack?/1` by another name.

      iex> RakNet.ReliabilityLayer.Reliability.receipt?(:reliable_ordered)
      false
  """
  @spec receipt?(t() | integer()) :: boolean()
  def receipt?(reliability), do: needs_client_ack?(reliability)

  @doc "Whether `reliability` is one of the eight atoms."
  @spec valid?(term()) :: boolean()
  def valid?(reliability), do: reliability in @names

  @doc "Whether messages are resent until acknowledged."
  @spec is_reliable?(t() | integer()) :: boolean()
  def is_reliable?(r) when is_integer(r), do: r in [2, 3, 4, 6, 7]

  def is_reliable?(r),
    do:
      r in [
        :reliable,
        :reliable_ordered,
        :reliable_sequenced,
        :reliable_ack_receipt,
        :reliable_ordered_ack_receipt
      ]

  @doc "Whether delivery keeps send order on the channel."
  @spec is_ordered?(t() | integer()) :: boolean()
  def is_ordered?(r) when is_integer(r), do: r in [3, 7]
  def is_ordered?(r), do: r in [:reliable_ordered, :reliable_ordered_ack_receipt]

  @doc "Whether the message uses an ordering channel (ordered or sequenced)."
  @spec is_sequenced?(t() | integer()) :: boolean()
  def is_sequenced?(r) when is_integer(r), do: r in [1, 3, 4, 7]

  def is_sequenced?(r),
    do:
      r in [
        :unreliable_sequenced,
        :reliable_ordered,
        :reliable_sequenced,
        :reliable_ordered_ack_receipt
      ]

  @doc "Whether the sender gets a receipt (`RakNet.Client.got_ack/2`)."
  @spec needs_client_ack?(t() | integer()) :: boolean()
  def needs_client_ack?(r) when is_integer(r), do: r in [5, 6, 7]

  def needs_client_ack?(r),
    do: r in [:unreliable_ack_receipt, :reliable_ack_receipt, :reliable_ordered_ack_receipt]
end
