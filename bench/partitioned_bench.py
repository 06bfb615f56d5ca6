"""Partitioned queue benchmark: 16 partitions, 4 consumers, 1 KiB persistent messages,
publisher confirms (window 1000) and per-message acks; and the pause of each partition handoff.

  throughput  one publisher (keys k0..k63 as routing keys through an exchange) and 4 consumer
              processes acking every message: msg/s until all N are acked; beside RabbitMQ's
              hand-built equivalent, a consistent-hash exchange in front of 16 quorum queues
              with single-active-consumer (each consumer first subscribes to its 4 queues, then
              to the other 12 as standby), so both sides deliver each key to one consumer.
  reference   ours: the same load into one quorum queue with 4 competing consumers (no key
              order), to show what the partitioning costs.
  handoff     (ours only: RabbitMQ's equivalent never rebalances) a publisher paced at --rate
              msg/s; 3 consumers, a 4th joins after 2 s, the first leaves (closes its
              connection) after 5 s. For each partition whose consumer changed: the pause, from
              the old owner's last delivery of the partition to the new owner's first, beside
              the partition's usual gap between two deliveries.

Usage:
  python bench/partitioned_bench.py                   # starts our broker and RabbitMQ (5676)
  python bench/partitioned_bench.py --no-rabbit --count 20000

Numbers are only comparable within one run on one machine.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from amqp_wire import FRAME_METHOD, WireClient, method_ids, parse_deliver_tag  # noqa: E402
from broker_bench import _handle_non_ack, our_broker  # noqa: E402
from broker_bench import publisher as bench_publisher  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTITIONS = 16
CONSUMERS = 4
KEYS = 64
EXCHANGE = "pbench.x"
QUEUE = "pbench.q"
RABBIT_PORT, RABBIT_MGMT = 5676, 15676
_BODY_HEAD = struct.Struct(">QI")   # send time (monotonic ns), key number


def _pika(url: str):
    import pika
    return pika.BlockingConnection(pika.URLParameters(url))


# -- topology ----------------------------------------------------------------------------------

def setup_ours(url: str, handoff_ms: int, delay_ms: int) -> list[str]:
    conn = _pika(url)
    ch = conn.channel()
    ch.queue_delete(QUEUE)
    ch.exchange_declare(EXCHANGE, "fanout", durable=True)
    ch.queue_declare(QUEUE, durable=True, arguments={
        "x-queue-type": "partitioned", "x-partitions": PARTITIONS,
        "x-partition-handoff-timeout": handoff_ms, "x-partition-rebalance-delay": delay_ms})
    ch.queue_bind(QUEUE, EXCHANGE)
    conn.close()
    return [QUEUE]


def setup_rabbit(url: str) -> list[str]:
    conn = _pika(url)
    ch = conn.channel()
    ch.exchange_declare(EXCHANGE, "x-consistent-hash", durable=True)
    queues = [f"{QUEUE}.{i}" for i in range(PARTITIONS)]
    for q in queues:
        ch.queue_delete(q)
        ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum",
                                                     "x-single-active-consumer": True})
        ch.queue_bind(q, EXCHANGE, routing_key="1")   # equal weights
    conn.close()
    return queues


def setup_quorum(url: str) -> list[str]:
    """Reference only: one quorum queue with 4 competing consumers (no per-key order)."""
    conn = _pika(url)
    ch = conn.channel()
    ch.queue_delete(QUEUE + ".quorum")
    ch.exchange_declare(EXCHANGE, "fanout", durable=True)
    ch.queue_declare(QUEUE + ".quorum", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind(QUEUE + ".quorum", EXCHANGE)
    conn.close()
    return [QUEUE + ".quorum"]


def teardown(url: str, queues: list[str]) -> None:
    conn = _pika(url)
    ch = conn.channel()
    for q in queues:
        ch.queue_delete(q)
    ch.exchange_delete(EXCHANGE)
    conn.close()


# -- clients -----------------------------------------------------------------------------------

def publisher(url: str, count: int, size: int, window: int, rate: float) -> float:
    """broker_bench's confirming publisher with keyed messages: routing key k0..k63 through
    EXCHANGE, body = send time, key number, padding. Seconds until the last confirm."""
    pad = os.urandom(max(0, size - _BODY_HEAD.size))

    def keyed(client: WireClient, n: int) -> bytes:
        key = n % KEYS
        body = _BODY_HEAD.pack(time.monotonic_ns(), key) + pad
        return client.publish_frames(EXCHANGE, f"k{key}", body)

    return bench_publisher(url, "", count, size, window, rate, frames=keyed)


def consumer(url: str, own: list[str], standby: list[str], prefetch: int, total: int,
             done, results, name: str, leave_after: float = 0.0) -> None:
    """Consume and ack until `done` (shared count) reaches `total` or, with `leave_after`,
    until that many seconds have passed (then close). Puts (name, [(recv ns, key)])."""
    client = WireClient(url)
    client.qos(prefetch)
    for q in own:
        client.consume(q, tag=f"{name}-{q}")
    if standby:
        time.sleep(1.0)   # the other consumers take their own queues first
        for q in standby:
            client.consume(q, tag=f"{name}-{q}")
    client.sock.settimeout(0.2)
    log: list[tuple[int, int]] = []
    out = bytearray()
    tag = None   # the delivery whose body comes next: acked once its body is read
    end = time.monotonic() + leave_after if leave_after else None
    while done.value < total and (end is None or time.monotonic() < end):
        try:
            ftype, _, payload = client.read_frame()
        except socket.timeout:
            continue
        if ftype == FRAME_METHOD:
            if method_ids(payload) == (60, 60):
                tag = parse_deliver_tag(payload)
            else:
                _handle_non_ack(payload)
        elif ftype == 3 and tag is not None:
            out += client.ack_frame(tag)
            tag = None
            log.append((time.monotonic_ns(), _BODY_HEAD.unpack_from(payload, 0)[1]))
            with done.get_lock():
                done.value += 1
        if out and not client.frames_available():
            client.send_raw(bytes(out))
            out.clear()
    if out:
        client.send_raw(bytes(out))
    client.sock.settimeout(None)
    client.close()
    results.put((name, log))


# -- scenarios ---------------------------------------------------------------------------------

def _collect(results, n: int, timeout: float) -> dict:
    out = {}
    for _ in range(n):
        name, log = results.get(timeout=timeout)
        out[name] = log
    return out


def throughput(url: str, queues: list[str], args) -> dict:
    done = mp.Value("i", 0)
    results = mp.Queue()
    procs = []
    per = max(1, len(queues) // CONSUMERS)
    for i in range(CONSUMERS):
        if len(queues) == 1:   # ours: one queue, the broker spreads the partitions
            own, standby, prefetch = queues, [], args.prefetch
        else:                  # RabbitMQ: 4 queues each, standby on the rest
            own = queues[i * per:(i + 1) * per]
            standby = [q for q in queues if q not in own]
            prefetch = max(1, args.prefetch // per)
        p = mp.Process(target=consumer, args=(url, own, standby, prefetch, args.count, done,
                                              results, f"c{i}"))
        p.start()
        procs.append(p)
    time.sleep(2.5)
    start_ns = time.monotonic_ns()
    elapsed = publisher(url, args.count, args.size, args.window, 0.0)
    logs = _collect(results, CONSUMERS, 300)
    for p in procs:
        p.join()
    last = max(t for log in logs.values() for t, _ in log)
    got = sum(len(log) for log in logs.values())
    assert got >= args.count, (got, args.count)
    spread = sorted(len(log) for log in logs.values())
    return {"publish msg/s": args.count / elapsed,
            "e2e msg/s": args.count / ((last - start_ns) / 1e9),
            "per-consumer share min/max": spread[0] / max(1, spread[-1])}


def handoff_pauses(url: str, args) -> dict:
    """Ours only: pauses of the partitions that changed consumer (join at 2 s, leave at 5 s)."""
    count = int(args.rate * args.handoff_seconds)
    done = mp.Value("i", 0)
    results = mp.Queue()
    procs = []

    def start(name: str, leave_after: float = 0.0):
        p = mp.Process(target=consumer, args=(url, [QUEUE], [], args.prefetch, count, done,
                                              results, name, leave_after))
        p.start()
        procs.append(p)

    start("c0", leave_after=5.0)
    start("c1")
    start("c2")
    time.sleep(1.0)
    pub = mp.Process(target=publisher, args=(url, count, args.size, args.window, args.rate))
    pub.start()
    time.sleep(2.0)
    start("c3")
    pub.join()
    logs = _collect(results, 4, 120)
    for p in procs:
        p.join()
    events = sorted((t, zlib.crc32(f"k{key}".encode()) % PARTITIONS, name)
                    for name, log in logs.items() for t, key in log)
    last: dict[int, tuple[int, str]] = {}
    gaps: dict[int, list[float]] = {}
    pauses: list[float] = []
    for t, part, name in events:
        if part in last:
            pt, pname = last[part]
            ms = (t - pt) / 1e6
            (pauses if pname != name else gaps.setdefault(part, [])).append(ms)
        last[part] = (t, name)
    usual = statistics.median(g for gs in gaps.values() for g in gs)
    return {"handoffs": len(pauses),
            "pause median ms": statistics.median(pauses) if pauses else 0.0,
            "pause max ms": max(pauses) if pauses else 0.0,
            "usual gap ms": usual}


# -- main --------------------------------------------------------------------------------------

class _Rabbit:
    def __enter__(self) -> str:
        self.script = os.path.join(ROOT, ".ci", "rabbitmq.sh")
        subprocess.run(["bash", self.script, "start", str(RABBIT_PORT), str(RABBIT_MGMT)],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["bash", self.script, "plugins", str(RABBIT_PORT), "enable",
                        "rabbitmq_consistent_hash_exchange"], check=True,
                       stdout=subprocess.DEVNULL)
        return f"amqp://guest:guest@127.0.0.1:{RABBIT_PORT}/"

    def __exit__(self, *exc) -> None:
        subprocess.run(["bash", self.script, "stop", str(RABBIT_PORT), str(RABBIT_MGMT)],
                       stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", help="URL of this broker (default: start one)")
    parser.add_argument("--no-rabbit", action="store_true", help="measure only this broker")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=400, help="per consumer process")
    parser.add_argument("--rate", type=float, default=1000.0, help="handoff scenario msg/s")
    parser.add_argument("--handoff-seconds", type=float, default=8.0)
    parser.add_argument("--handoff-timeout", type=int, default=5000, help="ms")
    args = parser.parse_args()
    print(f"{PARTITIONS} partitions, {CONSUMERS} consumers, {KEYS} keys, {args.size} B persistent, "
          f"{args.count} msgs, confirm window {args.window}, prefetch {args.prefetch} per "
          "consumer, per-message acks", flush=True)

    with (our_broker() if not args.ours else _Given(args.ours)) as url:
        queues = setup_ours(url, args.handoff_timeout, 0)
        ours = throughput(url, queues, args)
        print("  ours      " + _fmt(ours), flush=True)
        setup_ours(url, args.handoff_timeout, 0)
        pauses = handoff_pauses(url, args)
        print("  ours      handoff " + _fmt(pauses), flush=True)
        teardown(url, queues)
        reference = setup_quorum(url)
        plain = throughput(url, reference, args)
        print("  ours, one quorum queue, competing consumers (reference) " + _fmt(plain),
              flush=True)
        teardown(url, reference)
    rabbit = None
    if not args.no_rabbit:
        with _Rabbit() as url:
            queues = setup_rabbit(url)
            rabbit = throughput(url, queues, args)
            print("  rabbitmq  " + _fmt(rabbit), flush=True)
            teardown(url, queues)
    print()
    print(f"{'metric':28} {'ours':>12} {'rabbitmq':>12} {'ratio':>8}")
    for key, value in ours.items():
        other = rabbit.get(key) if rabbit else None
        print(f"{key:28} {value:12,.2f} {'' if other is None else f'{other:12,.2f}':>12} "
              f"{'' if not other else f'{value / other:8.2f}':>8}")
    for key, value in pauses.items():
        print(f"{'handoff ' + key:28} {value:12,.2f}")
    print("(ratio = ours / rabbitmq's consistent-hash exchange + 16 single-active-consumer "
          "quorum queues; above 1 is better)")


class _Given:
    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc) -> None:
        pass


def _fmt(figures: dict) -> str:
    return "  ".join(f"{k} {v:,.2f}" for k, v in figures.items())


if __name__ == "__main__":
    main()
