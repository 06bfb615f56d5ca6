"""Real processes: a 3-node group on loopback, kill -9 the leader under load, restart it.

Every proposal a client saw committed must be applied on the survivors and on the restarted
node, in the same order everywhere, exactly once. Each node is its own OS process
(`demo_node.py`, run as a script) with its own data directory, small WAL and frequent snapshots
so that rollover, segments and snapshot installation all take part.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import trio

from compat_tests.support.launcher import free_ports

from . import demo_node
from .demo_node import DemoClient

pytestmark = pytest.mark.trio

NAMES = ["n1", "n2", "n3"]


class Cluster:
    def __init__(self, root) -> None:
        ports = free_ports(6)
        self.root = root
        self.raft_ports = dict(zip(NAMES, ports[:3]))
        self.client_addrs = {n: ("127.0.0.1", p) for n, p in zip(NAMES, ports[3:])}
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, name: str) -> None:
        peers = ",".join(f"{n}=127.0.0.1:{p}" for n, p in self.raft_ports.items())
        cmd = [sys.executable, demo_node.__file__, "--id", name,
               "--data", str(self.root / name), "--peers", peers,
               "--client-port", str(self.client_addrs[name][1]), "--secret", "kill9-cookie",
               "--tick", "0.05", "--snapshot-every", "60", "--wal-max-bytes", "12000",
               "--segment-max-entries", "64"]
        err = open(self.root / f"{name}.stderr", "ab")
        self.procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)

    def kill9(self, name: str) -> None:
        p = self.procs[name]
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


async def status(client: DemoClient, node: str) -> dict | None:
    try:
        return await client.call(node, {"op": "status"})
    except ConnectionError:
        return None


async def find_leader(client: DemoClient, among: list[str]) -> str:
    while True:
        for n in among:
            st = await status(client, n)
            if st and st["is_leader"]:
                return n
        await trio.sleep(0.05)


async def applied(client: DemoClient, node: str) -> list[str]:
    return (await client.call(node, {"op": "applied"}))["applied"]


async def test_kill9_leader_loses_no_committed_proposal(tmp_path):
    cluster = Cluster(tmp_path)
    for n in NAMES:
        cluster.spawn(n)
    committed: list[str] = []
    alive = list(NAMES)
    guess = {"leader": None}
    try:
        async with trio.open_nursery() as nursery:
            client = DemoClient(nursery, cluster.client_addrs)
            phase = ["starting"]
            with trio.move_on_after(120) as deadline:
                guess["leader"] = await find_leader(client, alive)
                stop = trio.Event()

                async def proposer(k: int) -> None:
                    i = 0
                    while not stop.is_set():
                        cmd = f"p{k}-{i}"
                        i += 1
                        target = guess["leader"] or alive[0]
                        try:
                            resp = await client.call(target, {"op": "propose", "data": cmd})
                        except ConnectionError:
                            guess["leader"] = None
                            await trio.sleep(0.05)
                            guess["leader"] = await find_leader(client, alive)
                            continue
                        if resp["ok"]:
                            committed.append(cmd)
                        else:
                            hint = resp.get("leader")
                            guess["leader"] = hint if hint in alive else None
                            await trio.sleep(0.02)
                            if guess["leader"] is None:
                                guess["leader"] = await find_leader(client, alive)

                async with trio.open_nursery() as load:
                    for k in range(8):
                        load.start_soon(proposer, k)
                    while len(committed) < 250:
                        await trio.sleep(0.01)
                    phase[0] = "kill"
                    victim = guess["leader"] or await find_leader(client, alive)
                    at_kill = len(committed)
                    cluster.kill9(victim)  # proposals are in flight to it right now
                    alive.remove(victim)
                    while len(committed) < at_kill + 250:  # a new leader takes over
                        await trio.sleep(0.01)
                    phase[0] = "stopping load"
                    stop.set()

                phase[0] = "catch up"
                cluster.spawn(victim)
                alive.append(victim)
                # the restarted node catches up (log replay, appends or a snapshot install)
                while True:
                    lists = {}
                    for n in NAMES:
                        try:
                            lists[n] = await applied(client, n)
                        except ConnectionError:
                            break
                    if len(lists) == 3 and len({tuple(v) for v in lists.values()}) == 1 \
                            and set(committed) <= set(lists[victim]):
                        break
                    await trio.sleep(0.1)
            if deadline.cancelled_caught:
                report = {}
                for n in NAMES:
                    with trio.move_on_after(2):
                        report[n] = await status(client, n)
                logs = {n: (tmp_path / f"{n}.stderr").read_text()[-3000:] for n in NAMES}
                pytest.fail(f"stuck in phase {phase[0]!r} with {len(committed)} committed: "
                            f"{report}\nstderr: {logs}")
            await client.aclose()
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()

    final = lists[NAMES[0]]
    assert len(final) == len(set(final)), "a command was applied twice"
    assert set(committed) <= set(final)
    for n in NAMES:
        assert lists[n] == final
    # each proposer's committed commands appear in the order it issued them
    pos = {c: i for i, c in enumerate(final)}
    for k in range(8):
        mine = [pos[c] for c in committed if c.startswith(f"p{k}-")]
        assert mine == sorted(mine)
