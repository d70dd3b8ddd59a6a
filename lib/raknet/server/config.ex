defmodule RakNet.Server.Config do
  @moduledoc """
  The options of `RakNet.Server` (see `t:option/0`), validated when the server starts.

  X-Plane's options keep their names, meanings and defaults; the others are ours. Unknown
  options raise `ArgumentError`, except X-Plane's `:custom_packets`, `:custom_types` and
  `:send`, which are accepted and ignored with a warning when the server starts (`:send` was
  X-Plane's hook for capturing outgoing datagrams in tests; here the sockets belong to the
  Rust runtime). Every message names the option:

      iex> RakNet.Server.Config.new(MyGame.Player, 19132, max_mtu: 1400).max_mtu
      1400
      iex> RakNet.Server.Config.new(MyGame.Player, 19132, max_mtu: 9000)
      ** (ArgumentError) :max_mtu must be an integer in 400..1500, got: 9000
  """

  @typedoc """
  A `RakNet.Server` option:

    * `:name` - registers the server (its supervisor) under this name, as `GenServer` names
      go: an atom, `{:global, term}` or `{:via, module, term}`. Every `RakNet.Server` function
      then takes the name, and it is the server's child id. Default `nil`: unregistered.
    * `:host` - the server's own address as its clients see it (a tuple or a string), as in
      X-Plane's library: written first among the internal addresses of the handshake's
      connection-request-accepted message, on the socket of its address family. It does not
      restrict where the server listens (see `:ip`). Default `nil`: the bound address.
    * `:ip` - the IPv4 address the IPv4 socket binds, a tuple or a string (the name
      `:gen_udp`, ranch and thousand_island use). Default `{0, 0, 0, 0}`: every interface.
      It restricts the IPv4 socket only: with a loopback `:ip` and no `:ipv6_ip`, the IPv6
      socket binds `::1` (a server kept to this machine stays so); with another address and
      no `:ipv6_ip`, the server warns at start that its IPv6 socket listens on every
      interface.
    * `:ipv6_ip` - the IPv6 address the IPv6 socket binds. Default `{0, 0, 0, 0, 0, 0, 0, 0}`:
      every interface (`{0, 0, 0, 0, 0, 0, 0, 1}` with a loopback `:ip`, see above).
    * `:open_ipv4_socket` - open the IPv4 socket. Default `true`.
    * `:open_ipv6_socket` - open a separate, IPv6-only socket. Default `true` unless the
      `SEPARATE_IPV6_PORT` environment variable is `"false"` (X-Plane's rule).
    * `:ipv6_port` - the IPv6 socket's port. Default: the server's port (with port 0, each
      socket gets its own free port; `RakNet.Server.info/1` reports both).
    * `:client_timeout_ms` - close a connection after this many milliseconds without hearing
      from the peer. Default `10_000`; at least 100.
    * `:include_timestamp_with_datagrams` - datagrams carry a 4-byte timestamp, as in official
      RakNet built with `INCLUDE_TIMESTAMP_WITH_DATAGRAMS` (X-Plane's client). Default `false`.
    * `:convert_timestamps` - how messages that start with `ID_TIMESTAMP` (0x1B, the sender's
      8-byte clock, then the real message) reach `RakNet.Client.receive/4`. `true`: the prefix
      is stripped, the handler gets the inner message's type and body, and `transit_time` is
      computed from the stamp with the clock synchronisation. `false`: as X-Plane's library
      delivers them, type 27 with the stamp and the inner message in the buffer, and
      `transit_time` is half the round trip. Default: `false` when
      `:include_timestamp_with_datagrams` is `true` (what an X-Plane application expects),
      else `true`.
    * `:client_data` - the third argument of `RakNet.Client.new/3`, any term. Default `%{}`.
    * `:offline_ping_response` - the unconnected pong payload (a Bedrock MOTD, say), at most
      1,431 bytes (a pong must fit in one datagram). Default `"RakNet Server"`. Changed live with
      `RakNet.Server.set_offline_ping_response/2`.
    * `:server_identifier` - the server GUID, a 64-bit integer or an 8-byte binary (X-Plane
      makes one of 8 bytes). Default: random.
    * `:max_number_of_internal_ids` - internal addresses in the connection-request-accepted
      message at protocol 6 (official RakNet's `MAXIMUM_NUMBER_OF_INTERNAL_IDS`; protocols 10
      and 11 use 20). Default `10`.
    * `:max_connections` - connections of the whole server (IPv4 and IPv6 sockets and all
      their `:endpoint_threads` together); beyond it clients are refused with "no free
      incoming connections". Default `1024`.
    * `:protocol_versions` - the RakNet protocol versions accepted, the first preferred; other
      clients are refused with their version. Default `[11, 10, 6]`.
    * `:min_mtu` / `:max_mtu` - MTU bounds in bytes, 400..1500. Defaults `400` / `1492`.
    * `:use_cookies` - when to answer open-connection-request-1 with an anti-spoofing cookie
      the client must echo, so that a spoofed source never gets a handshake record. `:auto`
      (the default) sends one only while the handshake is under pressure (256 handshakes
      half-open, or 128 unproven ones started in a second; calm again 10 s after it falls
      below a quarter of that), and while under pressure also requires every client to echo
      the server's time in its last handshake message. While calm, the server takes what
      official RakNet takes: third-party clients that cannot read a cookie (jsp-raknet,
      rust-raknet, rak-rs), that send their connection request unreliable, or that do not
      echo the server's time; the last are *unproven* (anyone could have sent it), at most
      256 at once and 16 per IP address (`:unproven` and `:refused_unproven` in the
      endpoint stats; `:strict`, `:strict_entered`, `:strict_left` show the mode). `true`
      sends a cookie always (Minecraft Bedrock and official RakNet 4.x clients built without
      libcat security echo it; the clients above cannot connect); `false` never does (for
      an official client built with `LIBCAT_SECURITY`). Default `:auto`.
    * `:strict_half_open` / `:strict_handshakes_per_sec` - the pressure that turns `:auto`
      strict: handshakes half-open at once, or handshakes without proof of address started
      in one second. Defaults `256` / `128`.
    * `:max_unproven` / `:max_unproven_per_ip` - connections whose last handshake message
      did not echo the server's time (taken only while calm, see `:use_cookies`) held at
      once, over all addresses / from one address (IPv6: one /64). Beyond them such a client
      is closed at once, as "no free incoming connections". Defaults `256` / `16`.
    * `:handshake_timeout_ms` - how long a handshake may take. Default `10_000`.
    * `:max_half_open` - handshakes in progress (between open-connection-request-2 and
      new-incoming-connection) remembered at once, each in a record of at most 64 bytes, no
      connection: beyond it the oldest is forgotten. With cookies a spoofed request makes no
      record, so only real clients compete for these. Default `4096`.
    * `:max_half_open_per_ip` - of those, from one IP address (IPv6: one /64). Beyond it a
      cookie-proven request waits; with `use_cookies: false` a new handshake takes the place
      of that address's oldest (spoofed or not, they look the same). Default `64`.
    * `:max_connections_per_ip` - connections one IP address (IPv6: one /64) may hold
      (players behind one NAT share one); beyond it clients get "no free incoming
      connections". A provider's wider networks have growing caps: an IPv6 /56 twice this,
      a /48 (what a free tunnel broker hands anyone: 65,536 /64s) four times, an IPv4 /24
      four times. Default `128`.
    * `:new_connections_per_ip_per_sec` - handshakes one IP address may start per second
      (with a burst of as many); beyond it clients get "IP recently connected". A handshake
      counts once its address is proven (at its first request with a cookie; at its last
      message with `use_cookies: false`, and is then closed at once if over the limit), so
      requests spoofed from a player's address cannot spend it. Loopback is not exempt: a
      local load generator or test that connects faster raises it. Default `20`.
    * `:pongs_per_ip_per_sec` - unconnected pongs per source IP per second. Default `16`.
    * `:pong_bytes_per_sec` - unconnected pong bytes per second for all sources together, per
      socket (IPv4 and IPv6 each; divided among its endpoint threads), with a burst of one
      second's worth. Default `262_144`. Returning players (the IPs of clients that
      completed a handshake, in a table of 16,384 that newer ones push older ones out of)
      have a budget of the same size of their own, so a flood of spoofed pings that spends
      the strangers' budget does not hide the server from them (`pongs_to_known_ips` in
      `RakNet.Server.info/1`); a socket sends at most twice this in pongs.
    * `:pong_amplification` - the largest pong as a multiple of its 33-byte ping. A Bedrock
      MOTD makes pongs of 4-6 times the ping: with 3 (QUIC's anti-amplification bound, what
      every other reply to an unproven address gets) a Bedrock server list would never see
      the server. The per-IP and global pong budgets above bound what a spoofed flood can
      reflect either way. The server warns at start and on
      `RakNet.Server.set_offline_ping_response/2` when the pong would not fit. Default `6`.
    * `:max_pending_deliveries` - how many messages a connection process may have waiting in
      its mailbox before the connection stops taking the peer's messages (back-pressure: the
      peer's reliable messages stay unacknowledged and are sent again later, its unreliable
      ones are dropped and counted) until the process is down to half. Only a process that
      handles none of them for `:client_timeout_ms` gets its connection closed as
      `:overloaded`. Default `10_000`; at least 16.
    * `:max_buffered_bytes` - the most bytes of peer data the server buffers for all its
      connections together (both sockets): split messages being reassembled and messages
      held for ordering behind a gap (each connection also has its own 64 MiB bound). Shared
      fairly: each connection is guaranteed `max_buffered_bytes / 2 / max_connections`
      (256 KiB with the defaults, more than a Bedrock login), and only the other half is
      open to connections beyond their share, so a few peers piling data behind gaps cannot
      keep everyone else's split messages out. Beyond it such data is refused (left
      unacknowledged, so peers resend it later). A gap a peer leaves open for
      `:client_timeout_ms` with data held behind it (a message it never resends) closes its
      connection with `{:limit_exceeded, :stalled}`. Counted as `buffered_bytes` in
      `RakNet.Server.info/1`. Default `536_870_912` (512 MiB); at least 1 MiB.
    * `:max_pending_bytes` - the same budget in bytes. Default `4_194_304` (4 MiB); at least
      65 536.
    * `:max_send_bytes` - the most bytes the server holds queued or unacknowledged for
      sending, for all the connections of the server together (each connection also has its
      own 64 MiB bound): what players who stop reading can make it hold. Shared as
      `:max_buffered_bytes` is: each connection is guaranteed
      `max_send_bytes / 2 / max_connections` (512 KiB with the defaults), only the other half
      is open beyond shares, and a send beyond gets `{:error, :over_budget}`. Counted as
      `send_backlog_bytes` in `RakNet.Server.info/1`. Default `1_073_741_824` (1 GiB); at
      least 1 MiB.
    * `:max_messages_per_sec` - the most messages a second a peer may send, sustained (bursts
      of up to twice that pass), counted as they arrive: a peer over it is disconnected, its
      handler's disconnect callback told `{:limit_exceeded, :message_rate}` after the
      messages that came before, and what it sends from then on is dropped. It keeps one
      peer from taking every handler's and every shared process's time (a 1,464-byte
      datagram of 4-byte messages is 365 handler calls). Default `1_000`, far above what
      any game client sends (Bedrock batches a tick's packets into one message, 20 a
      second); `nil` for no limit (a bulk transfer of many small messages, a benchmark).
    * `:max_message_bytes` - the longest message taken from a peer (a longer one announced
      in its split header closes the connection with `{:limit_exceeded, :message_bytes}`)
      and sent to one (`{:error, :too_large}` beyond it). A game whose messages are small
      should lower it: a peer's message is also what its handler decodes, and a decoded
      list can take many times its bytes (see `RakNet.Packet.Type`). Default `33_554_432`
      (32 MiB); at least 1 024.
    * `:accept` - a check of every new connection before its process starts: a function of
      one argument, or `{module, function, args}` (called with the info first), given the
      connection's `%{address: {ip, port}, guid:, protocol:, mtu:}`, returning `:ok` or
      `{:refuse, reason}`. A refused connection is closed at once (the client sees its
      connect succeed and then a disconnection: RakNet has no message to refuse a finished
      handshake with), no process is started, and a `[:raknet, :server, :refused]` event
      with reason `:rejected` is emitted. It runs in the server's listener, which accepts
      every connection: keep it quick (an ETS look-up, not a database query); a crash or any
      other return refuses the connection and is logged. Default `nil`: every connection
      that completes the handshake is accepted.
    * `:bans` - bans in force from the start, until lifted (a block list loaded at boot):
      what `RakNet.Server.ban/3` takes, an address, a network (`"2001:db8::/48"`,
      `{{198, 51, 100, 0}, 24}`) or `{:guid, guid}`. Kept across restarts of the listener
      with the bans made later. Default `[]`.
    * `:send_delay_ms` - how long a small message may wait for others to the same client to
      share its datagram: data under a datagram's worth (nothing `:immediate`, nothing to
      resend) leaves once its oldest message has waited this long, or once it fills a
      datagram. A server that broadcasts many small messages (positions to a zone) then
      sends each player a few datagrams per tick instead of one per message, for up to this
      much latency. Default `0`: sent at once, as official RakNet does; at most 1 000.
    * `:telemetry_interval_ms` - how often the server emits its `[:raknet, :server, :stats]`
      telemetry event (and `:refused` / `:limited`), see `RakNet.Telemetry`; `nil` never.
      Only when the `:telemetry` module is available. Default `1_000`; at least 100.
    * `:congestion_control` - how fast the server sends to each client. `:reno` is official
      RakNet's loss-based sliding window: every lost datagram halves (0.7x) its window, so on
      a lossy path throughput collapses (a 16 MiB message at 20 ms RTT: 40 MB/s without loss,
      1.0 MB/s at 1 % loss, 0.4 MB/s at 5 %). `:bbr` paces at the measured bottleneck
      bandwidth and ignores random loss (79 / 68 / 62 MB/s in the same simulation), while
      still sharing a bottleneck fairly with other flows (`make bench`, docs/performance.md).
      Only the sender's choice matters (peers need nothing). Default `:reno`.
    * `:endpoint_threads` - how many threads serve each socket's port: that many UDP sockets
      bound to the port with `SO_REUSEPORT`, each read by its own thread with its own
      protocol engine. The kernel picks the socket by a hash of the client's address and
      port, so a client always lands on the same thread and connections spread over all of
      them. `:max_connections`, `:max_connections_per_ip` and `:max_buffered_bytes` are
      shared by the threads (atomic counters) and keep their server-wide meaning exactly;
      the budgets over all sources (`:max_half_open`, `:strict_half_open`,
      `:strict_handshakes_per_sec`, `:max_unproven` and `:pong_bytes_per_sec`) are divided
      among them (rounded up), and each thread keeps the whole per-IP ones
      (`:max_half_open_per_ip`, `:max_unproven_per_ip`, `:new_connections_per_ip_per_sec`,
      `:pongs_per_ip_per_sec`): the kernel spreads one address's clients over the threads
      unevenly, so a halved per-IP rate refused players of a LAN party below its documented
      burst, while an address whose clients land on several threads may get up to that many
      times a per-IP rate. With more than one thread,
      the server refuses to start (`:eaddrinuse`) when anything already holds the port. Not
      on Windows (one thread there). Default `nil`: the number of online schedulers
      (`System.schedulers_online/0`); at most 1024.
    * `:batch_delivery` - `true` (default): the runtime hands each connection process the
      messages that arrived together (a datagram's worth, up to 256) in one Erlang message,
      `{:raknet_batch, conn, [{type, payload, transit_time}, ...]}`, instead of one
      `{:raknet, conn, type, payload, transit_time}` each; the connection process calls the
      handler once per message either way, so handlers see no difference. Fewer wake-ups
      when peers send many small messages. `false` sends one Erlang message per RakNet
      message (what 0.1 did).
    * `:inline_sends` - `true` (default): a `RakNet.Connection.send/3` made while the
      server's endpoint thread is idle, with nothing queued ahead of it and no other send on
      that endpoint in the last 50 µs, is carried out on the caller's scheduler thread: the
      message goes to the engine and its datagram to the socket at once, without waking the
      endpoint thread (a reply leaves sooner, for less CPU). Bursts of sends still go through
      the endpoint thread, which packs them into fewer datagrams. `false` sends everything
      through the endpoint thread.
    * `:proxy_protocol` - the server sits behind UDP proxies that name each client in a
      header: `[mode: mode, trusted: prefixes, required: boolean, max_flows: integer]`.
      `mode` is `:v2_first` (a PROXY protocol v2 header on the first datagram of each flow,
      as frp, playit and sozu send it), `:v2_every` (one on every datagram) or `:spectrum`
      (Cloudflare Spectrum's 38-byte Simple Proxy Protocol header on every datagram; replies
      carry it back). `trusted` lists the proxies' addresses or networks (`"10.0.0.0/8"`,
      `"2001:db8::/32"`, `{127, 0, 0, 1}`): headers from anyone else are dropped and counted
      (`proxy_untrusted_header`). With `required: true` (default `false`) a datagram from a
      trusted proxy without a header is dropped too. The client's real address then stands
      for the peer everywhere: per-IP limits and fair shares, bans, cookies, "recently
      connected", `info/1`, `connections/1`, `lookup/2` and telemetry; replies go to the
      proxy (never around it to the client's own address: a client whose route is gone gets
      nothing). `max_flows` (default 16 384) bounds the clients routed (each route is
      forgotten after the longer of `:client_timeout_ms` and the handshake timeout without a
      datagram). See the "Behind a proxy" guide (docs/proxies.md). Default `nil`: no header
      is believed.
    * `:query` - answer GameSpy4 Query (the server-list status protocol of Minecraft
      servers, `RakNet.Query`) on the game port: `true`, or the initial info map; keep it
      current with `RakNet.Server.set_query_info/2`. Query datagrams (`FE FD`) from
      addresses without a RakNet session go to a process of the server's own, at most 10 per
      IP and 1 000 in all per second; stat replies are only sent once the asker returned the
      challenge token it was sent. Default `false`.
    * `:raw_handler` - `{module, arg}`: other datagrams that are not RakNet, starting with
      one of `:raw_prefixes`, from addresses without a RakNet session, are offered to
      `module.handle_datagram(data, {ip, port}, arg)` in a process of the server's own
      (within the same rates as `:query`). It returns `:noreply`, `{:reply, iodata}` (sent
      from the game port if no larger than 3 times the datagram) or `{:reply, iodata,
      :proven}` (up to 4 096 bytes: for an address the handler proved, e.g. it echoed a
      token). Exclusive with `:query`. Default `nil`.
    * `:raw_prefixes` - the first bytes of the datagrams `:raw_handler` is offered. Default
      `[<<0xFE, 0xFD>>]`.
    * `:nethernet` - also serve NetherNet (Bedrock's WebRTC transport) on the UDP ports, with
      HTTP signaling on a TCP port: a keyword list, see `RakNet.NetherNet.Options`.
      Sessions reach the same handler; `info/1` says `transport: :nethernet`. Default `nil`.
  """
  @type option ::
          {:name, GenServer.name()}
          | {:host, :inet.ip_address() | String.t() | nil}
          | {:ip, :inet.ip4_address() | String.t()}
          | {:ipv6_ip, :inet.ip6_address() | String.t()}
          | {:open_ipv4_socket, boolean()}
          | {:open_ipv6_socket, boolean()}
          | {:ipv6_port, :inet.port_number() | nil}
          | {:client_timeout_ms, pos_integer()}
          | {:include_timestamp_with_datagrams, boolean()}
          | {:convert_timestamps, boolean()}
          | {:client_data, term()}
          | {:offline_ping_response, binary()}
          | {:server_identifier, non_neg_integer() | <<_::64>> | nil}
          | {:max_number_of_internal_ids, 1..64}
          | {:max_connections, pos_integer()}
          | {:protocol_versions, [0..255, ...]}
          | {:min_mtu, 400..1500}
          | {:max_mtu, 400..1500}
          | {:use_cookies, :auto | boolean()}
          | {:handshake_timeout_ms, pos_integer()}
          | {:max_half_open, pos_integer()}
          | {:max_half_open_per_ip, pos_integer()}
          | {:strict_half_open, pos_integer()}
          | {:strict_handshakes_per_sec, pos_integer()}
          | {:max_unproven, pos_integer()}
          | {:max_unproven_per_ip, pos_integer()}
          | {:max_connections_per_ip, pos_integer()}
          | {:new_connections_per_ip_per_sec, pos_integer()}
          | {:pongs_per_ip_per_sec, non_neg_integer()}
          | {:pong_bytes_per_sec, non_neg_integer()}
          | {:pong_amplification, pos_integer()}
          | {:max_pending_deliveries, pos_integer()}
          | {:max_pending_bytes, pos_integer()}
          | {:max_buffered_bytes, pos_integer()}
          | {:max_send_bytes, pos_integer()}
          | {:max_message_bytes, pos_integer()}
          | {:max_messages_per_sec, pos_integer() | nil}
          | {:telemetry_interval_ms, pos_integer() | nil}
          | {:congestion_control, :reno | :bbr}
          | {:endpoint_threads, 1..1024 | nil}
          | {:batch_delivery, boolean()}
          | {:proxy_protocol, keyword() | nil}
          | {:query, boolean() | map()}
          | {:raw_handler, {module(), term()} | nil}
          | {:raw_prefixes, [binary(), ...]}
          | {:nethernet, keyword() | nil}
          | {:inline_sends, boolean()}
          | {:bans, [RakNet.Server.ban_target()]}
          | {:send_delay_ms, 0..1000}
          | {:accept, nil | (map() -> :ok | {:refuse, term()}) | {module(), atom(), list()}}

  @enforce_keys [:client_module, :port]
  # The fields of @engine_owned are nil here: new/3 fills in what the caller left out from
  # the engine (raknet_proto's EndpointConfig::default(), through the NIF), so each of those
  # defaults is written once, in Rust.
  defstruct client_module: nil,
            port: 0,
            name: nil,
            host: nil,
            ip: {0, 0, 0, 0},
            ipv6_ip: {0, 0, 0, 0, 0, 0, 0, 0},
            open_ipv4_socket: true,
            open_ipv6_socket: true,
            ipv6_port: nil,
            client_timeout_ms: nil,
            include_timestamp_with_datagrams: false,
            convert_timestamps: nil,
            client_data: %{},
            offline_ping_response: "RakNet Server",
            server_identifier: nil,
            max_number_of_internal_ids: nil,
            max_connections: nil,
            protocol_versions: nil,
            min_mtu: nil,
            max_mtu: nil,
            use_cookies: nil,
            handshake_timeout_ms: nil,
            max_half_open: nil,
            max_half_open_per_ip: nil,
            strict_half_open: nil,
            strict_handshakes_per_sec: nil,
            max_unproven: nil,
            max_unproven_per_ip: nil,
            max_connections_per_ip: nil,
            new_connections_per_ip_per_sec: nil,
            pongs_per_ip_per_sec: nil,
            pong_bytes_per_sec: nil,
            pong_amplification: nil,
            max_pending_deliveries: nil,
            max_pending_bytes: nil,
            max_buffered_bytes: nil,
            max_send_bytes: nil,
            max_message_bytes: nil,
            max_messages_per_sec: nil,
            telemetry_interval_ms: 1_000,
            congestion_control: nil,
            endpoint_threads: nil,
            batch_delivery: true,
            inline_sends: true,
            proxy_protocol: nil,
            query: false,
            raw_handler: nil,
            raw_prefixes: [<<0xFE, 0xFD>>],
            nethernet: nil,
            bans: [],
            send_delay_ms: nil,
            accept: nil,
            ignored_options: [],
            # :ip given (not loopback) without :ipv6_ip: the IPv6 socket takes every interface.
            ipv6_unrestricted: false

  @typedoc "A validated configuration."
  @type t :: %__MODULE__{}

  @ignored [:custom_packets, :custom_types, :send]

  # Unconnected pings (0x01, 0x02) and the handshake's open-connection requests (0x05, 0x07):
  # a raw prefix must not take them from RakNet.
  @raknet_offline_requests [0x01, 0x02, 0x05, 0x07]

  # Options whose default is the engine's, and the name the engine's defaults give them.
  @engine_owned %{
    client_timeout_ms: :timeout_ms,
    max_number_of_internal_ids: :max_number_of_internal_ids,
    max_connections: :max_connections,
    protocol_versions: :protocol_versions,
    min_mtu: :min_mtu,
    max_mtu: :max_mtu,
    use_cookies: :use_cookies,
    handshake_timeout_ms: :handshake_timeout_ms,
    max_half_open: :max_half_open,
    max_half_open_per_ip: :max_half_open_per_ip,
    strict_half_open: :strict_half_open,
    strict_handshakes_per_sec: :strict_handshakes_per_sec,
    max_unproven: :max_unproven,
    max_unproven_per_ip: :max_unproven_per_ip,
    max_connections_per_ip: :max_connections_per_ip,
    new_connections_per_ip_per_sec: :new_connections_per_ip_per_sec,
    pongs_per_ip_per_sec: :pongs_per_ip_per_sec,
    pong_bytes_per_sec: :pong_bytes_per_sec,
    pong_amplification: :pong_amplification,
    max_pending_deliveries: :max_pending_deliveries,
    max_pending_bytes: :max_pending_bytes,
    max_buffered_bytes: :max_buffered_bytes,
    max_send_bytes: :max_send_bytes,
    max_message_bytes: :max_message_bytes,
    max_messages_per_sec: :max_messages_per_sec,
    congestion_control: :congestion_control,
    send_delay_ms: :send_delay_ms
  }

  @doc false
  # The options whose default `new/3` takes from the engine: `%{option => engine name}`.
  @spec engine_owned() :: %{atom() => atom()}
  def engine_owned, do: @engine_owned

  @doc """
  Validates the arguments of `RakNet.Server.child_spec/1`, `[client_module, port | opts]`;
  see `new/3`.

      iex> RakNet.Server.Config.new([MyGame.Player, 0, ip: "127.0.0.1"]).ip
      {127, 0, 0, 1}
  """
  @spec new([term()]) :: t()
  def new([client_module, port | opts]), do: new(client_module, port, opts)

  def new(other) do
    raise ArgumentError,
          "expected [client_module, port | options], got: #{inspect(other)}"
  end

  @doc """
  Validates `opts` (see `t:option/0`) for a server of `client_module` on `port` (0 picks a
  free port) and fills in the defaults; raises `ArgumentError` naming the bad option.

      iex> config = RakNet.Server.Config.new(MyGame.Player, 0, open_ipv6_socket: false)
      iex> {config.ip, config.client_timeout_ms, config.offline_ping_response}
      {{0, 0, 0, 0}, 10000, "RakNet Server"}
  """
  @spec new(module(), :inet.port_number(), [option()]) :: t()
  def new(client_module, port, opts) do
    unless is_atom(client_module),
      do: raise(ArgumentError, "client module must be a module, got: #{inspect(client_module)}")

    check(:port, port, is_integer(port) and port in 0..65_535, "an integer in 0..65535")

    unless Keyword.keyword?(opts),
      do: raise(ArgumentError, "options must be a keyword list, got: #{inspect(opts)}")

    defaults = %__MODULE__{
      client_module: client_module,
      port: port,
      open_ipv6_socket: System.get_env("SEPARATE_IPV6_PORT") != "false"
    }

    defaults = %{defaults | ignored_options: opts |> Keyword.take(@ignored) |> Keyword.keys()}

    opts
    |> Keyword.drop(@ignored)
    |> Enum.reduce(defaults, fn {key, value}, config ->
      unless Map.has_key?(defaults, key) and
               key not in [:client_module, :port, :ignored_options, :ipv6_unrestricted] do
        raise ArgumentError, "unknown option #{inspect(key)} for RakNet.Server"
      end

      Map.put(config, key, validate(key, value))
    end)
    |> engine_defaults(opts)
    |> check_relations()
    |> loopback_ipv6(opts)
  end

  defp engine_defaults(config, opts) do
    engine = RakNet.Native.engine_defaults()

    Enum.reduce(@engine_owned, config, fn {field, name}, config ->
      if Keyword.has_key?(opts, field),
        do: config,
        else: Map.put(config, field, engine_default(name, Map.fetch!(engine, name)))
    end)
  end

  # The engine says 0 for "no message rate limit", which the option says with nil.
  defp engine_default(:max_messages_per_sec, 0), do: nil
  defp engine_default(_name, value), do: value

  # A loopback :ip without :ipv6_ip keeps the IPv6 socket on loopback too.
  defp loopback_ipv6(%{ip: {127, _, _, _}} = config, opts) do
    if Keyword.has_key?(opts, :ipv6_ip),
      do: config,
      else: %{config | ipv6_ip: {0, 0, 0, 0, 0, 0, 0, 1}}
  end

  defp loopback_ipv6(config, opts) do
    restricted = Keyword.has_key?(opts, :ip) and config.ip != {0, 0, 0, 0}

    %{
      config
      | ipv6_unrestricted:
          restricted and config.open_ipv6_socket and not Keyword.has_key?(opts, :ipv6_ip)
    }
  end

  # Integer options with a lower bound, and the unit their error message names.
  @minimums %{
    max_pending_deliveries: {16, ""},
    max_pending_bytes: {65_536, " (bytes)"},
    max_buffered_bytes: {1_048_576, " (bytes)"},
    max_send_bytes: {1_048_576, " (bytes)"},
    max_message_bytes: {1_024, " (bytes)"}
  }

  # Integer options with a range, and the unit their error message names.
  @ranges %{
    max_number_of_internal_ids: {1..64, ""},
    min_mtu: {400..1500, ""},
    max_mtu: {400..1500, ""},
    send_delay_ms: {0..1_000, " (ms)"}
  }

  defp validate(:host, nil), do: nil

  defp validate(:host, value) do
    case parse_ip(value) do
      {:ok, ip} ->
        ip

      :error ->
        raise ArgumentError,
              ":host must be an IP address (tuple or string) or nil, got: #{inspect(value)}"
    end
  end

  defp validate(:ip, value) do
    case parse_ip(value) do
      {:ok, ip} when tuple_size(ip) == 4 ->
        ip

      {:ok, _ipv6} ->
        raise ArgumentError,
              ":ip must be an IPv4 address (the IPv4 socket's); " <>
                "use :ipv6_ip for the IPv6 socket, got: #{inspect(value)}"

      :error ->
        raise ArgumentError,
              ":ip must be an IPv4 address (tuple or string), got: #{inspect(value)}"
    end
  end

  defp validate(:ipv6_ip, value) do
    case parse_ip(value) do
      {:ok, ip} when tuple_size(ip) == 8 ->
        ip

      _ ->
        raise ArgumentError,
              ":ipv6_ip must be an IPv6 address (tuple or string), got: #{inspect(value)}"
    end
  end

  defp validate(key, value)
       when key in [
              :open_ipv4_socket,
              :open_ipv6_socket,
              :include_timestamp_with_datagrams,
              :convert_timestamps
            ],
       do: check(key, value, is_boolean(value), "a boolean")

  defp validate(:use_cookies, value),
    do: check(:use_cookies, value, value == :auto or is_boolean(value), ":auto or a boolean")

  defp validate(:ipv6_port, value),
    do:
      check(
        :ipv6_port,
        value,
        is_nil(value) or (is_integer(value) and value in 0..65_535),
        "nil or an integer in 0..65535"
      )

  defp validate(:client_timeout_ms, value),
    do:
      check(
        :client_timeout_ms,
        value,
        is_integer(value) and value >= 100,
        "an integer >= 100 (milliseconds)"
      )

  defp validate(:client_data, value), do: value

  defp validate(:name, value),
    do:
      check(
        :name,
        value,
        # nil is the default, unregistered (so `name: Application.get_env(...)` may be unset).
        match?({:global, _}, value) or match?({:via, m, _} when is_atom(m), value) or
          (is_atom(value) and value not in [true, false]),
        "an atom, {:global, term}, {:via, module, term} or nil"
      )

  defp validate(:offline_ping_response, value),
    do:
      check(
        :offline_ping_response,
        value,
        is_binary(value) and byte_size(value) <= 1_431,
        "a binary of at most 1431 bytes"
      )

  defp validate(:server_identifier, value) do
    case value do
      nil ->
        nil

      <<id::64>> ->
        id

      id when is_integer(id) and id in 0..0xFFFF_FFFF_FFFF_FFFF ->
        id

      _ ->
        raise ArgumentError,
              ":server_identifier must be a 64-bit integer or an 8-byte binary, got: #{inspect(value)}"
    end
  end

  defp validate(:max_connections, value),
    do: check(:max_connections, value, is_integer(value) and value > 0, "a positive integer")

  defp validate(:protocol_versions, value),
    do:
      check(
        :protocol_versions,
        value,
        is_list(value) and value != [] and Enum.all?(value, &(is_integer(&1) and &1 in 0..255)),
        "a non-empty list of integers in 0..255"
      )

  defp validate(key, value)
       when key in [
              :handshake_timeout_ms,
              :max_half_open,
              :max_half_open_per_ip,
              :strict_half_open,
              :strict_handshakes_per_sec,
              :max_unproven,
              :max_unproven_per_ip,
              :max_connections_per_ip,
              :new_connections_per_ip_per_sec,
              :pong_amplification
            ],
       do: check(key, value, is_integer(value) and value > 0, "a positive integer")

  defp validate(key, value) when key in [:pongs_per_ip_per_sec, :pong_bytes_per_sec],
    do: check(key, value, is_integer(value) and value >= 0, "a non-negative integer")

  defp validate(key, value) when is_map_key(@ranges, key) do
    {first..last = range, unit} = Map.fetch!(@ranges, key)

    check(
      key,
      value,
      is_integer(value) and value in range,
      "an integer in #{first}..#{last}#{unit}"
    )
  end

  defp validate(key, value) when is_map_key(@minimums, key) do
    {min, unit} = Map.fetch!(@minimums, key)
    check(key, value, is_integer(value) and value >= min, "an integer >= #{min}#{unit}")
  end

  defp validate(:max_messages_per_sec, value),
    do:
      check(
        :max_messages_per_sec,
        value,
        value == nil or (is_integer(value) and value > 0 and value <= 4_294_967_295),
        "nil or a positive integer (at most 2^32 - 1)"
      )

  defp validate(:accept, value),
    do:
      check(
        :accept,
        value,
        value == nil or is_function(value, 1) or
          match?({m, f, a} when is_atom(m) and is_atom(f) and is_list(a), value),
        "nil, a function of one argument or {module, function, args}"
      )

  # Kept as the listener passes them on: a network's text or {:guid, guid}.
  defp validate(:bans, bans) when is_list(bans) do
    Enum.map(bans, fn target ->
      case RakNet.Server.ban_spec(target) do
        {:ok, ban} -> ban
        {:error, _} -> check(:bans, bans, false, "a list of addresses, networks or {:guid, guid}")
      end
    end)
  end

  defp validate(:nethernet, nil), do: nil
  defp validate(:nethernet, opts), do: RakNet.NetherNet.Options.new(opts)

  defp validate(:proxy_protocol, nil), do: nil

  defp validate(:proxy_protocol, opts) when is_list(opts) do
    expected =
      "[mode: :v2_first | :v2_every | :spectrum, trusted: [address or network, ...], " <>
        "required: boolean, max_flows: pos_integer]"

    unless Keyword.keyword?(opts) and
             Enum.all?(Keyword.keys(opts), &(&1 in [:mode, :trusted, :required, :max_flows])),
           do: check(:proxy_protocol, opts, false, expected)

    mode = Keyword.get(opts, :mode)
    trusted = Keyword.get(opts, :trusted, [])
    required = Keyword.get(opts, :required, false)
    max_flows = Keyword.get(opts, :max_flows, 16_384)

    networks =
      if is_list(trusted) and trusted != [],
        do: Enum.map(trusted, &trusted_network/1),
        else: [:error]

    check(
      :proxy_protocol,
      opts,
      mode in [:v2_first, :v2_every, :spectrum] and :error not in networks and
        is_boolean(required) and is_integer(max_flows) and max_flows > 0,
      expected
    )

    %{mode: mode, trusted: networks, required: required, max_flows: max_flows}
  end

  defp validate(:proxy_protocol, value),
    do: check(:proxy_protocol, value, false, "nil or a keyword list")

  defp validate(:query, value),
    do: check(:query, value, is_boolean(value) or is_map(value), "a boolean or an info map")

  defp validate(:raw_handler, value),
    do:
      check(
        :raw_handler,
        value,
        is_nil(value) or match?({module, _} when is_atom(module), value),
        "nil or {module, arg}"
      )

  defp validate(:raw_prefixes, value),
    do:
      check(
        :raw_prefixes,
        value,
        is_list(value) and value != [] and
          Enum.all?(value, fn prefix ->
            is_binary(prefix) and byte_size(prefix) in 1..64 and
              :binary.first(prefix) not in @raknet_offline_requests
          end),
        "a non-empty list of binaries (1 to 64 bytes), none starting with a RakNet " <>
          "ping or handshake ID (0x01, 0x02, 0x05, 0x07)"
      )

  defp validate(:bans, bans),
    do: check(:bans, bans, false, "a list of addresses, networks or {:guid, guid}")

  defp validate(:telemetry_interval_ms, value),
    do:
      check(
        :telemetry_interval_ms,
        value,
        value == nil or (is_integer(value) and value >= 100),
        "nil or an integer >= 100 (ms)"
      )

  defp validate(:congestion_control, value),
    do: check(:congestion_control, value, value in [:reno, :bbr], ":reno or :bbr")

  defp validate(:endpoint_threads, value),
    do:
      check(
        :endpoint_threads,
        value,
        value == nil or (is_integer(value) and value in 1..1024),
        "nil or an integer in 1..1024"
      )

  defp validate(:batch_delivery, value),
    do: check(:batch_delivery, value, is_boolean(value), "a boolean")

  defp validate(:inline_sends, value),
    do: check(:inline_sends, value, is_boolean(value), "a boolean")

  defp check(_key, value, true, _expected), do: value

  # The value is shortened: a 1 MB MOTD by mistake should not flood the log.
  defp check(key, value, false, expected),
    do:
      raise(
        ArgumentError,
        "#{inspect(key)} must be #{expected}, got: " <>
          inspect(value, limit: 16, printable_limit: 64)
      )

  defp check_relations(config) do
    if config.query != false and config.raw_handler != nil,
      do: raise(ArgumentError, ":query and :raw_handler are exclusive: give one of them")

    if config.min_mtu > config.max_mtu,
      do:
        raise(
          ArgumentError,
          ":min_mtu (#{config.min_mtu}) must not exceed :max_mtu (#{config.max_mtu})"
        )

    if not config.open_ipv4_socket and not config.open_ipv6_socket,
      do:
        raise(
          ArgumentError,
          "at least one of :open_ipv4_socket and :open_ipv6_socket must be true"
        )

    config
  end

  # A trusted proxy's address or network, as the runtime reads it ("10.0.0.0/8"); :error if
  # it is neither. An IPv4-mapped IPv6 network is its IPv4 network (`::ffff:10.0.0.0/104` is
  # `10.0.0.0/8`); a shorter one, which would take in more than IPv4, is refused.
  defp trusted_network(value) do
    {ip, len} =
      case value do
        text when is_binary(text) ->
          case String.split(text, "/", parts: 2) do
            [ip, len] -> {ip, Integer.parse(len)}
            [ip] -> {ip, nil}
          end

        ip ->
          {ip, nil}
      end

    with {:ok, ip} <- parse_ip(ip),
         bits = if(tuple_size(ip) == 4, do: 32, else: 128),
         len when is_integer(len) and len in 0..bits <-
           (case len do
              nil -> bits
              {n, ""} -> n
              _ -> :error
            end),
         {ip, len} when len >= 0 <- unmapped(ip, len) do
      "#{:inet.ntoa(ip)}/#{len}"
    else
      _ -> :error
    end
  end

  defp unmapped({0, 0, 0, 0, 0, 0xFFFF, hi, lo}, len),
    do: {{div(hi, 256), rem(hi, 256), div(lo, 256), rem(lo, 256)}, len - 96}

  defp unmapped(ip, len), do: {ip, len}

  @doc false
  @spec parse_ip(term()) :: {:ok, :inet.ip_address()} | :error
  def parse_ip(value) when is_tuple(value) do
    if :inet.is_ip_address(value), do: {:ok, value}, else: :error
  end

  def parse_ip(value) when is_binary(value) or is_list(value) do
    case :inet.parse_address(to_charlist(value)) do
      {:ok, ip} -> {:ok, ip}
      {:error, _} -> :error
    end
  end

  def parse_ip(_value), do: :error

  @doc """
  How many endpoint threads serve each socket: `:endpoint_threads`, or the number of
  online schedulers.

      iex> RakNet.Server.Config.new(MyGame.Player, 0, endpoint_threads: 3)
      ...> |> RakNet.Server.Config.endpoint_threads()
      3
  """
  @spec endpoint_threads(t()) :: pos_integer()
  def endpoint_threads(%__MODULE__{endpoint_threads: nil}), do: System.schedulers_online()
  def endpoint_threads(%__MODULE__{endpoint_threads: n}), do: n

  @doc """
  The `endpoint_start` options (docs/nif-contract.md) of the socket of `family`. The limits
  are the whole server's: the NIF gives each endpoint thread its share
  (`raknet_proto::AdmissionLimits::endpoint_share`).

      iex> config = RakNet.Server.Config.new(MyGame.Player, 0, pongs_per_ip_per_sec: 16)
      iex> RakNet.Server.Config.to_native(config, :inet).pongs_per_ip_per_sec
      16
  """
  @spec to_native(t(), :inet | :inet6) :: map()
  def to_native(%__MODULE__{} = c, family) do
    {bind, port} =
      case family do
        :inet -> {c.ip, c.port}
        :inet6 -> {c.ipv6_ip, c.ipv6_port || c.port}
      end

    # The advertised address goes to the socket of its own family.
    advertised =
      case {family, c.host} do
        {:inet, {_, _, _, _} = ip} -> ip |> :inet.ntoa() |> to_string()
        {:inet6, {_, _, _, _, _, _, _, _} = ip} -> ip |> :inet.ntoa() |> to_string()
        _ -> nil
      end

    convert =
      if is_nil(c.convert_timestamps),
        do: not c.include_timestamp_with_datagrams,
        else: c.convert_timestamps

    %{
      host: bind |> :inet.ntoa() |> to_string(),
      port: port,
      advertised_ip: advertised,
      strip_timestamps: convert,
      accept_incoming: true,
      max_connections: c.max_connections,
      protocol_versions: c.protocol_versions,
      min_mtu: c.min_mtu,
      max_mtu: c.max_mtu,
      timeout_ms: c.client_timeout_ms,
      include_timestamp_with_datagrams: c.include_timestamp_with_datagrams,
      offline_ping_response: c.offline_ping_response,
      max_number_of_internal_ids: c.max_number_of_internal_ids,
      use_cookies: c.use_cookies,
      guid: c.server_identifier,
      max_pending_deliveries: c.max_pending_deliveries,
      max_pending_bytes: c.max_pending_bytes,
      max_buffered_bytes: c.max_buffered_bytes,
      max_send_bytes: c.max_send_bytes,
      max_message_bytes: c.max_message_bytes,
      max_messages_per_sec: c.max_messages_per_sec,
      send_delay_ms: c.send_delay_ms,
      congestion_control: c.congestion_control,
      batch_delivery: c.batch_delivery,
      inline_sends: c.inline_sends,
      # Tests and benchmarks only: `config :raknet, udp_gso: false` sends every datagram on
      # its own instead of runs to one peer with UDP_SEGMENT (Linux).
      gso: Application.get_env(:raknet, :udp_gso, true),
      # Tests only: `config :raknet, max_reliable_in_flight: n` keeps fewer reliable frames in
      # flight to each peer (nil: the engine's 1,024), for official RakNet peers whose small
      # socket buffer must not overflow (see docs/interoperability.md).
      max_reliable_in_flight: Application.get_env(:raknet, :max_reliable_in_flight),
      handshake_timeout_ms: c.handshake_timeout_ms,
      max_connections_per_ip: c.max_connections_per_ip,
      max_half_open: c.max_half_open,
      max_half_open_per_ip: c.max_half_open_per_ip,
      strict_half_open: c.strict_half_open,
      strict_handshakes_per_sec: c.strict_handshakes_per_sec,
      max_unproven: c.max_unproven,
      max_unproven_per_ip: c.max_unproven_per_ip,
      new_connections_per_ip_per_sec: c.new_connections_per_ip_per_sec,
      pongs_per_ip_per_sec: c.pongs_per_ip_per_sec,
      pong_bytes_per_sec: c.pong_bytes_per_sec,
      pong_amplification: c.pong_amplification,
      proxy_protocol: c.proxy_protocol,
      # Query and the raw handler are offered these; nothing without either.
      raw_prefixes:
        cond do
          c.query != false -> [<<0xFE, 0xFD>>]
          c.raw_handler != nil -> c.raw_prefixes
          true -> nil
        end
    }
  end

  # An unconnected ping is 33 bytes; a pong is 35 bytes plus the payload.
  @ping_bytes 33
  @pong_overhead 35

  @doc """
  Whether a pong carrying `payload` fits the configuration's `:pong_amplification`; when it
  does not, clients pinging the server (a Bedrock server list) get no answer.

      iex> config = RakNet.Server.Config.new(MyGame.Player, 0, pong_amplification: 3)
      iex> RakNet.Server.Config.pong_fits?(config, "RakNet Server")
      true
      iex> RakNet.Server.Config.pong_fits?(config, String.duplicate("x", 100))
      false
  """
  @spec pong_fits?(t(), binary()) :: boolean()
  def pong_fits?(%__MODULE__{pong_amplification: ratio}, payload),
    do: @pong_overhead + byte_size(payload) <= ratio * @ping_bytes
end
