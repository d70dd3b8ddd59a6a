"""Official RakNet 4.081 (PyPI `raknet`) as an echo server on 127.0.0.1, for client-role tests.

Usage: official_server.py PROTOCOL [MOTD]. Prints "PORT <n>" once listening, echoes every user
message (first byte >= 0x86) back RELIABLE_ORDERED on channel 0, prints "CONNECTED" /
"DISCONNECTED" lines, and exits when stdin closes (the test's Port) or after 60 s.
"""
import select
import signal
import sys
import time

import raknet

R = raknet.PacketReliability
P = raknet.PacketPriority
M = raknet.MessageIdentifiers


def main():
    # The test's Port may close first: exit quietly instead of a BrokenPipe traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    protocol = int(sys.argv[1])
    peer = raknet.RakPeer()
    peer.startup(host="127.0.0.1", port=0, max_connections=32, protocol_version=protocol,
                 max_internal_ids=20 if protocol >= 10 else 10)
    peer.max_incoming_connections = 32
    if len(sys.argv) > 2:
        motd = sys.argv[2].encode()
        peer.offline_ping_response = len(motd).to_bytes(2, "big") + motd
    print(f"PORT {peer.get_bound_address().port}", flush=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
            break
        packet = peer.receive()
        if packet is None:
            time.sleep(0.0005)
            continue
        data = packet.data
        if data[0] == M.ID_NEW_INCOMING_CONNECTION:
            print("CONNECTED", flush=True)
        elif data[0] in (M.ID_DISCONNECTION_NOTIFICATION, M.ID_CONNECTION_LOST):
            print("DISCONNECTED", flush=True)
        elif data[0] >= M.ID_USER_PACKET_ENUM:
            peer.send(data, P.HIGH_PRIORITY, R.RELIABLE_ORDERED, 0, packet.system_address)
    peer.shutdown(0.3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
