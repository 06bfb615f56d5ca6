"""Message records and the ready queue of the quorum queue state machine.

A message in the state is its log index plus a small header (`Message`); the body stays
in the Raft log.  `ReadyQueue` holds the messages waiting for a consumer in delivery
order: returned messages first (delivery limit set: "near the head"), then two priority
levels served 2:1 like rabbit_fifo_q; or, for a mirrored classic queue (`QueueConfig.
max_priority`), strict levels as a classic queue's: a message's `hi` is then its level (an
int; level 0 shares the normal deque) and higher levels always go first.  `LiveIndexes`
tracks the smallest log index still referenced, for `ReleaseCursor`.  Used only by the other
modules of this package.
"""
from __future__ import annotations

from collections import deque
from itertools import islice

__all__ = ["Message", "ReadyQueue", "LiveIndexes"]

# The priority level above which a message is "high" (RabbitMQ 4.x: 0-4 and unset normal).
_HIGH_ABOVE = 4
# 2 high-priority deliveries per normal one when both levels have messages.
_WEIGHT = 2


class Message:
    """Header of one message.  Mutable: `acquired` / `delivery_failed` grow on returns.

    part: the partition of a partitioned queue's message (None in other queues).
    acquired: deliveries that were returned (x-delivery-count, delivery-limit check).
    delivery_failed: returns that counted as failed (consumer down, reject).
    expiry: absolute leader time (ms) after which it is dead at the head, or None."""
    __slots__ = ("index", "size", "expiry", "hi", "persistent", "acquired", "delivery_failed",
                 "part")

    def __init__(self, index: int, size: int, expiry: int | None = None, hi: bool = False,
                 persistent: bool = True, acquired: int = 0, delivery_failed: int = 0,
                 part: int | None = None):
        self.index = index
        self.size = size
        self.expiry = expiry
        self.hi = hi
        self.persistent = persistent
        self.acquired = acquired
        self.delivery_failed = delivery_failed
        self.part = part      # partitioned queues: the partition; None elsewhere

    def to_wire(self) -> list:
        w = [self.index, self.size, self.expiry, self.hi, self.persistent,
             self.acquired, self.delivery_failed]
        if self.part is not None:
            w.append(self.part)
        return w

    @classmethod
    def from_wire(cls, w: list) -> "Message":
        return cls(*w)

    def __repr__(self) -> str:
        return f"Message({', '.join(repr(v) for v in self.to_wire())})"


def is_high(priority: int | None) -> bool:
    return priority is not None and priority > _HIGH_ABOVE


