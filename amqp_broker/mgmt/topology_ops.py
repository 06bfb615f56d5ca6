"""Queue, exchange, binding and message operations of the management facade.

A mixin of `admin.Admin` (kept apart so each file has one job); it reaches the broker only
through `self._vhost(name)` and the vhost's public methods, maps the broker's AMQP errors to
HTTP-ish `AdminError`s, and calls `broker.run_pending()` after anything that may need a
dispatch (publish, purge, requeue, delete).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from amqp_broker.core.bindings import Dest
from amqp_broker.core.errors import AccessRefused, AMQPError, NotFound
from amqp_broker.core.policies import effective_definition
from amqp_broker.queues import Message

from .errors import BadRequest, NotAuthorised, NotFoundError
from .messages import payload_from_json, payload_to_json, properties_from_json, properties_to_json
from .rates import DEPTH_KEYS, EXCHANGE_KEYS, QUEUE_KEYS
from .rows import (binding_row, exchange_row, partition_rows, properties_key, queue_row,
                   same_properties_key)

__all__ = ["TopologyOps", "amqp_errors"]

_ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


@contextmanager
def amqp_errors():
    """Broker errors as RabbitMQ's management plugin reports them."""
    try:
        yield
    except AccessRefused:
        raise NotAuthorised("Access refused.") from None
    except NotFound as e:
        raise NotFoundError() from e
    except AMQPError as e:
        raise BadRequest(e.message) from None


