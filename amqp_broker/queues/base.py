"""The queue-type interface (`QueueType`) every queue implements, and the value types it exchanges.

Who calls it: `amqp_broker/server/` only through this interface — `QueueRuntime` (publish,
consumers, dispatch, settlement, timers, purge/delete), channels (`basic_get`, `remove_channel`,
`settings` for the consumer timeout), `server/admin.py` (`apply_policy`), `VHost` (`touch`),
recovery (`restore`), `dlx_port` (`is_full`); `amqp_broker/mgmt/` reads the facts (counts,
`active_consumer`, `placement`). Implemented by `classic.ClassicQueue` (in memory, pure),
`quorum.QuorumQueue` (a Raft group) and, later, a proxy to a queue on another node. Nobody
probes a queue with getattr: what is not declared here is not part of the contract.
`tests/queues/test_queue_type.py` checks every implementation against it.

Synchronous vs later. Every call returns at once and never blocks; an outcome that needs a
commit, an fsync or another node is delivered later, never by the return value:
- `publish(msg, now, confirm)`: the publisher-confirm outcome goes to `confirm = (sink, seq)` as
  exactly one `sink.settle(seq, ok)` — at once (classic, in memory or transient message), after
  the journal's fsync (classic durable, through `QueueJournal.confirm_when_durable`), after the
  Raft commit (quorum), or when the owning node answers (remote). ok=False is a nack (x-overflow
  reject-publish). A queue deleted with confirms outstanding settles them ok=True (RabbitMQ
  confirms messages of a deleted queue). The bool returned is only "refused at once" (classic).
- `basic_get(channel, no_ack, now, reply)`: `reply(entry or None, messages_left)` is called exactly
  once — inside the call (classic) or when the Dequeue applies (quorum), possibly after the
  channel closed (the caller then requeues the entry). A deleted queue answers (None, 0).
- Deliveries, dead letters and deadlines are pulled by the owner: after any call it marks the
  queue dirty and, at the end of the batch, calls `dispatch`, `take_dead_letters` and
  `next_deadline`. A queue whose state changes from elsewhere (Raft effects, a remote node) hands
  its deliveries straight to the consumers' channels and asks its `QueueRuntime` for such a pass
  (`mark_dirty` / `rearm_timer` / `expired`); its `dispatch` then returns nothing.
- Settlement (`settle` / `requeue` / `discard`), consumer changes, `purge`, `delete`, `expire`
  and `apply_policy` are fire-and-forget: they take effect in order with the queue's other
  commands. `purge` and `delete` return the count known now (quorum: applied state plus enqueues
  in flight), `expire` True only when the queue knows at once that it must go (classic x-expires;
  a quorum queue reports its expiry through `QueueRuntime.expired` when it applies).
- Facts (counts, `active_consumer`, `placement`, `settings`) read local state, as of now: for a
  replicated or remote queue the view of this node.

Prefetch stays in the channel: each `Consumer` carries `take_credit`, a callable the queue calls
once per delivery it is about to make; it returns False when the consumer's (or its channel's)
prefetch window is full. The channel asks for a dispatch again after an ack frees credit.

Time comes in as `now_ms` (a coarse clock the server reads); implementations read no clock.

Persistence: a durable classic queue is given a `QueueJournal`; it reports every persistent
message it accepts and every one that leaves (ack, drop, expiry, purge, delete).
`amqp_broker/store/` provides the implementation with group commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, runtime_checkable

from amqp_broker.core.policies import QueueSettings
from amqp_broker.queues.message import Entry, Message

__all__ = [
    "Confirm",
    "ConfirmSink",
    "Consumer",
    "GetReply",
    "Placement",
    "Delivery",
    "DeadLetter",
    "QueueJournal",
    "QueuePager",
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


def _never() -> bool:
    return False


@dataclass(eq=False, slots=True)
class Consumer:
    """One basic.consume on one queue. Identity is (channel, tag); compared by identity.

    `channel` is an opaque reference owned by the server (the queue only compares it with `is`).
    `take_credit` is called once per delivery the queue is about to make to this consumer and must
    consume one unit of prefetch; return False when the window is full (no_ack consumers and
    prefetch 0 use the default, always True). `priority` is the x-priority argument.
    `no_ack` deliveries are settled by the queue itself as they are handed out.
    `keeping_up` says whether the consumer could take more now, its client keeping pace (room
    in its prefetch window, its client reading as fast as we write): a classic queue whose ready
    messages pile up while a consumer keeps up asks its publishers to pause (`flow`); by
    default False (the queue's backlog is then the consumer's pace, and it grows).
    """

    tag: str
    channel: Any
    no_ack: bool = False
    exclusive: bool = False
    priority: int = 0
    take_credit: Callable[[], bool] = _always
    arguments: dict[str, Any] = field(default_factory=dict)
    keeping_up: Callable[[], bool] = _never


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

    def read(self, queue: str, msg_ids: Sequence[int]) -> list[Message]:
        """These live messages, read back (a paged-out persistent message's body is the
        journal's copy: paging writes nothing for it)."""
        ...

    def confirm_when_durable(self, journal_seq: int, confirm: "Confirm") -> None:
        """Settle `confirm` ok once the record `journal_seq` is fsynced (the server's
        `JournalTap` hands it to the broker's `Durability` task)."""
        ...


class Recovered(Protocol):
    """A durable queue's messages recovered from the journal at start-up, in msg-id order.

    Iterating gives a summary of each: (msg_id, body size, priority, expiration ms or None,
    redelivered, ref), read without decoding the message; `message(ref)` decodes one whole. A
    queue that pages its backlog out only needs the summaries of most of them.
    """

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[int, int, int, int | None, bool, Any]]: ...

    def message(self, ref: Any) -> Message: ...


