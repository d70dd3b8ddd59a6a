"""Official RakNet 4.081 client (PyPI `raknet`) against a server under test.

Connects, sends one message per reliability at each size, expects every message echoed
back intact (the server echoes RELIABLE_ORDERED), counts ack receipts, then disconnects.
Usage: official_client.py HOST PORT PROTOCOL. Prints one summary line; exits 1 on failure.
"""
import sys
import time

import raknet

R = raknet.PacketReliability
P = raknet.PacketPriority
M = raknet.MessageIdentifiers
RELIABILITIES = [
    R.UNRELIABLE, R.UNRELIABLE_SEQUENCED, R.RELIABLE, R.RELIABLE_ORDERED, R.RELIABLE_SEQUENCED,
    R.UNRELIABLE_WITH_ACK_RECEIPT, R.RELIABLE_WITH_ACK_RECEIPT, R.RELIABLE_ORDERED_WITH_ACK_RECEIPT,
]
SIZES = [16, 1024, 5 * 1024, 100 * 1024]


def main():
    host, port, protocol = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    peer = raknet.RakPeer()
    peer.startup(port=0, max_connections=1, protocol_version=protocol,
                 max_internal_ids=20 if protocol >= 10 else 10)
    peer.connect(host, port)

    def receive(deadline):
        while time.time() < deadline:
            packet = peer.receive()
            if packet is not None:
                return packet
            time.sleep(0.0005)
        return None

    first = receive(time.time() + 5)
    if first is None or first.data[0] != M.ID_CONNECTION_REQUEST_ACCEPTED:
        print(f"FAIL: no connection (first packet {first and first.data[:1]!r})", flush=True)
        return 1
    server = first.system_address
    sent = {}
    for size in SIZES:
        for reliability in RELIABILITIES:
            n = len(sent)
            body = bytes([0x86, n]) + bytes((j * 7 + n) % 251 for j in range(size - 2))
            sent[n] = body
            peer.send(body, P.HIGH_PRIORITY, reliability, n % 4, server)
    echoed, receipts, other = {}, 0, []
    deadline = time.time() + 20
    expected_receipts = 3 * len(SIZES)
    while time.time() < deadline and (len(echoed) < len(sent) or receipts < expected_receipts):
        packet = receive(deadline)
        if packet is None:
            break
        data = packet.data
        if data[0] == 0x86:
            echoed[data[1]] = data
        elif data[0] in (M.ID_SND_RECEIPT_ACKED, M.ID_SND_RECEIPT_LOSS):
            receipts += 1
        else:
            other.append(data[0])
    corrupted = [n for n in echoed if echoed[n] != sent[n]]
    missing = sorted(set(sent) - set(echoed))
    peer.shutdown(0.5)
    ok = not corrupted and not missing and receipts == expected_receipts
    print(f"{'OK' if ok else 'FAIL'}: protocol {protocol} sent {len(sent)} echoed {len(echoed)} "
          f"corrupted {corrupted} missing {missing} receipts {receipts}/{expected_receipts} other {other}",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
