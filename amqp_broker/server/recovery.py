"""Rebuild a broker's durable state from its store at start-up.

Called once by `node.run_node` after `Store.open()`, before the listener starts: durable
exchanges, then durable queues with their recovered persistent messages (redelivered if they had
been delivered before the crash), then bindings. Journal entries of queues that no longer exist
are dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from amqp_broker.core.bindings import Dest
from amqp_broker.core.errors import AMQPError
from amqp_broker.store import BINDING, EXCHANGE, QUEUE

if TYPE_CHECKING:
    from .broker import Broker
    from .persistence import Store

__all__ = ["recover"]

_log = logging.getLogger(__name__)


def recover(broker: "Broker", store: "Store", drop_orphans: bool = True) -> None:
    """`drop_orphans`: drop the journal entries of queues that were not recovered (in a
    cluster the caller does it once the replicated metadata has created its queues)."""
    meta = store.meta
    recovered = store.recovered
    now = broker.update_clock()
    exchanges = queues = messages = bindings = 0
    for (vhost_name, name), spec in meta.items(EXCHANGE):
        vhost = broker.add_vhost(vhost_name)
        try:
            vhost.topology.declare_exchange(name, spec["type"], spec["durable"],
                                            spec["auto_delete"], spec["internal"],
                                            spec["arguments"])
            exchanges += 1
        except AMQPError as err:
            _log.warning("cannot recover exchange %r: %s", name, err)
    for (vhost_name, name), spec in meta.items(QUEUE):
        vhost = broker.add_vhost(vhost_name)
        try:
            rt = vhost.create_queue(name, durable=True, exclusive=False,
                                    auto_delete=spec["auto_delete"], arguments=spec["arguments"],
                                    owner=None, persist=False)
        except AMQPError as err:
            _log.warning("cannot recover queue %r: %s", name, err)
            continue
        entries = recovered.pop(rt.queue.key, [])
        rt.queue.restore(entries, now)
        messages += len(entries)
        queues += 1
    for key, arguments in meta.items(BINDING):
        vhost_name, source, kind, dest, routing_key, _ = key
        vhost = broker.vhosts.get(vhost_name)
        if vhost is None:
            continue
        try:
            vhost.topology.bind(source, Dest(kind, dest), routing_key, arguments)
            bindings += 1
        except AMQPError as err:
            _log.warning("cannot recover binding %r: %s", key, err)
    if drop_orphans:
        store.drop_orphans()
    _log.info("recovered %d exchanges, %d queues (%d messages), %d bindings",
              exchanges, queues, messages, bindings)
