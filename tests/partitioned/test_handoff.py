"""Graceful partition handoff seen by pika and aio-pika clients on one node: two consumers,
keyed traffic, a third joins; a consumer that stops acking (tests/partitioned/workload.py)."""
from __future__ import annotations

import asyncio

import requests

from .workload import (KEYS, Log, PikaConsumer, PikaPublisher, aio_join_scenario,
                       check_acks_in_key_order, check_graceful_handoffs, declare,
                       pika_join_scenario, spin)

ROUNDS = 30


def _queue(broker, ch, name: str, handoff_ms: int) -> None:
    declare(ch, name, partitions=8, handoff_ms=handoff_ms)


def _handoffs(broker, name: str) -> dict:
    r = requests.get(f"{broker.mgmt_url}/api/queues/%2F/{name}", auth=("guest", "guest"))
    r.raise_for_status()
    return r.json()["partition_handoffs"]


def test_pika_third_consumer_joins_keys_stay_in_order(broker, ch):
    # a timeout far above how long our consumers hold a message: every handoff is graceful
    _queue(broker, ch, "pq-join-pika", handoff_ms=60_000)
    log = pika_join_scenario([broker.url], "pq-join-pika", ROUNDS)
    check_acks_in_key_order(log, ROUNDS)
    changes = check_graceful_handoffs(log)
    assert changes, "the third consumer took over no key"
    assert {new for _, _, new, _ in changes} == {"C"}
    counts = _handoffs(broker, "pq-join-pika")
    assert counts["started"] >= 1 and counts["forced"] == 0
    assert counts["graceful"] == counts["started"]


def test_aio_pika_third_consumer_joins_keys_stay_in_order(broker, ch):
    _queue(broker, ch, "pq-join-aio", handoff_ms=60_000)
    log = asyncio.run(aio_join_scenario([broker.url], "pq-join-aio", ROUNDS))
    check_acks_in_key_order(log, ROUNDS)
    changes = check_graceful_handoffs(log)
    assert changes and {new for _, _, new, _ in changes} == {"C"}


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
        for x in (*consumers, pub):
            x.close()


def check_stalled(log: Log, a: PikaConsumer) -> set:
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


def test_pika_stalled_owner_delays_handoff_by_the_timeout_only(broker, ch):
    _queue(broker, ch, "pq-stall", handoff_ms=1500)
    log, a = stalled_owner_scenario([broker.url], "pq-stall")
    check_stalled(log, a)
    counts = _handoffs(broker, "pq-stall")
    assert counts["forced"] >= 1
