"""A partitioned queue's ready messages: one log-index-ordered FIFO per partition.

A partitioned queue is an ordinary fifo queue (one Raft group, the same consumers, settles,
returns, limits and dead lettering) whose `QueueState.ready` is a `PartitionedReady` and
whose `parts` holds the partition map (`partitions.py`, the rules).  Its delivery, which
carries out the rules and moves the messages, is `delivery.deliver_partitioned`.  Order
within a partition is log-index order, always: a returned message goes back into its
partition at its place, so a key's messages are redelivered in the order they were
published.  Message priorities and per-message TTL do not apply (they
would reorder a key).
"""
from __future__ import annotations

from bisect import insort

from .messages import Message
from .packed import PackedMessages

__all__ = ["PartitionedReady"]


class PartitionedReady:
    """Ready messages, one index-ordered `PackedMessages` per partition.  Offers what the rest of the
    machine asks of a `ReadyQueue`: `len`, `bytes`, `push*`, `pop`/`peek`/`head` (oldest
    first over all partitions: drop-head and management reads) and `clear`."""
    __slots__ = ("parts", "bytes", "_n")

    def __init__(self, n: int) -> None:
        self.parts = [PackedMessages(Message, part=i) for i in range(n)]
        self.bytes = 0
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def depth(self, i: int) -> int:
        return len(self.parts[i])

    def push(self, msg: Message) -> None:
        self.parts[msg.part].append(msg)
        self.bytes += msg.size
        self._n += 1

    def push_return(self, msg: Message) -> None:
        """Back into its partition at its index's place (before later-published ones)."""
        dq = self.parts[msg.part]
        if not dq or dq.index_at(-1) < msg.index:
            dq.append(msg)
        elif dq.index_at(0) > msg.index:
            dq.appendleft(msg)
        else:
            items = list(dq)
            insort(items, msg, key=lambda m: m.index)
            dq.clear()
            dq.extend(items)
        self.bytes += msg.size
        self._n += 1

    push_tail = push_return

    def pop_from(self, i: int) -> Message:
        msg = self.parts[i].popleft()
        self.bytes -= msg.size
        self._n -= 1
        return msg

    def _oldest(self) -> int | None:
        best = None
        for i, dq in enumerate(self.parts):
            if dq and (best is None or dq.index_at(0) < self.parts[best].index_at(0)):
                best = i
        return best

    def peek(self) -> Message | None:
        i = self._oldest()
        return None if i is None else self.parts[i][0]

    def pop(self) -> Message | None:
        i = self._oldest()
        return None if i is None else self.pop_from(i)

    def head(self, n: int) -> list[Message]:
        return sorted((m for dq in self.parts for m in dq), key=lambda m: m.index)[:n]

    def clear(self) -> list[Message]:
        out = sorted((m for dq in self.parts for m in dq), key=lambda m: m.index)
        for dq in self.parts:
            dq.clear()
        self.bytes = 0
        self._n = 0
        return out

    def to_wire(self) -> list:
        return [dq.to_wire() for dq in self.parts]

    @classmethod
    def from_wire(cls, w: list) -> "PartitionedReady":
        r = cls(len(w))
        for dq, msgs in zip(r.parts, w):
            dq.load_wire(msgs)
        r.bytes = sum(dq.total_size() for dq in r.parts)
        r._n = sum(len(dq) for dq in r.parts)
        return r