class ReadyQueue:
    """Messages ready for delivery.  `len()` and `bytes` count all of them."""
    __slots__ = ("returns", "hi", "lo", "strict", "counter", "bytes")

    def __init__(self) -> None:
        self.returns: deque[Message] = deque()
        self.hi: deque[Message] = deque()
        self.lo: deque[Message] = deque()
        self.strict: dict[int, deque[Message]] = {}  # level >= 1 -> its messages (non-empty)
        self.counter = 0      # position in the 2:1 cycle, as rabbit_fifo_q's dequeue counter
        self.bytes = 0

    def __len__(self) -> int:
        n = len(self.returns) + len(self.hi) + len(self.lo)
        if self.strict:
            n += sum(len(q) for q in self.strict.values())
        return n

    def _level_of(self, msg: Message) -> deque[Message]:
        hi = msg.hi
        if hi is True:
            return self.hi
        if not hi:
            return self.lo
        q = self.strict.get(hi)
        if q is None:
            q = self.strict[hi] = deque()
        return q

    def push(self, msg: Message) -> None:
        self._level_of(msg).append(msg)
        self.bytes += msg.size

    def push_return(self, msg: Message) -> None:
        """Back near the head: after earlier returns, before everything else."""
        self.returns.append(msg)
        self.bytes += msg.size

    def push_tail(self, msg: Message) -> None:
        """Back at the tail of the normal level (returns with an unlimited delivery limit);
        with strict levels, at the tail of its own level."""
        (self.lo if msg.hi is True else self._level_of(msg)).append(msg)
        self.bytes += msg.size

    def _pick(self) -> deque[Message] | None:
        if self.returns:
            return self.returns
        if self.strict:
            return self.strict[max(self.strict)]
        hi, lo = self.hi, self.lo
        if hi and lo and self.counter == _WEIGHT:
            # normal's turn, but a high message published earlier still goes first
            return hi if hi[0].index < lo[0].index else lo
        if hi:
            return hi
        return lo if lo else None

    def peek(self) -> Message | None:
        q = self._pick()
        return q[0] if q is not None else None

    def head(self, n: int) -> list[Message]:
        """The first `n` messages in delivery order, without taking them (a management
        "get" that only looks): the same choices `pop` would make, on a copy of the cycle."""
        out = list(islice(self.returns, n))
        for level in sorted(self.strict, reverse=True):
            out.extend(islice(self.strict[level], max(0, n - len(out))))
        hi, lo, counter = self.hi, self.lo, self.counter
        h = l = 0
        while len(out) < n:
            has_hi, has_lo = h < len(hi), l < len(lo)
            if has_hi and has_lo and counter == _WEIGHT:
                take_hi = hi[h].index < lo[l].index
            elif has_hi or has_lo:
                take_hi = has_hi
            else:
                break
            if take_hi:
                out.append(hi[h])
                h += 1
            else:
                out.append(lo[l])
                l += 1
            counter = 0 if counter == _WEIGHT else counter + 1
        return out

    def pop(self) -> Message | None:
        q = self._pick()
        if q is None:
            return None
        if q is self.hi or q is self.lo:
            self.counter = 0 if self.counter == _WEIGHT else self.counter + 1
        msg = q.popleft()
        if not q and q is not self.returns and q is not self.hi and q is not self.lo:
            del self.strict[msg.hi]  # a strict level emptied
        self.bytes -= msg.size
        return msg

    def clear(self) -> list[Message]:
        out = [*self.returns, *(m for level in sorted(self.strict, reverse=True)
                                for m in self.strict[level]), *self.hi, *self.lo]
        self.returns.clear()
        self.hi.clear()
        self.lo.clear()
        self.strict.clear()
        self.bytes = 0
        return out

    def to_wire(self) -> list:
        w = [[m.to_wire() for m in self.returns], [m.to_wire() for m in self.hi],
             [m.to_wire() for m in self.lo], self.counter]
        if self.strict:  # absent for quorum queues: their snapshots keep the old shape
            w.append([[level, [m.to_wire() for m in ms]] for level, ms in self.strict.items()])
        return w

    @classmethod
    def from_wire(cls, w: list) -> "ReadyQueue":
        q = cls()
        q.returns.extend(Message.from_wire(m) for m in w[0])
        q.hi.extend(Message.from_wire(m) for m in w[1])
        q.lo.extend(Message.from_wire(m) for m in w[2])
        q.counter = w[3]
        for level, ms in (w[4] if len(w) > 4 else ()):
            q.strict[level] = deque(Message.from_wire(m) for m in ms)
        q.bytes = sum(m.size for m in q.returns) + sum(m.size for m in q.hi) \
            + sum(m.size for m in q.lo) + sum(m.size for ms in q.strict.values() for m in ms)
        return q


class LiveIndexes:
    """Log indexes of messages still held (ready, checked out or dead-lettered pending).

    Indexes are added in increasing order (a message's index is the index of the command
    that created it), so the smallest live one is found by dropping removed ones from the
    front: amortised O(1) per message."""
    __slots__ = ("_order", "_removed")

    def __init__(self, indexes: list[int] | None = None) -> None:
        self._order: deque[int] = deque(indexes or ())
        self._removed: set[int] = set()   # ints only: never iterated

    def add(self, index: int) -> None:
        self._order.append(index)

    def remove(self, index: int) -> None:
        self._removed.add(index)
        self._trim()

    def _trim(self) -> None:
        order, removed = self._order, self._removed
        while order and order[0] in removed:
            removed.discard(order.popleft())

    def smallest(self) -> int | None:
        return self._order[0] if self._order else None

    def live(self) -> list[int]:
        return [i for i in self._order if i not in self._removed]
