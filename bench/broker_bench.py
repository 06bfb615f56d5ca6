"""Side-by-side broker benchmark: the same load against this broker and RabbitMQ, one run, ratios.

Scenarios (persistent messages, durable queue, publisher confirms with a window, prefetch and
per-message acks, as in DESIGN.md's reference figures):

  publish   one publisher, confirms window W, N messages; msg/s until the last confirm
  e2e       one publisher and one consumer in separate processes; msg/s until the consumer has
            acked all N
  latency   a publisher paced at a fixed rate, a consumer measuring publish->deliver latency;
            p50 / p99 in ms, and the broker process's CPU time (user + system, from /proc, of
            the process listening on the URL's port) per message over the run, in µs

Usage:
  python bench/broker_bench.py                       # starts our broker and RabbitMQ (5673) itself
  python bench/broker_bench.py --ours URL --rabbit URL --queue-type quorum --size 16
  python bench/broker_bench.py --ours URL --rabbit URL --rounds 5   # medians, ratio per round

Each side runs in its own processes from this machine; numbers are only comparable within a run.
`bench/cluster_bench.py` imports the scenarios (SCENARIOS) to run them against clusters, with the
consumer on another node than the publisher (`consume_url`) and its own queue arguments
(`args.arguments`).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import deque
from contextlib import contextmanager, nullcontext
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from amqp_wire import (FRAME_METHOD, WireClient, describe_close, method_ids,  # noqa: E402
                       parse_basic_ack, parse_deliver_tag)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from compat_tests.support.launcher import Broker  # noqa: E402


def _queue_args(queue_type: str) -> dict:
    return {"x-queue-type": queue_type} if queue_type != "classic" else {}


def delete_queue(url: str, queue: str) -> None:
    client = WireClient(url)
    try:
        client.queue_delete(queue)
        client.close()
    except RuntimeError:
        client.sock.close()


def _declare_fresh(url: str, queue: str, arguments: dict, visible_on: str | None = None) -> None:
    """Delete and declare `queue` on `url`; with `visible_on`, also wait until that node knows it
    (a cluster may apply the declaration on other nodes a little later)."""
    delete_queue(url, queue)
    client = WireClient(url)
    client.queue_declare(queue, durable=True, arguments=arguments)
    client.close()
    if visible_on and visible_on != url:
        _wait_visible(visible_on, queue)


def _wait_visible(url: str, queue: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        client = WireClient(url)
        try:
            client.queue_declare(queue, passive=True)
            client.close()
            return
        except RuntimeError:
            # 404 closes the channel; the connection is dropped with the client.
            client.sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _wait_consumer(cons: mp.Process, results, timeout: float = 300.0) -> tuple:
    """The consumer's result once the publisher is done; raises instead of waiting forever if the
    consumer died or still lacks messages after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return results.get(timeout=1)
        except queue_mod.Empty:
            if not cons.is_alive():
                raise RuntimeError(f"consumer process exited with code {cons.exitcode}") from None
            if time.monotonic() > deadline:
                cons.terminate()
                raise RuntimeError(f"consumer still short of messages {timeout:.0f} s after the "
                                   "last publish was confirmed") from None


def _handle_non_ack(payload: bytes) -> None:
    cls, meth = method_ids(payload)
    if (cls, meth) in ((10, 50), (20, 40)):
        raise RuntimeError(describe_close(payload))
    if (cls, meth) == (60, 120):
        raise RuntimeError("broker nacked a publish")


class ConfirmTracker:
    """Counts newly confirmed sequence numbers from basic.ack (single or multiple)."""

    def __init__(self):
        self._outstanding: deque[int] = deque()
        self._acked_singles: set[int] = set()

    def sent(self, seq: int) -> None:
        self._outstanding.append(seq)

    def ack(self, tag: int, multiple: bool) -> int:
        newly = 0
        if not multiple:
            self._acked_singles.add(tag)
        while self._outstanding and (
                (multiple and self._outstanding[0] <= tag) or self._outstanding[0] in self._acked_singles):
            seq = self._outstanding.popleft()
            self._acked_singles.discard(seq)
            newly += 1
        return newly