class QueuePager(Protocol):
    """Where a classic queue puts the messages it pages out of memory (implemented by
    store/spill.py's `QueueSpill`; scratch space, not durable)."""

    def write(self, message: Message) -> tuple[int, int]:
        """Store a copy; returns its (position, length). Raises OSError if it cannot."""
        ...

    def read(self, refs: Sequence[tuple[int, int]]) -> list[Message]:
        """The messages at `refs`, in order."""
        ...

    def release(self, position: int) -> None:
        """The copy at `position` is no longer needed."""
        ...

    def drop(self) -> None:
        """The queue is gone: every copy goes."""
        ...


class ConfirmSink(Protocol):
    """Receives publisher-confirm outcomes: a channel's `ConfirmTracker`, the dead-letter port."""

    def settle(self, seq: int, ok: bool) -> None: ...


# (sink, seq): the queue calls sink.settle(seq, ok) exactly once. A tuple the channel builds
# once per publish anyway, so the classic path allocates nothing more for it.
Confirm = tuple[ConfirmSink, int]

# basic_get's answer: reply(entry or None, ready messages left)
GetReply = Callable[[Entry | None, int], None]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a queue's replicas live, for listings (management "node", "leader", "members",
    "online"). `replicated` is False for a classic queue, which lives on `leader` alone;
    `group` is the Raft group holding a replicated queue (metrics), None otherwise."""

    leader: str
    members: tuple[str, ...]
    online: tuple[str, ...]
    replicated: bool = False
    group: Any = None


def queue_key(vhost: str, name: str) -> str:
    """The journal's key for a queue: unique per (vhost, name); NUL cannot occur in names."""
    return f"{vhost}\x00{name}"




