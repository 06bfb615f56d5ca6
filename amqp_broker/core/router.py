"""Per-vhost topology: exchanges, bindings, the default exchange, and message routing.

``Topology`` is the pure model the server drives for ``exchange.declare/delete``,
``queue.bind/unbind``, ``exchange.bind/unbind``, queue creation/deletion and
``basic.publish``; the management API lists bindings from it. It raises the typed errors of
``amqp_broker.core.errors`` with RabbitMQ's texts and *reports* deletions (auto-delete
exchanges) instead of performing any IO, so the caller can persist them.

Routing (``route``) follows ``rabbit_exchange:route``: the routing key plus the CC and BCC
headers' keys are matched on the exchange; exchange destinations (e2e bindings) are routed
through with the same keys, each exchange at most once; an exchange whose bindings matched
nothing hands the message to its alternate exchange; queue names come back deduplicated, in
the order they were first reached (deterministic for a given sequence of topology changes).

Pure: no IO, no trio, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .bindings import EXCHANGE, QUEUE, Binding, Dest
from .errors import AccessRefused, AMQPError, CommandInvalid, NotFound, PreconditionFailed
from .exchanges import ALTERNATE_EXCHANGE_ARG, EXCHANGE_TYPES, DefaultExchange, Exchange, make_exchange
from .fieldtypes import args_equivalent, describe_mismatch, type_name

__all__ = ["Topology", "Unbound", "check_routing_headers", "routing_keys", "STANDARD_EXCHANGES"]

# Declared in every vhost, durable (amq.rabbitmq.trace is not provided).
STANDARD_EXCHANGES: tuple[tuple[str, str], ...] = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)

_DEFAULT_REFUSED = "operation not permitted on the default exchange"


@dataclass(frozen=True, slots=True)
class Unbound:
    """Result of an unbind: whether the binding existed, and exchanges auto-deleted as a result."""

    removed: bool
    deleted_exchanges: tuple[str, ...] = ()


def routing_keys(routing_key: str, headers: Mapping[str, Any] | None, *, bcc: bool = True) -> list[str]:
    """The routing key followed by the sender-selected keys of the CC (and BCC) headers.

    Only string entries of array values count (RabbitMQ ignores the others). A CC or BCC
    header that is not an array is refused at publish (`check_routing_headers`); a stored or
    dead-lettered message that has one is routed on its routing key alone.
    """
    keys = [routing_key]
    if headers:
        for h in ("CC", "BCC") if bcc else ("CC",):
            v = headers.get(h)
            if isinstance(v, (list, tuple)):
                keys.extend(k for k in v if isinstance(k, str))
    return keys


def check_routing_headers(headers: Mapping[str, Any]) -> None:
    """rabbit_basic:header_routes: a CC or BCC header must be an array, else the publish is
    refused with 406 "invalid message: {unacceptable_type_in_header,"CC",longstr}" (3.10 and
    4.x alike). Called by the channel for a published message that has either header."""
    for h in ("CC", "BCC"):
        if h not in headers:
            continue
        v = headers[h]
        if not isinstance(v, (list, tuple)):
            raise PreconditionFailed(
                f'invalid message: {{unacceptable_type_in_header,"{h}",{type_name(v)}}}')


class Topology:
    """Exchanges and bindings of one vhost, plus the set of queue names that exist in it.

    ``unknown_type_error`` picks the compat profile for an unknown exchange type:
    ``CommandInvalid`` (503, connection close; RabbitMQ 3.10) or ``PreconditionFailed``
    (406, channel close; RabbitMQ 4.x).
    """

    def __init__(
        self,
        vhost: str = "/",
        *,
        unknown_type_error: type[AMQPError] = CommandInvalid,
        standard_exchanges: bool = True,
    ) -> None:
        self.vhost = vhost
        self._unknown_type_error = unknown_type_error
        self._queues: dict[str, None] = {}
        self._default = DefaultExchange(self._queues)
        self._exchanges: dict[str, Exchange] = {"": self._default}
        # reverse index: dest -> {source exchange name: number of bindings}
        self._sources: dict[Dest, dict[str, int]] = {}
        if standard_exchanges:
            for name, typ in STANDARD_EXCHANGES:
                self._exchanges[name] = make_exchange(typ, name, durable=True)

    def _rs(self, kind: str, name: str) -> str:
        return f"{kind} '{name}' in vhost '{self.vhost}'"

    def _not_found(self, kind: str, name: str) -> NotFound:
        return NotFound(f"no {self._rs(kind, name)}")

    # -- queues ---------------------------------------------------------------------------------

    def add_queue(self, name: str) -> None:
        """Record that a queue exists (gives it its implicit default-exchange binding)."""
        self._queues[name] = None

    def has_queue(self, name: str) -> bool:
        return name in self._queues

    def delete_queue(self, name: str) -> list[str]:
        """Forget a queue and its bindings; return exchanges auto-deleted as a result."""
        self._queues.pop(name, None)
        return self._drop_dest(Dest.queue(name))

    # -- exchanges ------------------------------------------------------------------------------

    def lookup_exchange(self, name: str) -> Exchange | None:
        return self._exchanges.get(name)

    def get_exchange(self, name: str) -> Exchange:
        x = self._exchanges.get(name)
        if x is None:
            raise self._not_found("exchange", name)
        return x

    def exchanges(self) -> list[Exchange]:
        """All exchanges including the default one, in declaration order."""
        return list(self._exchanges.values())

    def declare_exchange(
        self,
        name: str,
        type: str = "direct",
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        *,
        passive: bool = False,
    ) -> tuple[Exchange, bool]:
        """``exchange.declare``: return (exchange, created). Checks in RabbitMQ's order."""
        if passive:
            if name == "":
                raise AccessRefused(_DEFAULT_REFUSED)
            return self.get_exchange(name), False
        if type not in EXCHANGE_TYPES:
            raise self._unknown_type_error(f"unknown exchange type '{type}'")
        if name == "":
            raise AccessRefused(_DEFAULT_REFUSED)
        args = dict(arguments or {})
        x = self._exchanges.get(name)
        if x is not None:
            self._assert_equivalent(x, type, durable, auto_delete, internal, args)
            return x, False
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        ae = args.get(ALTERNATE_EXCHANGE_ARG)
        if ae is not None and not isinstance(ae, str):
            raise PreconditionFailed(
                f"invalid type '{type_name(ae)}' for arg '{ALTERNATE_EXCHANGE_ARG}' in "
                f"{self._rs('exchange', name)}"
            )
        x = make_exchange(type, name, durable, auto_delete, internal, args)
        self._exchanges[name] = x
        return x, True

    def restore_exchange(self, exchange: Exchange) -> None:
        """Insert an exchange recovered from storage or a metadata log, without checks."""
        self._exchanges[exchange.name] = exchange

    def refresh_policy_alternates(self, lookup: Callable[[str], str | None]) -> None:
        """Set every exchange's policy alternate exchange, e.g. from
        ``PolicyStore.exchange_alternate``; call after policies or exchanges change."""
        for x in self._exchanges.values():
            if x.name:
                x.policy_alternate = lookup(x.name)

    def _assert_equivalent(
        self, x: Exchange, type: str, durable: bool, auto_delete: bool, internal: bool, args: dict
    ) -> None:
        where = self._rs("exchange", x.name)
        for field, current, received in (
            ("type", x.type, type),
            ("durable", x.durable, durable),
            ("auto_delete", x.auto_delete, auto_delete),
            ("internal", x.internal, internal),
        ):
            if current != received:
                raise PreconditionFailed(
                    f"inequivalent arg '{field}' for {where}: "
                    f"received '{_atom(received)}' but current is '{_atom(current)}'"
                )
        cur, new = x.arguments.get(ALTERNATE_EXCHANGE_ARG), args.get(ALTERNATE_EXCHANGE_ARG)
        if not args_equivalent(cur, new):
            raise PreconditionFailed(
                f"inequivalent arg '{ALTERNATE_EXCHANGE_ARG}' for {where}: "
                f"{describe_mismatch(new, cur)}"
            )

    def delete_exchange(self, name: str, if_unused: bool = False) -> list[str]:
        """``exchange.delete``: return every exchange deleted (itself first, then auto-deletes).

        Idempotent: deleting a missing exchange returns ``[]``.
        """
        if name == "":
            raise AccessRefused(_DEFAULT_REFUSED)
        if name.startswith("amq."):
            raise AccessRefused(f"deletion of system {self._rs('exchange', name)} not allowed")
        x = self._exchanges.get(name)
        if x is None:
            return []
        if if_unused and x.has_bindings:
            raise PreconditionFailed(f"{self._rs('exchange', name)} in use")
        return self._delete_cascade(name)

    def _delete_cascade(self, name: str) -> list[str]:
        deleted: list[str] = []
        work = [name]
        while work:
            n = work.pop()
            x = self._exchanges.pop(n, None)
            if x is None:
                continue
            deleted.append(n)
            for b in x.bindings():
                self._unindex(n, b.dest)
            work.extend(self._drop_dest(Dest.exchange(n), report=False))
        return deleted

    def _drop_dest(self, dest: Dest, report: bool = True) -> list[str]:
        """Remove all bindings to ``dest``; auto-delete sources left without bindings."""
        sources = self._sources.pop(dest, None)
        if not sources:
            return []
        emptied = []
        for src in sources:
            x = self._exchanges.get(src)
            if x is None:
                continue
            x.unbind_dest(dest)
            if x.auto_delete and not x.has_bindings:
                emptied.append(src)
        if not report:
            return emptied
        deleted: list[str] = []
        for src in emptied:
            deleted.extend(self._delete_cascade(src))
        return deleted

    # -- bindings -------------------------------------------------------------------------------

    def _check_bind_ends(self, source: str, dest: Dest) -> Exchange:
        if source == "" or (dest.kind == EXCHANGE and dest.name == ""):
            raise AccessRefused(_DEFAULT_REFUSED)
        x = self._exchanges.get(source)
        if x is None:
            raise self._not_found("exchange", source)
        exists = dest.name in self._queues if dest.kind == QUEUE else dest.name in self._exchanges
        if not exists:
            raise self._not_found(dest.kind, dest.name)
        return x

    def bind(self, source: str, dest: Dest, routing_key: str = "", arguments: Mapping[str, Any] | None = None) -> bool:
        """``queue.bind`` / ``exchange.bind``: return True if the binding is new."""
        x = self._check_bind_ends(source, dest)
        if not x.bind(dest, routing_key, arguments):
            return False
        per = self._sources.setdefault(dest, {})
        per[source] = per.get(source, 0) + 1
        return True

    def unbind(
        self, source: str, dest: Dest, routing_key: str = "", arguments: Mapping[str, Any] | None = None
    ) -> Unbound:
        """``queue.unbind`` / ``exchange.unbind``; a missing binding is not an error."""
        x = self._check_bind_ends(source, dest)
        if not x.unbind(dest, routing_key, arguments):
            return Unbound(False)
        self._unindex(source, dest)
        if x.auto_delete and not x.has_bindings:
            return Unbound(True, tuple(self._delete_cascade(source)))
        return Unbound(True)

    def _unindex(self, source: str, dest: Dest) -> None:
        per = self._sources.get(dest)
        if per is None or source not in per:
            return
        if per[source] <= 1:
            del per[source]
            if not per:
                del self._sources[dest]
        else:
            per[source] -= 1

    def bindings(self, source: str | None = None, dest: Dest | None = None) -> list[Binding]:
        """Bindings, optionally filtered; includes the default exchange's implicit ones."""
        if dest is not None:
            out = []
            if dest.kind == QUEUE and dest.name in self._queues and source in (None, ""):
                out.append(Binding("", dest, dest.name, {}))
            for src in self._sources.get(dest, {}):
                if source is None or src == source:
                    out.extend(b for b in self._exchanges[src].bindings() if b.dest == dest)
            return out
        if source is not None:
            x = self._exchanges.get(source)
            return x.bindings() if x is not None else []
        return [b for x in self._exchanges.values() for b in x.bindings()]

    # -- routing --------------------------------------------------------------------------------

    def route(
        self,
        exchange: str,
        routing_key: str,
        headers: Mapping[str, Any] | None = None,
        *,
        internal_ok: bool = False,
    ) -> list[str]:
        """Queue names a message published to ``exchange`` reaches (maybe empty).

        Raises ``NotFound`` for a missing exchange and ``AccessRefused`` for a publish to an
        internal exchange (pass ``internal_ok=True`` for dead-lettering, which may target one).
        Hot path: for one key on an exchange without e2e bindings, one list per call.
        """
        x = self._publishable(exchange, internal_ok)
        x.publish_in += 1
        keys: Iterable[str] | None = None
        if headers and ("CC" in headers or "BCC" in headers):
            keys = routing_keys(routing_key, headers)
        elif not x._exchange_dests:
            # Common publish: one key, no e2e: a tuple precomputed at bind time.
            qs = x.queues_for(routing_key, headers)
            if qs is not None and (qs or x.alternate is None):
                if qs:
                    x.publish_out += 1
                return list(qs)
        out = self._route_general(x, routing_key, keys, headers)
        if out:
            x.publish_out += 1
        return out

    def route_keys(
        self,
        exchange: str,
        routing_keys: Iterable[str],
        headers: Mapping[str, Any] | None = None,
        *,
        internal_ok: bool = False,
    ) -> list[str]:
        """Like ``route`` but with an explicit list of keys; CC/BCC headers are not read.

        For republishing a dead-lettered message with ``DeadLettered.routing_keys`` (which
        already include the CC and BCC keys, or only the dead-letter routing key).
        """
        x = self._publishable(exchange, internal_ok)
        keys = list(routing_keys)
        if not keys:
            return []
        return self._route_general(x, keys[0], keys, headers)

    def _publishable(self, exchange: str, internal_ok: bool) -> Exchange:
        x = self._exchanges.get(exchange)
        if x is None:
            raise self._not_found("exchange", exchange)
        if x.internal and not internal_ok:
            raise AccessRefused(f"cannot publish to internal {self._rs('exchange', exchange)}")
        return x

    def _route_general(self, x: Exchange, routing_key: str, keys, headers) -> list[str]:
        queues: dict[str, None] = {}
        pending: list[str] = []
        matched = self._collect(x, routing_key, keys, headers, queues, pending)
        if not pending and (matched or x.alternate is None):
            return list(queues)
        if not matched:
            pending.append(x.alternate)  # type: ignore[arg-type]
        self._route_through(x.name, routing_key, keys, headers, queues, pending)
        return list(queues)

    @staticmethod
    def _collect(
        x: Exchange, routing_key: str, keys: Iterable[str] | None, headers, queues, pending
    ) -> bool:
        if keys is None:
            return x.collect(routing_key, headers, queues, pending)
        matched = False
        for k in keys:
            if x.collect(k, headers, queues, pending):
                matched = True
        return matched

    def _route_through(self, first: str, routing_key, keys, headers, queues, pending: list[str]) -> None:
        """Follow e2e bindings and alternate exchanges breadth-first, each exchange once."""
        seen = {first}
        i = 0
        while i < len(pending):
            name = pending[i]
            i += 1
            if name in seen:
                continue
            seen.add(name)
            x = self._exchanges.get(name)
            if x is None:  # a dangling alternate exchange is skipped, as in RabbitMQ
                continue
            if not self._collect(x, routing_key, keys, headers, queues, pending):
                ae = x.alternate
                if ae is not None:
                    pending.append(ae)


def _atom(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
