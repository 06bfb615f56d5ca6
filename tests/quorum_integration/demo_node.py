"""A stand-alone node process hosting Raft groups with a tiny append-only state machine.

Used by the real-process kill test (`test_kill9.py` next to it) and by `bench/raft_bench.py`;
test code, not part of the broker or of the `quorum` package. They run it as a script (so
it needs only `quorum` importable, not this directory) and talk to it with `DemoClient`:

    python tests/quorum_integration/demo_node.py --id n1 --data /tmp/n1 --client-port 8001 \
        --peers n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003 --secret s3cret

Clients speak newline-delimited JSON on the client port; every request carries an `id` that
the response repeats, and requests on one connection run concurrently:

    {"id": 1, "op": "propose", "group": "demo", "data": "x"}
        -> {"id": 1, "ok": true, "reply": <position in the applied list>}
        -> {"id": 1, "ok": false, "error": "not_leader", "leader": "n2"}
        -> {"id": 1, "ok": false, "error": "unknown", "leader": "n2"}   (may still commit)
    {"id": 2, "op": "applied", "group": "demo"}  -> {"id": 2, "ok": true, "applied": [...]}
    {"id": 3, "op": "status", "group": "demo"}   -> {"id": 3, "ok": true, "leader": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

import msgspec
import trio

from quorum.driver import LeadershipLost, NodeDriver
from quorum.log import AsyncLog, LogConfig
from quorum.raft import Meta, NotLeader, RaftError, RaftOptions
from quorum.transport import Transport

__all__ = ["AppendMachine", "CountMachine", "DemoClient", "main"]


class AppendMachine:
    """State: the list of applied commands (as str). Reply: the command's position."""

    def init(self) -> list[str]:
        return []

    def decode(self, data: bytes) -> str:
        return data.decode()

    def apply(self, meta: Meta, command: str, state: list[str]) -> tuple[list[str], Any, list[Any]]:
        state.append(command)
        return state, len(state) - 1, []

    def snapshot(self, state: list[str]) -> bytes:
        return msgspec.msgpack.encode(state)

    def restore(self, data: bytes) -> list[str]:
        return msgspec.msgpack.decode(data, type=list[str])


class CountMachine:
    """State: how many commands were applied (for benchmarks: no per-command memory)."""

    def init(self) -> int:
        return 0

    def decode(self, data: bytes) -> bytes:
        return data

    def apply(self, meta: Meta, command: bytes, state: int) -> tuple[int, Any, list[Any]]:
        return state + 1, state, []

    def snapshot(self, state: int) -> bytes:
        return str(state).encode()

    def restore(self, data: bytes) -> int:
        return int(data)


_MACHINES = {"append": AppendMachine, "count": CountMachine}


def _parse_peers(text: str) -> dict[str, tuple[str, int]]:
    peers = {}
    for item in text.split(","):
        name, addr = item.split("=")
        host, port = addr.rsplit(":", 1)
        peers[name] = (host, int(port))
    return peers


class _Server:
    def __init__(self, driver: NodeDriver) -> None:
        self.driver = driver

    async def handle(self, stream: trio.SocketStream) -> None:
        send_ch, recv_ch = trio.open_memory_channel[bytes](1024)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, stream, recv_ch)
                buf = b""
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        break
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if line.strip():
                            nursery.start_soon(self._request, json.loads(line), send_ch)
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    async def _writer(self, stream: trio.SocketStream, recv_ch) -> None:
        try:
            async for first in recv_ch:
                batch = [first]
                while True:
                    try:
                        batch.append(recv_ch.receive_nowait())
                    except trio.WouldBlock:
                        break
                await stream.send_all(b"".join(batch))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _request(self, req: dict, send_ch) -> None:
        resp = await self._answer(req)
        resp["id"] = req.get("id")
        await send_ch.send(json.dumps(resp).encode() + b"\n")

    async def _answer(self, req: dict) -> dict:
        group = req.get("group", "demo")
        op = req.get("op")
        d = self.driver
        if op == "propose":
            try:
                reply = await d.propose(group, req["data"].encode())
            except NotLeader as e:
                return {"ok": False, "error": "not_leader", "leader": e.leader_hint}
            except LeadershipLost as e:
                return {"ok": False, "error": "unknown", "leader": e.leader_hint}
            except RaftError as e:
                return {"ok": False, "error": str(e)}
            return {"ok": True, "reply": reply}
        if op == "applied":
            state = d.state(group)
            return {"ok": True, "applied": list(state) if isinstance(state, list) else state}
        if op == "status":
            st = d.status(group)
            return {"ok": True, "node": d.node_id, "leader": st.leader, "is_leader": st.is_leader,
                    "term": st.term, "commit": st.commit, "applied": st.applied,
                    "stats": d.statistics()}
        return {"ok": False, "error": f"unknown op {op!r}"}


