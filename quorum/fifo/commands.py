"""Commands of the quorum queue state machine, and the queue configuration.

Every change to a quorum queue is one of these commands, proposed to the queue's Raft
group by the broker (quorum adapter, channel code, the DLX worker) and applied by
`apply()` on every replica in log order.  They are small frozen dataclasses (Enqueue is
not frozen for speed, see there) so `codec.py` can write them compactly into the log.

Identity of the actors:
- a consumer is `ConsumerKey(tag, pid, node)`: its consumer tag, the id of the channel
  (or connection) process that owns it, and the node that process runs on.  The node is
  what lets each replica decide locally whether it delivers (seed 003).
- a publisher is its channel id (`pid`); `seq` numbers its enqueues *to this queue*,
  1, 2, 3... (a per channel-and-queue counter, as rabbit_fifo_client keeps), used for
  confirms and for dropping duplicates resent after a leader change.  A gap is refused
  (`OUT_OF_SEQUENCE`): the publisher resends from its first unconfirmed seq.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

# Meta(index, term, timestamp): the entry's log position and the leader's clock (ms) when
# it was proposed - the only time the machine ever sees.  Shared with the Raft driver.
from quorum.raft.machine import Meta

__all__ = [
    "Meta", "ConsumerKey", "QueueConfig", "Command",
    "Enqueue", "Checkout", "Dequeue", "Settle", "Return", "Requeue", "Discard",
    "Credit", "Cancel", "ConsumerDown", "NodeDown", "NodeUp", "Purge", "Tick",
    "UpdateConfig", "DlxSettle",
    "DROP_HEAD", "REJECT_PUBLISH", "REJECT_PUBLISH_DLX", "AT_MOST_ONCE", "AT_LEAST_ONCE",
    "UNLIMITED_PREFETCH", "DEFAULT_HANDOFF_TIMEOUT", "DEFAULT_REBALANCE_DELAY",
]

DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
# Quorum queues do not support it; it behaves as drop-head and the caller logs a warning.
REJECT_PUBLISH_DLX = "reject-publish-dlx"
AT_MOST_ONCE = "at-most-once"
AT_LEAST_ONCE = "at-least-once"
# basic.qos prefetch 0 means "unlimited"; like RabbitMQ we cap it at a large credit.
UNLIMITED_PREFETCH = 2000
# Partitioned queues: how long an owner may keep a moving partition's messages unacked, and
# how long to wait after a consumer joins or leaves before rebalancing (a burst, one handoff).
DEFAULT_HANDOFF_TIMEOUT = 5000
DEFAULT_REBALANCE_DELAY = 1000


class ConsumerKey(NamedTuple):
    tag: str
    pid: str
    node: str


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Effective queue settings: x-arguments merged with policy by the caller.

    delivery_limit None means unlimited (the caller maps -1 to None; see `normalise`)."""
    name: str = ""
    max_length: int | None = None
    max_bytes: int | None = None
    overflow: str = DROP_HEAD
    delivery_limit: int | None = 20
    msg_ttl: int | None = None
    expires: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    dead_letter_strategy: str = AT_MOST_ONCE
    single_active_consumer: bool = False
    # partitioned queues (seed 001): partitions > 0 makes the queue partitioned (fixed at
    # declaration); the two times are ms of leader time (`partitions.py`)
    partitions: int = 0
    handoff_timeout: int = DEFAULT_HANDOFF_TIMEOUT
    rebalance_delay: int = DEFAULT_REBALANCE_DELAY
    # strict priority levels 0..N, as a classic queue's x-max-priority (a mirrored classic
    # queue); None: the quorum queue's two levels served 2:1
    max_priority: int | None = None

    def normalise(self) -> "QueueConfig":
        """Negative delivery limits mean unlimited (RabbitMQ's -1)."""
        if self.delivery_limit is not None and self.delivery_limit < 0:
            return replace(self, delivery_limit=None)
        return self

    @property
    def drops_head(self) -> bool:
        return self.overflow != REJECT_PUBLISH

    @property
    def at_least_once(self) -> bool:
        """At-least-once dead lettering needs a DLX and reject-publish, else at-most-once."""
        return (self.dead_letter_strategy == AT_LEAST_ONCE
                and self.dead_letter_exchange is not None
                and self.overflow == REJECT_PUBLISH)


