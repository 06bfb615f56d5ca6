"""Keyed traffic through a partitioned queue with pika and aio-pika, and the checks of the
issue's client-visible promises, shared by tests/partitioned (one node) and tests/cluster.

Every consumer of a scenario runs in one thread (pika) or one event loop (aio-pika) and
writes to one `Log`: a delivery is logged when the client receives it, an ack just before it
is sent.  So when the log shows a key's new owner receiving it after the old owner's last ack,
the broker sent that delivery after it had that ack.  Message bodies are "key:seq".
"""
from __future__ import annotations

import asyncio
import time
from collections import deque

import aio_pika
import pika

KEYS = [f"customer-{i}" for i in range(12)]


def declare(ch, name: str, partitions: int, handoff_ms: int, delay_ms: int = 0) -> None:
    ch.queue_declare(name, durable=True, arguments={
        "x-queue-type": "partitioned", "x-partitions": partitions,
        "x-partition-handoff-timeout": handoff_ms, "x-partition-rebalance-delay": delay_ms})


class Log:
    def __init__(self) -> None:
        self.events: list[tuple] = []
        # set before the consumers close: what they get meanwhile (an earlier one's unacked
        # messages going to a later one, as aio-pika keeps serving the others while one
        # closes) is not the scenario's
        self.frozen = False
        # when a consumer started to join (before its connection opened) and when its first
        # delivery came, on this process's monotonic clock
        self.joining: dict[str, float] = {}
        self.first_delivery: dict[str, float] = {}

    def deliver(self, who: str, key: str, seq: int, redelivered: bool, part: int) -> None:
        if not self.frozen:
            self.first_delivery.setdefault(who, time.monotonic())
            self.events.append(("deliver", who, key, seq, redelivered, part))

    def ack(self, who: str, key: str, seq: int) -> None:
        if not self.frozen:
            self.events.append(("ack", who, key, seq))

    def acked(self) -> int:
        return sum(1 for e in self.events if e[0] == "ack")

    def deliveries(self, who: str | None = None) -> list[tuple]:
        return [e for e in self.events if e[0] == "deliver" and (who is None or e[1] == who)]


def _parse(body: bytes) -> tuple[str, int]:
    key, seq = body.decode().rsplit(":", 1)
    return key, int(seq)


class PikaConsumer:
    """One consumer on its own connection; `turn()` reads what arrived and acks up to
    `acks_per_turn` of what it holds, oldest first (0: it holds everything, never acks)."""

    def __init__(self, name: str, url: str, queue: str, log: Log, prefetch: int = 10,
                 acks_per_turn: int = 1) -> None:
        self.name = name
        self.log = log
        self.acks_per_turn = acks_per_turn
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.pending: deque = deque()
        self.ch.basic_consume(queue, self._on)

    def _on(self, _ch, method, props, body) -> None:
        key, seq = _parse(body)
        assert props.headers["x-partition-key"] == key
        self.log.deliver(self.name, key, seq, method.redelivered, props.headers["x-partition"])
        self.pending.append((method.delivery_tag, key, seq))

    def turn(self) -> None:
        self.conn.process_data_events(0)
        for _ in range(min(self.acks_per_turn, len(self.pending))):
            tag, key, seq = self.pending.popleft()
            self.log.ack(self.name, key, seq)
            self.ch.basic_ack(tag)

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


