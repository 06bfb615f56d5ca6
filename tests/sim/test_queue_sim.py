"""Deterministic simulation of a quorum queue (the real `quorum.fifo` machine, as the broker's
`QuorumMachine` wraps it, applied through `quorum.replica` like the driver) on 3 and 5 node
clusters under the chaos of cluster.py (loss, duplication, reordering, partitions, crashes
losing unsynced writes, restarts), with publishers and consumers on several nodes; see
queue_world.py for the setup and queue_checker.py for the guarantees checked (no confirmed
message lost, FIFO per publisher, x-delivery-count on redeliveries, each delivery run on the
consumer's node only, replicas in agreement).

Two bugs this found have their own regression tests: chunks of a snapshot reordered by the
network never assembled (tests/raft/test_snapshot.py), and a follower caught up by a snapshot
never delivered what the entries it covers decided for its consumers
(tests/quorum_integration/test_driver.py, tests/fifo/test_replica.py).

CI runs a handful of seeds. A failure prints its seed; replay it with
    SIM_SEED=<seed> SIM_SIZE=<n> SIM_STEPS=<steps> SIM_QUEUE=1 python -m pytest tests/sim -k replay
and sweep more seeds (3 and 5 nodes) with
    SIM_QUEUE_SWEEP=<count> [SIM_STEPS=10000] [SIM_START=100000] \
        python -m pytest tests/sim -k queue_sweep
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_machine import encode_payload
from quorum.fifo import (Checkout, ConsumerKey, Deliver, Delivery, Enqueue, Meta, QueueConfig,
                         QueueState, Settle, apply, init)

from .queue_checker import QueueChecker, QueueViolation
from .queue_world import run_queue_seed

CI_SEEDS = 8
CI_STEPS = 3000


def test_quorum_queue_keeps_its_guarantees_under_chaos():
    total: Counter = Counter()
    for size in (3, 5):
        for seed in range(CI_SEEDS):
            ck = run_queue_seed(seed, size, CI_STEPS).app.checker
            assert ck.confirmed and all(i in ck.settled for i in ck.confirmed)
            total += ck.stats
    # the runs went through what the checks are about (restarts from a snapshot are the
    # rarest: compaction waits until the queue is nearly empty, which chaos seldom allows)
    for what in ("redelivered", "returned", "requeued", "compactions", "snapshots_received",
                 "restarts_from_snapshot"):
        assert total[what] > 0, (what, total)


@pytest.mark.skipif("SIM_QUEUE_SWEEP" not in os.environ,
                    reason="set SIM_QUEUE_SWEEP=<seeds> for a long sweep")
def test_queue_sweep():
    count = int(os.environ["SIM_QUEUE_SWEEP"])
    steps = int(os.environ.get("SIM_STEPS", "10000"))
    start = int(os.environ.get("SIM_START", "100000"))
    for seed in range(start, start + count):
        for size in (3, 5):
            run_queue_seed(seed, size, steps)


# -- the checker itself fails on what it is meant to catch ---------------------------------

CON = ConsumerKey("ctag", "con1", "n1")


def _queue_with(seqs: list[int]) -> tuple[QueueChecker, dict, QueueState]:
    """A checker whose ledger saw publisher p enqueue `seqs` at indexes 1, 2, ... into the
    fifo state returned, and the bodies by index."""
    ck, bodies, q = QueueChecker(), {}, init(QueueConfig("q"))
    for index, seq in enumerate(seqs, 1):
        body = b"p:%d" % seq
        msg = Message.from_publish("", "q", b"\0\0", body)
        cmd = Enqueue("p", seq, len(body), encode_payload(msg))
        ck.on_publish(body)
        assert ck.first_to_apply(index)
        ck.before(index, cmd, q)
        ck.after(index, cmd, apply(Meta(index, 1, 0), cmd, q).reply)
        bodies[index] = msg
    return ck, bodies, q


def _deliver(*ds: tuple[int, int, int]) -> Deliver:
    return Deliver(CON, tuple(Delivery(mid, index, 1, acquired, 0) for mid, index, acquired in ds))


def test_checker_catches_first_deliveries_out_of_publish_order():
    ck, bodies, _ = _queue_with([1, 2])
    ck.on_decision("n1", 3, _deliver((0, 2, 0)), bodies.get, True)
    with pytest.raises(QueueViolation, match="FIFO"):
        ck.on_decision("n1", 4, _deliver((1, 1, 0)), bodies.get, True)


def test_checker_catches_a_redelivery_without_a_higher_delivery_count():
    ck, bodies, _ = _queue_with([1])
    ck.on_decision("n1", 2, _deliver((0, 1, 0)), bodies.get, True)
    with pytest.raises(QueueViolation, match="acquired=0"):
        ck.on_decision("n1", 3, _deliver((1, 1, 0)), bodies.get, True)


def test_checker_catches_replicas_deciding_differently_and_a_delivery_on_another_node():
    ck, bodies, _ = _queue_with([1])
    ck.on_decision("n0", 2, _deliver((0, 1, 0)), bodies.get, True)
    with pytest.raises(QueueViolation, match="another replica"):
        ck.on_decision("n1", 2, _deliver((0, 1, 1)), bodies.get, False)
    with pytest.raises(QueueViolation, match="runs a delivery"):
        ck.on_run("n2", _deliver((0, 1, 0)))


def test_checker_catches_a_confirmed_message_never_settled():
    ck, bodies, q = _queue_with([1, 2])
    ck.on_confirm(b"p:1")
    ck.on_confirm(b"p:2")
    checkout = Checkout(CON, 10)  # both go to the consumer: msg ids 0 and 1
    assert ck.first_to_apply(3)
    ck.before(3, checkout, q)
    applied = apply(Meta(3, 1, 0), checkout, q)
    ck.after(3, checkout, applied.reply)
    (deliver,) = [e for e in applied.effects if type(e) is Deliver]
    ck.on_decision("n1", 3, deliver, bodies.get, True)
    settle = Settle(CON, (0,))  # only the first one is settled
    assert ck.first_to_apply(4)
    ck.before(4, settle, q)
    ck.after(4, settle, apply(Meta(4, 1, 0), settle, q).reply)
    assert ck.settled == {b"p:1": 4}
    with pytest.raises(QueueViolation, match="1 confirmed messages never settled"):
        ck.check_end()