@dataclass(slots=True)
class Enqueue:
    """Publish one message.  `payload` is the runtime's encoding of the whole message
    (properties, routing info, body); it stays in the log and the machine never looks
    inside.  `ttl` is the per-message expiration in ms (None if unset).  `partition`: a
    partitioned queue's partition of the message, chosen by the publishing node.
    Not frozen only because one is built for every publish and a frozen __init__ costs
    three times as much (~1 us): never change one after it was built."""
    publisher: str | None
    seq: int | None
    size: int
    payload: bytes = b""
    priority: int | None = None
    ttl: int | None = None
    persistent: bool = True
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class Checkout:
    """Subscribe (basic.consume) or update a consumer.  prefetch 0 = unlimited.
    credited=True: the consumer starts with no credit and gets it through `Credit`."""
    consumer: ConsumerKey
    prefetch: int = 0
    priority: int = 0
    credited: bool = False


@dataclass(frozen=True, slots=True)
class Dequeue:
    """basic.get.  settled=True is no-ack: the message is removed at once."""
    consumer: ConsumerKey
    settled: bool = False


@dataclass(frozen=True, slots=True)
class Settle:
    consumer: ConsumerKey
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Return:
    """Requeue (reject/nack requeue=true)."""
    consumer: ConsumerKey
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Unsent:
    """Messages checked out to a consumer whose channel held them back and never sent them
    (its lookahead, beyond the prefetch): back to the head in their order, not counted as a
    delivery (no redelivered flag, no x-delivery-count). The consumer's credit does not grow:
    it is leaving, or a Checkout with its prefetch follows."""
    consumer: ConsumerKey
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Requeue:
    """A return re-appended to the log with its payload (delivery limit unlimited), so the
    old entry can be truncated.  The message goes to the tail under the new index."""
    consumer: ConsumerKey
    msg_id: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class Discard:
    """Reject without requeue: dead-lettered with reason `rejected` (or dropped)."""
    consumer: ConsumerKey
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Credit:
    """Credit flow for credited consumers (AMQP 1.0 link credit, v1 semantics)."""
    consumer: ConsumerKey
    credit: int
    delivery_count: int
    drain: bool = False


@dataclass(frozen=True, slots=True)
class Cancel:
    """basic.cancel: no more deliveries; unacked messages stay until settled.
    remove=True also returns the unacked messages."""
    consumer: ConsumerKey
    remove: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerDown:
    """A channel/connection process went away: its consumers are removed, their
    checked-out messages return to the head of the queue, its publisher state dropped."""
    pid: str


@dataclass(frozen=True, slots=True)
class NodeDown:
    """Lost contact with a node: its consumers are suspected (no deliveries, messages
    returned) until `NodeUp` or a `ConsumerDown` settles their fate."""
    node: str


@dataclass(frozen=True, slots=True)
class NodeUp:
    node: str


@dataclass(frozen=True, slots=True)
class Purge:
    pass


@dataclass(frozen=True, slots=True)
class Tick:
    """Timer fired (see `SetTimer`): expire messages, check queue expiry."""
    pass


@dataclass(frozen=True, slots=True)
class UpdateConfig:
    """Policy change.  single_active_consumer is fixed at declaration and ignored here."""
    config: QueueConfig = field(default_factory=QueueConfig)


@dataclass(frozen=True, slots=True)
class DlxSettle:
    """The at-least-once DLX worker confirms these dead-lettered messages are republished."""
    dlx_ids: tuple[int, ...]


Command = (Enqueue | Checkout | Dequeue | Settle | Return | Requeue | Discard | Credit
           | Cancel | ConsumerDown | NodeDown | NodeUp | Purge | Tick | UpdateConfig
           | DlxSettle | Unsent)