class TopologyOps:
    broker: Any
    node: str

    # -- queues -------------------------------------------------------------------------------
    def list_queues(self, vhost: str | None = None) -> list[dict]:
        return [self._queue_row(v, rt) for v in self._vhosts(vhost) for rt in list(v.queues.values())]

    def get_queue(self, vhost: str, name: str) -> dict:
        """One queue's row; a quorum queue's also carries "raft": this node's replica of its
        Raft group (`QuorumRuntime.raft_status`), which `amqp-broker-queues quorum_status`
        shows. Our extension: RabbitMQ's API has no such field (its CLI asks each member).
        A partitioned queue's carries "partitions" (`rows.partition_rows`) and
        "partition_handoffs" (started / graceful / forced), as this node's replica sees them."""
        v = self._vhost(vhost)
        rt = v.queues.get(name)
        if rt is None:
            raise NotFoundError()
        row = self._queue_row(v, rt)
        group = rt.queue.placement(self.node).group
        runtime = getattr(self.broker, "quorum", None)
        if group is not None and runtime is not None:
            raft = runtime.raft_status(group)
            if raft is not None:
                row["raft"] = raft
        if rt.queue_type == "partitioned" and not rt.queue.deleted:
            row["partitions"] = partition_rows(rt.queue)
            row["partition_handoffs"] = rt.queue.handoff_counts()
        return row

    def _queue_row(self, v, rt) -> dict:
        policy, op = self._policy_store(v.name).for_queue(rt.name, rt.queue_type)
        row = queue_row(rt, self.node, policy, effective_definition(policy, op), op)
        if "slave_nodes" in row:  # mirrors that wait for sync_queue are mirrors, not in sync
            row["slave_nodes"] += [n for n in self.unsynced_mirrors(v.name, rt.name)
                                   if n not in row["slave_nodes"]]
        return self._with_rates(row, ("queue", v.name, rt.name), QUEUE_KEYS, DEPTH_KEYS)

    def declare_queue(self, vhost: str, name: str, *, durable: bool = True,
                      auto_delete: bool = False, arguments: dict | None = None) -> bool:
        """PUT /api/queues/vhost/name: True when created, False when an equivalent one exists."""
        v = self._vhost(vhost)
        if not name:
            raise BadRequest("queue name must not be empty")
        existed = name in v.queues
        with amqp_errors():  # the vhost applies matching policies to a new queue
            v.declare_queue(None, name, passive=False, durable=bool(durable), exclusive=False,
                                 auto_delete=bool(auto_delete), arguments=dict(arguments or {}))
        return not existed

    def delete_queue(self, vhost: str, name: str, *, if_empty: bool = False,
                     if_unused: bool = False) -> int:
        v = self._vhost(vhost)
        rt = v.queues.get(name)
        if rt is None:
            raise NotFoundError()
        if if_unused and rt.consumer_count:
            raise BadRequest(f"queue '{name}' in vhost '{vhost}' in use")
        if if_empty and rt.message_count:
            raise BadRequest(f"queue '{name}' in vhost '{vhost}' not empty")
        n = v.delete_queue_now(rt)  # exclusive queues too, as the management plugin allows
        self.broker.run_pending()
        return n

    def purge_queue(self, vhost: str, name: str) -> int:
        v = self._vhost(vhost)
        rt = v.queues.get(name)
        if rt is None:
            raise NotFoundError()
        n = rt.purge()
        self.broker.run_pending()
        return n

    def get_messages(self, vhost: str, name: str, *, count: int = 1, ackmode: str = "ack_requeue_true",
                     encoding: str = "auto", truncate: int | None = None) -> list[dict]:
        """POST /api/queues/vhost/name/get: fetch up to `count`, then requeue, ack or reject
        them all at once (so a requeued message is not fetched twice)."""
        if ackmode not in _ACKMODES:
            raise BadRequest(f"invalid ackmode '{ackmode}'")
        if encoding not in ("auto", "base64"):
            raise BadRequest(f"invalid encoding '{encoding}'")
        v = self._vhost(vhost)
        rt = v.queues.get(name)
        if rt is None:
            raise NotFoundError()
        self.broker.update_clock()
        out, ids = [], []
        for _ in range(max(0, int(count))):
            entry, left = rt.get(False)
            if entry is None:
                break
            ids.append(entry.msg_id)
            out.append(_message_row(entry, left, encoding, truncate))
        if ids:
            how = {"ack_requeue_true": "requeue", "reject_requeue_true": "requeue",
                   "ack_requeue_false": "ack", "reject_requeue_false": "discard"}[ackmode]
            rt.settle(ids, how)
        self.broker.run_pending()
        return out

    def move_messages(self, vhost: str, name: str, destination: str, limit: int) -> dict:
        """POST /api/queues/vhost/name/move (ours; RabbitMQ's UI uses a shovel): up to `limit`
        ready messages, oldest first, into queue `destination` of the same vhost, each
        published there (unchanged: headers, x-death, properties) before it is acked here,
        within one step of the node's loop. Returns {"moved": n, "remaining": ready left}."""
        v = self._vhost(vhost)
        src = v.queues.get(name)
        if src is None:
            raise NotFoundError()
        dst = v.queues.get(destination)
        if dst is None:
            raise BadRequest(f"no queue '{destination}' in vhost '{vhost}'")
        if dst is src:
            raise BadRequest("source and destination are the same queue")
        now = self.broker.update_clock()
        moved = 0
        while moved < limit:
            entry, _left = src.get(False)
            if entry is None:
                break
            dst.publish(entry.message, now, None)
            src.settle([entry.msg_id], "ack")
            moved += 1
        self.broker.run_pending()
        return {"moved": moved, "remaining": src.queue.message_count}

    # -- exchanges ----------------------------------------------------------------------------
    def list_exchanges(self, vhost: str | None = None) -> list[dict]:
        out = []
        for v in self._vhosts(vhost):
            store = self._policy_store(v.name)
            for x in v.topology.exchanges():
                out.append(self._exchange_row(v.name, x, store.for_exchange(x.name)[0] if x.name else None))
        return out

    def _exchange_row(self, vhost: str, x, policy) -> dict:
        return self._with_rates(exchange_row(vhost, x, policy), ("exchange", vhost, x.name),
                                EXCHANGE_KEYS)

    def get_exchange(self, vhost: str, name: str) -> dict:
        v = self._vhost(vhost)
        x = v.topology.lookup_exchange(name)
        if x is None:
            raise NotFoundError()
        return self._exchange_row(v.name, x,
                                  self._policy_store(v.name).for_exchange(name)[0] if name else None)

    def declare_exchange(self, vhost: str, name: str, type_: str, *, durable: bool = True,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: dict | None = None) -> bool:
        v = self._vhost(vhost)
        if name.startswith("amq.") or name == "":
            raise NotAuthorised("Access refused.")
        existed = v.topology.lookup_exchange(name) is not None
        with amqp_errors():
            v.declare_exchange(name, type_, passive=False, durable=bool(durable),
                               auto_delete=bool(auto_delete), internal=bool(internal),
                               arguments=dict(arguments or {}))
        if not existed:
            x = v.topology.lookup_exchange(name)
            x.policy_alternate = self._policy_store(v.name).exchange_alternate(name)
        return not existed

    def delete_exchange(self, vhost: str, name: str, *, if_unused: bool = False) -> None:
        v = self._vhost(vhost)
        if name.startswith("amq.") or name == "":
            raise NotAuthorised("Access refused.")
        if v.topology.lookup_exchange(name) is None:
            raise NotFoundError()
        with amqp_errors():
            v.delete_exchange(name, if_unused)

    def publish(self, vhost: str, exchange: str, routing_key: str, payload: Any,
                payload_encoding: str = "string", properties: dict | None = None) -> bool:
        """POST /api/exchanges/vhost/name/publish; True when routed to at least one queue."""
        v = self._vhost(vhost)
        if v.topology.lookup_exchange(exchange) is None:
            raise NotFoundError()
        body = payload_from_json(payload, payload_encoding)
        msg = Message.from_publish(exchange, routing_key, properties_from_json(properties), body)
        with amqp_errors():
            targets = v.route(exchange, routing_key, msg)
        now = self.broker.update_clock()
        for rt in targets:
            rt.publish(msg, now, None)
        self.broker.run_pending()
        return bool(targets)

    # -- bindings -----------------------------------------------------------------------------
    def list_bindings(self, vhost: str | None = None, *, source: str | None = None,
                      dest: tuple[str, str] | None = None) -> list[dict]:
        out = []
        for v in self._vhosts(vhost):
            d = Dest(*dest) if dest is not None else None
            if d is None and source in (None, ""):
                # The default exchange's implicit bindings come first, as in RabbitMQ.
                from amqp_broker.core.bindings import Binding

                out.extend(binding_row(v.name, Binding("", Dest.queue(q), q, {})) for q in v.queues)
            for b in v.topology.bindings(source, d):
                if d is None and b.source == "":
                    continue
                if source is not None and b.source != source:
                    continue
                out.append(binding_row(v.name, b))
        return out

    def bind(self, vhost: str, source: str, dest_kind: str, dest: str, routing_key: str = "",
             arguments: dict | None = None) -> str:
        """POST /api/bindings/vhost/e/source/{q,e}/dest; returns the new binding's properties key."""
        v = self._vhost(vhost)
        if source == "":
            raise NotAuthorised("Access refused.")
        if v.topology.lookup_exchange(source) is None:
            raise NotFoundError()
        if dest_kind == "queue" and dest not in v.queues:
            raise NotFoundError()
        if dest_kind == "exchange" and v.topology.lookup_exchange(dest) is None:
            raise NotFoundError()
        with amqp_errors():
            v.bind(None, source, Dest(dest_kind, dest), routing_key, dict(arguments or {}))
        return properties_key(routing_key, dict(arguments or {}))

    def unbind(self, vhost: str, source: str, dest_kind: str, dest: str, props_key: str) -> None:
        v = self._vhost(vhost)
        for b in v.topology.bindings(source, Dest(dest_kind, dest)):
            if b.source == source and same_properties_key(
                    props_key, properties_key(b.routing_key, dict(b.arguments))):
                with amqp_errors():
                    v.unbind(None, source, b.dest, b.routing_key, dict(b.arguments))
                return
        raise NotFoundError()

    # -- health -------------------------------------------------------------------------------
    def aliveness_test(self, vhost: str) -> None:
        """Declare `aliveness-test`, publish to it and get the message back, as RabbitMQ does."""
        self._vhost(vhost)
        self.declare_queue(vhost, "aliveness-test", durable=False)
        self.publish(vhost, "", "aliveness-test", "test_message")
        got = self.get_messages(vhost, "aliveness-test", count=1, ackmode="ack_requeue_false")
        if not got:
            raise BadRequest("aliveness test failed: message not received")


def _message_row(entry, left: int, encoding: str, truncate: int | None) -> dict:
    msg = entry.message
    payload, enc = payload_to_json(msg.body, encoding, truncate)
    return {"payload_bytes": len(msg.body), "redelivered": entry.redelivered,
            "exchange": msg.exchange, "routing_key": msg.routing_key, "message_count": left,
            "properties": properties_to_json(msg.properties), "payload": payload,
            "payload_encoding": enc}
