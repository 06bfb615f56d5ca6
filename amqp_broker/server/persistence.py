"""The node's local durable store as the server uses it: the message journal, and the old
metadata log read once.

Opened by `node.open_broker`; queues report persistent messages to `journal` directly. Durable
entities (queues, exchanges, bindings, users, ...) live in the metadata Raft group
(`cluster_meta.py`, which `node.open_broker` sets as `metadata`, where `VHost` reports its
changes). `meta` is the local metadata log of data directories written before that; only
`recovery.import_local_metadata` reads it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from amqp_broker.store import MessageJournal, MetadataStore
from amqp_broker.store.spill import SpillStore

__all__ = ["Store", "plain", "args_key"]

_log = logging.getLogger(__name__)


def plain(value: Any) -> Any:
    """Field-table values as msgpack can store them (Decimal and odd types become str)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    return str(value)


def args_key(arguments: dict) -> str:
    """A binding's arguments as part of its key (the metadata log's and the cluster's)."""
    return repr(sorted((str(k), repr(v)) for k, v in arguments.items()))


class Store:
    def __init__(self, data_dir: Path) -> None:
        self.meta = MetadataStore(str(data_dir))
        self.journal = MessageJournal(str(data_dir))
        self.spill_dir = str(Path(data_dir) / "spill")
        self.spill: SpillStore | None = None   # opened (wiped) by open()
        self.metadata: Any = None  # cluster_meta.ReplicatedMetadata (node.open_broker)
        self.recovered: dict = {}

    def open(self) -> None:
        self.meta.open()
        self.recovered = self.journal.open()
        self.spill = SpillStore(self.spill_dir)

    async def run(self, *, task_status) -> None:
        await self.journal.run(task_status=task_status)

    def close(self) -> None:
        """Clean shutdown: write and sync what is pending, then close the files."""
        try:
            self.journal.flush_sync()
        finally:
            self.journal.close()
            self.meta.close()

    def drop_orphans(self) -> None:
        """Journal entries no recovered queue took: their queues are gone."""
        for key in list(self.recovered):
            self.journal.drop_queue(key)
        self.recovered.clear()
