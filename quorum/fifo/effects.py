"""Effects and replies returned by `apply()`.

The state machine never does IO; it says what should happen.  Who runs an effect:
- `Deliver` is *local* (`local = True`): every replica runs it for consumers whose
  `node` is its own node; the leader also runs it for consumers on nodes without a
  replica (seed 003).  Every replica computes the same deliveries because the service
  queue is part of the replicated state.
- `Confirm` and `RejectPublish` are local too, with no node: every replica gets them and
  answers only the publisher that is its own (a publisher id names one channel on one node),
  so a publisher on a follower is confirmed by its own replica once the entry is applied there.
- every other effect is run by the leader only.

Effects within one `Applied` must be run in order: a `DeadLetter` reads message bodies
from the log, and a later `ReleaseCursor` in the same list may let those entries go.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from quorum.raft.machine import LocalEffect

from .commands import ConsumerKey

__all__ = [
    "Applied", "Delivery", "DeadMsg",
    "Deliver", "Confirm", "RejectPublish", "DeadLetter", "ReleaseCursor", "SetTimer",
    "Monitor", "ConsumerActive", "QueueExpired",
    "CheckoutReply", "DequeueReply", "CancelReply", "CreditReply", "should_run",
    "OK", "DUPLICATE", "OUT_OF_SEQUENCE", "REJECTED", "NOT_FOUND", "UNSUPPORTED",
]

OK = "ok"
DUPLICATE = "duplicate"              # Enqueue: seq already enqueued (confirmed again)
OUT_OF_SEQUENCE = "out_of_sequence"  # Enqueue: a gap in seq; not enqueued, resend
REJECTED = "reject_publish"          # Enqueue: queue full with overflow reject-publish
NOT_FOUND = "consumer_not_found"
UNSUPPORTED = "unsupported"          # Dequeue on a single-active-consumer queue


class Delivery(NamedTuple):
    """One message handed to a consumer.  `acquired` counts earlier deliveries that were
    returned: 0 on the first delivery (no x-delivery-count header, redelivered=false),
    else x-delivery-count = acquired and redelivered=true."""
    msg_id: int
    index: int
    size: int
    acquired: int
    delivery_failed: int

    @property
    def redelivered(self) -> bool:
        return self.acquired > 0


class DeadMsg(NamedTuple):
    index: int
    size: int
    acquired: int
    persistent: bool
    dlx_id: int | None   # set for at-least-once: settle with DlxSettle((dlx_id,))


# Built for (nearly) every applied command: not frozen, because a frozen dataclass's
# __init__ costs ~3x as much (~0.7 vs ~0.25 us). Still hashable; never change one after it
# was built.
@dataclass(slots=True, unsafe_hash=True)
class Applied:
    reply: Any
    effects: list = field(default_factory=list)


@dataclass(slots=True, unsafe_hash=True)
class Deliver(LocalEffect):
    """Hand `msgs` to `consumer`.  A `LocalEffect`: the driver passes it to every replica;
    `should_run` then keeps it on the consumer's node (or the leader, see below)."""
    consumer: ConsumerKey
    msgs: tuple[Delivery, ...]
    local = True

    @property
    def node(self) -> str:
        return self.consumer.node


@dataclass(slots=True, unsafe_hash=True)
class Confirm(LocalEffect):
    """The enqueues `seqs` of `publisher` are in the queue: basic.ack to the publisher."""
    publisher: str
    seqs: tuple[int, ...]
    local = True
    node = None  # whichever replica has the publisher


@dataclass(frozen=True, slots=True)
class RejectPublish(LocalEffect):
    """basic.nack to the publisher: the queue is full (overflow reject-publish)."""
    publisher: str
    seqs: tuple[int, ...]
    local = True
    node = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """reason: expired | maxlen | delivery_limit | rejected.  Bodies are read from the log
    at `msgs[i].index`.  at_least_once: the messages stay in the queue's `dlx` state
    until `DlxSettle`."""
    reason: str
    msgs: tuple[DeadMsg, ...]
    exchange: str
    routing_key: str | None
    at_least_once: bool = False
    local = False


@dataclass(slots=True, unsafe_hash=True)
class ReleaseCursor:
    """The state at `applied` may be snapshotted; no message body below `smallest_live`
    is referenced any more (None: no message is referenced at all)."""
    applied: int
    smallest_live: int | None
    local = False


@dataclass(slots=True, unsafe_hash=True)
class SetTimer:
    """Propose `Tick()` at leader time `at_ms` (None: cancel).  Replaces the last timer."""
    at_ms: int | None
    local = False


@dataclass(frozen=True, slots=True)
class Monitor:
    """Watch a process (`pid`, on `node` when known) or a whole node (`pid` None) and
    propose `ConsumerDown` / `NodeDown` / `NodeUp` when it changes."""
    pid: str | None
    node: str | None = None
    local = False


@dataclass(frozen=True, slots=True)
class ConsumerActive:
    """Single active consumer: this consumer became active or stopped being active."""
    consumer: ConsumerKey
    active: bool
    local = False


@dataclass(frozen=True, slots=True)
class QueueExpired:
    """x-expires elapsed with no consumers: the runtime deletes the queue."""
    name: str
    local = False


@dataclass(frozen=True, slots=True)
class CheckoutReply:
    next_msg_id: int
    credit: int
    num_checked_out: int
    active: bool


@dataclass(frozen=True, slots=True)
class DequeueReply:
    """delivery None: the queue was empty.  ready: messages left ready after this get."""
    delivery: Delivery | None
    ready: int


@dataclass(frozen=True, slots=True)
class CancelReply:
    num_checked_out: int


@dataclass(frozen=True, slots=True)
class CreditReply:
    delivery_count: int
    credit: int
    available: int
    drain: bool


def should_run(effect, node: str, is_leader: bool, replica_nodes) -> bool:
    """The one place that decides who runs an effect (seed 003): a local effect runs on
    the replica of the consumer's node, or on the leader when that node has no replica
    (`replica_nodes`: the nodes of the queue's members); every other effect on the leader."""
    if effect.local:
        where = effect.node
        if where is None:  # confirms: the runner keeps those of its own publishers
            return True
        return where == node or (is_leader and where not in replica_nodes)
    return is_leader
