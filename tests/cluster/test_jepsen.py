"""Fault injection in the manner of Jepsen's RabbitMQ test: publishers with confirms and
consumers on every node of a 3- or 5-node cluster, one quorum queue, and a nemesis that kills
(-9), stops (SIGSTOP) and partitions nodes (through the link proxy) on a seeded schedule. Once
everything is healed and the queue drained, the checker must find nothing lost (confirmed,
never consumed) and nothing unexpected (consumed, never published); duplicates are reported.

Draining: publishers stop, consumers keep going until the queue is empty on every node and
nothing new arrives; if that gets stuck, every consumer reconnects (the final read, as Jepsen's
drain phase) and the count of confirmed messages that reached a consumer only then is reported.

CI runs a short schedule (3 nodes and 5 nodes, ~20-25 s of faults each). By hand:

    JEPSEN_SECONDS=600 JEPSEN_NODES=5 python3 -m pytest tests/cluster/test_jepsen.py -s \
        -p no:cacheprovider

JEPSEN_SEED=<n> replays a schedule (the seed is printed at the start and in every failure);
JEPSEN_NODES=3 or 5 runs only that size. See docs/CLUSTER-TESTING.md.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from . import probes
from .checker import check
from .history import History
from .nemesis import Nemesis, schedule
from .workload import Workload, WorkloadConfig, declare_queue

QUEUE = "jepsen"
CI_SECONDS = {3: 25.0, 5: 20.0}


def _seed() -> int:
    env = os.environ.get("JEPSEN_SEED")
    return int(env) if env else random.randrange(1 << 32)


def _sizes() -> list[int]:
    env = os.environ.get("JEPSEN_NODES")
    return [int(env)] if env else [3, 5]


@pytest.mark.timeout(0)  # a long run sets its own length; each phase below has a deadline
@pytest.mark.parametrize("nodes", _sizes())
def test_no_confirmed_message_is_lost(make_cluster, nodes):
    seconds = float(os.environ.get("JEPSEN_SECONDS") or CI_SECONDS.get(nodes, 25.0))
    seed = _seed()
    steps = schedule(seed, nodes, seconds)
    pc = make_cluster(nodes)
    cluster = pc.cluster
    names = cluster.names
    banner = f"JEPSEN_SEED={seed} JEPSEN_NODES={nodes} JEPSEN_SECONDS={seconds:g}"
    print(f"\n{banner}\nschedule:\n" + "\n".join("  " + s.describe(names) for s in steps))

    declare_queue(cluster.urls[0], QUEUE)
    assert probes.on_every_node(cluster, QUEUE), f"{banner}: the queue did not reach every node"
    history = History()
    workload = Workload([cluster.urls[i] for i in range(nodes)], names, QUEUE, history,
                        WorkloadConfig()).start()
    nemesis = Nemesis(cluster, pc.proxy, pc.links, lambda: probes.leader_index(cluster, QUEUE),
                      history.note, seed)
    try:
        time.sleep(1.0)  # traffic before the first fault
        nemesis.run(steps)
    finally:
        nemesis.heal_all()
        history.note("nemesis: all healed")
    try:
        workload.stop_publishing()
        empty = lambda: probes.empty_everywhere(cluster, QUEUE)  # noqa: E731
        drained_live = workload.wait_drained(empty, timeout=60.0)
        live = check(*history.snapshot())  # what the consumers that lived through it got
        drained = drained_live
        if not drained_live:  # the final read: fresh consumers on every node
            print(f"stuck: (ready, unacked) per node {probes.counts(cluster, QUEUE)}")
            workload.restart_consumers()
            drained = workload.wait_drained(empty, timeout=60.0)
        left = probes.counts(cluster, QUEUE)
    finally:
        workload.stop()

    report = check(*history.snapshot())
    stuck = [i for i in live.lost if i not in report.lost]
    crashed = [f"{names[i]}: exit {cluster.brokers[i].proc.returncode}"
               for i in range(nodes) if cluster.node(i).pid is None]
    print(report.summary())
    print(f"reached consumers only after they reconnected: {len(stuck)}")
    print(f"drained: {drained}; (ready, unacked) per node at the end: {left}")
    print("events:\n" + "\n".join(f"  {t:7.2f} {e}" for t, e in history.events))
    if report.lost or stuck:
        print("lost or stuck:\n" + history.explain(report.lost + stuck))
    if report.duplicates_not_redelivered:
        print("delivered again with redelivered=false:\n"
              + history.explain(report.duplicates_not_redelivered))
    assert not crashed, f"{banner}: nodes died on their own: {crashed}"
    assert not workload.errors, f"{banner}: the workload itself failed: {workload.errors!r}"
    assert report.confirmed > 0 and report.consumed > 0, f"{banner}: no traffic got through"
    assert report.unexpected == [], f"{banner}\n{report.summary()}"
    assert report.lost == [], f"{banner}\n{report.summary()}"
    assert drained, (f"{banner}: the queue did not drain after healing, even with fresh "
                     f"consumers; (ready, unacked) per node: {left}\n{report.summary()}")
    # liveness: what the broker held for live consumers must reach them without reconnecting
    # (test_catch_up.py and test_cancel_close.py are the bugs this once found)
    assert stuck == [], (f"{banner}: {len(stuck)} confirmed messages reached consumers only "
                         f"after they reconnected\n{report.summary()}")