def publisher(url: str, queue: str, count: int, size: int, window: int, rate: float = 0.0,
              frames=None) -> float:
    """Publish `count` messages with confirms; return elapsed seconds until the last confirm.

    With `rate` > 0 the publisher paces itself and puts its send time in the first 8 body bytes.
    `frames(client, n)`, if given, builds the n-th publish (0-based) instead (another exchange,
    routing key or body; bench/partitioned_bench.py).
    """
    client = WireClient(url)
    client.confirm_select()
    body = bytearray(os.urandom(max(size, 8)))
    confirmed = 0
    sent = 0
    tracker = ConfirmTracker()
    start = time.perf_counter()
    while confirmed < count:
        while sent < count and sent - confirmed < window:
            if rate:
                due = start + sent / rate
                now = time.perf_counter()
                if due > now:
                    if client.frames_available():
                        break
                    time.sleep(min(due - now, 0.001))
                    continue
                struct.pack_into(">Q", body, 0, time.monotonic_ns())
            if frames is not None:
                client.send_raw(frames(client, sent))
            else:
                client.send_raw(client.publish_frames("", queue, bytes(body)))
            sent += 1
            tracker.sent(sent)
        if rate and sent < count and not client.frames_available():
            client.sock.settimeout(0.0005)
            try:
                client.recv_more()
            except (BlockingIOError, socket.timeout):
                pass
            finally:
                client.sock.settimeout(None)
            if not client.frames_available():
                continue
        ftype, _, payload = client.read_frame()
        if ftype != FRAME_METHOD:
            continue
        if method_ids(payload) == (60, 80):
            confirmed += tracker.ack(*parse_basic_ack(payload))
        else:
            _handle_non_ack(payload)
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


def consumer(url: str, queue: str, count: int, prefetch: int, results, measure_latency: bool) -> None:
    client = WireClient(url)
    client.qos(prefetch)
    client.consume(queue)
    received = 0
    latencies = []
    start = None
    out = bytearray()
    while received < count:
        ftype, _, payload = client.read_frame()
        if ftype == FRAME_METHOD:
            if method_ids(payload) == (60, 60):
                tag = parse_deliver_tag(payload)
                received += 1
                out += client.ack_frame(tag)
                if start is None:
                    start = time.perf_counter()
            else:
                _handle_non_ack(payload)
        elif ftype == 3 and measure_latency:
            sent_ns = struct.unpack_from(">Q", payload, 0)[0]
            latencies.append((time.monotonic_ns() - sent_ns) / 1e6)
        if out and not client.frames_available():
            client.send_raw(bytes(out))
            out.clear()
    if out:
        client.send_raw(bytes(out))
    results.put((time.perf_counter(), latencies))
    client.close()


# Each scenario publishes on `url` and consumes on `consume_url` (default: the same node). The
# queue is declared on `url` with `args.arguments`.

def run_publish(url: str, args, consume_url: str | None = None) -> dict:
    _declare_fresh(url, args.queue, args.arguments)
    elapsed = publisher(url, args.queue, args.count, args.size, args.window)
    delete_queue(url, args.queue)  # frees the messages before the next scenario
    return {"publish msg/s": args.count / elapsed}


def run_e2e(url: str, args, consume_url: str | None = None) -> dict:
    consume_url = consume_url or url
    _declare_fresh(url, args.queue, args.arguments, visible_on=consume_url)
    results = mp.Queue()
    cons = mp.Process(target=consumer,
                      args=(consume_url, args.queue, args.count, args.prefetch, results, False))
    cons.start()
    time.sleep(0.3)
    start = time.perf_counter()
    publisher(url, args.queue, args.count, args.size, args.window)
    end, _ = _wait_consumer(cons, results)
    cons.join()
    return {"e2e msg/s": args.count / (end - start)}


def run_latency(url: str, args, consume_url: str | None = None) -> dict:
    consume_url = consume_url or url
    _declare_fresh(url, args.queue, args.arguments, visible_on=consume_url)
    count = int(args.rate * args.latency_seconds)
    results = mp.Queue()
    cons = mp.Process(target=consumer,
                      args=(consume_url, args.queue, count, args.prefetch, results, True))
    cons.start()
    time.sleep(0.3)
    # one broker process when publisher and consumer share a node (a cluster's other nodes
    # work too, and are not counted)
    pid = listening_pid(urllib.parse.urlsplit(url).port or 5672)
    cpu_before = process_cpu_seconds(pid)
    publisher(url, args.queue, count, args.size, args.window, rate=args.rate)
    _, latencies = _wait_consumer(cons, results)
    cpu_used = process_cpu_seconds(pid) - cpu_before
    cons.join()
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    return {"p50 ms": statistics.median(latencies), "p99 ms": p99,
            "cpu µs/msg": cpu_used / count * 1e6}


