"""Plays a Minecraft client over NetherNet with aiortc, an independent WebRTC stack.

    nethernet_client.py http://127.0.0.1:PORT

GET /v1/join, then an offer with the two channels a Minecraft client opens and a player
identity (this script plays the auth service with its own P-384 key), POSTed to
/v1/join/{networkId}. The answer's server assertion is checked as the client checks it (the
JWT's self-signature with its cpk, the detached JWS over the answer's fingerprints, exp);
then a 100 KB message goes out fragmented on the reliable channel and a small one on the
unreliable channel, and both must come back (the server echoes). Prints OK and exits 0.
"""

import asyncio
import base64
import json
import sys
import time
import urllib.request

import aioice.ice
from aiortc import RTCPeerConnection, RTCSessionDescription
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

XUID = "2535400000000042"

# Loopback only: tests never send to another interface's address.
aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
# What this client sends per fragment: more than the 10,000 Minecraft (and the server) send,
# as another implementation may; the server must join them all the same.
FRAGMENT = 16_000
SERVER_FRAGMENT = 10_000


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def jwk(key: ec.EllipticCurvePrivateKey) -> dict:
    numbers = key.public_key().public_numbers()
    return {
        "kty": "EC",
        "crv": "P-384",
        "x": b64url(numbers.x.to_bytes(48, "big")),
        "y": b64url(numbers.y.to_bytes(48, "big")),
    }


def sign(key, data: bytes) -> str:
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA384())))
    return b64url(r.to_bytes(48, "big") + s.to_bytes(48, "big"))


def verify(public, data: bytes, signature: str) -> None:
    raw = unb64url(signature)
    r, s = int.from_bytes(raw[:48], "big"), int.from_bytes(raw[48:], "big")
    public.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA384()))


def fingerprints(sdp: str) -> str:
    found = []
    for line in sdp.splitlines():
        if line.startswith("a=fingerprint:"):
            algorithm, digest = line[len("a=fingerprint:"):].strip().split(" ", 1)
            found.append({"algorithm": algorithm, "digest": digest.strip()})
    return canonical({"fingerprint": found})


def with_identity(sdp: str, value: str) -> str:
    lines = [l for l in sdp.splitlines() if l]
    first_media = next(i for i, l in enumerate(lines) if l.startswith("m="))
    lines.insert(first_media, "a=identity:" + value)
    return "\r\n".join(lines) + "\r\n"


def player_identity(sdp: str) -> str:
    auth = ec.generate_private_key(ec.SECP384R1())
    player = ec.generate_private_key(ec.SECP384R1())
    header = b64url(canonical({"alg": "ES384", "typ": "JWT"}).encode())
    claims = b64url(canonical({"xuid": XUID, "cpk": jwk(player), "exp": int(time.time()) + 600}).encode())
    token = f"{header}.{claims}.{sign(auth, f'{header}.{claims}'.encode())}"
    jws_header = b64url(canonical({"alg": "ES384"}).encode())
    payload = b64url(fingerprints(sdp).encode())
    detached = f"{jws_header}..{sign(player, f'{jws_header}.{payload}'.encode())}"
    assertion = json.dumps({"token": token, "fingerprints": detached})
    envelope = {"idp": {"domain": "auth.test", "protocol": "default"}, "assertion": assertion}
    return base64.b64encode(json.dumps(envelope).encode()).decode()


def check_server_assertion(answer: str) -> str:
    """The client's checks of the answer's a=identity; returns the SDP without it."""
    values = [l[len("a=identity:"):] for l in answer.splitlines() if l.startswith("a=identity:")]
    assert len(values) == 1, "answer must carry one a=identity"
    envelope = json.loads(base64.b64decode(values[0] + "=" * (-len(values[0]) % 4)))
    assert envelope["idp"]["protocol"] == "default", envelope
    inner = json.loads(envelope["assertion"])
    head, body, sig = inner["token"].split(".")
    assert json.loads(unb64url(head))["alg"] == "ES384"
    claims = json.loads(unb64url(body))
    cpk = claims["cpk"]
    assert cpk["kty"] == "EC" and cpk["crv"] == "P-384", cpk
    public = ec.EllipticCurvePublicNumbers(
        int.from_bytes(unb64url(cpk["x"]), "big"),
        int.from_bytes(unb64url(cpk["y"]), "big"),
        ec.SECP384R1(),
    ).public_key()
    verify(public, f"{head}.{body}".encode(), sig)  # the JWT's self-signature
    assert claims["exp"] > time.time(), "server token expired"
    jws_head, empty, jws_sig = inner["fingerprints"].split(".")
    assert empty == "", "fingerprints must be a detached JWS"
    payload = b64url(fingerprints(answer).encode())
    verify(public, f"{jws_head}.{payload}".encode(), jws_sig)
    return "\r\n".join(l for l in answer.splitlines() if not l.startswith("a=identity:")) + "\r\n"


async def main(url: str) -> None:
    with urllib.request.urlopen(url + "/v1/join", timeout=5) as reply:
        status = json.loads(reply.read())
    assert {"name", "protocol", "version", "players", "maxPlayers"} <= status.keys(), status

    pc = RTCPeerConnection()
    reliable = pc.createDataChannel("ReliableDataChannel")
    unreliable = pc.createDataChannel("UnreliableDataChannel", ordered=False, maxRetransmits=0)
    opened = {name: asyncio.Event() for name in ("reliable", "unreliable")}
    reliable.on("open", lambda: opened["reliable"].set())
    unreliable.on("open", lambda: opened["unreliable"].set())
    got = {"reliable": asyncio.Queue(), "unreliable": asyncio.Queue()}
    partial = bytearray()
    sizes = []

    @reliable.on("message")
    def on_reliable(frame):
        sizes.append(len(frame))
        partial.extend(frame[1:])
        if frame[0] == 0:
            got["reliable"].put_nowait(bytes(partial))
            partial.clear()

    @unreliable.on("message")
    def on_unreliable(frame):
        assert frame[0] == 0, "the unreliable channel never fragments"
        got["unreliable"].put_nowait(frame[1:])

    await pc.setLocalDescription(await pc.createOffer())
    offer = with_identity(pc.localDescription.sdp, player_identity(pc.localDescription.sdp))
    request = urllib.request.Request(
        url + "/v1/join/1234567890",
        data=offer.encode(),
        headers={"Content-Type": "application/sdp"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        assert reply.status // 100 == 2
        answer = reply.read().decode()
    answer = check_server_assertion(answer)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    await asyncio.wait_for(opened["reliable"].wait(), 15)
    await asyncio.wait_for(opened["unreliable"].wait(), 15)

    big = bytes(i % 251 for i in range(100_000))
    chunks = [big[i:i + FRAGMENT] for i in range(0, len(big), FRAGMENT)]
    for i, chunk in enumerate(chunks):
        reliable.send(bytes([len(chunks) - 1 - i]) + chunk)
    unreliable.send(b"\x00ping")
    echoed = await asyncio.wait_for(got["reliable"].get(), 15)
    assert echoed == big, f"reliable echo differs: {len(echoed)} bytes"
    assert max(sizes) == SERVER_FRAGMENT + 1, f"the server's fragments: {sorted(set(sizes))}"
    assert await asyncio.wait_for(got["unreliable"].get(), 15) == b"ping"
    await pc.close()
    print("OK")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
