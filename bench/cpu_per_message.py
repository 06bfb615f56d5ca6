"""Broker CPU time per message: the broker process's user+system CPU (from /proc) over a fixed
pika workload (publish N transient 256-byte messages to a classic queue, then consume them with
manual acks, prefetch 500), divided by N. CPU time, unlike msg/s, barely moves when other work
shares the machine, so it shows small per-message costs that throughput noise hides.

    python bench/cpu_per_message.py [--messages 20000] [--rounds 3] [--tree DIR ...]

Each --tree is a checkout whose broker is measured (PYTHONPATH=DIR for the broker process);
rounds alternate between trees. Prints µs of broker CPU per message, each round and the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_CHILD = r'''
import os, sys, tempfile, pathlib
sys.path.insert(0, sys.argv[1])
import pika
from compat_tests.support.launcher import Broker

def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

n = int(sys.argv[2])
with Broker(pathlib.Path(tempfile.mkdtemp())).start() as b:
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("cpu.q")
    body = b"x" * 256
    for _ in range(200):  # warm up
        ch.basic_publish("", "cpu.q", body)
    ch.queue_purge("cpu.q")
    before = cpu(b.proc.pid)
    for _ in range(n):
        ch.basic_publish("", "cpu.q", body)
    ch.basic_qos(prefetch_count=500)
    got = 0
    for method, _p, _b in ch.consume("cpu.q"):
        ch.basic_ack(method.delivery_tag)
        got += 1
        if got == n:
            break
    ch.cancel()
    after = cpu(b.proc.pid)
    conn.close()
print((after - before) / n * 1e6)
'''


def measure(tree: str, messages: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, "-c", _CHILD, tree, str(messages)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", action="append", default=None)
    args = ap.parse_args()
    trees = args.tree or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    results: dict[str, list[float]] = {t: [] for t in trees}
    for r in range(args.rounds):
        for t in trees:
            us = measure(t, args.messages)
            results[t].append(us)
            print(f"round {r + 1} {t}: {us:.1f} µs broker CPU per message", flush=True)
    for t, xs in results.items():
        print(f"median {t}: {statistics.median(xs):.1f} µs per message ({len(xs)} rounds)")


if __name__ == "__main__":
    main()
