"""Cluster benchmark: the same quorum-queue load against two 3-node clusters in one run, as ratios.

Our cluster (`amqp-broker-cluster`) and a RabbitMQ 3.10 cluster (`.ci/rabbitmq.sh cluster`), each
driven by bench/broker_bench.py's scenarios on a quorum queue with 3 replicas
(x-quorum-initial-group-size 3) and persistent messages of 16 B, 1 KiB and 64 KiB:

  publish   publisher with confirms (window W) on node 1, where the queue is declared
  e2e       publisher on node 1, consumer on node 2 (prefetch, per-message acks); msg/s until
            the consumer has acked all messages
  latency   publisher on node 1 paced at --rate msg/s, consumer on node 2; p50 / p99 in ms, node 1's CPU µs/msg

Usage:
  python bench/cluster_bench.py                              # starts both clusters itself
  python bench/cluster_bench.py --ours URL,URL,URL --rabbit URL,URL,URL
  python bench/cluster_bench.py --messages 20000 --sizes 1024

Without --rabbit it runs `.ci/rabbitmq.sh cluster start 3 PORT` (--rabbit-port); without --ours it
runs `amqp-broker-cluster start --nodes 3 --port PORT --data-dir DIR` (--ours-port); it stops what
it started at the end. Both clusters stay up for the whole run and the rounds alternate between
them (ours, rabbitmq, ours, ...), so a change in the machine's background load hits both sides
alike; each figure is the median over --rounds. Every run uses a new queue (see measure_round).
Numbers are only comparable within one run.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from amqp_wire import WireClient  # noqa: E402
from broker_bench import ROOT, SCENARIOS, delete_queue  # noqa: E402

NODES = 3
QUEUE_ARGUMENTS = {"x-queue-type": "quorum", "x-quorum-initial-group-size": NODES}


@dataclass
class Side:
    """One cluster under test: its node URLs and, when known, a management API URL."""

    name: str
    urls: list[str]
    mgmt: str | None = None


@contextmanager
def rabbit_cluster(port: int):
    script = os.path.join(ROOT, ".ci", "rabbitmq.sh")
    try:
        done = subprocess.run(["bash", script, "cluster", "start", str(NODES), str(port)],
                              check=True, stdout=subprocess.PIPE, text=True)
        yield Side("rabbitmq", done.stdout.split(), f"http://127.0.0.1:{port + 10000}")
    finally:
        subprocess.run(["bash", script, "cluster", "stop", str(NODES), str(port)],
                       stdout=subprocess.DEVNULL)


def _cluster_command() -> str:
    """`amqp-broker-cluster` beside the running Python (a venv), else on PATH."""
    beside = Path(sys.executable).with_name("amqp-broker-cluster")
    exe = str(beside) if beside.exists() else shutil.which("amqp-broker-cluster")
    if exe is None:
        sys.exit("amqp-broker-cluster is not installed (pip install -e .); "
                 "or pass --ours URL,URL,URL")
    return exe


def _log_tail(log_path: str) -> str:
    with open(log_path, "rb") as log:
        return log.read()[-2000:].decode(errors="replace")


def _read_nodes(proc: subprocess.Popen, log_path: str, timeout: float = 120.0) -> list[dict]:
    """The JSON line per node that `amqp-broker-cluster start` prints once the nodes are up."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    buf, nodes = b"", []
    while len(nodes) < NODES:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"amqp-broker-cluster start: {len(nodes)} of {NODES} nodes after "
                               f"{timeout:.0f} s; its stderr ends:\n{_log_tail(log_path)}")
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError(f"amqp-broker-cluster start exited ({proc.wait()}) after "
                               f"{len(nodes)} of {NODES} nodes; its stderr ends:\n"
                               f"{_log_tail(log_path)}")
        *lines, buf = (buf + chunk).split(b"\n")
        nodes += [json.loads(line) for line in lines if line.strip().startswith(b"{")]
    # Should the command stay in the foreground, keep its stdout drained so it never blocks.
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    return nodes


def _wait_amqp(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            WireClient(url).close()
            return
        except (OSError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def our_cluster(port: int, command: str | None = None):
    exe = command or _cluster_command()
    work = tempfile.mkdtemp(prefix="bench-cluster-")
    data, log_path = os.path.join(work, "data"), os.path.join(work, "cluster.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([exe, "start", "--nodes", str(NODES), "--port", str(port),
                                 "--data-dir", data], stdout=subprocess.PIPE, stderr=log)
    try:
        nodes = _read_nodes(proc, log_path)
        urls = [f"amqp://guest:guest@localhost:{node['amqp_port']}/" for node in nodes]
        for url in urls:
            _wait_amqp(url)
        yield Side("ours", urls, f"http://127.0.0.1:{nodes[0]['management_port']}")
    finally:
        subprocess.run([exe, "stop", "--data-dir", data], stdout=subprocess.DEVNULL)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def _members(mgmt: str, url: str, queue: str) -> list[str]:
    """The queue's replicas as the management API lists them (RabbitMQ's `members`)."""
    parts = urllib.parse.urlparse(url)
    auth = base64.b64encode(f"{parts.username or 'guest'}:{parts.password or 'guest'}".encode())
    request = urllib.request.Request(f"{mgmt}/api/queues/%2F/{urllib.parse.quote(queue, safe='')}",
                                     headers={"Authorization": "Basic " + auth.decode()})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply).get("members") or []


