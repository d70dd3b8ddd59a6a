"""Official RakNet 4.081 (PyPI `raknet`) as a sender for `make bench`, and as a counting server.

  official_sender.py send HOST PORT COUNT SIZE   connect, send COUNT messages of SIZE bytes
                                                 RELIABLE_ORDERED (first byte 0x86), then one
                                                 0x87 marker; exit when the connection closes
                                                 or after 120 s
  official_sender.py count                       an official server on 127.0.0.1:0; prints
                                                 "PORT n", then "RATE <msgs/s> <count>" when the
                                                 0x87 marker arrives
  official_sender.py burst HOST PORT COUNT SIZE  connect, queue COUNT numbered messages of SIZE
                                                 bytes RELIABLE_ORDERED at once, then read the
                                                 echoes; prints "ECHOED <n> IN_ORDER <yes|no>
                                                 RATE <msgs/s> CLOSED <yes|no>" when all came
                                                 back, the connection closed, or after 120 s
  official_sender.py echo                        an official server on 127.0.0.1:0 that echoes
                                                 every message of type 0x86; prints "PORT n";
                                                 exits when stdin closes or after 180 s
"""
import select
import signal
import sys
import time

import raknet

R = raknet.PacketReliability
P = raknet.PacketPriority
M = raknet.MessageIdentifiers


def send(host, port, count, size):
    peer = raknet.RakPeer()
    peer.startup(port=0, max_connections=1)
    peer.connect(host, port)
    server = None
    deadline = time.time() + 10
    while server is None and time.time() < deadline:
        packet = peer.receive()
        if packet is not None and packet.data[0] == M.ID_CONNECTION_REQUEST_ACCEPTED:
            server = packet.system_address
        time.sleep(0.0005)
    if server is None:
        print("FAIL: no connection", flush=True)
        return 1
    body = bytes([0x86]) + bytes(size - 1)
    for _ in range(count):
        peer.send(body, P.HIGH_PRIORITY, R.RELIABLE_ORDERED, 0, server)
    peer.send(bytes([0x87]), P.HIGH_PRIORITY, R.RELIABLE_ORDERED, 0, server)
    deadline = time.time() + 120
    while time.time() < deadline:
        packet = peer.receive()
        if packet is not None and packet.data[0] in (M.ID_DISCONNECTION_NOTIFICATION, M.ID_CONNECTION_LOST):
            break
        time.sleep(0.001)
    peer.shutdown(0.2)
    return 0


def connect(host, port):
    peer = raknet.RakPeer()
    peer.startup(port=0, max_connections=1)
    peer.connect(host, port)
    deadline = time.time() + 10
    while time.time() < deadline:
        packet = peer.receive()
        if packet is not None and packet.data[0] == M.ID_CONNECTION_REQUEST_ACCEPTED:
            return peer, packet.system_address
        time.sleep(0.0005)
    return peer, None


def burst(host, port, count, size):
    peer, server = connect(host, port)
    if server is None:
        print("FAIL: no connection", flush=True)
        return 1
    for i in range(count):
        body = bytes([0x86]) + i.to_bytes(4, "big") + bytes(max(size - 5, 0))
        peer.send(body, P.HIGH_PRIORITY, R.RELIABLE_ORDERED, 0, server)
    start = time.time()
    n, in_order, closed, last = 0, True, False, start
    deadline = start + 120
    while n < count and time.time() < deadline:
        packet = peer.receive()
        if packet is None:
            time.sleep(0.0001)
            continue
        kind = packet.data[0]
        if kind == 0x86:
            if int.from_bytes(packet.data[1:5], "big") != n:
                in_order = False
            n += 1
            last = time.time()
        elif kind in (M.ID_DISCONNECTION_NOTIFICATION, M.ID_CONNECTION_LOST):
            closed = True
            break
    rate = n / max(last - start, 1e-9)
    print(f"ECHOED {n} IN_ORDER {'yes' if in_order else 'no'} RATE {rate:.0f} "
          f"CLOSED {'yes' if closed else 'no'}", flush=True)
    peer.shutdown(0.2)
    return 0


def echo():
    peer = raknet.RakPeer()
    peer.startup(host="127.0.0.1", port=0, max_connections=4)
    peer.max_incoming_connections = 4
    print(f"PORT {peer.get_bound_address().port}", flush=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        packet = peer.receive()
        if packet is None:
            # Exit when stdin closes (the Port of whoever started us).
            if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
                break
            time.sleep(0.0001)
            continue
        if packet.data[0] == 0x86:
            peer.send(bytes(packet.data), P.HIGH_PRIORITY, R.RELIABLE_ORDERED, 0,
                      packet.system_address)
    peer.shutdown(0.5)
    return 0


def count():
    peer = raknet.RakPeer()
    peer.startup(host="127.0.0.1", port=0, max_connections=4)
    peer.max_incoming_connections = 4
    print(f"PORT {peer.get_bound_address().port}", flush=True)
    n, first = 0, None
    deadline = time.time() + 180
    while time.time() < deadline:
        packet = peer.receive()
        if packet is None:
            time.sleep(0.0001)
            continue
        kind = packet.data[0]
        if kind == 0x86:
            if first is None:
                first = time.time()
            n += 1
        elif kind == 0x87:
            rate = n / max(time.time() - first, 1e-9) if first else 0
            print(f"RATE {rate:.0f} {n}", flush=True)
            break
    peer.shutdown(0.5)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if sys.argv[1] == "send":
        sys.exit(send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
    if sys.argv[1] == "burst":
        sys.exit(burst(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
    if sys.argv[1] == "echo":
        sys.exit(echo())
    sys.exit(count())
