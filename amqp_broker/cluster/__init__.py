"""Node-level quorum runtime: one Raft driver and one shared WAL per broker node.

`install_quorum(broker, dlx_worker_factory=...)` is called by `server.node.open_broker` before
durable queues are recovered: it opens ``<data_dir>/quorum``, registers the quorum queue type
(x-queue-type=quorum -> `amqp_broker.queues.quorum.QuorumQueue`) and returns the
`QuorumRuntime`, whose `run` the node starts in its nursery. The dead-letter worker factory
comes from the server (`server.dlx_port.start_dlx_worker`), so neither this package nor the
queue layer imports the server.
"""

from __future__ import annotations

from typing import Any, Callable

from quorum.log import LogConfig

from .catalog import GroupCatalog
from .runtime import QuorumRuntime

__all__ = ["install_quorum", "QuorumRuntime", "GroupCatalog"]


def install_quorum(broker: Any, *, dlx_worker_factory: Callable[[Any], Any],
                   node: str = "rabbit@localhost") -> QuorumRuntime:
    """Register x-queue-type=quorum on `broker`; `dlx_worker_factory(queue)` builds a quorum
    queue's at-least-once dead-letter worker (a `dlx.DlxWorker`)."""
    from amqp_broker.queues.quorum import QuorumQueue

    runtime = QuorumRuntime(str(broker.settings.data_dir / "quorum"), node,
                            log_config=_log_config(broker.settings))

    def factory(name: str, vhost: str, *, durable: bool, auto_delete: bool, exclusive: bool,
                arguments: dict, now_ms: int) -> QuorumQueue:
        return QuorumQueue(runtime, broker, name, vhost, arguments=arguments, now_ms=now_ms,
                           dlx_worker_factory=dlx_worker_factory)

    broker.queue_factories["quorum"] = factory
    return runtime


def _log_config(settings: Any) -> LogConfig | None:
    """raft.* from rabbitmq.conf (BrokerSettings); plain Settings have none: the log's defaults."""
    raft = getattr(settings, "raft", None)
    if raft is None:
        return None
    return LogConfig(wal_max_size_bytes=raft.wal_max_size_bytes,
                     segment_max_entries=raft.segment_max_entries)
