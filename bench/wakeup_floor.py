"""What one wake-up costs at a low rate, before any broker code: a server that echoes 16 bytes,
one round trip every millisecond, its CPU time per round trip (from /proc). Three servers:

  trio      trio.serve_tcp, receive_some / send_all (what a trio program does)
  trio-ll   trio.lowlevel.wait_readable and plain socket calls (the broker's sockio way)
  epoll     a bare select.epoll loop (the floor of any Python server)

    python bench/wakeup_floor.py [--count 10000] [--rate 1000]

At 1000 msg/s a classic queue's message makes two wake-ups of the broker (the publish, the
ack); bench/quorum_notes.md (session 28) compares.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

_SERVERS = {
    "trio": """
import trio
async def handler(stream):
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        await stream.send_all(data)
async def main():
    await trio.serve_tcp(handler, PORT, host="127.0.0.1")
trio.run(main)
""",
    "trio-ll": """
import socket, trio
async def main():
    ls = socket.create_server(("127.0.0.1", PORT)); ls.setblocking(False)
    await trio.lowlevel.wait_readable(ls)
    c, _ = ls.accept(); c.setblocking(False)
    while True:
        await trio.lowlevel.wait_readable(c)
        data = c.recv(65536)
        if not data:
            return
        c.send(data)
trio.run(main)
""",
    "epoll": """
import select, socket
ls = socket.create_server(("127.0.0.1", PORT))
c, _ = ls.accept(); c.setblocking(False)
ep = select.epoll(); ep.register(c.fileno(), select.EPOLLIN)
while True:
    ep.poll()
    data = c.recv(65536)
    if not data:
        break
    c.send(data)
""",
}


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(kind: str, count: int, rate: float) -> float:
    """CPU microseconds of the server per round trip."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", _SERVERS[kind].replace("PORT", str(port))])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", port))
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        time.sleep(0.2)
        before = _cpu_seconds(server.pid)
        start = time.perf_counter()
        for i in range(count):
            due = start + i / rate
            while time.perf_counter() < due:
                time.sleep(0.0002)
            client.sendall(b"x" * 16)
            got = 0
            while got < 16:
                got += len(client.recv(100))
        spent = _cpu_seconds(server.pid) - before
        client.close()
        return spent / count * 1e6
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()
    for kind in _SERVERS:
        print(f"{kind:8} {measure(kind, args.count, args.rate):6.1f} µs of server CPU a round trip")


if __name__ == "__main__":
    main()
