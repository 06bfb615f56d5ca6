"""Consumer and publisher records, and the service queue of consumers.

The service queue decides which consumer gets the next ready message: the highest
consumer priority first, round robin within a priority (a consumer goes to the back after
each message), only consumers that are up and have credit.  It is part of the replicated
state, so every replica picks the same consumer for every message (seed 003).
Used only by the other modules of this package.
"""
from __future__ import annotations

from collections import deque

from .commands import ConsumerKey
from .messages import Message

__all__ = ["Consumer", "ServiceQueue", "Enqueuer", "UP", "CANCELLED", "SUSPECTED", "QUIESCING"]

UP = "up"
CANCELLED = "cancelled"          # basic.cancel: waits for its unacked messages, then goes
SUSPECTED = "suspected_down"     # its node is unreachable
QUIESCING = "quiescing"          # SAC: a higher-priority consumer waits for our unacked


class Consumer:
    """One consumer.  credit: how many more messages it may be given now; for a prefetch
    consumer credit + len(checked_out) <= prefetch.  once: removed when it has no credit
    and nothing checked out (basic.get consumers and cancelled ones)."""
    __slots__ = ("key", "priority", "credited", "prefetch", "credit", "delivery_count",
                 "checked_out", "next_msg_id", "status", "once", "in_sq", "seq")

    def __init__(self, key: ConsumerKey, priority: int, credited: bool, prefetch: int,
                 seq: int, once: bool = False):
        self.key = key
        self.priority = priority
        self.credited = credited
        self.prefetch = prefetch
        self.credit = 0 if credited else prefetch
        self.delivery_count = 0
        self.checked_out: dict[int, Message] = {}
        self.next_msg_id = 0
        self.status = UP
        self.once = once
        self.in_sq = False
        self.seq = seq          # log index of its first checkout: attach order for SAC

    def add_credit(self, n: int) -> None:
        """Credit back after settle/return.  once and credited consumers get none back."""
        if self.once or self.credited:
            return
        # never above what the prefetch leaves (it may have been lowered meanwhile)
        self.credit = max(0, min(self.prefetch - len(self.checked_out), self.credit + n))

    def to_wire(self) -> list:
        return [list(self.key), self.priority, self.credited, self.prefetch, self.credit,
                self.delivery_count,
                [[i, m.to_wire()] for i, m in self.checked_out.items()],
                self.next_msg_id, self.status, self.once, self.in_sq, self.seq]

    @classmethod
    def from_wire(cls, w: list) -> "Consumer":
        c = cls(ConsumerKey(*w[0]), w[1], w[2], w[3], w[11], w[9])
        c.credit = w[4]
        c.delivery_count = w[5]
        c.checked_out = {i: Message.from_wire(m) for i, m in w[6]}
        c.next_msg_id = w[7]
        c.status = w[8]
        c.in_sq = w[10]
        return c


class Enqueuer:
    __slots__ = ("next_seq",)

    def __init__(self, next_seq: int):
        self.next_seq = next_seq


class ServiceQueue:
    """Consumers waiting for messages, by consumer priority (highest first), FIFO within
    a priority.  Membership is `Consumer.in_sq`, kept in step by the callers."""
    __slots__ = ("_levels", "_prios")

    def __init__(self) -> None:
        self._levels: dict[int, deque[ConsumerKey]] = {}
        self._prios: list[int] = []      # descending

    def push(self, c: Consumer) -> None:
        q = self._levels.get(c.priority)
        if q is None:
            q = self._levels[c.priority] = deque()
            self._prios.append(c.priority)
            self._prios.sort(reverse=True)
        q.append(c.key)
        c.in_sq = True

    def pop(self) -> ConsumerKey | None:
        for p in self._prios:
            q = self._levels[p]
            if q:
                return q.popleft()
        return None

    def remove(self, c: Consumer) -> None:
        if c.in_sq:
            q = self._levels.get(c.priority)
            if q is not None and c.key in q:
                q.remove(c.key)
            c.in_sq = False

    def __len__(self) -> int:
        return sum(len(q) for q in self._levels.values())

    def __bool__(self) -> bool:
        # asked after every command (deliver's early exit): cheaper than summing lengths
        for q in self._levels.values():
            if q:
                return True
        return False

    def to_wire(self) -> list:
        return [[p, [list(k) for k in self._levels[p]]] for p in self._prios
                if self._levels[p]]

    @classmethod
    def from_wire(cls, w: list) -> "ServiceQueue":
        sq = cls()
        for p, keys in w:
            sq._levels[p] = deque(ConsumerKey(*k) for k in keys)
            sq._prios.append(p)
        return sq
