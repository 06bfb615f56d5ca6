"""The classic queue: an in-memory queue on one node, RabbitMQ classic-queue semantics.

Who calls it: the server (`QueueRuntime`, channels, admin, recovery) and the management API,
only through the `QueueType` interface of base.py, which it implements completely; everything it
answers, it answers at once (a durable persistent publish's confirm waits for the journal's
fsync through `QueueJournal.confirm_when_durable`). Pure: time comes in as `now_ms`, persistence
goes through the injected `QueueJournal` (which only buffers), no trio, no IO.

Layout: one `PagedLevel` per priority level (a single level without x-max-priority), each in
msg-id order; `_unacked` maps msg id -> entry for deliveries awaiting ack. Publish, dispatch and ack
are O(1) per message; requeue merges back by msg id (only the head part that is out of order moves).

Paging (with a `pager`, which the server gives every classic queue): the bodies of ready messages
kept in memory are bounded by `memory_budget` bytes (each message also counts
`ENTRY_OVERHEAD`; `x-queue-mode: lazy`, argument or policy, makes it 0). Past it, a message is
paged out as it is published (a level's newer messages only: see paging.py) and paged back in,
in order, a batch at a time, when its level's in-memory head runs out. A durable queue's
persistent messages are paged out for free: the journal has them and reads them back.

Rules, following RabbitMQ's rabbit_amqqueue_process:
- TTL: deadline = enqueue time + min(per-message expiration, x-message-ttl); expired messages are
  dropped only when they reach the head of their level (dead-letter reason "expired").
- x-max-length / x-max-length-bytes count ready messages only. drop-head drops the oldest
  (highest level first, as fetch order) with reason "maxlen"; reject-publish refuses the publish;
  reject-publish-dlx refuses it and dead-letters it.
- x-expires: deleted after being unused (no consumers, no basic.get, no redeclare) that long.
- Dead letters are recorded only while a dead-letter exchange is set (argument or policy).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable

from amqp_broker.core.policies import QueueSettings, resolve_queue_settings
from amqp_broker.queues.arguments import (
    OVERFLOW_DROP_HEAD,
    OVERFLOW_REJECT_PUBLISH_DLX,
    parse_consumer_priority,
    parse_queue_arguments,
)
from amqp_broker.queues.base import (
    REASON_EXPIRED,
    REASON_MAXLEN,
    REASON_REJECTED,
    Confirm,
    Consumer,
    DeadLetter,
    Delivery,
    GetReply,
    Placement,
    QueueJournal,
    QueuePager,
    Recovered,
    queue_key,
)
from amqp_broker.queues.consumers import ConsumerSet
from amqp_broker.queues.message import Entry, Message
from amqp_broker.queues.paging import PagedLevel

__all__ = ["ClassicQueue", "DEFAULT_MEMORY_BUDGET", "ENTRY_OVERHEAD"]

# bodies of ready messages a queue keeps in memory before paging out (classic_queue.
# memory_budget_bytes), and what each message counts besides its body
DEFAULT_MEMORY_BUDGET = 8 << 20
ENTRY_OVERHEAD = 256
# a lazy queue (budget 0) still pages in this much at a time
_MIN_PAGE_IN = 256 << 10
# Publisher flow, as RabbitMQ's credit flow does in effect. A reader handles a whole read of
# publishes before their deliveries go out, so on a busy node a publisher can outpace a consumer
# that keeps up: the queue then grows for the whole run, pages its messages out and reads them
# back, which slows its consumer further (classic 64 KiB end-to-end: 6,000 messages after 7 s,
# while RabbitMQ's queue stayed empty). Past the flow mark (FLOW_READY ready messages, or more
# than the memory budget and at least _FLOW_MIN), while a consumer keeps up
# (`Consumer.keeping_up`), the queue asks its publishers to stop reading (`flow`) until it is
# under half the mark, no consumer keeps up, or FLOW_WAIT has passed (short: a client that
# drives its publishing and its consuming connection from one thread reads no deliveries while
# a publish waits; at 0.1 s, 3,000 such publishes of 64 KiB took 5.8 s instead of 3.4). A
# consumer that does not keep up (its prefetch window full, its client not reading) sets the
# pace itself: the backlog grows, as RabbitMQ's does. Checked every _FLOW_CHECK_EVERY publishes.
FLOW_READY = 1024
_FLOW_MIN = 64
FLOW_WAIT = 0.01  # seconds: short, for a publisher and a consumer sharing one client thread
_FLOW_CHECK_EVERY = 16


class ClassicQueue:
    """One classic queue. Implements `amqp_broker.queues.base.QueueType`.

    `journal` is given for durable queues only; then every persistent message accepted, first
    delivered and removed is reported to it. `exclusive_owner` is the server's connection ref for
    exclusive queues (stored, not interpreted here).
    """

    queue_type = "classic"
    supports_global_qos = True
    supports_conditional_delete = True
    flow_wait = FLOW_WAIT

    def __init__(
        self,
        name: str,
        vhost: str = "/",
        *,
        durable: bool = False,
        auto_delete: bool = False,
        exclusive: bool = False,
        exclusive_owner: Any = None,
        arguments: dict[str, Any] | None = None,
        journal: QueueJournal | None = None,
        now_ms: int = 0,
        pager: QueuePager | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.auto_delete = auto_delete
        self.exclusive = exclusive
        self.exclusive_owner = exclusive_owner
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.settings: QueueSettings = parse_queue_arguments(name, vhost, self.arguments)
        self.key = queue_key(vhost, name)
        self._journal = journal if durable else None
        levels = (self.settings.max_priority or 0) + 1
        self._pager = pager
        self._levels = [PagedLevel(pager, self._journal, self.key) for _ in range(levels)]
        self._max_level = levels - 1
        self._ready_count = 0
        self._ready_bytes = 0
        self._memory_budget = memory_budget
        self._mem_cost = 0    # body bytes + ENTRY_OVERHEAD of the ready messages in memory
        self._unacked: dict[int, Entry] = {}
        self._next_id = 1
        self._consumers = ConsumerSet(self.settings.single_active_consumer)
        self._dead: list[DeadLetter] = []
        self._last_used = now_ms
        self.has_had_consumers = False  # for auto-delete: only after the first consumer left
        # while it becomes a mirrored queue (`server/mirror_convert.py`): no deliveries, and
        # `held` keeps publishes (their confirms unsettled) for the replicated queue
        self.paused = False
        self.held: list[tuple[Message, int, Confirm | None]] | None = None
        self.flow = False   # asks its publishers to pause (see FLOW_READY)
        self._flow_waiters: dict[Callable[[], None], None] = {}

    # -- policy --------------------------------------------------------------------------------
    def apply_policy(self, policy: dict[str, Any] | None) -> None:
        """Re-derive the effective settings from the declared arguments plus a policy definition
        (the merged policy and operator policy; None when no policy applies).

        A lower max-length/max-length-bytes with drop-head overflow trims the queue at once,
        dead-lettering the dropped heads (maxlen), as RabbitMQ does on a policy change; the
        caller runs the queue afterwards so the dead letters are routed. With reject-publish
        the messages already in the queue stay."""
        s = self.settings = resolve_queue_settings(self.arguments, policy, "classic")
        if s.overflow == OVERFLOW_DROP_HEAD and (
                s.max_length is not None or s.max_length_bytes is not None):
            self._drop_head_over_limits()

    # -- counters ------------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        return self._ready_count

    @property
    def message_bytes(self) -> int:
        return self._ready_bytes

    @property
    def paged_out_count(self) -> int:
        """Ready messages whose bodies are paged out (RabbitMQ's messages_paged_out)."""
        return sum(level.paged for level in self._levels)

    @property
    def paged_out_bytes(self) -> int:
        return sum(level.paged_bytes for level in self._levels)

    @property
    def ram_bytes(self) -> int:
        """Body bytes held in memory: ready ones not paged out, and unacked ones (RabbitMQ's
        message_bytes_ram)."""
        return self._ready_bytes - self.paged_out_bytes + \
            sum(e.message.size for e in self._unacked.values())

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    @property
    def unacked_count(self) -> int:
        return len(self._unacked)

    def consumers(self) -> list[Consumer]:
        return self._consumers.all()

    @property
    def active_consumer(self) -> Consumer | None:
        return self._consumers.active  # set only with x-single-active-consumer

    def placement(self, local_node: str) -> Placement:
        """A classic queue lives on the node that declared it: this one."""
        return Placement(local_node, (local_node,), (local_node,))

    def unavailable_error(self) -> None:
        return None  # always usable where it is

    def is_full(self) -> bool:
        """At x-max-length / x-max-length-bytes under reject-publish(-dlx): the next publish is
        refused (any message would go over the count limit; the byte limit once reached)."""
        s = self.settings
        if s.overflow == OVERFLOW_DROP_HEAD:
            return False
        if s.max_length is not None and self._ready_count >= s.max_length:
            return True
        return s.max_length_bytes is not None and self._ready_bytes >= s.max_length_bytes

    # -- publishing ----------------------------------------------------------------------------
    def publish(self, message: Message, now_ms: int, confirm: Confirm | None = None) -> bool:
        """Settles `confirm` at once, except for a persistent message in a durable queue: then
        once the journal has fsynced its record."""
        if self.held is not None:
            self.held.append((message, now_ms, confirm))
            return True
        s = self.settings
        if s.overflow != OVERFLOW_DROP_HEAD and self._would_overflow(message.size):
            if s.overflow == OVERFLOW_REJECT_PUBLISH_DLX:
                self._dead_letter(message, REASON_MAXLEN, False)
            if confirm is not None:
                confirm[0].settle(confirm[1], False)
            return False
        entry = Entry(self._next_id, message, self._deadline(message.expiration_ms, now_ms))
        self._next_id += 1
        journal = self._journal
        if journal is not None and message.persistent:
            journal_seq = journal.enqueued(self.key, entry.msg_id, message)
            if confirm is not None:
                journal.confirm_when_durable(journal_seq, confirm)
        elif confirm is not None:
            confirm[0].settle(confirm[1], True)
        self._push(entry)
        if s.max_length is not None or s.max_length_bytes is not None:
            self._drop_head_over_limits()
        if (self._ready_count > _FLOW_MIN and not self.flow
                and not entry.msg_id % _FLOW_CHECK_EVERY and self._over_flow_mark()
                and self._consumers.any_keeping_up()):
            self.flow = True
        return True

    def _ready_cost(self) -> int:
        """What the ready messages would cost in memory, paged out or not (as `_mem_cost`)."""
        return self._ready_bytes + self._ready_count * ENTRY_OVERHEAD

    def _over_flow_mark(self) -> bool:
        n = self._ready_count
        return n > FLOW_READY or (n > _FLOW_MIN and self._ready_cost() > self._budget())

    def _under_flow_mark(self) -> bool:
        n = self._ready_count
        return n <= _FLOW_MIN // 2 or (
            n <= FLOW_READY // 2 and 2 * self._ready_cost() <= self._budget())

    def when_flow_ends(self, callback: Callable[[], None]) -> None:
        """`callback()` once the queue no longer asks its publishers to pause (at once if it
        does not); kept once however often it is given while it waits."""
        self._end_flow_if_due()
        if not self.flow:
            callback()
        else:
            self._flow_waiters[callback] = None

    def _end_flow_if_due(self) -> None:
        if self.flow and (self._under_flow_mark() or not self._consumers.any_keeping_up()):
            self.flow = False
            waiters, self._flow_waiters = self._flow_waiters, {}
            for callback in waiters:
                callback()

    def _deadline(self, expiration_ms: int | None, now_ms: int) -> int | None:
        ttl = expiration_ms
        qttl = self.settings.message_ttl
        if qttl is not None and (ttl is None or qttl < ttl):
            ttl = qttl
        return None if ttl is None else now_ms + ttl

    def _would_overflow(self, size: int) -> bool:
        s = self.settings
        if s.max_length is not None and self._ready_count + 1 > s.max_length:
            return True
        return s.max_length_bytes is not None and self._ready_bytes + size > s.max_length_bytes

    def _budget(self) -> int:
        return 0 if self.settings.queue_mode == "lazy" else self._memory_budget

    def _push(self, entry: Entry) -> None:
        level = self._levels[min(entry.message.priority, self._max_level)]
        size = entry.message.size
        self._ready_count += 1
        self._ready_bytes += size
        cost = size + ENTRY_OVERHEAD
        if self._pager is not None and (level.paged or self._mem_cost + cost > self._budget()):
            if level.page_out(entry):
                return
        level.head.append(entry)
        self._mem_cost += cost

    def _drop_head_over_limits(self) -> None:
        s = self.settings
        max_len = s.max_length if s.max_length is not None else self._ready_count
        max_bytes = s.max_length_bytes if s.max_length_bytes is not None else self._ready_bytes
        dropped: list[int] = []
        while self._ready_count > max_len or self._ready_bytes > max_bytes:
            entry = self._pop_head()
            self._dead_letter(entry.message, REASON_MAXLEN, entry.redelivered)
            if entry.message.persistent:
                dropped.append(entry.msg_id)
        self._journal_removed(dropped)

    def ready_entries(self) -> list[Entry]:
        """The ready messages in the order they would be delivered (highest level first);
        paged-out ones are read back (and stay paged)."""
        out: list[Entry] = []
        for level in reversed(self._levels):
            out.extend(level.head)
            out.extend(level.paged_entries())
        return out

    def release_held(self) -> list[tuple[Message, int, Confirm | None]]:
        """Stop holding publishes; hand back those held (still to be published)."""
        held, self.held = self.held or [], None
        return held

    # -- ready-list primitives -------------------------------------------------------------------
    def _head_level(self) -> PagedLevel | None:
        for level in reversed(self._levels):
            if level:
                return level
        return None

    def _first(self, level: PagedLevel) -> Entry:
        """The oldest message of a non-empty level, paged in if it is not in memory."""
        if not level.head:
            moved = level.page_in(max(self._budget() // 4, _MIN_PAGE_IN))
            self._mem_cost += moved + ENTRY_OVERHEAD * len(level.head)
        return level.head[0]

    def _take(self, level: PagedLevel) -> Entry:
        """Remove the oldest message of a non-empty level from the ready list."""
        self._first(level)
        entry = level.head.popleft()
        size = entry.message.size
        self._ready_count -= 1
        self._ready_bytes -= size
        self._mem_cost -= size + ENTRY_OVERHEAD
        return entry

    def _pop_head(self) -> Entry:
        level = self._head_level()
        assert level is not None
        return self._take(level)

    # -- consumers -----------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if "x-priority" in consumer.arguments:
            consumer.priority = parse_consumer_priority(self.name, self.vhost, consumer.arguments)
        self._consumers.add(consumer, self.name, self.vhost)
        self.has_had_consumers = True
        self._last_used = now_ms

    def remove_consumer(self, channel: Any, tag: str, now_ms: int) -> Consumer | None:
        consumer = self._consumers.remove(channel, tag)
        if consumer is not None:
            self._last_used = now_ms
            self._end_flow_if_due()
        return consumer

    def remove_channel(self, channel: Any, now_ms: int) -> list[Consumer]:
        gone = self._consumers.remove_channel(channel)
        if gone:
            self._last_used = now_ms
            self._end_flow_if_due()
        return gone

    @property
    def should_auto_delete(self) -> bool:
        """auto_delete queues go once they had a consumer and the last one left."""
        return self.auto_delete and self.has_had_consumers and not len(self._consumers)

    # -- delivery ------------------------------------------------------------------------------
    def dispatch(self, now_ms: int, deliver: Callable[[Delivery], None] | None = None
                 ) -> list[Delivery]:
        out: list[Delivery] = []
        # Handing each delivery on at once lets the consumers' take_credit see the connection's
        # output grow: a consumer with a large prefetch gets its window in bounded bursts as the
        # client reads, instead of all of it (and its consume-ok) after one long pass.
        hand_on = out.append if deliver is None else deliver
        if self.paused or not self._ready_count or not len(self._consumers):
            return out
        first_delivered: list[int] = []
        removed: list[int] = []
        pick = self._consumers.pick
        while self._ready_count:
            level = self._head_level()
            assert level is not None
            expires_at = level.first_expiry()
            if expires_at is not None and now_ms > expires_at:
                self._expire_one(level, removed)
                continue
            consumer = pick()
            if consumer is None:
                break
            entry = self._take(level)
            self._hand_out(entry, consumer.no_ack, first_delivered, removed)
            hand_on(Delivery(consumer, entry))
        self._journal_delivered(first_delivered)
        self._journal_removed(removed)
        if self.flow:
            self._end_flow_if_due()
        return out

    def _hand_out(self, entry: Entry, no_ack: bool, first: list[int], removed: list[int]) -> None:
        """Bookkeeping for a message leaving the ready list towards a client."""
        persistent = entry.message.persistent
        if no_ack:
            if persistent:
                removed.append(entry.msg_id)
        else:
            if persistent and entry.delivery_count == 0:
                first.append(entry.msg_id)
            self._unacked[entry.msg_id] = entry
        entry.delivery_count += 1

    def get(self, now_ms: int, no_ack: bool) -> Entry | None:
        self._last_used = now_ms
        if self.paused:
            return None
        removed: list[int] = []
        self._expire_heads(now_ms, removed)
        entry = None
        if self._ready_count:
            entry = self._pop_head()
            first: list[int] = []
            self._hand_out(entry, no_ack, first, removed)
            self._journal_delivered(first)
        self._journal_removed(removed)
        return entry

    def basic_get(self, channel: Any, no_ack: bool, now_ms: int, reply: GetReply) -> None:
        """Answers inside the call."""
        entry = self.get(now_ms, no_ack)
        reply(entry, self._ready_count)

    # -- settlement ----------------------------------------------------------------------------
    def settle(self, msg_ids: Iterable[int]) -> None:
        removed = []
        unacked = self._unacked
        for msg_id in msg_ids:
            entry = unacked.pop(msg_id, None)
            if entry is not None and entry.message.persistent:
                removed.append(msg_id)
        self._journal_removed(removed)

    def requeue(self, msg_ids: Iterable[int]) -> None:
        by_level: dict[int, list[Entry]] = {}
        for msg_id in msg_ids:
            entry = self._unacked.pop(msg_id, None)
            if entry is None:
                continue
            entry.redelivered = True
            level = min(entry.message.priority, self._max_level)
            by_level.setdefault(level, []).append(entry)
            self._ready_count += 1
            self._ready_bytes += entry.message.size
            self._mem_cost += entry.message.size + ENTRY_OVERHEAD
        for level, entries in by_level.items():
            _merge_front(self._levels[level].head, entries)
        s = self.settings
        if by_level and s.overflow == OVERFLOW_DROP_HEAD and (
            s.max_length is not None or s.max_length_bytes is not None
        ):
            self._drop_head_over_limits()

    def discard(self, msg_ids: Iterable[int], reason: str = REASON_REJECTED) -> None:
        removed = []
        for msg_id in msg_ids:
            entry = self._unacked.pop(msg_id, None)
            if entry is None:
                continue
            self._dead_letter(entry.message, reason, entry.redelivered)
            if entry.message.persistent:
                removed.append(msg_id)
        self._journal_removed(removed)

    def take_dead_letters(self) -> list[DeadLetter]:
        dead, self._dead = self._dead, []
        return dead

    def _dead_letter(self, message: Message, reason: str, redelivered: bool) -> None:
        if self.settings.dead_letter_exchange is not None:
            self._dead.append(DeadLetter(message, reason, self.name, redelivered))

    # -- whole queue ---------------------------------------------------------------------------
    def purge(self) -> int:
        count = self._ready_count
        removed: list[int] = []
        for level in self._levels:
            removed.extend(e.msg_id for e in level.head if e.message.persistent)
            removed.extend(level.paged_persistent_ids())
            level.clear()
        self._ready_count = 0
        self._ready_bytes = 0
        self._mem_cost = 0
        self._journal_removed(removed)
        self._end_flow_if_due()
        return count

    def delete(self) -> int:
        journal, self._journal = self._journal, None  # one drop record instead of many removes
        count = self.purge()
        self._unacked.clear()
        if journal is not None:
            journal.drop_queue(self.key)
        if self._pager is not None:
            self._pager.drop()
        self._consumers = ConsumerSet(self.settings.single_active_consumer)
        return count

    def touch(self, now_ms: int) -> None:
        self._last_used = now_ms

    def is_unused(self) -> bool:
        return not len(self._consumers)

    # -- timers --------------------------------------------------------------------------------
    def next_deadline(self, now_ms: int) -> int | None:
        best: int | None = None
        for level in self._levels:
            expires_at = level.first_expiry()
            if expires_at is not None:
                due = expires_at + 1  # expired strictly after the deadline
                best = due if best is None or due < best else best
        expires = self.settings.expires
        if expires is not None and not len(self._consumers):
            due = self._last_used + expires
            best = due if best is None or due < best else best
        return best

    def expire(self, now_ms: int) -> bool:
        removed: list[int] = []
        self._expire_heads(now_ms, removed)
        self._journal_removed(removed)
        expires = self.settings.expires
        return expires is not None and not len(self._consumers) and now_ms >= self._last_used + expires

    def _expire_heads(self, now_ms: int, removed: list[int]) -> None:
        for level in self._levels:
            while True:
                expires_at = level.first_expiry()
                if expires_at is None or now_ms <= expires_at:
                    break
                self._expire_one(level, removed)

    def _expire_one(self, level: PagedLevel, removed: list[int]) -> None:
        entry = self._take(level)
        self._dead_letter(entry.message, REASON_EXPIRED, entry.redelivered)
        if entry.message.persistent:
            removed.append(entry.msg_id)

    # -- recovery ------------------------------------------------------------------------------
    def restore(self, recovered: Recovered, now_ms: int) -> None:
        """Load the recovered messages into an empty queue. TTL deadlines restart from `now_ms`.
        Those past the memory budget are paged out again straight from their summaries: their
        bodies stay in the journal, unread. Used by store recovery only."""
        # per level: the columns (ids, sizes, deadlines, redelivered) of the rows to page out
        paging: dict[int, tuple[list, list, list, list]] = {}
        pages = self._pager is not None and self._journal is not None
        for msg_id, size, priority, expiration_ms, redelivered, ref in recovered:
            p = min(priority, self._max_level)
            level = self._levels[p]
            expires_at = self._deadline(expiration_ms, now_ms)
            self._ready_count += 1
            self._ready_bytes += size
            cols = paging.get(p)
            if cols is None and pages and \
                    (level.paged or self._mem_cost + size + ENTRY_OVERHEAD > self._budget()):
                cols = paging[p] = ([], [], [], [])
            if cols is None:
                level.head.append(Entry(msg_id, recovered.message(ref), expires_at, redelivered,
                                        1 if redelivered else 0))
                self._mem_cost += size + ENTRY_OVERHEAD
            else:
                cols[0].append(msg_id)
                cols[1].append(size)
                cols[2].append(expires_at)
                cols[3].append(redelivered)
            if msg_id >= self._next_id:
                self._next_id = msg_id + 1
        for p, cols in paging.items():
            self._levels[p].page_out_journaled(*cols)

    # -- journal ---------------------------------------------------------------------------------
    def _journal_removed(self, msg_ids: list[int]) -> None:
        if msg_ids and self._journal is not None:
            self._journal.removed(self.key, msg_ids)

    def _journal_delivered(self, msg_ids: list[int]) -> None:
        if msg_ids and self._journal is not None:
            self._journal.delivered(self.key, msg_ids)

    def __repr__(self) -> str:
        return (
            f"ClassicQueue({self.name!r}, vhost={self.vhost!r}, ready={self._ready_count}, "
            f"unacked={len(self._unacked)}, consumers={len(self._consumers)})"
        )


def _merge_front(dq: deque[Entry], entries: list[Entry]) -> None:
    """Put requeued `entries` back into `dq` at their original positions (msg-id order).

    Only the part of `dq`'s head with ids below the largest requeued id is touched, so the common
    case (everything requeued is older than everything ready) is O(len(entries)).
    """
    entries.sort(key=lambda e: e.msg_id)
    top = entries[-1].msg_id
    if dq and dq[0].msg_id < top:
        head = []
        while dq and dq[0].msg_id < top:
            head.append(dq.popleft())
        entries = sorted(entries + head, key=lambda e: e.msg_id)
    dq.extendleft(reversed(entries))
