"""The trio-side owner of one queue: runs a `QueueType` and performs what it asks for.

Created by `vhost.VHost` when a queue is declared (or recovered). It holds the queue only through
`queues.base.QueueType` (classic, quorum, later a remote proxy), with no per-type branches.
Channels call `publish`, `settle`, `basic_get`, `add_consumer`, `remove_consumer`, `kick`;
`VHost` and the management API call `purge`, `delete` and `get`; the quorum queue type, whose state changes arrive from its Raft group
rather than from these calls, calls `mark_dirty`, `rearm_timer` and `expired`. None of these
deliver directly. Instead the runtime marks itself dirty (`mark_dirty`) and the broker's
`run_pending()` (called once after each batch of events a session handles, and by timer/journal
tasks) calls `run()`, which hands deliveries to the consumers' channels, drains dead letters
and re-arms the queue's timer. So a burst of publishes costs one dispatch pass, not one per
message.

Confirms: the queue settles each publish's `(tracker, seq)` itself (see base.py); a durable
classic queue hands persistent ones to `JournalTap.confirm_when_durable`, which waits for the
journal's fsync through `broker.durability`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from amqp_broker.queues import Consumer, Message, QueueType
from amqp_broker.queues.base import Confirm, Delivery, GetReply

from .counters import QueueCounters

if TYPE_CHECKING:
    from .broker import Broker, VHost
    from .session import Session

__all__ = ["QueueRuntime", "JournalTap"]

_log = logging.getLogger(__name__)


class JournalTap:
    """The `queues.base.QueueJournal` a durable classic queue is given: the store's journal
    (its record methods bound straight through, so the hot path pays no extra call) plus
    `confirm_when_durable`, which parks a publisher confirm on the broker's `Durability` task
    until the journal has fsynced that record. Built by `VHost.create_queue`."""

    __slots__ = ("journal", "enqueued", "delivered", "removed", "drop_queue", "read", "_wait")

    def __init__(self, journal, durability) -> None:
        self.journal = journal
        self.enqueued = journal.enqueued
        self.delivered = journal.delivered
        self.removed = journal.removed
        self.drop_queue = journal.drop_queue
        self.read = journal.read
        self._wait = durability.wait

    def confirm_when_durable(self, journal_seq: int, confirm: Confirm) -> None:
        self._wait(journal_seq, confirm[0], confirm[1])


class QueueRuntime:
    """One live queue: the pure queue object plus owner, consumers, confirms and timers."""

    def __init__(self, broker: "Broker", vhost: "VHost", queue: QueueType,
                 owner: "Session | None") -> None:
        self.broker = broker
        self.vhost = vhost
        self.queue = queue
        self.name: str = queue.name
        self.durable: bool = queue.durable
        self.auto_delete: bool = queue.auto_delete
        self.exclusive: bool = queue.exclusive
        self.arguments: dict = queue.arguments
        self.queue_type: str = queue.queue_type
        self.owner = owner  # the declaring connection of an exclusive queue
        self.consumers: dict[tuple[int, str], Consumer] = {}
        self.had_consumer = False
        self.deleted = False
        self.dirty = False
        self.timer_deadline: int | None = None
        self.counters = QueueCounters()  # message_stats: bumped by channels and `publish`/`settle`

    # -- publish -------------------------------------------------------------------------------
    def publish(self, msg: Message, now_ms: int, confirm: Confirm | None) -> bool:
        """Hot path. `confirm` = (tracker, seq): the queue settles it, now or later. True when
        the queue asks its publishers to pause (`QueueType.flow`; `Session.pause_for`)."""
        queue = self.queue
        queue.publish(msg, now_ms, confirm)
        self.counters.publish += 1
        self.mark_dirty()
        return queue.flow

    # -- consumers -----------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.queue.add_consumer(consumer, self.broker.now_ms)
        self.consumers[(id(consumer.channel), consumer.tag)] = consumer
        self.had_consumer = True
        self.mark_dirty()

    def remove_consumer(self, channel: Any, tag: str) -> None:
        if self.consumers.pop((id(channel), tag), None) is None:
            return
        if not self.deleted:
            self.queue.remove_consumer(channel, tag, self.broker.now_ms)
            self.mark_dirty()
            if self.auto_delete and not self.consumers:
                # Auto-delete fires when the last consumer goes, never before the first one.
                self.vhost.delete_queue_now(self)

    def kick(self) -> None:
        """A consumer of this queue got credit back: dispatch at the end of the batch."""
        if not self.dirty:  # every ack lands here: usually marked already
            self.mark_dirty()

    # -- settlement ----------------------------------------------------------------------------
    def settle(self, msg_ids: list[int], how: str) -> None:
        if self.deleted:
            return
        if how == "ack":
            self.queue.settle(msg_ids)
            self.counters.ack += len(msg_ids)
        elif how == "requeue":
            self.queue.requeue(msg_ids)
        else:
            self.queue.discard(msg_ids)
        self.mark_dirty()

    def basic_get(self, channel: Any, no_ack: bool, reply: GetReply) -> None:
        """basic.get for `channel`: `reply(entry or None, messages left)`, at once or later."""
        self.queue.basic_get(channel, no_ack, self.broker.now_ms, reply)
        self.mark_dirty()

    def get(self, no_ack: bool):
        """The management API's get: (entry or None, messages left), from local state."""
        entry = self.queue.get(self.broker.now_ms, no_ack)
        self.mark_dirty()
        return entry, self.queue.message_count

    def channel_closed(self, channel: Any) -> None:
        """A channel that used this queue closed (after requeueing its unacked here)."""
        if not self.deleted:
            self.queue.remove_channel(channel, self.broker.now_ms)

    # -- batch end ------------------------------------------------------------------------------
    def mark_dirty(self) -> None:
        """Ask for a `run` pass at the end of the current batch (`Broker.run_pending`): queue
        state changed, so dispatch, dead letters or the timer may be due. Cheap: a flag test."""
        if not self.dirty:
            self.dirty = True
            self.broker.pending.append(self)

    def rearm_timer(self) -> None:
        """The queue's deadline may have changed outside a `run` (a quorum Tick applied):
        schedule it afresh at the end of the batch, even if it equals the old one."""
        self.timer_deadline = None
        self.mark_dirty()

    def run(self) -> None:
        """Dispatch, dead-letter and re-arm the timer (called by `Broker.run_pending`)."""
        self.dirty = False
        if self.deleted:
            return
        q = self.queue
        now = self.broker.now_ms
        if self.consumers:
            q.dispatch(now, self._deliver)
        dls = q.take_dead_letters()
        if dls:
            self.broker.dead_letter(self.vhost, dls)
        deadline = q.next_deadline(now)
        if deadline != self.timer_deadline:
            self.timer_deadline = deadline
            if deadline is not None:
                self.broker.timers.schedule(deadline, self)
            else:
                self.broker.timers.forget()

    def _deliver(self, d: Delivery) -> None:
        ch = d.consumer.channel
        ch.deliver(self, d.consumer, d.entry)
        ch.session.wake()

    def on_timer(self, now_ms: int) -> None:
        """The deadline heap fired for this queue."""
        if self.deleted:
            return
        self.timer_deadline = None
        if self.queue.expire(now_ms):
            self.expired()
            return
        self.mark_dirty()

    def expired(self) -> None:
        """The queue expired (x-expires, decided by the queue itself): delete it now."""
        _log.info("%s queue %r in vhost %r expired", self.queue_type, self.name, self.vhost.name)
        self.vhost.delete_queue_now(self)

    # -- whole queue ---------------------------------------------------------------------------
    def purge(self) -> int:
        """queue.purge (channel or management API): ready messages dropped, count returned."""
        n = self.queue.purge()
        self.mark_dirty()
        return n

    # -- deletion ------------------------------------------------------------------------------
    def delete(self) -> int:
        """Drop the queue; consumers get basic.cancel (if they asked for notifications)."""
        if self.deleted:
            return 0
        count = self.queue.delete()
        self.deleted = True
        consumers, self.consumers = self.consumers, {}
        for c in consumers.values():
            c.channel.consumer_cancelled(c.tag)
        return count

    @property
    def message_count(self) -> int:
        return self.queue.message_count

    @property
    def consumer_count(self) -> int:
        return self.queue.consumer_count
