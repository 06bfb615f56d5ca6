"""The node's durable store as the server uses it: metadata log + message journal.

Opened by `node.run_node`; `VHost` reports durable entity changes through `metadata` (this
object's methods named after the events), queues report persistent messages to `journal`
directly. Keys in the metadata log:

    QUEUE    [vhost, name]                          -> {durable, auto_delete, arguments}
    EXCHANGE [vhost, name]                          -> {type, durable, auto_delete, internal, arguments}
    BINDING  [vhost, source, kind, dest, key, args] -> arguments   (args = canonical repr)

Metadata writes fsync before returning (declares are rare; the short block is accepted).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from amqp_broker.store import BINDING, EXCHANGE, QUEUE, MessageJournal, MetadataStore

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
        self.metadata = self  # VHost calls store.metadata.<event>(...)
        self.recovered: dict = {}

    def open(self) -> None:
        self.meta.open()
        self.recovered = self.journal.open()

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

    # -- events from VHost ---------------------------------------------------------------------
    def queue_declared(self, vhost: str, name: str, durable: bool, auto_delete: bool,
                       arguments: dict) -> None:
        self.meta.put(QUEUE, [vhost, name], {"durable": durable, "auto_delete": auto_delete,
                                             "arguments": plain(arguments)})

    def queue_deleted(self, vhost: str, name: str) -> None:
        self.meta.delete(QUEUE, [vhost, name])
        # The queue itself told the journal to drop its messages (ClassicQueue.delete).
        self._drop_bindings(vhost, lambda src, kind, dest: kind == "queue" and dest == name)

    def exchange_declared(self, vhost: str, name: str, type_: str, durable: bool,
                          auto_delete: bool, internal: bool, arguments: dict) -> None:
        self.meta.put(EXCHANGE, [vhost, name], {
            "type": type_, "durable": durable, "auto_delete": auto_delete, "internal": internal,
            "arguments": plain(arguments)})

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.meta.delete(EXCHANGE, [vhost, name])
        self._drop_bindings(vhost, lambda src, kind, dest: src == name or
                            (kind == "exchange" and dest == name))

    def binding_added(self, vhost: str, source: str, kind: str, dest: str, routing_key: str,
                      arguments: dict) -> None:
        self.meta.put(BINDING, [vhost, source, kind, dest, routing_key, args_key(arguments)],
                      plain(arguments))

    def binding_removed(self, vhost: str, source: str, kind: str, dest: str, routing_key: str,
                        arguments: dict) -> None:
        self.meta.delete(BINDING, [vhost, source, kind, dest, routing_key, args_key(arguments)])

    def _drop_bindings(self, vhost: str, match) -> None:
        for key, _ in self.meta.items(BINDING):
            if key[0] == vhost and match(key[1], key[2], key[3]):
                self.meta.delete(BINDING, key)
