"""Confirm latency while a backlog drains: what a publisher waits for while another queue's
backlog is consumed, on this broker and on RabbitMQ in the same run.

For each broker and queue type: publish N x SIZE persistent messages with confirms to a fresh
durable queue (the backlog); then drain it (prefetch 2000, a multiple ack every 500) while a
second connection publishes one persistent message every 10 ms with confirms to another durable
queue of the same type, timing each confirm. Prints the drain rate and the side publisher's
confirm latency (p50, p99, max).

A store that rewrites its live data in one piece while the backlog drains shows up here as a
stall of every confirm: this broker's classic journal did so until it was split into segment
files (bench/quorum_notes.md, session 27: 2.8 s at 1,000,000 x 1 KiB, RabbitMQ 3.10 39 ms).

Usage:
  python bench/drain_latency.py --count 1000000                  # starts both brokers
  python bench/drain_latency.py --ours URL --rabbit URL --queue-types classic
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from contextlib import nullcontext

import pika

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from broker_bench import _declare_fresh, _given, _queue_args, our_broker, publisher, rabbitmq  # noqa: E402

SIDE_INTERVAL = 0.01


def side_publisher(url: str, queue: str, arguments: dict, stop: threading.Event,
                   latencies: list[float]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    while not stop.is_set():
        start = time.perf_counter()
        ch.basic_publish("", queue, b"side", persistent)   # returns once confirmed
        latencies.append(time.perf_counter() - start)
        time.sleep(SIDE_INTERVAL)
    conn.close()


def drain(url: str, queue: str, count: int) -> float:
    """Consume `count` messages from `queue`; returns the seconds it took."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got = 0
    start = time.perf_counter()
    for method, _, _ in ch.consume(queue, inactivity_timeout=30):
        if method is None:
            raise RuntimeError(f"{queue}: only {got} of {count} messages came back")
        got += 1
        if got % 500 == 0 or got == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == count:
            break
    elapsed = time.perf_counter() - start
    ch.cancel()
    conn.close()
    return elapsed


def measure(name: str, url: str, queue_type: str, args) -> dict:
    arguments = _queue_args(queue_type)
    _declare_fresh(url, "drain.backlog", arguments)
    _declare_fresh(url, "drain.side", arguments)
    publisher(url, "drain.backlog", args.count, args.size, args.window)
    latencies: list[float] = []
    stop = threading.Event()
    side = threading.Thread(target=side_publisher,
                            args=(url, "drain.side", arguments, stop, latencies))
    side.start()
    time.sleep(0.5)   # the side publisher's first confirms, before the drain starts
    try:
        seconds = drain(url, "drain.backlog", args.count)
    finally:
        stop.set()
        side.join()
    latencies.sort()
    figures = {
        "drain msg/s": args.count / seconds,
        "confirm p50 ms": 1000 * statistics.median(latencies),
        "confirm p99 ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "confirm max ms": 1000 * latencies[-1],
    }
    print(f"  {name:9} {queue_type:8} " + "  ".join(f"{k} {v:,.1f}" for k, v in figures.items()),
          flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", help="URL of this broker (default: start one)")
    parser.add_argument("--rabbit", help="URL of RabbitMQ (default: start one with .ci/rabbitmq.sh)")
    parser.add_argument("--no-rabbit", action="store_true", help="measure only this broker")
    parser.add_argument("--queue-types", nargs="+", default=["classic", "quorum"],
                        choices=["classic", "quorum"])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000)
    args = parser.parse_args()
    print(f"backlog of {args.count} x {args.size} B persistent messages drained while a side "
          f"publisher confirms one message every {SIDE_INTERVAL * 1000:.0f} ms")
    with (our_broker() if not args.ours else _given(args.ours)) as ours_url, \
            (nullcontext() if args.no_rabbit else rabbitmq() if not args.rabbit
             else _given(args.rabbit)) as rabbit_url:
        for queue_type in args.queue_types:
            ours = measure("ours", ours_url, queue_type, args)
            if rabbit_url:
                rabbit = measure("rabbitmq", rabbit_url, queue_type, args)
                print(f"  {'ratio':9} {queue_type:8} " + "  ".join(
                    f"{k} {ours[k] / rabbit[k]:.2f}" for k in ours), flush=True)


if __name__ == "__main__":
    main()