class PikaPublisher:
    def __init__(self, url: str, queue: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()
        self.queue = queue

    def publish(self, key: str, seq: int) -> None:
        self.ch.basic_publish("", self.queue, f"{key}:{seq}".encode(),
                              pika.BasicProperties(delivery_mode=2,
                                                   headers={"x-partition-key": key}))

    def round(self, seq: int, keys=KEYS) -> None:
        for key in keys:
            self.publish(key, seq)

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


def spin(consumers, until, timeout: float = 60.0) -> bool:
    """Turn every consumer until `until()` (True) or the timeout (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for c in consumers:
            c.turn()
        if until():
            return True
        time.sleep(0.002)
    return False


def pika_join_scenario(urls: list[str], queue: str, rounds: int = 30) -> Log:
    """Two consumers, keyed traffic, a third joins while the first two hold unacked
    messages; every message published is acked once (waits up to a minute)."""
    log = Log()
    pub = PikaPublisher(urls[0], queue)
    a = PikaConsumer("A", urls[0], queue, log)
    b = PikaConsumer("B", urls[1 % len(urls)], queue, log)
    consumers = [a, b]
    try:
        for seq in range(rounds // 3):
            pub.round(seq)
            spin(consumers, lambda: True, 0)
        spin(consumers, lambda: len(a.pending) > 0 and len(b.pending) > 0, 10)
        c = PikaConsumer("C", urls[2 % len(urls)], queue, log)
        consumers.append(c)
        for seq in range(rounds // 3, rounds):
            pub.round(seq)
            spin(consumers, lambda: True, 0)
        total = rounds * len(KEYS)
        assert spin(consumers, lambda: log.acked() >= total), (log.acked(), total)
        return log
    finally:
        log.frozen = True
        for x in (*consumers, pub):
            x.close()


def stalled_owner_scenario(urls: list[str], queue: str) -> tuple[Log, PikaConsumer]:
    """A takes everything and never acks; B joins: the partitions that move to B wait for
    the handoff timeout only, then B gets A's unacked messages of them, redelivered."""
    log = Log()
    pub = PikaPublisher(urls[0], queue)
    a = PikaConsumer("A", urls[0], queue, log, prefetch=1000, acks_per_turn=0)
    consumers = [a]
    try:
        for seq in range(3):
            pub.round(seq)
        n = 3 * len(KEYS)
        assert spin(consumers, lambda: len(a.pending) == n, 30)
        log.joining["B"] = time.monotonic()
        b = PikaConsumer("B", urls[-1], queue, log, prefetch=1000)
        consumers.append(b)
        # B gets the moved partitions once the deadline passed, though A acks nothing
        assert spin(consumers, lambda: len(log.deliveries("B")) > 0, 60)
        for seq in range(3, 6):
            pub.round(seq)
        moved = {e[2] for e in log.deliveries("B")}
        want = 6 * len(moved)
        assert spin(consumers, lambda: sum(1 for e in log.events
                                           if e[0] == "ack" and e[1] == "B") >= want, 60)
        return log, a
    finally:
        log.frozen = True
        for x in (*consumers, pub):
            x.close()


def check_stalled(log: Log, a: PikaConsumer, timeout_s: float | None = None) -> set:
    """B got the moved partitions in order, what A held of them redelivered; with `timeout_s`
    (the queue's handoff timeout), B's first message came no sooner than the timeout after it
    began to join (every partition that moved was held by A) and not long after: A, which
    never acks, delayed the handoff by the timeout only."""
    if timeout_s is not None:
        waited = log.first_delivery["B"] - log.joining["B"]
        assert waited >= 0.9 * timeout_s, f"handoff after {waited:.2f} s, before the timeout"
        assert waited < timeout_s + 15.0, f"handoff after {waited:.2f} s, long past the timeout"
    held_by_a = {(k, s) for _, k, s in a.pending}
    moved = {e[2] for e in log.deliveries("B")}
    assert moved and moved != set(KEYS)            # some partitions moved, not all
    for key in moved:
        got = [(e[3], e[4]) for e in log.deliveries("B") if e[2] == key]
        assert [s for s, _ in got] == list(range(6)), (key, got)   # in order, all of them
        # what A held of the key comes again, redelivered; the rest is new
        assert all(r == ((key, s) in held_by_a) for s, r in got), (key, got)
        # A got nothing of the key after the handoff
        assert len([e for e in log.deliveries("A") if e[2] == key]) == 3
    return moved


# -- aio-pika ----------------------------------------------------------------------------------

class AioConsumer:
    def __init__(self, name: str, log: Log, acks_per_turn: int = 1) -> None:
        self.name = name
        self.log = log
        self.acks_per_turn = acks_per_turn
        self.pending: deque = deque()
        self.conn = None

    async def start(self, url: str, queue: str, prefetch: int = 10) -> None:
        self.conn = await aio_pika.connect(url)
        ch = await self.conn.channel()
        await ch.set_qos(prefetch_count=prefetch)
        q = await ch.get_queue(queue, ensure=False)
        await q.consume(self._on)

    async def _on(self, message) -> None:
        key, seq = _parse(message.body)
        assert message.headers["x-partition-key"] == key
        self.log.deliver(self.name, key, seq, message.redelivered,
                         message.headers["x-partition"])
        self.pending.append((message, key, seq))

    async def turn(self) -> None:
        for _ in range(min(self.acks_per_turn, len(self.pending))):
            message, key, seq = self.pending.popleft()
            self.log.ack(self.name, key, seq)
            await message.ack()

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def _aio_publish_round(pub, queue: str, seq: int) -> None:
    """One message per key, with confirms (`pub` is a confirming aio-pika channel)."""
    for key in KEYS:
        await pub.default_exchange.publish(
            aio_pika.Message(f"{key}:{seq}".encode(), headers={"x-partition-key": key},
                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue)


async def _aio_spin(consumers, until, timeout: float) -> bool:
    """Turn every consumer until `until()` (True) or the timeout (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for c in consumers:
            await c.turn()
        if until():
            return True
        await asyncio.sleep(0.002)
    return False


async def aio_join_scenario(urls: list[str], queue: str, rounds: int = 30) -> Log:
    """`pika_join_scenario` with aio-pika."""
    log = Log()
    pub_conn = await aio_pika.connect(urls[0])
    pub = await pub_conn.channel(publisher_confirms=True)

    async def publish_round(seq: int) -> None:
        await _aio_publish_round(pub, queue, seq)

    consumers = [AioConsumer("A", log), AioConsumer("B", log)]
    await consumers[0].start(urls[0], queue)
    await consumers[1].start(urls[1 % len(urls)], queue)

    async def spin_until(until, timeout: float) -> bool:
        return await _aio_spin(consumers, until, timeout)

    try:
        for seq in range(rounds // 3):
            await publish_round(seq)
            await spin_until(lambda: True, 0)
        await spin_until(lambda: all(c.pending for c in consumers), 10)
        c = AioConsumer("C", log)
        await c.start(urls[2 % len(urls)], queue)
        consumers.append(c)
        for seq in range(rounds // 3, rounds):
            await publish_round(seq)
            await spin_until(lambda: True, 0)
        total = rounds * len(KEYS)
        assert await spin_until(lambda: log.acked() >= total, 60), (log.acked(), total)
        return log
    finally:
        log.frozen = True
        for c in consumers:
            await c.close()
        await pub_conn.close()


async def aio_stalled_owner_scenario(urls: list[str], queue: str) -> tuple[Log, AioConsumer]:
    """`stalled_owner_scenario` with aio-pika."""
    log = Log()
    pub_conn = await aio_pika.connect(urls[0])
    pub = await pub_conn.channel(publisher_confirms=True)

    async def publish_round(seq: int) -> None:
        await _aio_publish_round(pub, queue, seq)

    a = AioConsumer("A", log, acks_per_turn=0)
    await a.start(urls[0], queue, prefetch=1000)
    consumers = [a]

    async def spin_until(until, timeout: float) -> bool:
        return await _aio_spin(consumers, until, timeout)

    try:
        for seq in range(3):
            await publish_round(seq)
        assert await spin_until(lambda: len(a.pending) == 3 * len(KEYS), 30)
        b = AioConsumer("B", log, acks_per_turn=1000)
        log.joining["B"] = time.monotonic()
        await b.start(urls[-1], queue, prefetch=1000)
        consumers.append(b)
        assert await spin_until(lambda: len(log.deliveries("B")) > 0, 60)
        for seq in range(3, 6):
            await publish_round(seq)
        moved = {e[2] for e in log.deliveries("B")}
        assert await spin_until(lambda: sum(1 for e in log.events if e[0] == "ack"
                                            and e[1] == "B") >= 6 * len(moved), 60)
        return log, a
    finally:
        log.frozen = True
        for c in consumers:
            await c.close()
        await pub_conn.close()


# -- checks ------------------------------------------------------------------------------------

def check_acks_in_key_order(log: Log, rounds: int) -> None:
    """Each key's messages were acked in publish order, each exactly once."""
    per_key: dict[str, list[int]] = {}
    for e in log.events:
        if e[0] == "ack":
            per_key.setdefault(e[2], []).append(e[3])
    assert sorted(per_key) == sorted(KEYS)
    for key, seqs in per_key.items():
        assert seqs == list(range(rounds)), (key, seqs)


def owner_changes(log: Log) -> list[tuple[str, str, str, int]]:
    """(key, old owner, new owner, log position of the new owner's first delivery)."""
    last: dict[str, str] = {}
    out = []
    for pos, e in enumerate(log.events):
        if e[0] != "deliver":
            continue
        key, who = e[2], e[1]
        if key in last and last[key] != who:
            out.append((key, last[key], who, pos))
        last[key] = who
    return out


def check_graceful_handoffs(log: Log) -> list:
    """For every key that changed owner: the new owner's first delivery of it came after the
    old owner's last ack of it, and nothing of it was redelivered.  Returns the changes."""
    changes = owner_changes(log)
    for key, old, new, pos in changes:
        later_acks = [i for i, e in enumerate(log.events)
                      if e[0] == "ack" and e[1] == old and e[2] == key and i > pos]
        assert not later_acks, (key, old, new, pos, later_acks)
    assert not [e for e in log.deliveries() if e[4]], "a redelivery in a graceful handoff"
    return changes
