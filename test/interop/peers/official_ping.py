"""Official RakNet 4.081 (PyPI `raknet`) sends an unconnected ping to HOST PORT and prints the
pong's payload as hex on one line ("PONG <hex>"), or "NO PONG" after 3 s (exit 1)."""
import sys
import time

import raknet


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    peer = raknet.RakPeer()
    peer.startup(port=0, max_connections=1)
    peer.ping(host, port)
    deadline = time.time() + 3
    while time.time() < deadline:
        packet = peer.receive()
        if packet is not None and packet.data[0] == raknet.MessageIdentifiers.ID_UNCONNECTED_PONG:
            # Official hands the app ID (1) + its 32-bit ping time (4), then the response.
            print("PONG " + packet.data[5:].hex(), flush=True)
            peer.shutdown(0.1)
            return 0
        time.sleep(0.001)
    print("NO PONG", flush=True)
    peer.shutdown(0.1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
