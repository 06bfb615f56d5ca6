"""The queue-type interface the channel code calls, and the small value types it exchanges.

Who calls it: `amqp_broker/server/` (channel semantics) drives every queue through `QueueType`;
`amqp_broker/queues/classic.py` implements it in memory, a quorum adapter will implement it on top
of `quorum/`. Everything here is pure: time comes in as `now_ms` (a coarse clock the server reads),
nothing blocks, nothing does IO.

How the channel uses a queue (one trio task owns the queue; no locking):

    ok = q.publish(msg, now)            # False -> reject-publish overflow: nack the publisher
    for d in q.dispatch(now):           # after publishes/acks/consumer changes, ask who gets what
        send basic.deliver to d.consumer (d.consumer.channel), tag -> (q, d.entry.msg_id)
    q.settle([msg_id]); q.requeue([...]); q.discard([...])    # ack / nack+requeue / reject
    for dl in q.take_dead_letters(): dlx routing (dlx/deaths.py builds the x-death headers)
    deadline = q.next_deadline(now)     # arm one timer; when it fires: if q.expire(now): delete q

Prefetch stays in the channel: each `Consumer` carries `take_credit`, a callable the queue calls
once per delivery it is about to make; it returns False when the consumer's (or its channel's)
prefetch window is full. The channel calls `dispatch` again after an ack frees credit.

Persistence: a durable queue is given a `QueueJournal`; it reports every persistent message it
accepts and every one that leaves (ack, drop, expiry, purge, delete). `amqp_broker/store/` provides
the implementation with group commit; publisher confirms wait for `journal.wait_durable(seq)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from amqp_broker.queues.message import Entry, Message

__all__ = [
    "Consumer",
    "Delivery",
    "DeadLetter",
    "QueueJournal",
    "QueueType",
    "queue_key",
    "REASON_REJECTED",
    "REASON_EXPIRED",
    "REASON_MAXLEN",
    "REASON_DELIVERY_LIMIT",
]

# Dead-letter reasons, spelled as in RabbitMQ's x-death "reason" field.
REASON_REJECTED = "rejected"
REASON_EXPIRED = "expired"
REASON_MAXLEN = "maxlen"
REASON_DELIVERY_LIMIT = "delivery_limit"


def _always() -> bool:
    return True


@dataclass(eq=False, slots=True)
class Consumer:
    """One basic.consume on one queue. Identity is (channel, tag); compared by identity.

    `channel` is an opaque reference owned by the server (the queue only compares it with `is`).
    `take_credit` is called once per delivery the queue is about to make to this consumer and must
    consume one unit of prefetch; return False when the window is full (no_ack consumers and
    prefetch 0 use the default, always True). `priority` is the x-priority argument.
    `no_ack` deliveries are settled by the queue itself as they are handed out.
    """

    tag: str
    channel: Any
    no_ack: bool = False
    exclusive: bool = False
    priority: int = 0
    take_credit: Callable[[], bool] = _always
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Delivery:
    """Deliver `entry` to `consumer` now. `entry.redelivered` is the basic.deliver flag."""

    consumer: Consumer
    entry: Entry


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message the queue dropped and that should be dead-lettered, with RabbitMQ's reason.

    Recorded only while the queue has a dead-letter exchange (argument or policy); the caller
    drains them with `take_dead_letters()` and builds the x-death headers (dlx/deaths.py).
    """

    message: Message
    reason: str
    queue: str
    redelivered: bool = False


class QueueJournal(Protocol):
    """What a durable queue reports about its persistent messages (implemented by store/journal).

    Both calls only buffer a record in memory (no IO); a flusher task writes and fdatasyncs.
    `enqueued` returns the journal sequence number covering that record, for confirms.
    """

    def enqueued(self, queue: str, msg_id: int, message: Message) -> int: ...

    def delivered(self, queue: str, msg_ids: Iterable[int]) -> int:
        """First delivery of these messages: recovered after a crash, they come back with
        redelivered=True (as RabbitMQ classic queues do)."""
        ...

    def removed(self, queue: str, msg_ids: Iterable[int]) -> int: ...

    def drop_queue(self, queue: str) -> int:
        """The durable queue was deleted: all its messages go with one record."""
        ...