def check_members(side: Side, args) -> None:
    """Declare a queue as the load does and show its replicas: fewer than 3 would measure less."""
    queue = f"{args.queue}.members"
    url = side.urls[0]
    client = WireClient(url)
    client.queue_declare(queue, arguments=args.arguments)
    client.close()
    try:
        members = _members(side.mgmt, url, queue)
    finally:
        delete_queue(url, queue)
    print(f"  {side.name:9} a quorum queue declared on node 1 has members: {', '.join(members)}")
    if len(members) != NODES:
        print(f"  WARNING: {len(members)} members, not {NODES}", flush=True)


def measure_round(side: Side, args, round_no: int, samples: dict) -> list[str]:
    """Every scenario at every size once; appends to samples[(size, metric)] and returns the
    queues left behind (empty; the caller deletes them at the end).

    Every run gets a new queue, and the drained queues are deleted only at the end: RabbitMQ
    3.10.8 fails to start a member of a quorum queue declared again at once under a just deleted
    name (ra: already_started), and its segment writer crashes (enoent) when a queue is deleted
    while it still truncates that queue's segments; either way a member is missing and the
    consumer on node 2 waits for ever. The publish scenario deletes its full queue itself."""
    publish_url, consume_url = side.urls[0], side.urls[1 % len(side.urls)]
    left = []
    for size in args.sizes:
        for scenario in args.scenarios:
            queue = f"{args.queue}.{side.name}.{round_no}.{size}.{scenario}"
            load = argparse.Namespace(**{**vars(args), "size": size, "queue": queue})
            got = SCENARIOS[scenario](publish_url, load, consume_url)
            left.append(queue)
            print(f"  {side.name:9} round {round_no} {size:>6} B {scenario:8} "
                  + "  ".join(f"{k} {v:,.1f}" for k, v in got.items()), flush=True)
            for metric, value in got.items():
                samples.setdefault((size, metric), []).append(value)
    return left


def medians(samples: dict) -> dict:
    return {key: statistics.median(values) for key, values in samples.items()}


def report(ours: dict, rabbit: dict) -> None:
    print()
    print(f"{'size':>8}  {'metric':14} {'ours':>12} {'rabbitmq':>12} {'ratio':>8}")
    for (size, metric), value in ours.items():
        other = rabbit.get((size, metric))
        ratio = f"{value / other:8.2f}" if other else ""
        print(f"{size:>6} B  {metric:14} {value:12,.1f} {other or 0:12,.1f} {ratio:>8}")
    print("(ratio = ours / rabbitmq: above 1 is better for msg/s, below 1 is better for latency and CPU)")


def _given(name: str, urls: str) -> nullcontext:
    return nullcontext(Side(name, [url.strip() for url in urls.split(",") if url.strip()]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", help="our node URLs, comma-separated (default: start a cluster)")
    parser.add_argument("--rabbit", help="RabbitMQ node URLs, comma-separated (default: start one)")
    parser.add_argument("--ours-port", type=int, default=5691,
                        help="first AMQP port of our cluster when started here")
    parser.add_argument("--ours-command",
                        help="the amqp-broker-cluster to run (default: beside python, else PATH)")
    parser.add_argument("--rabbit-port", type=int, default=5681,
                        help="first AMQP port of the RabbitMQ cluster when started here")
    parser.add_argument("--messages", type=int, default=10000, help="messages per publish/e2e run")
    parser.add_argument("--rounds", type=int, default=3, help="report the median of this many")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 1024, 65536])
    parser.add_argument("--queue", default="bench.cluster.q")
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--rate", type=float, default=1000.0, help="latency scenario msg/s")
    parser.add_argument("--latency-seconds", type=float, default=3.0)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    args = parser.parse_args()
    args.count = args.messages
    args.arguments = QUEUE_ARGUMENTS

    print(f"quorum queue, {NODES} replicas, persistent messages of {args.sizes} B, "
          f"{args.messages} msgs, confirm window {args.window}, prefetch {args.prefetch}, "
          f"per-message acks; latency at {args.rate:g} msg/s for {args.latency_seconds:g} s; "
          f"publisher on node 1, consumer on node 2; median of {args.rounds} rounds")
    with ExitStack() as stack:
        sides = [stack.enter_context(_given("ours", args.ours) if args.ours
                                     else our_cluster(args.ours_port, args.ours_command)),
                 stack.enter_context(_given("rabbitmq", args.rabbit) if args.rabbit
                                     else rabbit_cluster(args.rabbit_port))]
        for side in sides:
            if side.mgmt:
                check_members(side, args)
        samples: dict[str, dict] = {side.name: {} for side in sides}
        left: dict[str, list[str]] = {side.name: [] for side in sides}
        for round_no in range(1, args.rounds + 1):
            for side in sides:
                left[side.name] += measure_round(side, args, round_no, samples[side.name])
        for side in sides:
            for queue in left[side.name]:
                delete_queue(side.urls[0], queue)
    report(medians(samples["ours"]), medians(samples["rabbitmq"]))


if __name__ == "__main__":
    main()
