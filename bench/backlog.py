"""Backlog benchmark: N messages left in a durable quorum and a durable classic queue, on this
broker and on RabbitMQ in the same run.

For each broker: publish N x SIZE persistent messages with confirms to a fresh quorum queue,
then to a fresh classic queue; record the process's RSS (VmRSS from /proc) before and after
each, i.e. RSS per queued message; then kill -9 the broker with both backlogs in place, start
it again on the same data and time how long until both queues report all N messages again
(recovery); then consume everything back and record the RSS at the end. Each message carries
its sequence number in its first 8 body bytes, and the consumer checks that every queue gives
back 0..N-1 exactly in publish order (the script fails otherwise).

RabbitMQ's classic queue is declared with `x-queue-mode: lazy` unless `--rabbit-classic-mode
default` is given: RabbitMQ 3.10's documented setting for queues of millions of messages (its
default mode holds about 4 KB per 1 KiB message in memory, so at 10 million it passes its memory
watermark and blocks the publisher). This broker's classic queue pages on its own and is declared
without arguments.

Usage (by hand; RabbitMQ 3.10 through .ci/rabbitmq.sh on a port of your own):
  python bench/backlog.py --count 1000000 --size 1024 --rabbit-port 5675
  python bench/backlog.py --count 2000 --no-rabbit          # the small size CI runs

Numbers are only comparable within one run (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import multiprocessing as mp
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from amqp_wire import FRAME_METHOD, WireClient, method_ids, parse_deliver_tag  # noqa: E402
from broker_bench import _declare_fresh, _handle_non_ack, publisher  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from compat_tests.support.launcher import Broker  # noqa: E402

SCRIPT = os.path.join(ROOT, ".ci", "rabbitmq.sh")
QUEUES = {"quorum": {"x-queue-type": "quorum"}, "classic": {}}
MiB = 1024 * 1024


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Ours:
    name = "ours"
    queue_args = QUEUES

    def __init__(self) -> None:
        self.work = tempfile.mkdtemp(prefix="bench-backlog-")
        self.broker = Broker(Path(self.work), management=False)

    def start(self) -> None:
        self.broker.start(timeout=3600)

    @property
    def url(self) -> str:
        return self.broker.url

    def pid(self) -> int:
        return self.broker.proc.pid

    def kill(self) -> None:
        self.broker.kill()

    def close(self) -> None:
        self.broker.stop()
        shutil.rmtree(self.work, ignore_errors=True)


class Rabbit:
    name = "RabbitMQ"

    def __init__(self, port: int, classic_mode: str) -> None:
        self.port = port
        self.queue_args = dict(QUEUES)
        if classic_mode != "default":
            self.queue_args["classic"] = {"x-queue-mode": classic_mode}
        self.base = Path(os.environ.get("RMQ_STATE_ROOT", tempfile.gettempdir())) / \
            f"rabbitmq-compat-{port}"
        self._started = False

    def _sh(self, *args: str) -> None:
        # a restart with millions of messages recovers for minutes before it listens (the
        # script's own default of 90 s is for tests)
        env = {**os.environ, "RMQ_START_TIMEOUT": os.environ.get("RMQ_START_TIMEOUT", "3600")}
        subprocess.run(["bash", SCRIPT, *args], check=True, stdout=subprocess.DEVNULL, env=env)

    def start(self) -> None:
        self._sh("resume" if self._started else "start", str(self.port), str(self.port + 10000))
        self._started = True

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def pid(self) -> int:
        return int((self.base / "rabbitmq.pid").read_text().strip())

    def kill(self) -> None:
        self._sh("kill", str(self.port))

    def close(self) -> None:
        subprocess.run(["bash", SCRIPT, "stop", str(self.port)], stdout=subprocess.DEVNULL)


def queue_count(url: str, name: str) -> int | None:
    """Messages in `name`, or None while the queue is not available yet."""
    try:
        client = WireClient(url)
    except OSError:
        return None
    try:
        return client.queue_declare(name, passive=True).message_count
    except (RuntimeError, OSError):
        return None
    finally:
        try:
            client.close()
        except (OSError, RuntimeError):
            client.sock.close()


def wait_counts(url: str, names: list[str], n: int, timeout: float) -> float:
    start = time.perf_counter()
    deadline = start + timeout
    pending = list(names)
    while pending:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"queues {pending} not back with {n} messages in {timeout}s")
        if queue_count(url, pending[0]) == n:
            pending.pop(0)
        else:
            time.sleep(0.1)
    return time.perf_counter() - start


def publish_numbered(url: str, queue: str, args) -> float:
    """Publish with confirms (broker_bench's publisher), message n's body starting with n
    (8 bytes, big-endian); seconds until the last confirm."""
    body = bytearray(os.urandom(max(args.size, 8)))

    def frames(client: WireClient, n: int) -> bytes:
        struct.pack_into(">Q", body, 0, n)
        return client.publish_frames("", queue, bytes(body))
    return publisher(url, queue, args.count, args.size, args.window, frames=frames)


def ordered_consumer(url: str, queue: str, count: int, results) -> None:
    """Consume `count` messages (prefetch 500, acks) and check that their first body frames
    carry 0..count-1 in order; put None, or what went wrong, on `results`."""
    client = WireClient(url)
    client.qos(500)
    client.consume(queue)
    expected, first_body, problem = 0, False, None
    out = bytearray()
    while expected < count:
        ftype, _, payload = client.read_frame()
        if ftype == FRAME_METHOD:
            if method_ids(payload) == (60, 60):
                out += client.ack_frame(parse_deliver_tag(payload))
                first_body = True
            else:
                _handle_non_ack(payload)
        elif ftype == 3 and first_body:
            first_body = False
            seq = struct.unpack_from(">Q", payload, 0)[0]
            if seq != expected and problem is None:
                problem = f"{queue}: message {expected} expected, got {seq}"
            expected += 1
        if out and not client.frames_available():
            client.send_raw(bytes(out))
            out.clear()
    if out:
        client.send_raw(bytes(out))
    results.put(problem)
    client.close()


def consume_in_order(url: str, name: str, n: int) -> float:
    """Seconds to consume the `n` messages of `name`; raises if they come back out of order."""
    results = mp.Queue()
    start = time.perf_counter()
    proc = mp.Process(target=ordered_consumer, args=(url, name, n, results))
    proc.start()
    problem = results.get(timeout=3600)
    proc.join()
    if problem is not None:
        raise RuntimeError(problem)
    return time.perf_counter() - start


def run(side, args) -> dict:
    out: dict = {}
    side.start()
    try:
        for qtype, qargs in side.queue_args.items():
            name = f"backlog.{qtype}"
            _declare_fresh(side.url, name, qargs)
            time.sleep(1.0)
            before = rss(side.pid())
            elapsed = publish_numbered(side.url, name, args)
            time.sleep(2.0)
            after = rss(side.pid())
            out[f"{qtype} publish msg/s"] = args.count / elapsed
            out[f"{qtype} RSS B/msg"] = (after - before) / args.count
            print(f"  {side.name:9} {qtype:8} published {args.count} in {elapsed:.1f}s, "
                  f"RSS {before / MiB:.0f} -> {after / MiB:.0f} MiB "
                  f"({out[f'{qtype} RSS B/msg']:.0f} B per queued message)", flush=True)
        out["RSS MiB with backlog"] = rss(side.pid()) / MiB
        side.kill()
        t0 = time.perf_counter()
        side.start()
        out["recovery s"] = time.perf_counter() - t0 + wait_counts(
            side.url, [f"backlog.{q}" for q in QUEUES], args.count, 3600)
        print(f"  {side.name:9} kill -9 + restart: both queues back with {args.count} in "
              f"{out['recovery s']:.1f}s", flush=True)
        for qtype in QUEUES:
            took = consume_in_order(side.url, f"backlog.{qtype}", args.count)
            out[f"{qtype} consume msg/s"] = args.count / took
            print(f"  {side.name:9} {qtype:8} all {args.count} consumed back in publish order",
                  flush=True)
        time.sleep(2.0)
        out["RSS MiB drained"] = rss(side.pid()) / MiB
        print(f"  {side.name:9} drained: RSS {out['RSS MiB drained']:.0f} MiB", flush=True)
    finally:
        side.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rabbit-port", type=int, default=5675,
                        help="AMQP port of the private RabbitMQ (.ci/rabbitmq.sh; mgmt +10000)")
    parser.add_argument("--no-rabbit", action="store_true")
    parser.add_argument("--rabbit-only", action="store_true",
                        help="run RabbitMQ's side alone (e.g. to repeat it after a failure)")
    parser.add_argument("--rabbit-classic-mode", choices=["lazy", "default"], default="lazy",
                        help="x-queue-mode of RabbitMQ's classic queue (see above)")
    args = parser.parse_args()
    print(f"backlog: {args.count} x {args.size} B, persistent, confirms (window {args.window})")
    results = {} if args.rabbit_only else {"ours": run(Ours(), args)}
    if not args.no_rabbit:
        results["RabbitMQ"] = run(Rabbit(args.rabbit_port, args.rabbit_classic_mode), args)
    if len(results) == 1:
        (name, figures), = results.items()
        print(f"\n| figure | {name} |\n|---|---|")
        for k, v in figures.items():
            print(f"| {k} | {v:,.1f} |")
        return
    print("\n| figure | ours | RabbitMQ | ratio |\n|---|---|---|---|")
    for k, ours in results["ours"].items():
        theirs = results["RabbitMQ"][k]
        print(f"| {k} | {ours:,.1f} | {theirs:,.1f} | "
              f"{ours / theirs if theirs else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