def listening_pid(port: int) -> int:
    """The pid of the process listening on TCP `port` of this machine (ours or beam.smp)."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout
    match = re.search(r"pid=(\d+)", out)
    if match is None:
        raise RuntimeError(f"no process found listening on port {port} (ss -ltnp)")
    return int(match.group(1))


def process_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SCENARIOS = {"publish": run_publish, "e2e": run_e2e, "latency": run_latency}


@contextmanager
def our_broker():
    work = tempfile.mkdtemp(prefix="bench-broker-")
    broker = Broker(Path(work)).start()
    try:
        yield broker.url
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def rabbitmq():
    script = os.path.join(ROOT, ".ci", "rabbitmq.sh")
    subprocess.run(["bash", script, "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        yield "amqp://guest:guest@127.0.0.1:5673/"
    finally:
        subprocess.run(["bash", script, "stop"], stdout=subprocess.DEVNULL)


def measure(name: str, url: str, args) -> dict:
    figures = {}
    for scenario in args.scenarios:
        figures.update(SCENARIOS[scenario](url, args))
        print(f"  {name:9} {scenario:8} " + "  ".join(f"{k} {v:,.1f}" for k, v in figures.items()
                                                      if k.split()[0] in (scenario, "p50", "p99", "cpu")
                                                      or scenario in k), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", help="URL of this broker (default: start one)")
    parser.add_argument("--rabbit", help="URL of RabbitMQ (default: start one with .ci/rabbitmq.sh)")
    parser.add_argument("--no-rabbit", action="store_true", help="measure only this broker")
    parser.add_argument("--queue", default="bench.q")
    parser.add_argument("--queue-type", default="classic", choices=["classic", "quorum"])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--rate", type=float, default=1000.0, help="latency scenario msg/s")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the scenarios this many times, ours then RabbitMQ each round; "
                             "with more than one, the table gives medians and each round's ratio")
    args = parser.parse_args()
    args.arguments = _queue_args(args.queue_type)

    print(f"{args.queue_type} durable queue, {args.size} B persistent messages, {args.count} msgs, "
          f"confirm window {args.window}, prefetch {args.prefetch}, per-message acks")
    rounds: list[tuple[dict, dict | None]] = []
    with (our_broker() if not args.ours else _given(args.ours)) as ours_url, \
            (nullcontext() if args.no_rabbit else rabbitmq() if not args.rabbit
             else _given(args.rabbit)) as rabbit_url:
        for number in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"round {number}", flush=True)
            ours = measure("ours", ours_url, args)
            rabbit = measure("rabbitmq", rabbit_url, args) if rabbit_url else None
            rounds.append((ours, rabbit))
    print_table(rounds)


def print_table(rounds: list[tuple[dict, dict | None]]) -> None:
    """One row per figure: ours, RabbitMQ and their ratio; over several rounds the medians, and
    the ratio of each round (a machine whose speed drifts moves both sides of a round alike)."""
    many = len(rounds) > 1
    print()
    print(f"{'metric':16} {'ours':>12} {'rabbitmq':>12} {'ratio':>8}" + ("   ratio per round" if many else ""))
    for key in rounds[0][0]:
        ours = statistics.median(o[key] for o, _ in rounds)
        others = [r.get(key) for _, r in rounds if r is not None and r.get(key) is not None]
        if len(others) != len(rounds):
            print(f"{key:16} {ours:12,.1f}")
            continue
        ratios = [o[key] / r[key] for o, r in rounds]
        line = f"{key:16} {ours:12,.1f} {statistics.median(others):12,.1f} {statistics.median(ratios):8.2f}"
        if many:
            line += "   " + " ".join(f"{x:.2f}" for x in ratios)
        print(line)
    print("(ratio = ours / rabbitmq: above 1 is better for msg/s, below 1 is better for latency and CPU"
          + ("; medians over the rounds)" if many else ")"))


@contextmanager
def _given(url: str):
    yield url


if __name__ == "__main__":
    main()
