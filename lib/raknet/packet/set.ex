defmodule RakNet.Packet.Set do
  @moduledoc """
  The packets of one protocol, by id: decoding a message finds its module at compile-time
  speed (a function clause per id).

      defmodule MyGame.Protocol do
        use RakNet.Packet.Set,
          packets: [MyGame.Packets.Login, MyGame.Packets.Move, MyGame.Packets.Chat]
      end

      {:ok, %MyGame.Packets.Move{}} = RakNet.Packet.decode(MyGame.Protocol, message)
      {:error, {:unknown_packet, 0x99}} = RakNet.Packet.decode(MyGame.Protocol, <<0x99, 1, 2>>)

  ## Ids

  Each packet declares how its id is written (see `RakNet.Packet`): as the RakNet message
  type byte (`id: 0x90`), or as a wider application id inside a message type
  (`id: 0x0102, message_type: 0x86, id_type: :uint16_le`: the message is `0x86`, then
  `<<0x02, 0x01>>`, then the fields). A set may mix both; the set's option
  `id_format:` (`:byte` or `{message_type, id_type}`, e.g. `{0x86, :uint16_le}`) makes it one
  protocol-wide rule that every packet must follow.

  The set is checked at compile time: a `CompileError` for two packets with the same id, for
  a packet whose message type byte is also the type that carries wider ids, for wide ids of
  one message type written with different id types, for a packet without an id, and for one
  that breaks the set's `id_format`.

  ## Generated functions

    * `decode(message)` and `decode(type, body)` (the latter as `RakNet.Client.receive/4`
      gives a message: type byte and rest) - `{:ok, packet}`, or `{:error, reason}`:
      `{:unknown_packet, type}` or `{:unknown_packet, {message_type, id}}` for an id that is
      not in the set, `{:truncated_id, message_type}` for a message that ends inside its id,
      `:empty` for an empty message, or the packet's own parse error.
    * `packets/0` - the modules; `module_for/1` - the module of an id (`{message_type, id}`
      for wide ids), or `nil`.
  """

  alias RakNet.Packet.Type

  @doc false
  defmacro __using__(opts) do
    quote bind_quoted: [opts: opts] do
      @raknet_set RakNet.Packet.Set.__table__(__MODULE__, opts)
      @before_compile RakNet.Packet.Set
    end
  end

  @doc false
  # Resolves the packet modules (compiling them first) and checks the set; returns
  # %{byte: [{id, mod}], wide: [{message_type, id_type, [{id, mod}]}], packets: [mod]}.
  def __table__(set, opts) do
    packets = Keyword.fetch!(opts, :packets)
    format = normalize_format(Keyword.get(opts, :id_format))

    entries =
      for mod <- packets do
        Code.ensure_compiled!(mod)

        unless function_exported?(mod, :packet_id, 0) and function_exported?(mod, :parse, 1),
          do: error!(set, "#{inspect(mod)} is not a RakNet.Packet module")

        id = mod.packet_id()
        unless is_integer(id), do: error!(set, "#{inspect(mod)} has no id")

        id_format = if function_exported?(mod, :id_format, 0), do: mod.id_format(), else: :byte

        if format != nil and id_format != format,
          do:
            error!(
              set,
              "#{inspect(mod)} writes its id as #{inspect(id_format)}, the set requires #{inspect(format)}"
            )

        {id_format, id, mod}
      end

    byte = for {:byte, id, mod} <- entries, do: {id, mod}

    wide =
      entries
      |> Enum.filter(&match?({{_, _}, _, _}, &1))
      |> Enum.group_by(fn {{mt, _}, _, _} -> mt end)
      |> Enum.map(fn {mt, list} ->
        case list |> Enum.map(fn {{_, t}, _, _} -> t end) |> Enum.uniq() do
          [type] ->
            {mt, type, for({_, id, mod} <- list, do: {id, mod})}

          types ->
            error!(set, "message type #{mt} carries ids of different types: #{inspect(types)}")
        end
      end)

    check_unique!(set, byte, fn id -> "message type #{id}" end)

    for {mt, _type, ids} <- wide do
      check_unique!(set, ids, fn id -> "id #{id} in message type #{mt}" end)

      if List.keymember?(byte, mt, 0),
        do:
          error!(
            set,
            "message type #{mt} is both a packet's id and the type of wider ids (#{inspect(List.keyfind(byte, mt, 0))})"
          )
    end

    %{byte: byte, wide: wide, packets: packets}
  end

  defp normalize_format(nil), do: nil
  defp normalize_format(:byte), do: :byte
  defp normalize_format({mt, type}) when mt in 0..255, do: {mt, Type.normalize(type)}

  defp check_unique!(set, pairs, describe) do
    pairs
    |> Enum.group_by(fn {id, _} -> id end, fn {_, mod} -> mod end)
    |> Enum.each(fn
      {_id, [_]} -> :ok
      {id, mods} -> error!(set, "#{describe.(id)} is used by #{inspect(mods)}")
    end)
  end

  defp error!(set, message),
    do: raise(CompileError, description: "#{inspect(set)}: #{message}")

  @doc false
  defmacro __before_compile__(env) do
    %{byte: byte, wide: wide, packets: packets} = Module.get_attribute(env.module, :raknet_set)

    byte_clauses =
      for {id, mod} <- byte do
        quote do
          def decode(unquote(id), body), do: unquote(parse_call(mod, quote(do: body)))
        end
      end

    wide_clauses =
      for {mt, type, _ids} <- wide do
        fun = :"decode_#{mt}"
        id_pattern = id_segment(type, quote(do: id))

        quote do
          def decode(unquote(mt), <<unquote(id_pattern), body::binary>>),
            do: unquote(fun)(id, body)

          def decode(unquote(mt), _body), do: {:error, {:truncated_id, unquote(mt)}}
        end
      end

    wide_helpers =
      for {mt, _type, ids} <- wide do
        fun = :"decode_#{mt}"

        by_id =
          for {id, mod} <- ids do
            quote do
              defp unquote(fun)(unquote(id), body), do: unquote(parse_call(mod, quote(do: body)))
            end
          end

        quote do
          unquote_splicing(by_id)
          defp unquote(fun)(id, _body), do: {:error, {:unknown_packet, {unquote(mt), id}}}
        end
      end

    lookup =
      for({id, mod} <- byte, do: {id, mod}) ++
        for {mt, _, ids} <- wide, {id, mod} <- ids, do: {{mt, id}, mod}

    quote do
      @doc "Decodes a whole message (type byte first); see `RakNet.Packet.Set`."
      @spec decode(binary()) :: {:ok, struct()} | {:error, term()}
      def decode(<<type, body::binary>>), do: decode(type, body)
      def decode(<<>>), do: {:error, :empty}
      def decode(other), do: {:error, {:not_a_binary, other}}

      @doc "Decodes a message given as its type byte and the rest; see `RakNet.Packet.Set`."
      @spec decode(byte(), binary()) :: {:ok, struct()} | {:error, term()}
      def decode(type, body)
      unquote_splicing(byte_clauses)
      unquote_splicing(wide_clauses)
      def decode(type, _body), do: {:error, {:unknown_packet, type}}
      unquote_splicing(wide_helpers)

      @doc "The packet modules of the set."
      @spec packets() :: [module()]
      def packets, do: unquote(packets)

      @doc "The module of an id (`{message_type, id}` for wider ids), or `nil`."
      @spec module_for(term()) :: module() | nil
      def module_for(id), do: Map.get(unquote(Macro.escape(Map.new(lookup))), id)
    end
  end

  # Modules of `use RakNet.Packet` are called at their fast path directly (one call less per
  # message), falling back to parse/1 only to explain a failure; others through parse/1.
  defp parse_call(mod, body) do
    if function_exported?(mod, :__parse__, 1) do
      quote do
        case unquote(mod).__parse__(unquote(body)) do
          {:ok, packet, <<>>} -> {:ok, packet}
          _ -> unquote(mod).parse(unquote(body))
        end
      end
    else
      quote(do: unquote(mod).parse(unquote(body)))
    end
  end

  defp id_segment({:int, bits, :unsigned, endian}, var),
    do: quote(do: unquote(var) :: size(unquote(bits)) - unquote(Macro.var(endian, nil)))
end
