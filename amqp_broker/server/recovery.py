"""A data directory written before the metadata was a Raft group: its records, imported once.

Every node, alone or in a cluster, keeps its durable topology, users, vhosts, permissions and
policies in the ``meta`` Raft group (`cluster_meta.py`). Earlier versions of the broker kept
them in the local metadata log (`store/metadata.py`) and the quorum queues' group ids in a
catalog file (`cluster/catalog.py`). `import_local_metadata` is called by `node.serve_broker`
once the ``meta`` group is replayed: if the group holds nothing yet and that old log holds
records, they are proposed (a quorum queue with its old group id and this node as its member,
a classic queue at home here) and committed before the node serves, then a marker file keeps
the import from happening twice. Messages are not part of this: classic queues' messages stay
in the journal (their queue takes them back when its record applies) and quorum queues' in
their Raft logs.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from amqp_broker.cluster.catalog import read_catalog
from amqp_broker.cluster.metadata import BINDING, EXCHANGE, QUEUE, Put
from amqp_broker.store import POLICY, USER, VHOST
from quorum.log.disk import OsDisk

from .cluster_meta import PendingChange

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["import_local_metadata"]

_log = logging.getLogger(__name__)
_MARKER = "metadata.imported"
_KINDS = (VHOST, USER, "permission", POLICY, EXCHANGE, QUEUE, BINDING)


async def import_local_metadata(broker: "Broker") -> int:
    """Import the old local metadata log into the (empty) ``meta`` group; returns how many
    records were imported."""
    meta, store = broker.cluster_meta, broker.store
    marker = os.path.join(str(broker.settings.data_dir), _MARKER)
    local = getattr(store, "meta", None)
    if local is None or os.path.exists(marker) or meta.state().records:
        return 0
    groups = read_catalog(broker.quorum.directory)
    changes = []
    for kind in _KINDS:
        for key, value in local.items(kind):
            key = tuple(key) if isinstance(key, (list, tuple)) else (key,)
            if kind == QUEUE:
                value = _queue_record(key, value, groups, broker)
            changes.append(PendingChange(meta, Put(kind, key, value, if_absent=True)))
    await meta.commit_all(changes)  # a lone node commits at once; else it waits for peers
    OsDisk().replace_file(marker, (b"%d\n" % len(changes),))
    if changes:
        _log.info("imported %d metadata records of the local log into the metadata group",
                  len(changes))
    return len(changes)


def _queue_record(key: tuple, value: dict, groups: dict[str, str], broker: "Broker") -> dict:
    record: dict[str, Any] = dict(value)
    args = value.get("arguments") or {}
    if args.get("x-queue-type") == "quorum":
        record["type"] = "quorum"
        record["group"] = groups.get(f"{key[0]}\x00{key[1]}") or broker.quorum.new_group_id()
        record["members"] = [broker.node_name]
    else:
        record["type"] = "classic"
        record["node"] = broker.node_name
    return record
