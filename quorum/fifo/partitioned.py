"""A partitioned queue inside the fifo machine: its ready messages per partition, its
delivery, and the carrying out of the partition rules of `partitions.py`.

A partitioned queue is an ordinary fifo queue (one Raft group, the same consumers, settles,
returns, limits and dead lettering) whose `QueueState.ready` is a `PartitionedReady` and
whose `parts` holds the partition map.  `delivery.deliver` calls `deliver` here instead of
its service-queue loop.  Order within a partition is log-index order, always: a returned
message goes back into its partition at its place, so a key's messages are redelivered in
the order they were published.  Message priorities and per-message TTL do not apply (they
would reorder a key).
"""
from __future__ import annotations

from bisect import insort
from collections import deque

from .commands import Meta
from .consumers import UP
from .effects import Deliver
from .messages import Message
from . import partitions as rules

__all__ = ["PartitionedReady", "deliver", "next_time", "held"]


class PartitionedReady:
    """Ready messages, one index-ordered deque per partition.  Offers what the rest of the
    machine asks of a `ReadyQueue`: `len`, `bytes`, `push*`, `pop`/`peek`/`head` (oldest
    first over all partitions: drop-head and management reads) and `clear`."""
    __slots__ = ("parts", "bytes", "_n")

    def __init__(self, n: int) -> None:
        self.parts: list[deque[Message]] = [deque() for _ in range(n)]
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
        if not dq or dq[-1].index < msg.index:
            dq.append(msg)
        elif dq[0].index > msg.index:
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
            if dq and (best is None or dq[0].index < self.parts[best][0].index):
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
        return [[m.to_wire() for m in dq] for dq in self.parts]

    @classmethod
    def from_wire(cls, w: list) -> "PartitionedReady":
        r = cls(len(w))
        for dq, msgs in zip(r.parts, w):
            dq.extend(Message.from_wire(m) for m in msgs)
        r.bytes = sum(m.size for dq in r.parts for m in dq)
        r._n = sum(len(dq) for dq in r.parts)
        return r


def held(c, i: int) -> list[int]:
    """The msg ids of partition `i` that consumer `c` holds unacked, in delivery order."""
    return [mid for mid, m in c.checked_out.items() if m.part == i]


def _apply_rules(meta: Meta, q, effects: list) -> None:
    """Bring the partition map up to date with the consumers and the leader time: members,
    a due rebalance, handoffs that are over (nothing held) or past their deadline."""
    from .delivery import return_msgs, update_or_remove   # delivery imports this module
    ps, cfg, now = q.parts, q.config, meta.timestamp
    # q.consumers is in attach order (a new consumer is added at the end, with a new seq)
    up = [c.key for c in q.consumers.values() if c.status == UP]
    rules.sync(ps, up, now, cfg.handoff_timeout)
    if rules.due(ps, now, cfg.rebalance_delay):
        rules.rebalance(ps, now, cfg.handoff_timeout)
    for i in rules.handing_off(ps) if ps.handoffs else ():
        p = ps.parts[i]
        owner = q.consumers.get(p.owner)
        mids = held(owner, i) if owner is not None else []
        if not mids:
            rules.complete(ps, i, forced=False)
        elif now >= p.deadline:
            # step 3 at the deadline: what is still unacked goes back, in order, redelivered
            return_msgs(q, owner, mids, False, False, effects)
            update_or_remove(meta, q, owner, effects)
            rules.complete(ps, i, forced=True)


def deliver(meta: Meta, q, effects: list) -> None:
    """Apply the partition rules, then give each consumer with credit messages from its
    active partitions, one at a time round robin over consumers and, per consumer, over its
    partitions (so a prefetch window spans partitions).  One `Deliver` per consumer."""
    from .delivery import hand_out   # delivery imports this module
    _apply_rules(meta, q, effects)
    ready, ps = q.ready, q.parts
    if not len(ready):
        return
    sends: dict = {}
    cursors = ps.cursor
    live = [c for c in q.consumers.values()
            if c.status == UP and c.credit > 0 and rules.owned(ps, c.key)]
    while live:
        nxt = []
        for c in live:
            mine = rules.owned(ps, c.key)
            start = cursors.get(c.key, 0)
            for step in range(len(mine)):
                i = mine[(start + step) % len(mine)]
                if ready.parts[i]:
                    cursors[c.key] = (start + step + 1) % len(mine)
                    hand_out(q, c, ready.pop_from(i), sends)
                    if c.credit > 0:
                        nxt.append(c)
                    break
        live = nxt
    for key, out in sends.items():
        effects.append(Deliver(key, tuple(out)))


def next_time(q) -> int | None:
    return rules.next_time(q.parts, q.config.rebalance_delay)
