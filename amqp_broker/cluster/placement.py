"""Where a new queue goes in a cluster: a quorum queue's member nodes (RabbitMQ's queue leader
locator, `choose_members`) and a durable classic queue's home node (the queue master locator,
`choose_home`).

Called by the quorum queue factory (`cluster/__init__.py`) when a queue is declared on this
node of a cluster. How many: x-quorum-initial-group-size, else quorum_queue.initial_cluster_size,
else 3; never more than the cluster has. Which: x-queue-leader-locator, else
queue_leader_locator: ``client-local`` puts this node first (it also starts the first election,
so it usually leads), ``balanced`` starts from the node hosting the fewest queue leaders this
node knows of. The rest follow in the cluster's node order, so sizes below the cluster's spread.
"""

from __future__ import annotations

from typing import Any

__all__ = ["choose_members", "choose_home"]


def choose_home(runtime: Any, locator: str, homes: dict[str, int]) -> str:
    """`client-local`: this node; `balanced` (and 3.x's `min-masters`, `random`): the running
    node that is home to the fewest classic queues (`homes`, from the metadata)."""
    if locator not in ("balanced", "min-masters", "random", "least-leaders"):
        return runtime.node
    running = [n for n in sorted(runtime.nodes) if runtime.is_running(n)]
    return min(running, key=lambda n: (homes.get(n, 0), n))


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
