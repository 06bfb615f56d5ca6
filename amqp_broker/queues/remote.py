"""A classic queue of another node, as channels on this node see it: a `QueueType` proxy.

In a cluster a classic queue lives on its home node. Every other node holds a `RemoteQueue` in
its vhost under the same name (created from the cluster's metadata by
`server/cluster_meta.py`), so routing, declarations, consumers, gets and acks on any node work
as on the home node. Every call becomes a `remote_wire` message to the home node through a
`RemoteLink` (the server's `server/remote_queues.py`, which also hands the home node's answers
back: `confirmed`, `deliver`, `got`, `stats`, `consumer_gone`).

What completes later: confirms (the home queue's own, e.g. after its journal fsync), deliveries
(the home queue enforces each consumer's prefetch; this side counts them with
`channel.count_granted`, as for quorum queues, and credits the link window back as the
consumer's connection takes them), basic.get replies, and the counts of a declare-ok or a
purge-ok (`ask_counts`: the home queue answers, as RabbitMQ's queue process does; the server
holds the reply until then). Listings show the counts the home node last reported (every 2 s).
While the home node is down the queue is unavailable as RabbitMQ's is (`unavailable_error`: 404 "home node ... is down or
inaccessible"); a confirmed publish routed to it is nacked; consumers are cancelled.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

from amqp_broker.core.errors import AMQPError, NotFound

from . import remote_wire as w
from .arguments import parse_queue_arguments
from .base import (REASON_REJECTED, Confirm, Consumer, DeadLetter, Delivery, GetReply, Placement,
                   Recovered, queue_key)
from .message import Entry, Message

__all__ = ["RemoteQueue", "RemoteLink"]


class RemoteLink(Protocol):
    """The node's link to the home nodes of remote queues (`server/remote_queues.py`)."""

    def send(self, node: str, msg: Any) -> bool:
        """Queue a `remote_wire` message to `node`; False when the link is down."""
        ...

    def is_up(self, node: str) -> bool: ...

    def new_id(self) -> int:
        """A node-wide unique number for a consumer or a request."""
        ...

    def channel_id(self, channel: Any) -> int:
        """A node-wide number for a local channel (the home node keys its stand-ins by it)."""
        ...

    def expect(self, ident: int, queue: "RemoteQueue") -> None:
        """Route the home node's answers about `ident` (a cid or corr) to `queue`."""
        ...

    def forget(self, ident: int) -> None: ...

    def runtime_of(self, queue: "RemoteQueue") -> Any | None:
        """The server's runtime holding `queue` (deliveries are handed to channels with it)."""
        ...


