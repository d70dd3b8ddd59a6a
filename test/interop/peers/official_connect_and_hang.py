"""Official RakNet 4.081 (PyPI `raknet`) connects to HOST PORT, prints "CONNECTED", then does
nothing: a peer to kill -9 for timeout tests. Exits after 30 s at the latest."""
import signal
import sys
import time

import raknet


def main():
    # The test's Port may close first: exit quietly instead of a BrokenPipe traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    host, port = sys.argv[1], int(sys.argv[2])
    peer = raknet.RakPeer()
    peer.startup(port=0, max_connections=1)
    peer.connect(host, port)
    deadline = time.time() + 30
    while time.time() < deadline:
        packet = peer.receive()
        if packet is not None and packet.data[0] == raknet.MessageIdentifiers.ID_CONNECTION_REQUEST_ACCEPTED:
            print("CONNECTED", flush=True)
        time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
