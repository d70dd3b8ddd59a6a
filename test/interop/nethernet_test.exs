defmodule RakNet.Interop.NetherNetTest do
  @moduledoc """
  NetherNet against aiortc (PyPI), an independent WebRTC implementation playing the
  Minecraft client (test/interop/nethernet_client.py): signaling over HTTP, the server's
  identity assertion checked as the client checks it, both data channels, a 100 KB message
  fragmented on the reliable channel, an unreliable one; official RakNet on the same UDP port
  at the same time.
  """
  use ExUnit.Case, async: false
  @moduletag :interop
  @moduletag timeout: 120_000

  alias RakNet.Test.{ChannelEcho, Official}

  @client Path.expand("nethernet_client.py", __DIR__)

  setup do
    dir = Path.join(System.tmp_dir!(), "raknet-nethernet-#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(dir) end)
    %{key_file: Path.join(dir, "operator.pem")}
  end

  defp start_server(key_file, nethernet \\ []) do
    nethernet = Keyword.merge([port: 0, key_file: key_file], nethernet)
    {server, port} = RakNet.Test.Server.start!(ChannelEcho, nethernet: nethernet)
    {server, port, RakNet.Server.info(server).nethernet_port}
  end

  defp run_client(http_port) do
    System.cmd(Official.python(), [@client, "http://127.0.0.1:#{http_port}"],
      stderr_to_stdout: true
    )
  end

  test "aiortc connects over NetherNet, beside official RakNet on the same UDP port",
       %{key_file: key_file} do
    # Official 4.081 mis-assembles split messages whose fragments were resent after its
    # small socket buffer dropped some: the server's 100 KB echoes to it are held to 32
    # reliable frames in flight, as in official_test.exs.
    Application.put_env(:raknet, :max_reliable_in_flight, 32)
    on_exit(fn -> Application.delete_env(:raknet, :max_reliable_in_flight) end)
    {_server, port, http_port} = start_server(key_file)
    assert is_integer(http_port) and http_port > 0
    nethernet = Task.async(fn -> run_client(http_port) end)
    official = Task.async(fn -> Official.run_client(port, 11) end)

    assert {"OK\n", 0} = Task.await(nethernet, 60_000)
    assert Task.await(official, 60_000) =~ ~r/^OK: protocol 11 sent 32 echoed 32/

    # The NetherNet session reached the same handler, identified as such: the client's
    # claims, its fingerprint signature checked against its own key (open: not the issuer).
    assert_receive {:client_new, _conn, {:ok, %{transport: :nethernet} = info}}, 5_000
    assert %{identity: %{claims: %{"xuid" => "2535400000000042"}, verified: false}} = info
    assert {127, 0, 0, 1} = elem(info.address, 0)
    assert_receive {:client_new, _conn, {:ok, %{transport: :raknet}}}, 5_000
    assert_receive {:client_received, _conn, 0, 99_999}, 5_000
  end

  test "RakNet.connect(..., transport: :nethernet) speaks NetherNet to a server",
       %{key_file: key_file} do
    {server, port, http} = start_server(key_file)
    {:ok, jwk} = RakNet.Native.nethernet_key_jwk(File.read!(key_file))

    assert {:ok, conn} =
             RakNet.connect("127.0.0.1", port, transport: :nethernet, signaling_port: http)

    # The server's assertion was checked; its key is the one to pin.
    assert {:ok, %{transport: :nethernet, identity: %{claims: claims}}} =
             RakNet.Connection.info(conn)

    assert jwk =~ claims["cpk"]["x"] and jwk =~ claims["cpk"]["y"]
    assert_receive {:client_new, _server_side, {:ok, %{transport: :nethernet}}}, 5_000

    big = :binary.copy(<<7>>, 200_000)
    assert {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0, big::binary>>)
    assert_receive {:raknet, ^conn, 0, echoed, _transit}, 10_000
    # (Compared here, not in the pattern: a failed match would print 200 KB.)
    assert echoed == big
    assert {:ok, nil} = RakNet.Connection.send(conn, :unreliable, "ping")
    assert_receive {:raknet, ^conn, ?p, "ing", _transit}, 5_000

    # The unreliable channel does not fragment: one 10,000-byte segment at most, as
    # Minecraft's own.
    assert {:error, :too_large} =
             RakNet.Connection.send(conn, :unreliable, :binary.copy(<<1>>, 10_001))

    assert {:ok, nil} = RakNet.Connection.send(conn, :unreliable, :binary.copy(<<1>>, 10_000))

    # Receipts need per-message acknowledgements, which data channels do not give.
    assert {:error, :unsupported} = RakNet.Connection.send(conn, :reliable_ack_receipt, "x")

    # Broadcasts and groups reach NetherNet players as they reach RakNet ones.
    assert {:ok, 1} = RakNet.Server.broadcast(server, :reliable_ordered, <<0x86, "all">>)
    assert_receive {:raknet, ^conn, 0x86, "all", _transit}, 5_000
    assert [%{pid: player}] = RakNet.Server.connections(server)
    :ok = RakNet.Group.join(player, {:nethernet_zone, self()})

    assert {:ok, 1} =
             RakNet.Group.broadcast({:nethernet_zone, self()}, :unreliable, <<0x86, "zone">>)

    assert_receive {:raknet, ^conn, 0x86, "zone", _transit}, 5_000

    assert {:error, :too_large} =
             RakNet.Server.broadcast(server, :unreliable, :binary.copy(<<1>>, 10_001))

    :ok = RakNet.Connection.close(conn)
    assert_receive {:client_disconnect, _}, 5_000
  end

  test "batch_header: 0xFE puts Bedrock's game-packet byte back in front and takes it off",
       %{key_file: key_file} do
    # Bedrock sends its batches over NetherNet without RakNet's 0xFE; with the option, a
    # handler written for RakNet gets them as over RakNet.
    {_server, port, http} = start_server(key_file, batch_header: 0xFE)
    {:ok, plain} = RakNet.connect("127.0.0.1", port, transport: :nethernet, signaling_port: http)
    assert_receive {:client_new, _, {:ok, %{transport: :nethernet}}}, 5_000

    # A batch as the client sends it (compression byte 0x00 first): 0xFE in front for the
    # handler; its echo, <<0xFE, 0x00, "batch">>, leaves without it.
    assert {:ok, nil} = RakNet.Connection.send(plain, :reliable_ordered, <<0x00, "batch">>)
    assert_receive {:client_received, _, 0xFE, 6}, 5_000
    assert_receive {:raknet, ^plain, 0x00, "batch", _}, 5_000
    :ok = RakNet.Connection.close(plain)
    assert_receive {:client_disconnect, _}, 5_000

    # The client role's option, against a server without it (which sees the wire's bytes).
    {_server, port, http} = start_server(key_file)

    {:ok, bedrock} =
      RakNet.connect("127.0.0.1", port,
        transport: :nethernet,
        signaling_port: http,
        batch_header: 0xFE
      )

    assert_receive {:client_new, _, {:ok, %{transport: :nethernet}}}, 5_000
    assert {:ok, nil} = RakNet.Connection.send(bedrock, :reliable_ordered, <<0xFE, 0x00, "b">>)
    assert_receive {:client_received, _, 0x00, 1}, 5_000
    assert_receive {:raknet, ^bedrock, 0xFE, <<0x00, "b">>, _}, 5_000

    # The byte taken off counts out of the unreliable channel's 10,000.
    big = :binary.copy(<<1>>, 10_000)
    assert {:ok, nil} = RakNet.Connection.send(bedrock, :unreliable, <<0xFE, big::binary>>)

    assert {:error, :too_large} =
             RakNet.Connection.send(bedrock, :unreliable, <<0xFE, 1, big::binary>>)

    :ok = RakNet.Connection.close(bedrock)

    assert_raise ArgumentError, ~r/:batch_header must be a byte/, fn ->
      RakNet.connect("127.0.0.1", port, transport: :nethernet, batch_header: 256)
    end

    # Not silently ignored on a RakNet connection.
    assert_raise ArgumentError, ~r/:batch_header is an option of transport: :nethernet/, fn ->
      RakNet.connect("127.0.0.1", port, batch_header: 0xFE)
    end
  end

  test "NetherNet over IPv6: the IPv6 socket's own sessions and signaling",
       %{key_file: key_file} do
    {server, _port} =
      RakNet.Test.Server.start!(ChannelEcho,
        open_ipv6_socket: true,
        ipv6_ip: {0, 0, 0, 0, 0, 0, 0, 1},
        nethernet: [port: 0, key_file: key_file]
      )

    %{ipv6_port: port6, nethernet_signaling: %{ports: %{inet6: http6}}} =
      RakNet.Server.info(server)

    assert {:ok, conn} =
             RakNet.connect("::1", port6, transport: :nethernet, signaling_port: http6)

    assert {:ok, %{transport: :nethernet, address: {{0, 0, 0, 0, 0, 0, 0, 1}, ^port6}}} =
             RakNet.Connection.info(conn)

    assert_receive {:client_new, _, {:ok, %{address: {{0, 0, 0, 0, 0, 0, 0, 1}, _}}}}, 5_000
    assert {:ok, nil} = RakNet.Connection.send(conn, :reliable_ordered, <<0x86, "over v6">>)
    assert_receive {:raknet, ^conn, 0x86, "over v6", _}, 5_000
    RakNet.Connection.close(conn)
  end

  test "RakNet.connect over NetherNet with a handler, and a refused offer",
       %{key_file: key_file} do
    {_server, port, http} = start_server(key_file)
    client = {RakNet.Test.EchoClient, self()}

    assert {:ok, pid} =
             RakNet.connect("127.0.0.1", port,
               transport: :nethernet,
               signaling_port: http,
               client: client
             )

    assert_receive {:client_new, ^pid}, 5_000
    assert {:ok, %{transport: :nethernet}} = RakNet.Connection.info(pid)
    RakNet.Connection.close(pid)

    {:ok, jwk} = RakNet.Native.nethernet_key_jwk(RakNet.Native.nethernet_generate_key())
    dir = Path.join(Path.dirname(key_file), "closed")

    {_server, port, http} =
      start_server(Path.join(dir, "key.pem"), client_auth: {:jwks, ~s({"keys":[#{jwk}]})})

    assert {:error, {:signaling, 400, body}} =
             RakNet.connect("127.0.0.1", port, transport: :nethernet, signaling_port: http)

    assert body =~ "no a=identity"

    assert {:error, {:signaling, :econnrefused}} =
             RakNet.connect("127.0.0.1", port, transport: :nethernet, signaling_port: 1)
  end

  test "a player identity the server's JWKS trusts reaches the handler, verified",
       %{key_file: key_file} do
    # The test plays the auth service: its key is the server's JWKS, and it signs a token
    # naming the player's key.
    {auth, auth_jwk} = es384_key()

    {_server, port, http} =
      start_server(key_file, client_auth: {:jwks, ~s({"keys":[#{auth_jwk}]})})

    player_pem = RakNet.Native.nethernet_generate_key()
    {:ok, player_jwk} = RakNet.Native.nethernet_key_jwk(player_pem)
    token = sign_jwt(auth, ~s({"xuid":"2535400000000007","cpk":#{player_jwk}}))

    assert {:ok, conn} =
             RakNet.connect("127.0.0.1", port,
               transport: :nethernet,
               signaling_port: http,
               identity: [token: token, key_pem: player_pem]
             )

    assert_receive {:client_new, _,
                    {:ok, %{identity: %{verified: true, claims: %{"xuid" => "2535400000000007"}}}}},
                   5_000

    RakNet.Connection.close(conn)

    # The same token with another player's key: its fingerprints do not verify.
    other_pem = RakNet.Native.nethernet_generate_key()

    assert {:error, {:signaling, 400, body}} =
             RakNet.connect("127.0.0.1", port,
               transport: :nethernet,
               signaling_port: http,
               identity: [token: token, key_pem: other_pem]
             )

    assert body =~ "fingerprint signature"
  end

  test "the operator key is made once and kept; the answer's cpk is it", %{key_file: key_file} do
    {_server, _port, _http} = start_server(key_file)
    pem = File.read!(key_file)
    assert {:ok, jwk} = RakNet.Native.nethernet_key_jwk(pem)
    assert jwk =~ ~s("crv":"P-384")
    assert File.stat!(key_file).mode |> Bitwise.band(0o777) == 0o600
    # A second server (a restart, another host of the fleet) signs with the same key.
    start_server(key_file)
    assert File.read!(key_file) == pem
    File.write!(key_file, "not a key")

    assert {:error, {{%ArgumentError{message: message}, _stack}, _child}} =
             start_supervised(
               {RakNet.Server,
                [ChannelEcho, 0, ip: {127, 0, 0, 1}, nethernet: [port: 0, key_file: key_file]]}
             )

    assert message =~ "not a P-384 PKCS#8 PEM key"
  end

  test "signaling answers status, refuses what is not an offer, and bounds requests",
       %{key_file: key_file} do
    {server, _port, http} = start_server(key_file, status: %{name: "Test", max_players: 7})

    assert {200, body} = request(http, "GET /v1/join HTTP/1.1\r\nhost: x\r\n\r\n")

    assert body ==
             ~s({"gameType":0,"level":"","maxPlayers":7,"name":"Test","players":0,"protocol":0,"version":""})

    :ok = RakNet.Server.set_nethernet_status(server, %{name: "Renamed", level: "world"})
    assert {200, body} = request(http, "GET /v1/join HTTP/1.1\r\n\r\n")
    assert body =~ ~s("level":"world") and body =~ ~s("name":"Renamed")
    assert body =~ ~s("maxPlayers":7)

    assert {404, _} = request(http, "GET /nope HTTP/1.1\r\n\r\n")
    assert {400, reason} = post(http, "v=0\r\nnot an offer\r\n")
    assert reason =~ "data channel"
    assert {413, _} = request(http, "POST /v1/join/1 HTTP/1.1\r\ncontent-length: 999999\r\n\r\n")

    # A client that sends nothing is dropped at the timeout, without an answer.
    {:ok, idle} = :gen_tcp.connect({127, 0, 0, 1}, http, [:binary, active: false])
    assert {:error, :closed} = :gen_tcp.recv(idle, 0, 10_000)
  end

  test "slow requests from one address cannot take every signaling slot", %{key_file: key_file} do
    {_server, _port, http} =
      start_server(key_file, max_http_connections_per_ip: 3, http_timeout_ms: 30_000)

    # Three connections from 127.0.0.1 that never finish their request hold its share...
    idle =
      for _ <- 1..3 do
        {:ok, s} = :gen_tcp.connect({127, 0, 0, 1}, http, [:binary, active: false])
        :ok = :gen_tcp.send(s, "GET /v1/jo")
        s
      end

    # ...once signaling has taken them all (a fourth is refused at once, not left waiting)...
    assert {503, "busy"} = request(http, "GET /v1/join HTTP/1.1\r\n\r\n", {127, 0, 0, 1})
    # ...and another address is served.
    assert {200, _} = request(http, "GET /v1/join HTTP/1.1\r\n\r\n", {127, 0, 0, 2})
    Enum.each(idle, &:gen_tcp.close/1)
  end

  test "slow requests from many addresses give way to a new address when every slot is taken",
       %{key_file: key_file} do
    {server, _port, http} =
      start_server(key_file, max_http_connections: 4, http_timeout_ms: 30_000)

    idle =
      for i <- 2..5 do
        {:ok, s} =
          :gen_tcp.connect({127, 0, 0, 1}, http, [:binary, active: false, ip: {127, 0, 0, i}])

        :ok = :gen_tcp.send(s, "GET /v1/jo")
        s
      end

    # All four slots hold requests that never finish; a fifth address is still served, and
    # one of the four lost its slot.
    assert {200, _} = request(http, "GET /v1/join HTTP/1.1\r\n\r\n", {127, 0, 0, 9})
    closed = Enum.count(idle, &match?({:error, :closed}, :gen_tcp.recv(&1, 0, 100)))
    assert closed >= 1
    assert %{evicted: evicted} = RakNet.Server.info(server).nethernet_signaling
    assert evicted >= 1
    Enum.each(idle, &:gen_tcp.close/1)
  end

  # :ssl logs the plain-HTTP request's alert.
  @tag capture_log: true
  test "signaling over HTTPS", %{key_file: key_file} do
    %{server_config: config} =
      :public_key.pkix_test_data(%{
        server_chain: %{
          root: [key: {:namedCurve, :secp256r1}],
          peer: [key: {:namedCurve, :secp256r1}]
        },
        client_chain: %{
          root: [key: {:namedCurve, :secp256r1}],
          peer: [key: {:namedCurve, :secp256r1}]
        }
      })

    dir = Path.dirname(key_file)
    File.mkdir_p!(dir)
    certfile = Path.join(dir, "cert.pem")
    keyfile = Path.join(dir, "key.pem")
    File.write!(certfile, :public_key.pem_encode([{:Certificate, config[:cert], :not_encrypted}]))
    {:ECPrivateKey, der} = config[:key]
    File.write!(keyfile, :public_key.pem_encode([{:ECPrivateKey, der, :not_encrypted}]))

    {_server, _port, http} = start_server(key_file, tls: [certfile: certfile, keyfile: keyfile])

    # The test trusts the certificate it made: no chain to check against here.
    {:ok, tls} =
      :ssl.connect({127, 0, 0, 1}, http, [:binary, active: false, verify: :verify_none], 5_000)

    :ok = :ssl.send(tls, "GET /v1/join HTTP/1.1\r\nhost: x\r\n\r\n")
    {:ok, reply} = read_all_tls(tls, "")
    assert reply =~ ~r{^HTTP/1.1 200 OK}
    assert reply =~ ~s("maxPlayers")

    # Plain HTTP to the TLS port gets nothing.
    assert_raise MatchError, fn -> request(http, "GET /v1/join HTTP/1.1\r\n\r\n") end
  end

  test "offers per IP per second are limited", %{key_file: key_file} do
    {_server, _port, http} = start_server(key_file, offers_per_ip_per_sec: 2)
    statuses = for _ <- 1..6, do: elem(post(http, "v=0\r\n"), 0)
    assert 429 in statuses
    assert Enum.count(statuses, &(&1 == 400)) in 2..4
  end

  test "client_auth {:jwks, _} refuses an offer without a trusted identity",
       %{key_file: key_file} do
    # Any P-384 public key will do as the auth service's: the script's tokens are signed by
    # a key of its own, which is not this one.
    {:ok, jwk} = RakNet.Native.nethernet_key_jwk(RakNet.Native.nethernet_generate_key())
    jwks = ~s({"keys":[#{jwk}]})
    {_server, _port, http} = start_server(key_file, client_auth: {:jwks, jwks})
    {out, status} = run_client(http)
    assert status != 0
    assert out =~ "400"
  end

  test "bad :nethernet options are refused when the server starts" do
    assert_raise ArgumentError, ~r/:nethernet's :port/, fn ->
      RakNet.Server.Config.new(ChannelEcho, 0, nethernet: [port: -1])
    end

    assert_raise ArgumentError, ~r/:nethernet's :batch_header must be a byte/, fn ->
      RakNet.Server.Config.new(ChannelEcho, 0, nethernet: [batch_header: 0x1FE])
    end

    assert_raise ArgumentError, ~r/unknown :nethernet option :nope/, fn ->
      RakNet.Server.Config.new(ChannelEcho, 0, nethernet: [nope: 1])
    end

    {server, _port} = RakNet.Test.Server.start!(ChannelEcho)
    assert {:error, :no_nethernet} = RakNet.Server.set_nethernet_status(server, %{name: "x"})
    assert RakNet.Server.info(server).nethernet_port == nil
  end

  # A P-384 key made by :public_key, and its public half as a JWK.
  defp es384_key do
    key = :public_key.generate_key({:namedCurve, :secp384r1})
    <<4, x::binary-48, y::binary-48>> = elem(key, 4)
    {key, ~s({"kty":"EC","crv":"P-384","x":"#{b64url(x)}","y":"#{b64url(y)}"})}
  end

  defp sign_jwt(key, claims_json) do
    input = b64url(~s({"alg":"ES384","typ":"JWT"})) <> "." <> b64url(claims_json)
    der = :public_key.sign(input, :sha384, key)
    {:"ECDSA-Sig-Value", r, s} = :public_key.der_decode(:"ECDSA-Sig-Value", der)
    input <> "." <> b64url(<<r::384, s::384>>)
  end

  defp b64url(bytes), do: Base.url_encode64(bytes, padding: false)

  defp post(port, body) do
    request(
      port,
      "POST /v1/join/42 HTTP/1.1\r\ncontent-type: application/sdp\r\n" <>
        "content-length: #{byte_size(body)}\r\n\r\n" <> body
    )
  end

  defp request(port, data, from \\ {127, 0, 0, 1}) do
    {:ok, socket} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false, ip: from])
    :ok = :gen_tcp.send(socket, data)
    {:ok, reply} = read_all(socket, "")
    :gen_tcp.close(socket)
    [head, body] = String.split(reply, "\r\n\r\n", parts: 2)
    ["HTTP/1.1", status | _] = String.split(head, " ")
    {String.to_integer(status), body}
  end

  defp read_all_tls(socket, acc) do
    case :ssl.recv(socket, 0, 10_000) do
      {:ok, data} -> read_all_tls(socket, acc <> data)
      {:error, :closed} -> {:ok, acc}
      {:error, _} = e -> e
    end
  end

  defp read_all(socket, acc) do
    case :gen_tcp.recv(socket, 0, 10_000) do
      {:ok, data} -> read_all(socket, acc <> data)
      {:error, :closed} -> {:ok, acc}
      {:error, _} = e -> e
    end
  end
end