async def serve(args: argparse.Namespace) -> None:
    peers = _parse_peers(args.peers)
    cfg = LogConfig(wal_max_size_bytes=args.wal_max_bytes, segment_max_entries=args.segment_max_entries)
    log = AsyncLog.open(args.data, cfg)
    holder: dict[str, NodeDriver] = {}
    transport = Transport(args.id, peers, args.secret.encode(),
                          lambda p, g, data: holder["d"].deliver(p, g, data),
                          listen=peers[args.id])
    options = RaftOptions(election_tick=args.election_tick, heartbeat_tick=args.heartbeat_tick,
                          early_messages=not args.no_early_messages)
    driver = holder["d"] = NodeDriver(args.id, log, transport, options=options,
                                      tick_interval=args.tick, snapshot_every=args.snapshot_every,
                                      rng=random.Random())
    for group in args.groups.split(","):
        driver.add_group(group, _MACHINES[args.machine](), sorted(peers))
    async with trio.open_nursery() as nursery:
        await nursery.start(transport.run)
        await nursery.start(driver.run)
        await nursery.start(trio.serve_tcp, _Server(driver).handle, args.client_port)
        print(f"READY {args.id} {args.client_port}", flush=True)


class _Conn:
    """One client connection; responses are matched to requests by id."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.waiting: dict[int, list] = {}
        self.broken = False
        self.lock = trio.Lock()

    async def read_loop(self) -> None:
        buf = b""
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    resp = json.loads(line)
                    slot = self.waiting.pop(resp["id"], None)
                    if slot is not None:
                        slot[1] = resp
                        slot[0].set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.broken = True
            for slot in self.waiting.values():
                slot[0].set()
            self.waiting.clear()


class DemoClient:
    """Async client for demo nodes: `await client.call("n1", {"op": "status"})`. Raises
    ConnectionError when the node is unreachable or dies before answering."""

    def __init__(self, nursery: trio.Nursery, addrs: dict[str, tuple[str, int]]) -> None:
        self._nursery = nursery
        self.addrs = addrs
        self._conns: dict[str, _Conn] = {}
        self._next = 0

    async def _conn(self, node: str) -> _Conn:
        c = self._conns.get(node)
        if c is None or c.broken:
            try:
                stream = await trio.open_tcp_stream(*self.addrs[node])
            except OSError as e:
                raise ConnectionError(f"{node}: {e}") from e
            c = self._conns[node] = _Conn(stream)
            self._nursery.start_soon(c.read_loop)
        return c

    async def call(self, node: str, req: dict) -> dict:
        c = await self._conn(node)
        self._next += 1
        rid = self._next
        slot: list = [trio.Event(), None]
        c.waiting[rid] = slot
        try:
            async with c.lock:
                await c.stream.send_all(json.dumps({**req, "id": rid}).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            c.waiting.pop(rid, None)
            c.broken = True
            raise ConnectionError(f"{node}: {e}") from e
        await slot[0].wait()
        if slot[1] is None:
            raise ConnectionError(f"{node}: connection lost")
        return slot[1]

    async def aclose(self) -> None:
        for c in self._conns.values():
            await trio.aclose_forcefully(c.stream)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--id", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--peers", required=True, help="name=host:port,... including this node")
    p.add_argument("--client-port", type=int, required=True)
    p.add_argument("--secret", default="demo-cookie")
    p.add_argument("--groups", default="demo")
    p.add_argument("--machine", choices=sorted(_MACHINES), default="append")
    p.add_argument("--tick", type=float, default=0.05)
    p.add_argument("--election-tick", type=int, default=10)
    p.add_argument("--heartbeat-tick", type=int, default=2)
    p.add_argument("--snapshot-every", type=int, default=4096)
    p.add_argument("--no-early-messages", action="store_true",
                   help="a leader sends Appends only after its own fsync")
    p.add_argument("--wal-max-bytes", type=int, default=512 * 1024 * 1024)
    p.add_argument("--segment-max-entries", type=int, default=4096)
    args = p.parse_args(argv)
    try:
        trio.run(serve, args)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
