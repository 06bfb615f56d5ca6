"""Binding records shared by the exchange types and the topology.

``Dest`` names what a binding points at: a queue, or an exchange (exchange-to-exchange
bindings). ``Binding`` is the listing record used by ``queue.bind`` bookkeeping,
``list_bindings`` and the management API. ``Targets`` is the routing-side form: the queue names
and exchange names reached through one match, precomputed at bind time so routing only touches
``str`` objects (cheap cached hashes) and never builds ``Dest`` objects.

Pure: no IO. Used by ``amqp_broker.core.exchanges`` and ``amqp_broker.core.router``.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Dest", "Binding", "Targets", "args_key", "QUEUE", "EXCHANGE"]

QUEUE = "queue"
EXCHANGE = "exchange"


@dataclass(frozen=True, slots=True, order=True)
class Dest:
    """A binding destination: ``kind`` is ``"queue"`` or ``"exchange"``."""

    kind: str
    name: str

    @classmethod
    def queue(cls, name: str) -> "Dest":
        return cls(QUEUE, name)

    @classmethod
    def exchange(cls, name: str) -> "Dest":
        return cls(EXCHANGE, name)

    @property
    def is_queue(self) -> bool:
        return self.kind == QUEUE


@dataclass(frozen=True, slots=True)
class Binding:
    """One binding as listed to clients: source exchange -> dest, with key and arguments."""

    source: str
    dest: Dest
    routing_key: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


class Targets:
    """Queue and exchange names reached through one routing match.

    Rebuilt (not mutated in place) whenever a binding is added or removed under the same match,
    so the routing path can iterate the tuples without copying. Invariant: no duplicates, in
    bind order.
    """

    __slots__ = ("queues", "queue_map", "exchanges", "_count")

    def __init__(self) -> None:
        self.queues: tuple[str, ...] = ()
        # same names as ``queues``, as a dict so routing can ``out.update(queue_map)`` in C
        self.queue_map: dict[str, None] = {}
        self.exchanges: tuple[str, ...] = ()
        # dest -> number of bindings (different args) pointing at it under this match
        self._count: dict[Dest, int] = {}

    def add(self, dest: Dest) -> None:
        n = self._count.get(dest, 0)
        self._count[dest] = n + 1
        if n == 0:
            self._rebuild()

    def remove(self, dest: Dest) -> None:
        n = self._count[dest]
        if n == 1:
            del self._count[dest]
            self._rebuild()
        else:
            self._count[dest] = n - 1

    def __bool__(self) -> bool:
        return bool(self._count)

    def _rebuild(self) -> None:
        self.queues = tuple(d.name for d in self._count if d.kind == QUEUE)
        self.queue_map = dict.fromkeys(self.queues)
        self.exchanges = tuple(d.name for d in self._count if d.kind == EXCHANGE)


def args_key(value: Any) -> Any:
    """A hashable, order-insensitive key for a binding-arguments table.

    Bindings are identified by (source, dest, routing key, arguments) as in RabbitMQ; two
    tables with the same entries in another order are the same binding. bool is tagged apart
    from int so ``True`` and ``1`` stay different, as AMQP types do.
    """
    if value is None:
        return ("V",)
    if isinstance(value, bool):
        return ("t", value)
    if isinstance(value, Mapping):
        return ("F", tuple(sorted((str(k), args_key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("A", tuple(args_key(v) for v in value))
    if isinstance(value, (bytearray, memoryview)):
        return ("x", bytes(value))
    if isinstance(value, (str, bytes, int, float, decimal.Decimal, datetime.datetime)):
        return value
    return ("?", repr(value))
