"""One virtual host: its topology (exchanges, bindings) and its live queues.

Owned by `broker.Broker`. Channels (through `declares.py`) call the declare/bind/delete methods and
`route`/`get_queue` on the hot path. The pure `core.router.Topology` does exchange and binding
semantics; this class adds what needs the server: queue runtimes, exclusive ownership per
connection (405 for anyone else), auto-delete and expiry deletion, and persistence of durable
entities through the broker's store (`amqp_broker/store/`) when one is configured.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from amqp_broker.core import limits
from amqp_broker.core.bindings import Dest
from amqp_broker.core.errors import (
    AccessRefused, CommandInvalid, NotFound, NotImplemented_, PreconditionFailed, ResourceLocked,
)
from amqp_broker.core.fieldtypes import WireInt, args_equivalent, describe_mismatch, plain_arguments
from amqp_broker.core.router import Topology
from amqp_broker.queues import (check_dead_letter_exchange_type, check_declare_arguments, queue_key,
                                 queue_type_of)
from amqp_broker.queues.classic import ClassicQueue

from .counters import Counters
from .queue_runtime import JournalTap, QueueRuntime

if TYPE_CHECKING:
    from amqp_broker.queues import Message

    from .broker import Broker
    from .session import Session

__all__ = ["VHost"]

_log = logging.getLogger(__name__)

# Arguments compared on redeclare (rabbit_amqqueue:declare_args), absent == absent.
_EQUIV_ARGS = (
    "x-expires", "x-message-ttl", "x-max-length", "x-max-length-bytes", "x-max-priority",
    "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-single-active-consumer", "x-queue-mode", "x-queue-type",
    "x-partitions",  # partitioned queues: the times may differ (policies change them too)
)


_RELAXED_ARGS = (
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-expires", "x-max-length",
    "x-max-length-bytes", "x-single-active-consumer", "x-message-ttl",
)


def _atom(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class VHost:
    def __init__(self, broker: "Broker", name: str) -> None:
        self.broker = broker
        self.name = name
        # An unknown exchange type: 406 channel error in 4.x, 503 connection error in 3.10.
        profile = getattr(broker.settings, "compat_profile", "rabbitmq-4.2")
        unknown = CommandInvalid if profile == "rabbitmq-3.10" else PreconditionFailed
        # 4.x stores x-queue-type on every queue (absent = "classic"); 3.10 compares as sent.
        self._default_queue_type = None if profile == "rabbitmq-3.10" else "classic"
        self.topology = Topology(name, unknown_type_error=unknown)
        self._default_exchange = self.topology.get_exchange("")  # counts the fast path below
        self.queues: dict[str, QueueRuntime] = {}
        self.retired_counters = Counters()  # counts of closed channels of this vhost
        # queue -> {argument: the int as the declaring client typed it (WireInt)}: only for
        # RabbitMQ's inequivalent-arg texts; the queue itself and the store get plain ints.
        self._declared_ints: dict[str, dict] = {}

    # -- hot path ------------------------------------------------------------------------------
    def route(self, exchange: str, routing_key: str, msg: "Message") -> list[QueueRuntime]:
        headers = msg.headers if msg.headers_offset >= 0 else None
        if exchange == "" and not headers:
            x = self._default_exchange
            x.publish_in += 1
            rt = self.queues.get(routing_key)
            if rt is None:
                return []
            x.publish_out += 1
            return [rt]
        queues = self.queues
        return [queues[n] for n in self.topology.route(exchange, routing_key, headers) if n in queues]

    def get_queue(self, name: str, session: "Session | None") -> QueueRuntime:
        rt = self.queues.get(name)
        if rt is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.name}'")
        self._check_owner(rt, session)
        err = rt.queue.unavailable_error()
        if err is not None:
            raise err
        return rt

    def _check_owner(self, rt: QueueRuntime, session: "Session | None",
                     exclusive: bool | None = None) -> None:
        # A redeclare whose exclusive flag differs is refused the same way (RabbitMQ 405).
        if (rt.exclusive and rt.owner is not session) or (exclusive is not None
                                                           and exclusive != rt.exclusive):
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{rt.name}' in vhost "
                f"'{self.name}'. It could be originally declared on another connection or the "
                "exclusive property value does not match that of the original declaration."
            )

    # -- queues --------------------------------------------------------------------------------
    def declare_queue(self, session: "Session", name: str, *, passive: bool, durable: bool,
                      exclusive: bool, auto_delete: bool, arguments: dict,
                      server_named: bool = False) -> QueueRuntime:
        if passive:
            rt = self.get_queue(name, session)
            return rt
        rt = self.queues.get(name)
        if rt is not None:
            self._check_owner(rt, session, exclusive)
            err = rt.queue.unavailable_error()
            if err is not None:
                raise err
            if self._relaxed_applies(rt, arguments):
                self._check_relaxed(rt, arguments)
            else:
                self._check_equivalent(rt, durable, exclusive, auto_delete, arguments)
            rt.queue.touch(self.broker.now_ms)
            return rt
        if name.startswith("amq.") and not server_named:
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        full = limits.reached(self.broker.admin.vhost_limits.get(self.name), "max-queues",
                              len(self.queues))
        if full is not None:
            raise limits.vhost_queues_refused(name, self.name, full)
        check_dead_letter_exchange_type(name, self.name, arguments)
        check_declare_arguments(name, self.name, arguments)
        if queue_type_of(arguments) in ("quorum", "partitioned"):
            self._check_quorum_properties(name, durable, exclusive, auto_delete)
        rt = self.create_queue(name, durable=durable, exclusive=exclusive,
                               auto_delete=auto_delete, arguments=plain_arguments(arguments),
                               owner=session if exclusive else None)
        typed = {k: v for k, v in arguments.items() if isinstance(v, WireInt)}
        if typed:
            self._declared_ints[name] = typed
        return rt

    def create_queue(self, name: str, *, durable: bool, exclusive: bool, auto_delete: bool,
                     arguments: dict, owner: "Session | None", persist: bool = True,
                     placement: dict | None = None) -> QueueRuntime:
        """`placement`: the queue's metadata record, for a quorum queue or a mirrored classic
        queue (its group and members) or a classic queue of another node (its home `node`: a
        proxy is made here)."""
        factory = self.broker.queue_factories.get(queue_type_of(arguments))
        remote = self.broker.remote_queues
        home = placement.get("node") if placement is not None else None
        new_durable_classic = (placement is None and remote is not None and factory is None
                               and durable and not exclusive and persist)
        if new_durable_classic and not auto_delete:  # under an ha-mode policy: mirrored
            placement = self.broker.membership.mirror_placement(self.name, name, arguments)
        if new_durable_classic and placement is None:  # x-queue-master-locator
            home = remote.home_for(self.name, name, arguments)
        if placement is not None and placement.get("mirrored"):
            q = self.broker.mirrored_queue_factory(name, self.name, arguments=arguments,
                                                   now_ms=self.broker.now_ms,
                                                   placement=placement)
        elif remote is not None and home is not None and home != remote.node:
            # a classic queue of another node: this node's proxy of it
            q = remote.make_queue(name, self.name, home, arguments=arguments,
                                  auto_delete=auto_delete)
        elif factory is not None:
            # Another queue type (e.g. the quorum adapter) owns its own persistence and confirms.
            extra = {"placement": placement} if placement is not None else {}
            q = factory(name, self.name, durable=durable, auto_delete=auto_delete,
                        exclusive=exclusive, arguments=arguments, now_ms=self.broker.now_ms,
                        **extra)
        else:
            journal = self.broker.journal if durable and not exclusive else None
            tap = JournalTap(journal, self.broker.durability) if journal is not None else None
            spill = self.broker.spill
            q = ClassicQueue(name, self.name, durable=durable, auto_delete=auto_delete,
                             exclusive=exclusive, exclusive_owner=owner, arguments=arguments,
                             journal=tap, now_ms=self.broker.now_ms,
                             pager=spill.pager(queue_key(self.name, name)) if spill else None,
                             memory_budget=self.broker.settings.classic_queue_memory_budget)
        rt = QueueRuntime(self.broker, self, q, owner)
        if owner is not None:
            owner.exclusive_queues.append(rt)  # so closing the owner costs O(its queues)
        self.queues[name] = rt
        self.topology.add_queue(name)
        self.broker.admin.apply_queue_policy(self.name, rt)
        if durable and not exclusive and persist:
            self._store("queue_declared", self.name, name, durable, auto_delete, dict(arguments))
        rt.mark_dirty()  # arm x-expires
        return rt

    def _check_quorum_properties(self, name: str, durable: bool, exclusive: bool,
                                 auto_delete: bool) -> None:
        for bad, prop in ((not durable, "non-durable"), (exclusive, "exclusive-owner"),
                          (auto_delete, "auto-delete")):
            if bad:
                raise PreconditionFailed(
                    f"invalid property '{prop}' for queue '{name}' in vhost '{self.name}'")

    def _relaxed_applies(self, rt: QueueRuntime, arguments: dict) -> bool:
        """quorum_queue.property_equivalence.relaxed_checks_on_redeclaration (RabbitMQ 3.11.16+,
        opt-in): a quorum queue redeclared as classic (x-queue-type absent or "classic") is
        compared on the shared arguments only. Off (the default), x-queue-type must match."""
        if rt.queue_type not in ("quorum", "partitioned") or arguments.get("x-queue-type", "classic") not in ("classic", b"classic"):
            return False
        quorum = getattr(self.broker.settings, "quorum_queue", None)
        return bool(getattr(quorum, "relaxed_checks_on_redeclaration", False))

    def _check_relaxed(self, rt: QueueRuntime, arguments: dict) -> None:
        # Only these are compared; durable, auto-delete and classic-only arguments are not.
        saved = {k: rt.arguments.get(k) for k in _RELAXED_ARGS}
        probe = {k: arguments.get(k) for k in _RELAXED_ARGS}
        for key in _RELAXED_ARGS:
            cur, new = saved[key], probe[key]
            if not args_equivalent(cur, new):
                raise PreconditionFailed(
                    f"inequivalent arg '{key}' for queue '{rt.name}' in vhost '{self.name}': "
                    f"{describe_mismatch(new, cur)}")

    def _check_equivalent(self, rt: QueueRuntime, durable: bool, exclusive: bool,
                          auto_delete: bool, arguments: dict) -> None:
        where = f"queue '{rt.name}' in vhost '{self.name}'"
        for field, current, received in (("durable", rt.durable, durable),
                                         ("auto_delete", rt.auto_delete, auto_delete)):
            if current != received:
                raise PreconditionFailed(f"inequivalent arg '{field}' for {where}: received "
                                         f"'{_atom(received)}' but current is '{_atom(current)}'")
        cur_args = {**rt.arguments, **self._declared_ints.get(rt.name, {})}
        for key in _EQUIV_ARGS:
            cur, new = cur_args.get(key), arguments.get(key)
            if key == "x-queue-type":
                cur = cur or self._default_queue_type
                new = new or self._default_queue_type
                if {cur, new} <= {None, "classic", b"classic"}:
                    continue  # absent == classic in 3.10 too (rabbit_misc special case)
            if not args_equivalent(cur, new):
                raise PreconditionFailed(f"inequivalent arg '{key}' for {where}: "
                                         f"{describe_mismatch(new, cur)}")

    def delete_queue(self, session: "Session", name: str, if_unused: bool, if_empty: bool) -> int:
        rt = self.queues.get(name)
        if rt is None:
            return 0  # idempotent, as the spec says
        self._check_owner(rt, session)
        if (if_unused or if_empty) and not rt.queue.supports_conditional_delete:
            # rabbit_quorum_queue:delete/4 (3.10 to 4.2): a connection error, whatever the state.
            flag = "if-unused" if if_unused else "if-empty"
            raise NotImplemented_(
                f"cannot delete queue '{name}' in vhost '{self.name}'. queue.delete operations "
                f"with {flag} flag set are not supported by {rt.queue_type} queues")
        if if_unused and rt.consumer_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' in use")
        if if_empty and rt.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' not empty")
        return self.delete_queue_now(rt)

    def delete_queue_now(self, rt: QueueRuntime) -> int:
        if self.queues.get(rt.name) is not rt:
            return 0
        del self.queues[rt.name]
        self._declared_ints.pop(rt.name, None)
        count = rt.delete()
        for x in self.topology.delete_queue(rt.name):
            self._store("exchange_deleted", self.name, x)
        if rt.durable and not rt.exclusive:
            self._store("queue_deleted", self.name, rt.name)
        return count

    def replace_queue(self, rt: QueueRuntime, placement: dict) -> QueueRuntime:
        """The queue `rt` is now served as `placement` (its metadata record) says, e.g. a
        classic queue of another node that became mirrored: its bindings stay, its consumers
        get basic.cancel."""
        if self.queues.get(rt.name) is rt:
            del self.queues[rt.name]
        if rt.queue.placement(self.broker.node_name).members[0] != self.broker.node_name:
            self.broker.remote_queues.retire(rt.queue)  # a proxy: its confirms still come
        rt.delete()
        return self.create_queue(rt.name, durable=True, exclusive=False,
                                 auto_delete=placement["auto_delete"],
                                 arguments=placement["arguments"], owner=None, persist=False,
                                 placement=placement)

    def purge_queue(self, session: "Session", name: str) -> int:
        return self.get_queue(name, session).purge()

    def drop_exclusive(self, session: "Session") -> None:
        """The owner connection closed: its exclusive queues go, even durable ones."""
        for rt in session.exclusive_queues:
            if rt.vhost is self:
                self.delete_queue_now(rt)

    # -- exchanges and bindings ----------------------------------------------------------------
    def declare_exchange(self, name: str, type_: str, *, passive: bool, durable: bool,
                         auto_delete: bool, internal: bool, arguments: dict) -> None:
        x, created = self.topology.declare_exchange(name, type_, durable, auto_delete, internal,
                                                    arguments, passive=passive)
        if created:
            store = self.broker.admin.policies.get(self.name)
            x.policy_alternate = store.exchange_alternate(name) if store is not None else None
        if created:  # transient ones too: every node of a cluster routes through them
            self._store("exchange_declared", self.name, name, type_, durable, auto_delete,
                        internal, dict(arguments))

    def delete_exchange(self, name: str, if_unused: bool) -> None:
        for x in self.topology.delete_exchange(name, if_unused):
            self._store("exchange_deleted", self.name, x)

    def bind(self, session: "Session", source: str, dest: Dest, routing_key: str,
             arguments: dict) -> None:
        self.topology.get_exchange(source)  # RabbitMQ reports a missing source first (404)
        if dest.is_queue:
            rt = self.queues.get(dest.name)
            if rt is None:
                raise NotFound(f"no queue '{dest.name}' in vhost '{self.name}'")
            self._check_owner(rt, session)
        if self.topology.bind(source, dest, routing_key, arguments) and self._shared_binding(source, dest):
            self._store("binding_added", self.name, source, dest.kind, dest.name, routing_key,
                        dict(arguments))

    def unbind(self, session: "Session", source: str, dest: Dest, routing_key: str,
               arguments: dict) -> None:
        if dest.is_queue:
            rt = self.queues.get(dest.name)
            if rt is None:
                return  # queue.unbind is idempotent
            self._check_owner(rt, session)
        try:
            res = self.topology.unbind(source, dest, routing_key, arguments)
        except NotFound:
            return
        if res.removed:
            self._store("binding_removed", self.name, source, dest.kind, dest.name, routing_key,
                        dict(arguments))
        for x in res.deleted_exchanges:
            self._store("exchange_deleted", self.name, x)

    def _shared_binding(self, source: str, dest: Dest) -> bool:
        """Bindings in the metadata: between exchanges, or to a durable, non-exclusive queue
        (the queues every node knows; a transient queue lives with its node)."""
        if self.topology.lookup_exchange(source) is None:
            return False
        if dest.is_queue:
            rt = self.queues.get(dest.name)
            return rt is not None and rt.durable and not rt.exclusive
        return self.topology.lookup_exchange(dest.name) is not None

    # -- persistence ---------------------------------------------------------------------------
    def _store(self, op: str, *args: Any) -> None:
        meta = getattr(self.broker.store, "metadata", None)
        fn = getattr(meta, op, None)
        if fn is not None:
            fn(*args)
