"""Graceful partition handoff seen by pika and aio-pika clients on one node: two consumers,
keyed traffic, a third joins; a consumer that stops acking (tests/partitioned/workload.py)."""
from __future__ import annotations

import asyncio

import requests

from .workload import (aio_join_scenario, aio_stalled_owner_scenario, check_acks_in_key_order,
                       check_graceful_handoffs, check_stalled, declare, pika_join_scenario,
                       stalled_owner_scenario)

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


def test_pika_stalled_owner_delays_handoff_by_the_timeout_only(broker, ch):
    _queue(broker, ch, "pq-stall", handoff_ms=1500)
    log, a = stalled_owner_scenario([broker.url], "pq-stall")
    check_stalled(log, a, timeout_s=1.5)
    counts = _handoffs(broker, "pq-stall")
    assert counts["forced"] >= 1


def test_aio_pika_stalled_owner_delays_handoff_by_the_timeout_only(broker, ch):
    _queue(broker, ch, "pq-stall-aio", handoff_ms=1500)
    log, a = asyncio.run(aio_stalled_owner_scenario([broker.url], "pq-stall-aio"))
    check_stalled(log, a, timeout_s=1.5)
    assert _handoffs(broker, "pq-stall-aio")["forced"] >= 1
