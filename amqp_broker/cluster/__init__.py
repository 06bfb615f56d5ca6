"""Node-level quorum runtime and cluster: one Raft driver and one shared WAL per broker node.

`install_quorum(broker, dlx_worker_factory=..., cluster=...)` is called by
`server.node.open_broker` before durable queues are recovered: it opens ``<data_dir>/quorum``,
registers the quorum queue type (x-queue-type=quorum -> `amqp_broker.queues.quorum.QuorumQueue`,
x-queue-type=partitioned -> `amqp_broker.queues.partitioned.PartitionedQueue`)
and returns the `QuorumRuntime`, whose `run` the node starts in its nursery. The dead-letter
worker factory comes from the server (`server.dlx_port.start_dlx_worker`), so neither this
package nor the queue layer imports the server. In a cluster (`nodes.ClusterConfig` with
peers) the runtime also links the nodes, and `host_metadata` hosts the ``meta`` group
(`metadata.py`) whose effects the server applies.
"""

from __future__ import annotations

from typing import Any, Callable

from quorum.log import LogConfig

from .metadata import META_GROUP, MetadataMachine
from .nodes import ClusterConfig, cluster_config
from .placement import choose_members
from .runtime import QuorumRuntime

__all__ = ["install_quorum", "host_metadata", "QuorumRuntime", "ClusterConfig",
           "cluster_config"]


def install_quorum(broker: Any, *, dlx_worker_factory: Callable[[Any], Any],
                   cluster: ClusterConfig | str = "rabbit@localhost") -> QuorumRuntime:
    """Register x-queue-type=quorum on `broker`; `dlx_worker_factory(queue)` builds a quorum
    queue's at-least-once dead-letter worker (a `dlx.DlxWorker`)."""
    from amqp_broker.queues.partitioned import PartitionedQueue
    from amqp_broker.queues.quorum import QuorumQueue

    runtime = QuorumRuntime(str(broker.settings.data_dir / "quorum"), cluster,
                            log_config=_log_config(broker.settings))
    runtime.driver.effects_batch = broker.output_batch

    def factory(name: str, vhost: str, *, durable: bool, auto_delete: bool, exclusive: bool,
                arguments: dict, now_ms: int, placement: dict | None = None,
                kind: type = QuorumQueue) -> QuorumQueue:
        if placement is not None:  # from the metadata group's record
            # every replica boots from the founding members (later changes are in the log)
            group = placement["group"]
            members = tuple(placement.get("founders") or placement["members"])
        else:  # declared here: a new group, placed by the leader locator
            group = runtime.new_group_id()
            members = choose_members(runtime, broker.settings, arguments)
        return kind(runtime, broker, name, vhost, arguments=arguments, now_ms=now_ms,
                    dlx_worker_factory=dlx_worker_factory, group=group, members=members)

    def partitioned(*args: Any, **kw: Any) -> QuorumQueue:
        """x-queue-type partitioned: a quorum queue whose fifo is partitioned."""
        return factory(*args, kind=PartitionedQueue, **kw)

    broker.queue_factories["quorum"] = factory
    broker.queue_factories["partitioned"] = partitioned

    def mirrored(name: str, vhost: str, *, arguments: dict, now_ms: int,
                 placement: dict, **_flags: Any) -> QuorumQueue:
        """A classic queue under an ha-mode policy: the quorum engine, classic semantics."""
        return QuorumQueue(runtime, broker, name, vhost, arguments=arguments, now_ms=now_ms,
                           dlx_worker_factory=dlx_worker_factory, group=placement["group"],
                           members=tuple(placement.get("founders") or placement["members"]),
                           mirrored=True)

    broker.mirrored_queue_factory = mirrored
    return runtime


def host_metadata(runtime: QuorumRuntime, on_effects: Callable[[str, list], None],
                  on_ready: Callable[[], None]) -> None:
    """Host the ``meta`` group (every node of the cluster a voter; a lone node alone);
    `on_effects` gets its `MetaChanged` effects on every node, `on_ready()` once the local
    log is replayed."""
    runtime.add_group(META_GROUP, MetadataMachine(), on_effects, on_ready,
                      voters=[] if runtime.cluster.joining else sorted(runtime.nodes))


def _log_config(settings: Any) -> LogConfig | None:
    """raft.* from rabbitmq.conf (BrokerSettings); plain Settings have none: the log's defaults."""
    raft = getattr(settings, "raft", None)
    if raft is None:
        return None
    return LogConfig(wal_max_size_bytes=raft.wal_max_size_bytes,
                     segment_max_entries=raft.segment_max_entries,
                     mem_max_bytes=raft.mem_table_max_bytes)
