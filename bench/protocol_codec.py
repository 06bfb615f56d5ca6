"""Micro-benchmark of the protocol layer's per-message codec: struct fast path vs pamqp.

Prints microseconds per message for:
  publish decode  - basic.publish + content header + body frames in, Publish event out
  deliver encode  - basic.deliver + content header + body frames out
  ack decode      - basic.ack frame in, Ack event out
Run: python bench/protocol_codec.py [--n 20000] [--body 1024]
"""

from __future__ import annotations

import argparse
import time

from pamqp import body as pbody
from pamqp import commands as c
from pamqp import frame, header

from amqp_broker.protocol import ProtocolConfig, ServerConnection

_PROPS = c.Basic.Properties(delivery_mode=2, content_type="application/json",
                            headers={"x-trace": "abc"})


def _opened() -> ServerConnection:
    conn = ServerConnection(ProtocolConfig())
    conn.feed(b"AMQP\x00\x00\x09\x01" + frame.marshal(c.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest"), 0))
    conn.accept_login()
    conn.feed(frame.marshal(c.Connection.TuneOk(2047, 131072, 0), 0) +
              frame.marshal(c.Connection.Open("/"), 0))
    conn.accept_open()
    conn.feed(frame.marshal(c.Channel.Open(), 1))
    conn.data_to_send()
    conn.next_events()
    return conn


def _publish_bytes(body: bytes) -> bytes:
    return (frame.marshal(c.Basic.Publish(exchange="amq.direct", routing_key="orders"), 1) +
            frame.marshal(header.ContentHeader(0, len(body), _PROPS), 1) +
            frame.marshal(pbody.ContentBody(body), 1))


def _per_msg(fn, n: int, repeat: int = 5) -> float:
    """Best of `repeat` runs (the machine is shared; the minimum is the least disturbed)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def bench_publish(n: int, body: bytes) -> tuple[float, float]:
    one = _publish_bytes(body)
    batch = one * 100

    def fast(n):
        conn = _opened()
        for _ in range(n // 100):
            conn.feed(batch)
            conn.next_events()

    def slow(n):  # per-frame slices, as a pamqp-based reader would do
        frames = []
        data = one
        while data:
            size = int.from_bytes(data[3:7], "big") + 8
            frames.append(data[:size])
            data = data[size:]
        for _ in range(n):
            for f in frames:
                frame.unmarshal(f)

    return _per_msg(fast, n), _per_msg(slow, n)


def bench_deliver(n: int, body: bytes) -> tuple[float, float]:
    raw_props = _PROPS.marshal()

    def fast(n):
        conn = _opened()
        for tag in range(1, n + 1):
            conn.send_deliver(1, "amq.ctag-1", tag, False, "amq.direct", "orders", raw_props, body)
            if tag % 100 == 0:
                conn.data_to_send()

    def slow(n):
        out = bytearray()
        for tag in range(1, n + 1):
            out += frame.marshal(c.Basic.Deliver("amq.ctag-1", tag, False, "amq.direct",
                                                 "orders"), 1)
            out += frame.marshal(header.ContentHeader(0, len(body), _PROPS), 1)
            out += frame.marshal(pbody.ContentBody(body), 1)
            if tag % 100 == 0:
                out.clear()

    return _per_msg(fast, n), _per_msg(slow, n)


def bench_ack(n: int) -> tuple[float, float]:
    one = frame.marshal(c.Basic.Ack(12345, False), 1)
    batch = one * 100

    def fast(n):
        conn = _opened()
        for _ in range(n // 100):
            conn.feed(batch)
            conn.next_events()

    def slow(n):
        for _ in range(n):
            frame.unmarshal(one)

    return _per_msg(fast, n), _per_msg(slow, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--body", type=int, default=1024)
    args = parser.parse_args()
    body = b"x" * args.body
    print(f"{args.n} messages, body {args.body} bytes; us/message (fast path vs pamqp)")
    for name, (fast, slow) in (
        ("publish decode", bench_publish(args.n, body)),
        ("deliver encode", bench_deliver(args.n, body)),
        ("ack decode", bench_ack(args.n)),
    ):
        print(f"  {name:15s} fast {fast:6.2f}   pamqp {slow:6.2f}   x{slow / fast:4.1f}")


if __name__ == "__main__":
    main()
