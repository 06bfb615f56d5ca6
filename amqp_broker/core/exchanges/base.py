"""The exchange base class: attributes, binding bookkeeping, and the routing contract.

Each exchange type (``direct``, ``fanout``, ``topic``, ``headers``) subclasses ``Exchange`` and
implements three hooks: ``_add`` / ``_remove`` keep its routing index in step with the binding
set, and ``collect`` matches one routing key. ``amqp_broker.core.router.Topology`` owns the
exchanges of a vhost and drives routing through ``collect``; tests and tools may call
``route`` directly.

Pure: no IO, no clock.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from ..bindings import EXCHANGE, Binding, Dest, args_key

__all__ = ["Exchange", "ALTERNATE_EXCHANGE_ARG"]

ALTERNATE_EXCHANGE_ARG = "alternate-exchange"


class Exchange:
    """An exchange and its bindings (those whose *source* it is).

    Bindings are identified as in RabbitMQ by (dest, routing key, arguments); binding the same
    triple twice is a no-op that returns False.
    """

    type_name: ClassVar[str] = ""

    __slots__ = (
        "name", "durable", "auto_delete", "internal", "arguments",
        "policy_alternate", "_bindings", "_exchange_dests", "publish_in", "publish_out",
    )

    def __init__(
        self,
        name: str,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        # set by the owner from the effective policy; the argument wins over it
        self.policy_alternate: str | None = None
        self._bindings: dict[tuple[Dest, str, Any], Binding] = {}
        self._exchange_dests = 0  # bindings to exchanges; lets routing skip e2e work
        # messages published into it, and those of them routed to at least one queue
        # (the management API's exchange message_stats; counted by `Topology.route`)
        self.publish_in = 0
        self.publish_out = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} bindings={len(self._bindings)}>"

    # -- attributes -------------------------------------------------------------------------

    @property
    def type(self) -> str:
        return self.type_name

    @property
    def alternate(self) -> str | None:
        """The alternate exchange name: argument first, then policy (as RabbitMQ)."""
        ae = self.arguments.get(ALTERNATE_EXCHANGE_ARG)
        if isinstance(ae, str):
            return ae
        if isinstance(ae, (bytes, bytearray)):
            return bytes(ae).decode("utf-8", "replace")
        return self.policy_alternate

    @property
    def has_bindings(self) -> bool:
        return bool(self._bindings)

    @property
    def has_exchange_dests(self) -> bool:
        return self._exchange_dests > 0

    # -- bindings -----------------------------------------------------------------------------

    def validate_binding(self, routing_key: str, arguments: Mapping[str, Any]) -> None:
        """Raise ``PreconditionFailed`` if this type refuses the binding (default: accept)."""

    def bind(self, dest: Dest, routing_key: str = "", arguments: Mapping[str, Any] | None = None) -> bool:
        """Add a binding; return True if it is new."""
        args = dict(arguments or {})
        key = (dest, routing_key, args_key(args))
        if key in self._bindings:
            return False
        self.validate_binding(routing_key, args)
        self._bindings[key] = Binding(self.name, dest, routing_key, args)
        if dest.kind == EXCHANGE:
            self._exchange_dests += 1
        self._add(dest, routing_key, args)
        return True

    def unbind(self, dest: Dest, routing_key: str = "", arguments: Mapping[str, Any] | None = None) -> bool:
        """Remove a binding; return True if it existed."""
        args = dict(arguments or {})
        b = self._bindings.pop((dest, routing_key, args_key(args)), None)
        if b is None:
            return False
        self._forget(b)
        return True

    def unbind_dest(self, dest: Dest) -> int:
        """Remove every binding to ``dest`` (queue or exchange deleted); return how many."""
        gone = [k for k in self._bindings if k[0] == dest]
        for k in gone:
            self._forget(self._bindings.pop(k))
        return len(gone)

    def bindings(self) -> list[Binding]:
        """Bindings in the order they were made."""
        return list(self._bindings.values())

    def _forget(self, b: Binding) -> None:
        if b.dest.kind == EXCHANGE:
            self._exchange_dests -= 1
        self._remove(b.dest, b.routing_key, b.arguments)

    # -- routing ------------------------------------------------------------------------------

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> list[Dest]:
        """Destinations matched by one routing key (no e2e traversal, no alternate)."""
        queues: dict[str, None] = {}
        exchanges: list[str] = []
        self.collect(routing_key, headers, queues, exchanges)
        out = [Dest.queue(q) for q in queues]
        seen: set[str] = set()
        for x in exchanges:
            if x not in seen:
                seen.add(x)
                out.append(Dest.exchange(x))
        return out

    def collect(
        self,
        routing_key: str,
        headers: Mapping[str, Any] | None,
        queues: dict[str, None],
        exchanges: list[str],
    ) -> bool:
        """Add matched queue names to ``queues`` and exchange names to ``exchanges``.

        Returns True if any binding matched. Hot path: implementations must not allocate per
        binding and must not insert into their own index.
        """
        raise NotImplementedError

    def queues_for(self, routing_key: str, headers: Mapping[str, Any] | None) -> tuple[str, ...] | None:
        """Fast path for the common publish: the queue names one key reaches, as a shared
        tuple (do not mutate), or None when the general ``collect`` path is needed.

        Only valid when the exchange has no exchange destinations (the caller checks
        ``has_exchange_dests``).
        """
        return None

    def _add(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _remove(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        raise NotImplementedError
