"""Where a new quorum queue's replicas go: its member nodes (RabbitMQ's queue leader locator).

Called by the quorum queue factory (`cluster/__init__.py`) when a queue is declared on this
node of a cluster. How many: x-quorum-initial-group-size, else quorum_queue.initial_cluster_size,
else 3; never more than the cluster has. Which: x-queue-leader-locator, else
queue_leader_locator: ``client-local`` puts this node first (it also starts the first election,
so it usually leads), ``balanced`` starts from the node hosting the fewest queue leaders this
node knows of. The rest follow in the cluster's node order, so sizes below the cluster's spread.
"""

from __future__ import annotations

from typing import Any

__all__ = ["choose_members"]


def choose_members(runtime: Any, settings: Any, arguments: dict) -> tuple[str, ...]:
    nodes = sorted(runtime.nodes)
    size = arguments.get("x-quorum-initial-group-size")
    if size is None:
        q = getattr(settings, "quorum_queue", None)
        size = q.initial_cluster_size if q is not None else 3
    size = max(1, min(int(size), len(nodes)))
    locator = arguments.get("x-queue-leader-locator") or \
        getattr(settings, "queue_leader_locator", "client-local")
    first = runtime.node
    if locator == "balanced":
        led = runtime.leaders_per_node()
        first = min(nodes, key=lambda n: (led.get(n, 0), n))
    i = nodes.index(first)
    ring = nodes[i:] + nodes[:i]
    return tuple(ring[:size])
