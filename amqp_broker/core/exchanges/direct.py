"""Direct exchange (exact routing-key match) and the default exchange ``""``.

The default exchange is a direct exchange with an implicit binding to every queue by its
name; it cannot be bound to or unbound from. Its queue set is owned by the ``Topology`` and
shared by reference, so ``collect`` is one dict lookup.

Pure. Created by ``amqp_broker.core.exchanges.make_exchange`` and ``Topology``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..bindings import Binding, Dest, Targets
from ..errors import AccessRefused
from .base import Exchange

__all__ = ["DirectExchange", "DefaultExchange"]


class DirectExchange(Exchange):
    type_name = "direct"
    __slots__ = ("_by_key",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._by_key: dict[str, Targets] = {}

    def collect(self, routing_key, headers, queues, exchanges) -> bool:
        t = self._by_key.get(routing_key)
        if t is None:
            return False
        queues.update(t.queue_map)
        if t.exchanges:
            exchanges.extend(t.exchanges)
        return True

    def queues_for(self, routing_key, headers):
        t = self._by_key.get(routing_key)
        return t.queues if t is not None else ()

    def _add(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        t = self._by_key.get(routing_key)
        if t is None:
            t = self._by_key[routing_key] = Targets()
        t.add(dest)

    def _remove(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        t = self._by_key[routing_key]
        t.remove(dest)
        if not t:
            del self._by_key[routing_key]


_DEFAULT_REFUSED = "operation not permitted on the default exchange"


class DefaultExchange(Exchange):
    """The nameless direct exchange; routes a key to the queue of that name, if it exists."""

    type_name = "direct"
    __slots__ = ("_queues",)

    def __init__(self, queues: Mapping[str, Any]) -> None:
        super().__init__("", durable=True)
        self._queues = queues  # shared with the Topology, never copied

    @property
    def has_bindings(self) -> bool:
        return bool(self._queues)

    def bind(self, dest, routing_key="", arguments=None) -> bool:
        raise AccessRefused(_DEFAULT_REFUSED)

    def unbind(self, dest, routing_key="", arguments=None) -> bool:
        raise AccessRefused(_DEFAULT_REFUSED)

    def unbind_dest(self, dest: Dest) -> int:
        return 0

    def bindings(self) -> list[Binding]:
        """The implicit bindings, as RabbitMQ lists them."""
        return [Binding("", Dest.queue(q), q, {}) for q in self._queues]

    def queues_for(self, routing_key, headers):
        return (routing_key,) if routing_key in self._queues else ()

    def collect(self, routing_key, headers, queues, exchanges) -> bool:
        if routing_key in self._queues:
            queues[routing_key] = None
            return True
        return False
