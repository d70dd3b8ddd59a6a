defmodule RakNet.Message do
  @moduledoc """
  RakNet message identifiers (the first byte of a message) by name, as in X-Plane's
  `RakNet.Message`: the same names, values and functions.

      iex> RakNet.Message.name(0x13)
      :client_handshake
      iex> RakNet.Message.binary(:unconnected_pong)
      0x1C
      iex> RakNet.Message.name(0xFE)
      :error

  Application messages have no name of their own: `name/1` returns `:error` for them (or, as
  in X-Plane's table, a `:data_packet_N` name for 0x80..0x8F, which are datagram headers on
  the wire), and `RakNet.Client.receive/4` gets the integer.
  """

  @names_and_vals %{
    # RakNet's DefaultMessageIDTypes (MessageIdentifiers.h)
    :ping => 0x00,
    :unconnected_ping => 0x01,
    :unconnected_ping_open_connections => 0x02,
    :pong => 0x03,
    :open_connection_request_1 => 0x05,
    :open_connection_reply_1 => 0x06,
    :open_connection_request_2 => 0x07,
    :open_connection_reply_2 => 0x08,
    # ID_CONNECTION_REQUEST
    :client_connect => 0x09,
    # ID_CONNECTION_REQUEST_ACCEPTED
    :server_handshake => 0x10,
    # ID_CONNECTION_ATTEMPT_FAILED
    :connection_attempt_failed => 0x11,
    # ID_NEW_INCOMING_CONNECTION
    :client_handshake => 0x13,
    # ID_DISCONNECTION_NOTIFICATION
    :client_disconnect => 0x15,
    # ID_CONNECTION_LOST
    :connection_lost => 0x16,
    # ID_INCOMPATIBLE_PROTOCOL_VERSION
    :incompatible_version => 0x19,
    :unconnected_pong => 0x1C,
    :advertise_system => 0x1D,
    # Datagram headers of the reliability layer (0x80-0x8F), ACK and NAK
    :data_packet_0 => 0x80,
    :data_packet_1 => 0x81,
    :data_packet_2 => 0x82,
    :data_packet_3 => 0x83,
    :data_packet_4 => 0x84,
    :data_packet_5 => 0x85,
    :data_packet_6 => 0x86,
    :data_packet_7 => 0x87,
    :data_packet_8 => 0x88,
    :data_packet_9 => 0x89,
    :data_packet_A => 0x8A,
    :data_packet_B => 0x8B,
    :data_packet_C => 0x8C,
    :data_packet_D => 0x8D,
    :data_packet_E => 0x8E,
    :data_packet_F => 0x8F,
    :nack => 0xA0,
    :ack => 0xC0
  }

  @msg_names MapSet.new(Map.keys(@names_and_vals))
  @msg_binary_vals MapSet.new(Map.values(@names_and_vals))
  @vals_and_names Map.new(@names_and_vals, fn {name, val} -> {val, name} end)

  @offline_msg_id <<0, 255, 255, 0, 254, 254, 254, 254, 253, 253, 253, 253, 18, 52, 86, 120>>

  @typedoc "A message name, such as `:client_handshake`."
  @type name :: atom()

  @doc """
  The set of every message name.

      iex> MapSet.member?(RakNet.Message.known_message_names(), :ping)
      true
  """
  @spec known_message_names() :: MapSet.t(name())
  def known_message_names, do: @msg_names

  @doc """
  The set of every named identifier value.

      iex> MapSet.member?(RakNet.Message.known_messages(), 0x1C)
      true
  """
  @spec known_messages() :: MapSet.t(byte())
  def known_messages, do: @msg_binary_vals

  @doc """
  Whether `id` has a name.

      iex> RakNet.Message.is_known?(0x15)
      true
  """
  @spec is_known?(integer()) :: boolean()
  # X-Plane's name, kept for compatibility (Elixir would say known?/1).
  def is_known?(id) when is_integer(id), do: MapSet.member?(@msg_binary_vals, id)

  @doc """
  Whether `id` is a datagram header of the reliability layer (0x80..0x8F).

      iex> RakNet.Message.is_protocol_data?(0x84)
      true
  """
  @spec is_protocol_data?(integer()) :: boolean()
  def is_protocol_data?(id) when is_integer(id), do: id in 0x80..0x8F

  @doc """
  The name of identifier `id`, or `:error` when it has none.

      iex> RakNet.Message.name(0x09)
      :client_connect
  """
  @spec name(integer()) :: name() | :error
  def name(id) when is_integer(id), do: Map.get(@vals_and_names, id, :error)

  @doc """
  The identifier value of `name`; raises `KeyError` for an unknown name (as X-Plane's does).

      iex> RakNet.Message.binary(:client_disconnect)
      0x15
  """
  @spec binary(name()) :: byte()
  def binary(name) when is_atom(name), do: Map.fetch!(@names_and_vals, name)

  @doc """
  The 16 "magic" bytes that mark RakNet's offline messages.

      iex> byte_size(RakNet.Message.offline_msg_id())
      16
  """
  @spec offline_msg_id() :: <<_::128>>
  def offline_msg_id, do: @offline_msg_id
end