def queue_key(vhost: str, name: str) -> str:
    """The journal's key for a queue: unique per (vhost, name); NUL cannot occur in names."""
    return f"{vhost}\x00{name}"


class QueueType(Protocol):
    """The operations the channel code performs on any queue (classic, quorum, ...).

    `msg_ids` are the ids from `Entry.msg_id` (the channel maps delivery tags to them). Unknown
    or already-settled ids are ignored (a channel may race with a purge or delete).
    """

    name: str
    vhost: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict[str, Any]

    # -- publishing --------------------------------------------------------------------------
    def publish(self, message: Message, now_ms: int) -> bool:
        """Accept or refuse a routed message. False = refused by x-overflow reject-publish(-dlx):
        the publisher gets a nack. Overflow drops (drop-head) become dead letters."""
        ...

    # -- consumers ---------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        """Register a consumer. Raises AccessRefused (403) when an exclusive consumer exists or an
        exclusive one is requested while others exist."""
        ...

    def remove_consumer(self, channel: Any, tag: str, now_ms: int) -> Consumer | None:
        """basic.cancel (or channel close): forget the consumer; its unacked stay unacked."""
        ...

    def remove_channel(self, channel: Any, now_ms: int) -> list[Consumer]:
        """Drop every consumer of a closing channel; returns them. The channel then requeues its
        unacked deliveries with `requeue`."""
        ...

    def dispatch(self, now_ms: int) -> list[Delivery]:
        """Hand ready messages to consumers with credit: higher x-priority first, round-robin among
        equals; single-active-consumer queues use only the active one. Expired heads are dropped
        first. Deliveries to ack-mode consumers become unacked; no_ack ones are settled."""
        ...

    def get(self, now_ms: int, no_ack: bool) -> Entry | None:
        """basic.get: take the head message (None when empty). Counts as use for x-expires."""
        ...

    # -- settlement --------------------------------------------------------------------------
    def settle(self, msg_ids: Iterable[int]) -> None:
        """basic.ack: the messages are gone for good."""
        ...

    def requeue(self, msg_ids: Iterable[int]) -> None:
        """nack/reject with requeue, channel close, basic.recover: back to their original position
        (ordered by msg id, ahead of later messages), with redelivered=True."""
        ...

    def discard(self, msg_ids: Iterable[int], reason: str = REASON_REJECTED) -> None:
        """nack/reject without requeue: removed, and dead-lettered with `reason`."""
        ...

    def take_dead_letters(self) -> list[DeadLetter]:
        """Return and clear the dead letters recorded since the last call."""
        ...

    # -- whole-queue operations --------------------------------------------------------------
    def purge(self) -> int:
        """queue.purge: drop all ready messages (not unacked ones); returns how many."""
        ...

    def delete(self) -> int:
        """queue.delete: drop everything (not dead-lettered); returns the ready count dropped."""
        ...

    def touch(self, now_ms: int) -> None:
        """A redeclare (or other use) resets the x-expires timer."""
        ...

    # -- timers ------------------------------------------------------------------------------
    def next_deadline(self, now_ms: int) -> int | None:
        """Absolute ms at which `expire` has something to do (head TTL, x-expires), or None."""
        ...

    def expire(self, now_ms: int) -> bool:
        """Drop expired head messages (dead letter reason "expired"). Returns True when the queue
        itself has expired (x-expires): the caller must delete it."""
        ...

    # -- counters ----------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        """Ready messages (queue.declare-ok message_count)."""
        ...

    @property
    def consumer_count(self) -> int: ...

    @property
    def unacked_count(self) -> int: ...
