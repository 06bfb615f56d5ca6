"""Raft commit throughput: a 3-node group on loopback, each node its own process, fsync on.

Measures commands committed (and applied on the leader) per second at 1 and 100 concurrent
proposers with 16 B and 1 KiB commands, and how many fdatasyncs each committed command cost
(on the leader, and summed over the three nodes). Group commit is what brings the fsync count
per command below 1. Not a test: one run, numbers printed as a table.

    python bench/raft_bench.py               # about a minute and a half
    python bench/raft_bench.py --seconds 3   # quicker, noisier

The client is one trio process speaking the demo node's JSON protocol; on a 2-core machine it
competes with the three nodes for CPU, so the numbers are a floor for the Raft path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
from compat_tests.support.launcher import free_ports  # noqa: E402
from tests.quorum_integration import demo_node  # noqa: E402
from tests.quorum_integration.demo_node import DemoClient  # noqa: E402

NAMES = ["n1", "n2", "n3"]


def spawn_cluster(root: str, extra: list[str]) -> tuple[list[subprocess.Popen], dict[str, tuple[str, int]]]:
    ports = free_ports(6)
    peers = ",".join(f"{n}=127.0.0.1:{p}" for n, p in zip(NAMES, ports[:3]))
    addrs = {n: ("127.0.0.1", p) for n, p in zip(NAMES, ports[3:])}
    procs = []
    for n in NAMES:
        cmd = [sys.executable, demo_node.__file__, "--id", n, "--data", os.path.join(root, n),
               "--peers", peers, "--client-port", str(addrs[n][1]), "--machine", "count",
               "--tick", "0.05", "--wal-max-bytes", str(64 * 1024 * 1024), *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
    return procs, addrs


async def find_leader(client: DemoClient) -> str:
    while True:
        for n in NAMES:
            try:
                st = await client.call(n, {"op": "status"})
            except ConnectionError:
                continue
            if st["is_leader"]:
                return n
        await trio.sleep(0.05)


async def fsyncs(client: DemoClient) -> dict[str, int]:
    out = {}
    for n in NAMES:
        st = await client.call(n, {"op": "status"})
        out[n] = st["stats"]["log"]["fsyncs"]
    return out


async def run_case(client: DemoClient, leader: str, proposers: int, size: int, seconds: float) -> dict:
    payload = "x" * size
    done = 0
    before = await fsyncs(client)
    deadline = trio.current_time() + seconds
    start = time.perf_counter()

    async def proposer() -> None:
        nonlocal done
        while trio.current_time() < deadline:
            resp = await client.call(leader, {"op": "propose", "data": payload})
            if not resp["ok"]:
                raise RuntimeError(f"leader changed during the run: {resp}")
            done += 1

    async with trio.open_nursery() as nursery:
        for _ in range(proposers):
            nursery.start_soon(proposer)
    elapsed = time.perf_counter() - start
    after = await fsyncs(client)
    total = sum(after[n] - before[n] for n in NAMES)
    return {"proposers": proposers, "size": size, "committed": done, "rate": done / elapsed,
            "leader_fsyncs": (after[leader] - before[leader]) / max(done, 1),
            "all_fsyncs": total / max(done, 1)}


async def main_async(seconds: float, extra: list[str]) -> list[dict]:
    root = tempfile.mkdtemp(prefix="raft-bench-")
    procs, addrs = spawn_cluster(root, extra)
    try:
        async with trio.open_nursery() as nursery:
            client = DemoClient(nursery, addrs)
            with trio.fail_after(30):
                leader = await find_leader(client)
            await run_case(client, leader, 4, 16, 1.0)  # warm-up
            rows = []
            for proposers in (1, 100):
                for size in (16, 1024):
                    rows.append(await run_case(client, leader, proposers, size, seconds))
            await client.aclose()
            nursery.cancel_scope.cancel()
        return rows
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="Raft commit throughput on loopback")
    ap.add_argument("--seconds", type=float, default=15.0, help="per case")
    ap.add_argument("--no-early-messages", action="store_true",
                    help="leaders send Appends only after their own fsync")
    args = ap.parse_args()
    extra = ["--no-early-messages"] if args.no_early_messages else []
    rows = trio.run(main_async, args.seconds, extra)
    print(f"{'proposers':>9} {'size':>6} {'committed':>10} {'cmds/s':>9} {'fsync/cmd leader':>17} "
          f"{'fsync/cmd 3 nodes':>18}")
    for r in rows:
        print(f"{r['proposers']:>9} {r['size']:>6} {r['committed']:>10} {r['rate']:>9.0f} "
              f"{r['leader_fsyncs']:>17.3f} {r['all_fsyncs']:>18.3f}")


if __name__ == "__main__":
    main()