@runtime_checkable
class QueueType(Protocol):
    """The one interface between the server and a queue of any type (classic, quorum, remote).

    `msg_ids` are the ids from `Entry.msg_id` (the channel maps delivery tags to them; opaque to
    the caller: an int for classic, (consumer, id) for quorum). Unknown or already-settled ids
    are ignored (a channel may race with a purge or delete). See the module docstring for which
    calls complete later and how the caller learns the outcome.
    """

    # -- facts ---------------------------------------------------------------------------------
    name: str
    vhost: str
    key: str  # queue_key(vhost, name)
    queue_type: str  # "classic" / "quorum": management "type", policy apply-to, log lines
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict[str, Any]  # as declared
    settings: QueueSettings  # effective: arguments + policy (consumer timeout, DLX, limits)
    supports_global_qos: bool  # False: basic.consume under basic.qos global=true is refused
    supports_conditional_delete: bool  # False: queue.delete if-unused / if-empty is refused
    # True: this queue asks its publishers to stop reading their sockets for now (RabbitMQ's
    # "flow"); a queue that can set it also has `when_flow_ends(callback)`, which calls back
    # once they may go on (quorum queues: `QuorumQueue.when_flow_ends`), and `flow_wait`, the
    # longest a publisher waits for that before it reads again.
    flow: bool

    @property
    def message_count(self) -> int:
        """Ready messages (queue.declare-ok / basic.get-ok message_count)."""
        ...

    @property
    def message_bytes(self) -> int:
        """Bytes of the messages counted by the management API's message_bytes."""
        ...

    @property
    def consumer_count(self) -> int: ...

    @property
    def unacked_count(self) -> int: ...

    @property
    def active_consumer(self) -> Consumer | None:
        """The single active consumer (None without x-single-active-consumer)."""
        ...

    def placement(self, local_node: str) -> Placement:
        """Where the queue lives; `local_node` is the caller's node name (a local queue's)."""
        ...

    def unavailable_error(self) -> Any:
        """An `AMQPError` when the queue cannot be used now (a classic queue whose home node is
        down: 404 as RabbitMQ's), else None. Checked by declare, consume and get."""
        ...

    def is_full(self) -> bool:
        """True while an x-overflow reject-publish(-dlx) queue is at its limit, so a publish now
        would be refused (the at-least-once dead-letter worker holds back then)."""
        ...

    # -- publishing ----------------------------------------------------------------------------
    def publish(self, message: Message, now_ms: int, confirm: Confirm | None = None) -> bool:
        """Accept a routed message; with `confirm`, settle it once (see the module docstring).
        Returns False only when refused at once (classic reject-publish); overflow drops
        (drop-head) become dead letters. Hot path: no awaits, no per-message allocation beyond
        the queue's own entry."""
        ...

    # -- consumers -----------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        """Register a consumer. Raises AccessRefused (403) when an exclusive consumer exists or an
        exclusive one is requested while others exist."""
        ...

    def remove_consumer(self, channel: Any, tag: str, now_ms: int) -> Consumer | None:
        """basic.cancel (or channel close): forget the consumer; its unacked stay unacked."""
        ...

    def remove_channel(self, channel: Any, now_ms: int) -> list[Consumer]:
        """A channel closed: drop its consumers (returned) and anything else the queue tracks for
        it. The channel requeues its unacked deliveries with `requeue` first."""
        ...

    def dispatch(self, now_ms: int, deliver: Callable[[Delivery], None] | None = None
                 ) -> list[Delivery]:
        """Hand ready messages to consumers with credit: higher x-priority first, round-robin among
        equals; single-active-consumer queues use only the active one. Expired heads are dropped
        first. Each delivery goes to `deliver` as soon as it is made, so that a consumer's credit
        check sees the output the earlier ones added (with no `deliver` they are returned).
        Queues that deliver on their own (quorum) return []."""
        ...

    def basic_get(self, channel: Any, no_ack: bool, now_ms: int, reply: GetReply) -> None:
        """basic.get: take the head message for `channel`; `reply` is called exactly once,
        possibly later. Counts as use for x-expires."""
        ...

    def get(self, now_ms: int, no_ack: bool) -> Entry | None:
        """The management API's synchronous get from local state (classic: takes the head as
        basic.get does; quorum: looks at the next ready message, taken only if it is then settled
        or discarded). Not for channels: they use `basic_get`."""
        ...

    # -- settlement ----------------------------------------------------------------------------
    def settle(self, msg_ids: Iterable[Any]) -> None:
        """basic.ack: the messages are gone for good."""
        ...

    def requeue(self, msg_ids: Iterable[Any]) -> None:
        """nack/reject with requeue, channel close, basic.recover: back to their original position
        (ordered by msg id, ahead of later messages), with redelivered=True."""
        ...

    def discard(self, msg_ids: Iterable[Any], reason: str = REASON_REJECTED) -> None:
        """nack/reject without requeue: removed, and dead-lettered with `reason`."""
        ...

    def take_dead_letters(self) -> list[DeadLetter]:
        """Return and clear the at-most-once dead letters recorded since the last call."""
        ...

    # -- policy, whole queue -------------------------------------------------------------------
    def apply_policy(self, policy: dict[str, Any] | None) -> None:
        """Re-derive `settings` from the declared arguments plus the merged policy definition
        (None: no policy applies). May drop messages (lower max-length): run the queue after."""
        ...

    def purge(self) -> int:
        """queue.purge: drop all ready messages (not unacked ones); returns how many."""
        ...

    def delete(self) -> int:
        """queue.delete: drop everything (not dead-lettered); returns the ready count dropped.
        Outstanding confirms are settled ok, outstanding basic.get replies get (None, 0)."""
        ...

    def touch(self, now_ms: int) -> None:
        """A redeclare: resets the x-expires timer where the type does so (classic)."""
        ...

    def restore(self, recovered: Recovered, now_ms: int) -> None:
        """Recovery from the classic journal at start-up. Types that recover from their own log
        ignore it."""
        ...

    # -- timers --------------------------------------------------------------------------------
    def next_deadline(self, now_ms: int) -> int | None:
        """Absolute ms at which `expire` has something to do (head TTL, x-expires, a replicated
        timer), or None. Called at the end of every batch the queue was dirty in."""
        ...

    def expire(self, now_ms: int) -> bool:
        """The deadline is due: drop expired heads (dead letter reason "expired"). True when the
        queue itself has expired (x-expires) and the caller must delete it now."""
        ...
