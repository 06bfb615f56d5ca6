"""Micro-benchmark of the quorum queue state machine (quorum/fifo): applies per second.

Not a test.  Run: python bench/fifo_bench.py [--n 200000]
Workloads:
  cycle     one consumer, prefetch 100: enqueue, then settle each delivery (3 applies
            per message counting the checkout once) - the hot path
  backlog   enqueue n messages, then one consumer drains them settling one by one
  competing 4 consumers round robin, settle in batches of 10
  codec     encode_command + decode_command of a 1 KiB Enqueue
"""
from __future__ import annotations

import argparse
import time

from quorum.fifo import (Checkout, ConsumerKey, Deliver, Enqueue, Meta, QueueConfig, Settle,
                         apply, decode_command, encode_command, init)


def _cycle(n: int) -> tuple[int, float]:
    q = init(QueueConfig(name="bench"), 0)
    c = ConsumerKey("ctag", "ch-1", "node-a")
    idx = 1
    apply(Meta(idx, 1, 0), Checkout(c, prefetch=100), q)
    applies = 1
    t0 = time.perf_counter()
    for i in range(n):
        idx += 1
        a = apply(Meta(idx, 1, i), Enqueue("pub", i + 1, 1024, b""), q)
        for e in a.effects:
            if type(e) is Deliver:
                idx += 1
                apply(Meta(idx, 1, i), Settle(c, tuple(d.msg_id for d in e.msgs)), q)
                applies += 1
        applies += 1
    return applies, time.perf_counter() - t0


def _backlog(n: int) -> tuple[int, float]:
    q = init(QueueConfig(name="bench"), 0)
    c = ConsumerKey("ctag", "ch-1", "node-a")
    t0 = time.perf_counter()
    idx = 0
    for i in range(n):
        idx += 1
        apply(Meta(idx, 1, i), Enqueue("pub", i + 1, 1024, b""), q)
    idx += 1
    pending = []
    for e in apply(Meta(idx, 1, n), Checkout(c, prefetch=1), q).effects:
        if type(e) is Deliver:
            pending.extend(d.msg_id for d in e.msgs)
    applies = n + 1
    while pending:
        mid = pending.pop()
        idx += 1
        for e in apply(Meta(idx, 1, n), Settle(c, (mid,)), q).effects:
            if type(e) is Deliver:
                pending.extend(d.msg_id for d in e.msgs)
        applies += 1
    return applies, time.perf_counter() - t0


def _competing(n: int) -> tuple[int, float]:
    q = init(QueueConfig(name="bench"), 0)
    keys = [ConsumerKey(f"t{i}", f"ch-{i}", f"node-{i % 3}") for i in range(4)]
    idx = 0
    for k in keys:
        idx += 1
        apply(Meta(idx, 1, 0), Checkout(k, prefetch=50), q)
    held: dict = {k: [] for k in keys}
    applies = 0
    t0 = time.perf_counter()
    for i in range(n):
        idx += 1
        for e in apply(Meta(idx, 1, i), Enqueue("pub", i + 1, 1024, b""), q).effects:
            if type(e) is Deliver:
                held[e.consumer].extend(d.msg_id for d in e.msgs)
        applies += 1
        for k, ids in held.items():
            if len(ids) >= 10:
                idx += 1
                apply(Meta(idx, 1, i), Settle(k, tuple(ids)), q)
                ids.clear()
                applies += 1
    return applies, time.perf_counter() - t0


def _codec(n: int) -> tuple[int, float]:
    cmd = Enqueue("ch-1", 1, 1024, b"x" * 1024, None, None, True)
    t0 = time.perf_counter()
    for _ in range(n):
        decode_command(encode_command(cmd))
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    for name, fn in [("cycle", _cycle), ("backlog", _backlog), ("competing", _competing),
                     ("codec", _codec)]:
        ops, dt = fn(args.n)
        print(f"{name:10s} {ops:9d} ops in {dt:6.2f}s = {ops / dt:10,.0f} ops/s")


if __name__ == "__main__":
    main()
