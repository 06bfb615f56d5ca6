"""The consumers of one classic queue: priority groups, round-robin, exclusivity, single-active.

Who calls it: `ClassicQueue` only. `pick()` chooses who gets the next message:
- consumers are grouped by x-priority; a higher group gets every message while any of its
  members has credit, lower groups only get what the higher ones cannot take;
- inside a group, round-robin: a consumer that was offered a message moves to the back;
- with single-active-consumer only the active consumer is offered messages; when it leaves, the
  waiting consumer with the highest priority (earliest registered among equals) takes over.
Cost of `pick()`: O(1) when the first consumer tried has credit; O(consumers) when all are full.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from amqp_broker.core.errors import AccessRefused, vhost_resource
from amqp_broker.queues.base import Consumer

__all__ = ["ConsumerSet"]


class ConsumerSet:
    """Registered consumers of one queue, in the order they get offered messages."""

    __slots__ = ("_groups", "_count", "_exclusive", "_single_active", "_active", "_waiting")

    def __init__(self, single_active: bool = False) -> None:
        # (priority, consumers) sorted by priority, highest first; groups are never empty.
        self._groups: list[tuple[int, deque[Consumer]]] = []
        self._count = 0
        self._exclusive = False
        self._single_active = single_active
        self._active: Consumer | None = None
        self._waiting: list[Consumer] = []  # single-active only, registration order

    def __len__(self) -> int:
        return self._count

    @property
    def active(self) -> Consumer | None:
        """The single active consumer (single-active-consumer queues only)."""
        return self._active

    def all(self) -> list[Consumer]:
        if self._single_active:
            return ([self._active] if self._active else []) + list(self._waiting)
        return [c for _, group in self._groups for c in group]

    def add(self, consumer: Consumer, queue: str, vhost: str) -> None:
        """Register; raises AccessRefused when exclusivity forbids it (RabbitMQ's 403 text)."""
        if self._exclusive or (consumer.exclusive and self._count):
            raise AccessRefused(f"{vhost_resource('queue', queue, vhost)} in exclusive use")
        self._count += 1
        self._exclusive = consumer.exclusive
        if self._single_active:
            if self._active is None:
                self._active = consumer
            else:
                self._waiting.append(consumer)
            return
        for i, (prio, group) in enumerate(self._groups):
            if prio == consumer.priority:
                group.append(consumer)
                return
            if prio < consumer.priority:
                self._groups.insert(i, (consumer.priority, deque([consumer])))
                return
        self._groups.append((consumer.priority, deque([consumer])))

    def remove(self, channel: Any, tag: str) -> Consumer | None:
        for c in self.all():
            if c.channel is channel and c.tag == tag:
                self._discard(c)
                return c
        return None

    def remove_channel(self, channel: Any) -> list[Consumer]:
        gone = [c for c in self.all() if c.channel is channel]
        for c in gone:
            self._discard(c)
        return gone

    def _discard(self, consumer: Consumer) -> None:
        self._count -= 1
        if consumer.exclusive:
            self._exclusive = False
        if self._single_active:
            if consumer is self._active:
                self._active = self._next_active()
            else:
                self._waiting.remove(consumer)
            return
        for i, (_, group) in enumerate(self._groups):
            if consumer in group:
                group.remove(consumer)
                if not group:
                    del self._groups[i]
                return

    def _next_active(self) -> Consumer | None:
        if not self._waiting:
            return None
        best = max(range(len(self._waiting)), key=lambda i: (self._waiting[i].priority, -i))
        return self._waiting.pop(best)

    def any_keeping_up(self) -> bool:
        """Whether a consumer that may be offered messages could take more now
        (`Consumer.keeping_up`). O(consumers)."""
        if self._single_active:
            return self._active is not None and self._active.keeping_up()
        return any(c.keeping_up() for _, group in self._groups for c in group)

    def pick(self) -> Consumer | None:
        """The consumer that gets the next message, having taken one unit of its credit; None when
        nobody can take a message now."""
        if self._single_active:
            active = self._active
            return active if active is not None and active.take_credit() else None
        for _, group in self._groups:
            for _ in range(len(group)):
                consumer = group.popleft()
                group.append(consumer)  # offered -> back of its group (round-robin)
                if consumer.take_credit():
                    return consumer
        return None