class RemoteQueue:
    queue_type = "classic"
    durable = True
    exclusive = False
    supports_global_qos = True  # the home node enforces each consumer's prefetch
    supports_conditional_delete = True
    flow = False  # never asks publishers to pause (QueueType.flow)

    def __init__(self, link: RemoteLink, name: str, vhost: str, home: str, *, arguments: dict,
                 auto_delete: bool) -> None:
        self.link = link
        self.name = name
        self.vhost = vhost
        self.home = home
        self.arguments = arguments
        self.auto_delete = auto_delete
        self.key = queue_key(vhost, name)
        self.settings = parse_queue_arguments(name, vhost, arguments)
        self.deleted = False
        self._messages = 0  # as the home node last reported
        self._remote_consumers = 0
        self.consumers: dict[int, Consumer] = {}  # cid -> local consumer
        self._confirms: dict[int, Confirm] = {}  # corr -> the publish's confirm
        self._gets: dict[int, tuple[Any, GetReply]] = {}  # corr -> (channel, reply)
        # corr -> (what to call with the answer, the count to give if none comes, a purge?)
        self._counting: dict[int, tuple[Callable[[int], None], int, bool]] = {}
        # the link window (remote_wire.WINDOW_*): per cid, [deliveries, bytes] passed to the
        # consumer's connection and not yet credited back to the home node; cids whose credit
        # waits for their connection to drain
        self._owed: dict[int, list[int]] = {}
        self._held: set[int] = set()

    # -- availability ---------------------------------------------------------------------------
    def unavailable_error(self) -> AMQPError | None:
        if self.link.is_up(self.home):
            return None
        return NotFound(f"home node '{self.home}' of durable queue '{self.name}' in vhost "
                        f"'{self.vhost}' is down or inaccessible")

    def _check(self) -> None:
        err = self.unavailable_error()
        if err is not None:
            raise err

    # -- counts ---------------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        return 0 if self.deleted else self._messages

    @property
    def message_bytes(self) -> int:
        return 0

    @property
    def consumer_count(self) -> int:
        return self._remote_consumers

    @property
    def unacked_count(self) -> int:
        return 0

    @property
    def active_consumer(self) -> Consumer | None:
        return None

    def placement(self, local_node: str) -> Placement:
        online = (self.home,) if self.link.is_up(self.home) else ()
        return Placement(self.home, (self.home,), online)

    def is_full(self) -> bool:
        return False  # the home queue decides (reject-publish nacks come back as confirms)

    # -- publish --------------------------------------------------------------------------------
    def publish(self, message: Message, now_ms: int, confirm: Confirm | None = None) -> bool:
        corr = 0
        if confirm is not None:
            corr = self.link.new_id()
            self._confirms[corr] = confirm
            self.link.expect(corr, self)
        sent = not self.deleted and self.link.send(self.home, w.Publish(
            self.vhost, self.name, corr, message.exchange, message.routing_key,
            message.properties, message.body))
        if not sent and confirm is not None:
            self.confirmed((corr,), False)  # nowhere to put it: nack
        return True

    def confirmed(self, corrs: Iterable[int], ok: bool) -> None:
        for corr in corrs:
            confirm = self._confirms.pop(corr, None)
            self.link.forget(corr)
            if confirm is not None:
                confirm[0].settle(confirm[1], ok)

    # -- consumers ------------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        self._check()
        cid = self.link.new_id()
        self.consumers[cid] = consumer
        self.link.expect(cid, self)
        prefetch = 0 if consumer.no_ack else getattr(consumer.channel, "prefetch", 0)
        self.link.send(self.home, w.Consume(
            cid, self.link.channel_id(consumer.channel), self.vhost, self.name, consumer.tag,
            consumer.no_ack, consumer.exclusive, consumer.priority, prefetch,
            dict(consumer.arguments)))

    def _find(self, channel: Any, tag: str) -> int | None:
        for cid, c in self.consumers.items():
            if c.channel is channel and c.tag == tag:
                return cid
        return None

    def remove_consumer(self, channel: Any, tag: str, now_ms: int) -> Consumer | None:
        cid = self._find(channel, tag)
        if cid is None:
            return None
        self.link.send(self.home, w.Cancel(cid))
        self._forget(cid)
        return self.consumers.pop(cid)

    def _forget(self, cid: int) -> None:
        self.link.forget(cid)
        self._owed.pop(cid, None)
        self._held.discard(cid)

    def remove_channel(self, channel: Any, now_ms: int) -> list[Consumer]:
        gone = [cid for cid, c in self.consumers.items() if c.channel is channel]
        for cid in gone:
            self._forget(cid)
        self.link.send(self.home, w.ChannelDown(self.link.channel_id(channel)))
        return [self.consumers.pop(cid) for cid in gone]

    def deliver(self, msg: w.Deliver) -> None:
        """A delivery from the home queue to one of this node's consumers."""
        consumer = self.consumers.get(msg.cid)
        rt = self.link.runtime_of(self)
        if consumer is None or rt is None or consumer.channel.released:
            # cancelled or closed meanwhile: give it back at once
            if not consumer or not consumer.no_ack:
                self.link.send(self.home, w.Settle(self.vhost, self.name, "requeue",
                                                   (msg.msg_id,)))
            return
        entry = _entry(msg.msg_id, msg.redelivered, msg.delivery_count, msg)
        channel = consumer.channel
        channel.deliver(rt, consumer, entry)
        if not consumer.no_ack:
            channel.count_granted(consumer.tag, 1)
        channel.session.wake()
        owed = self._owed.setdefault(msg.cid, [0, 0])
        owed[0] += 1
        owed[1] += len(msg.body)
        if owed[0] >= w.WINDOW_MESSAGES // 4 or owed[1] >= w.WINDOW_BYTES // 4:
            self._credit(msg.cid, consumer)

    def _credit(self, cid: int, consumer: Consumer) -> None:
        """Give the home node the window back for what this consumer's connection took; held
        while the connection is not taking what it is sent (then `dispatch`, run when it
        drains, gives it)."""
        if consumer.channel.session.output_full():
            self._held.add(cid)
            return
        self._held.discard(cid)
        count, size = self._owed.pop(cid, (0, 0))
        if count:
            self.link.send(self.home, w.Credit(cid, count, size))

    def consumer_gone(self, cid: int) -> None:
        """The home queue dropped the consumer (deleted, or its node restarted)."""
        consumer = self.consumers.pop(cid, None)
        self._forget(cid)
        if consumer is not None and not consumer.channel.released:
            rt = self.link.runtime_of(self)
            if rt is not None:
                rt.consumers.pop((id(consumer.channel), consumer.tag), None)
            consumer.channel.consumer_cancelled(consumer.tag)

    def home_down(self) -> None:
        """The link to the home node dropped: nack confirms in flight, empty gets, cancel
        consumers (the home node requeues what they held)."""
        self.confirmed(list(self._confirms), False)
        self._end_gets_and_consumers()

    def _end_gets_and_consumers(self) -> None:
        for corr in list(self._gets):
            self.got(w.GetReply(corr, 0))
        for corr in list(self._counting):
            self.counted(w.Counts(corr, -1, 0))
        for cid in list(self.consumers):
            self.consumer_gone(cid)

    def dispatch(self, now_ms: int, deliver: Callable[[Delivery], None] | None = None
                 ) -> list[Delivery]:
        # Deliveries arrive from the home node (`deliver`). Run when a consumer's connection
        # drained (it kicks its consumers' queues): give back the window held meanwhile.
        for cid in list(self._held):
            consumer = self.consumers.get(cid)
            if consumer is None:
                self._held.discard(cid)
                self._owed.pop(cid, None)
            else:
                self._credit(cid, consumer)
        return []

    # -- get ------------------------------------------------------------------------------------
    def basic_get(self, channel: Any, no_ack: bool, now_ms: int, reply: GetReply) -> None:
        self._check()
        corr = self.link.new_id()
        self._gets[corr] = (channel, reply)
        self.link.expect(corr, self)
        if not self.link.send(self.home, w.Get(corr, self.link.channel_id(channel), self.vhost,
                                               self.name, no_ack)):
            self.got(w.GetReply(corr, 0))

    def got(self, msg: w.GetReply) -> None:
        waiting = self._gets.pop(msg.corr, None)
        self.link.forget(msg.corr)
        if waiting is None:
            return
        self._messages = msg.left
        if msg.msg_id < 0:
            waiting[1](None, msg.left)
        else:
            waiting[1](_entry(msg.msg_id, msg.redelivered, msg.delivery_count, msg), msg.left)

    def get(self, now_ms: int, no_ack: bool) -> Entry | None:
        return None  # the management API reads a queue on its home node

    # -- settlement ----------------------------------------------------------------------------
    def _settle(self, how: str, msg_ids: Iterable[Any]) -> None:
        ids = tuple(msg_ids)
        if ids and not self.deleted:
            self.link.send(self.home, w.Settle(self.vhost, self.name, how, ids))

    def settle(self, msg_ids: Iterable[Any]) -> None:
        self._settle("ack", msg_ids)

    def requeue(self, msg_ids: Iterable[Any]) -> None:
        self._settle("requeue", msg_ids)

    def discard(self, msg_ids: Iterable[Any], reason: str = REASON_REJECTED) -> None:
        self._settle("discard", msg_ids)

    def take_dead_letters(self) -> list[DeadLetter]:
        return []  # the home node dead-letters

    # -- whole queue ---------------------------------------------------------------------------
    def stats(self, messages: int, consumers: int) -> None:
        self._messages = messages
        self._remote_consumers = consumers

    def apply_policy(self, policy: dict[str, Any] | None) -> None:
        pass  # policies act on the home node

    def purge(self) -> int:
        self._check()
        n = self._messages
        self.link.send(self.home, w.Purge(self.vhost, self.name))
        self._messages = 0
        return n

    def ask_counts(self, done: Callable[[int], None], purge: bool = False) -> None:
        """Ask the home node what the queue holds now (a declare-ok) or, with `purge`, purge
        it there and learn how many went (a purge-ok): RabbitMQ answers both from the queue
        itself. `done(n)` gets the ready count (or the number purged) when the answer is here;
        the last report if the home node cannot answer (its link down)."""
        if purge:
            self._check()
        corr = self.link.new_id()
        self._counting[corr] = (done, self._messages, purge)
        self.link.expect(corr, self)
        msg = w.Purge(self.vhost, self.name, corr) if purge else \
            w.CountsRequest(corr, self.vhost, self.name)
        sent = self.link.send(self.home, msg)
        if purge:
            self._messages = 0
        if not sent:
            self.counted(w.Counts(corr, -1, 0))

    def counted(self, msg: w.Counts) -> None:
        waiting = self._counting.pop(msg.corr, None)
        self.link.forget(msg.corr)
        if waiting is None:
            return
        done, fallback, purge = waiting
        if msg.messages < 0:
            done(fallback)
            return
        if not purge:
            self._messages, self._remote_consumers = msg.messages, msg.consumers
        done(msg.messages)

    def delete(self) -> int:
        """This node's proxy goes (the home node deletes the queue when the change commits)."""
        if self.deleted:
            return 0  # retired already
        n = self.message_count
        self.deleted = True
        self.home_down()
        return n

    def retire(self) -> int:
        """This proxy's queue is served by a replica here now (it became mirrored): as
        `delete`, except that publishes in flight keep waiting for the home node's confirms
        (it put them into the queue); `home_down` nacks them if the link drops first."""
        n = self.message_count
        self.deleted = True
        self._end_gets_and_consumers()
        return n

    @property
    def confirms_pending(self) -> bool:
        return bool(self._confirms)

    def touch(self, now_ms: int) -> None:
        pass

    def restore(self, recovered: Recovered, now_ms: int) -> None:
        pass

    def next_deadline(self, now_ms: int) -> int | None:
        return None

    def expire(self, now_ms: int) -> bool:
        return False


def _entry(msg_id: int, redelivered: bool, delivery_count: int, msg: Any) -> Entry:
    message = Message.from_publish(msg.exchange, msg.routing_key, msg.properties, msg.body)
    return Entry(msg_id, message, None, redelivered, delivery_count)
