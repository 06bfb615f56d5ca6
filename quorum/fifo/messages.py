"""Message records and the ready queue of the quorum queue state machine.

A message in the state is its log index plus a small header (`Message`); the body stays
in the Raft log.  Ready messages and live indexes are held packed past their oldest few
thousand (`packed.py`: about 20 bytes a message).  `ReadyQueue` holds the messages waiting for a consumer in delivery
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

from .packed import PackedInts, PackedMessages

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
    """Messages ready for delivery.  `len()` (kept as `count`: asked on every enqueue) and
    `bytes` count all of them."""
    __slots__ = ("returns", "hi", "lo", "strict", "counter", "bytes", "count")

    def __init__(self) -> None:
        self.returns: deque[Message] = deque()   # few: kept as objects
        self.hi = PackedMessages(Message, hi=True)
        self.lo = PackedMessages(Message)
        self.strict: dict[int, PackedMessages] = {}  # level >= 1 -> its messages (non-empty)
        self.counter = 0      # position in the 2:1 cycle, as rabbit_fifo_q's dequeue counter
        self.bytes = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def _level_of(self, msg: Message) -> PackedMessages:
        hi = msg.hi
        if hi is True:
            return self.hi
        if not hi:
            return self.lo
        q = self.strict.get(hi)
        if q is None:
            q = self.strict[hi] = PackedMessages(Message, hi=hi)
        return q

    def push(self, msg: Message) -> None:
        self._level_of(msg).append(msg)
        self.bytes += msg.size
        self.count += 1

    def push_return(self, msg: Message) -> None:
        """Back near the head: after earlier returns, before everything else."""
        self.returns.append(msg)
        self.bytes += msg.size
        self.count += 1

    def push_head(self, msgs: list[Message]) -> None:
        """Back in front of their level, in the order given: where they were before a
        consumer took them (messages it never saw, `Unsent`)."""
        for msg in reversed(msgs):
            self._level_of(msg).appendleft(msg)
            self.bytes += msg.size
        self.count += len(msgs)

    def push_tail(self, msg: Message) -> None:
        """Back at the tail of the normal level (returns with an unlimited delivery limit);
        with strict levels, at the tail of its own level."""
        (self.lo if msg.hi is True else self._level_of(msg)).append(msg)
        self.bytes += msg.size
        self.count += 1

    def _pick(self) -> deque[Message] | PackedMessages | None:
        if self.returns:
            return self.returns
        if self.strict:
            return self.strict[max(self.strict)]
        hi, lo = self.hi, self.lo
        hh, lh = hi.hot, lo.hot   # deques: empty only when their FIFO is
        if hh and lh and self.counter == _WEIGHT:
            # normal's turn, but a high message published earlier still goes first
            return hi if hh[0].index < lh[0].index else lo
        if hh:
            return hi
        return lo if lh else None

    def peek(self) -> Message | None:
        q = self._pick()
        if q is None:
            return None
        return q[0] if q is self.returns else q.hot[0]

    def head(self, n: int) -> list[Message]:
        """The first `n` messages in delivery order, without taking them (a management
        "get" that only looks): the same choices `pop` would make, on a copy of the cycle."""
        out = list(islice(self.returns, n))
        for level in sorted(self.strict, reverse=True):
            out.extend(islice(self.strict[level], max(0, n - len(out))))
        his, los = iter(self.hi), iter(self.lo)
        h, l, counter = next(his, None), next(los, None), self.counter
        while len(out) < n:
            if h is not None and l is not None and counter == _WEIGHT:
                take_hi = h.index < l.index
            elif h is not None or l is not None:
                take_hi = h is not None
            else:
                break
            if take_hi:
                out.append(h)
                h = next(his, None)
            else:
                out.append(l)
                l = next(los, None)
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
        self.count -= 1
        return msg

    def clear(self) -> list[Message]:
        out = [*self.returns, *(m for level in sorted(self.strict, reverse=True)
                                for m in self.strict[level]), *self.hi, *self.lo]
        self.returns.clear()
        self.hi.clear()
        self.lo.clear()
        self.strict.clear()
        self.bytes = 0
        self.count = 0
        return out

    def to_wire(self) -> list:
        w = [[m.to_wire() for m in self.returns], self.hi.to_wire(), self.lo.to_wire(),
             self.counter]
        if self.strict:  # absent for quorum queues
            w.append([[level, ms.to_wire()] for level, ms in self.strict.items()])
        return w

    @classmethod
    def from_wire(cls, w: list) -> "ReadyQueue":
        q = cls()
        q.returns.extend(Message.from_wire(m) for m in w[0])
        q.hi.load_wire(w[1])
        q.lo.load_wire(w[2])
        q.counter = w[3]
        for level, ms in (w[4] if len(w) > 4 else ()):
            q._level_of(Message(0, 0, hi=level)).load_wire(ms)
        q.bytes = sum(m.size for m in q.returns) + q.hi.total_size() + q.lo.total_size() \
            + sum(ms.total_size() for ms in q.strict.values())
        q.count = len(q.returns) + len(q.hi) + len(q.lo) + sum(len(ms) for ms in q.strict.values())
        return q


class LiveIndexes:
    """Log indexes of messages still held (ready, checked out or dead-lettered pending).

    Indexes are added in increasing order (a message's index is the index of the command
    that created it), so the smallest live one is found by dropping removed ones from the
    front: amortised O(1) per message."""
    __slots__ = ("_order", "_removed")

    def __init__(self, indexes=()) -> None:
        self._order = PackedInts(indexes)
        self._removed: set[int] = set()   # ints only: never iterated

    def add(self, index: int) -> None:
        self._order.append(index)

    def remove(self, index: int) -> None:
        self._removed.add(index)
        self._trim()

    def _trim(self) -> None:
        order, removed = self._order, self._removed
        hot = order.hot   # empty only when `order` is
        while hot and hot[0] in removed:
            removed.discard(order.popleft())

    def smallest(self) -> int | None:
        hot = self._order.hot
        return hot[0] if hot else None

    def live(self) -> list[int]:
        return [i for i in self._order if i not in self._removed]

    def to_wire(self) -> bytes:
        if self._removed:
            removed = self._removed
            return PackedInts(i for i in self._order if i not in removed).to_bytes()
        return self._order.to_bytes()

    @classmethod
    def from_wire(cls, w: bytes | list[int]) -> "LiveIndexes":
        """From a snapshot: packed bytes, or a list of ints (snapshots before the packed form)."""
        if isinstance(w, bytes):
            live = cls()
            live._order = PackedInts.from_bytes(w)
            return live
        return cls(w)
