"""Fanout exchange: every bound destination gets every message, routing key ignored.

Pure. Created by ``amqp_broker.core.exchanges.make_exchange``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..bindings import Dest, Targets
from .base import Exchange

__all__ = ["FanoutExchange"]


class FanoutExchange(Exchange):
    type_name = "fanout"
    __slots__ = ("_targets",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._targets = Targets()

    def collect(self, routing_key, headers, queues, exchanges) -> bool:
        t = self._targets
        if not t:
            return False
        queues.update(t.queue_map)
        if t.exchanges:
            exchanges.extend(t.exchanges)
        return True

    def queues_for(self, routing_key, headers):
        return self._targets.queues

    def _add(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        self._targets.add(dest)

    def _remove(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        self._targets.remove(dest)
