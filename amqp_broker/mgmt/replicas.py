"""Quorum queue replicas through the management API (our extension; rabbitmq-queues reaches
these over Erlang distribution): add and remove members, rebalance leaders, and the
node-is-quorum-critical health check.

A mixin of `admin.Admin`. The work is the node's `broker.membership` (`server/membership.py`),
reached duck-typed; its refusals (`kind`: not_found, classic, not_running, last_member) become
`AdminError`s. A lone node has no membership object for replicas: every verb answers as
RabbitMQ's single node does.

    POST   /api/queues/VHOST/NAME/members        {"node": N}   add_member
    DELETE /api/queues/VHOST/NAME/members/NODE                 delete_member
    POST   /api/rebalance/queues  {"vhost_pattern", "queue_pattern"} (RabbitMQ's path)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from . import health
from .errors import BadRequest, NotFoundError

__all__ = ["ReplicaOps"]


@contextmanager
def _refusals():
    try:
        yield
    except Exception as err:
        kind = getattr(err, "kind", None)
        if kind is None:
            raise
        if kind == "not_found":
            raise NotFoundError() from None
        raise BadRequest(err.reason) from None


class ReplicaOps:
    broker: Any
    node: str

    def _membership(self) -> Any:
        return getattr(self.broker, "membership", None)

    def add_member(self, vhost: str, name: str, node: str) -> bool:
        with _refusals():
            return self._membership().add_member(vhost, name, node)

    def delete_member(self, vhost: str, name: str, node: str) -> bool:
        with _refusals():
            return self._membership().delete_member(vhost, name, node)

    def sync_queue(self, vhost: str, name: str, action: str) -> None:
        """POST /api/queues/V/N/actions {"action": "sync" | "cancel_sync"}."""
        membership = self._membership()
        if membership is None:
            return  # a lone node mirrors nothing
        with _refusals():
            membership.sync_queue(vhost, name, action == "sync")

    def unsynced_mirrors(self, vhost: str, name: str) -> list[str]:
        membership = self._membership()
        return membership.unsynced_mirrors(vhost, name) if membership is not None else []

    def rebalance(self, vhost_pattern: str = ".*", queue_pattern: str = ".*") -> list[dict]:
        return self._membership().rebalance(vhost_pattern, queue_pattern)

    def quorum_critical(self, mirrored: bool = False) -> tuple[int, dict]:
        """node-is-quorum-critical (`mirrored`: node-is-mirror-sync-critical), as RabbitMQ
        answers them."""
        queues = self._membership().quorum_critical(mirrored)
        if queues is None:
            return health.single_node()
        if not queues:
            return 200, {"status": "ok"}
        reason = ("There are classic mirrored queues without online synchronised mirrors "
                  "(queue content would be lost if the node is shut down)" if mirrored else
                  "There are quorum queues that would lose their quorum if the target node "
                  "is shut down")
        return 503, {"status": "failed", "reason": reason, "queues": queues}
