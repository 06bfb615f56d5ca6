"""What the cluster tests read from the nodes' management APIs: a queue as each node sees it,
its leader, whether it is empty everywhere.

Used by the fault tests (`test_jepsen.py`, `test_failover.py`, ...) and by the nemesis (to aim
at the leader), on a `compat_tests.support.cluster.LocalCluster`. A node that is down, stopped
(SIGSTOP) or does not answer within `timeout` reads as None.
"""

from __future__ import annotations

import time
from typing import Any


from amqp_broker.mgmt.client import ApiClient, ApiError, NodeDown
from compat_tests.support.pika_util import declared  # noqa: F401  (re-exported for the tests)

__all__ = ["queue_on", "on_every_node", "leader_index", "empty_everywhere", "wait_until",
           "counts", "caught_up", "declared"]


def queue_on(cluster: Any, i: int, queue: str, vhost: str = "/",
             timeout: float = 2.0) -> dict | None:
    if cluster.node(i).pid is None or cluster.brokers[i].paused:
        return None
    try:
        with ApiClient(cluster.mgmt_urls[i], timeout=timeout) as api:
            return api.get("queues", vhost, queue)
    except (NodeDown, ApiError):
        return None


def on_every_node(cluster: Any, queue: str, timeout: float = 30.0) -> bool:
    """Wait until every node of `cluster` lists `queue`; False if one still does not."""
    return wait_until(lambda: all(queue_on(cluster, i, queue) is not None
                                  for i in range(len(cluster))), timeout)


def leader_index(cluster: Any, queue: str) -> int | None:
    """The queue's leader as the first answering node sees it."""
    for i in range(len(cluster)):
        q = queue_on(cluster, i, queue)
        if q is not None and q.get("leader") in cluster.names:
            return cluster.names.index(q["leader"])
    return None


def counts(cluster: Any, queue: str) -> list[tuple[int, int] | None]:
    """(ready, unacked) on each node (None: no answer)."""
    out: list[tuple[int, int] | None] = []
    for i in range(len(cluster)):
        q = queue_on(cluster, i, queue)
        out.append(None if q is None else (q["messages_ready"], q["messages_unacknowledged"]))
    return out


def empty_everywhere(cluster: Any, queue: str) -> bool:
    """Every node answers and sees neither ready nor unacknowledged messages."""
    return all(c == (0, 0) for c in counts(cluster, queue))


def caught_up(cluster: Any, i: int, queue: str) -> bool:
    """Node i's replica has applied everything the leader has committed (the queue's "raft"
    status on node i and on the leader)."""
    leader = leader_index(cluster, queue)
    if leader is None:
        return False
    mine, lead = queue_on(cluster, i, queue), queue_on(cluster, leader, queue)
    if mine is None or lead is None or "raft" not in mine or "raft" not in lead:
        return False
    return mine["raft"]["applied_index"] >= lead["raft"]["commit_index"]


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
