"""A quorum queue consumer's lookahead: messages checked out to it beyond its prefetch, held on
its node until its channel has room for them.

The fifo gives a consumer more messages only once its settles have gone through the log (the
Settle committed, fsynced and applied: about two Raft driver passes under load). With credit
equal to the prefetch, a consumer that acks at once waits that long for every refill, so at
prefetch 500 the consumer path was capped by that cycle. A consumer that is alone on the queue
checks out its prefetch P plus `extra(P)`; what its channel cannot take yet waits here and goes
out as soon as an ack makes room, without waiting for the log. The client never has more than P
unacknowledged messages.

Held messages were never sent. When the consumer is cancelled or its channel closes they go
back with `fifo.Unsent`: to the head of the queue, not counted as deliveries (no redelivered
flag, no x-delivery-count). A second consumer on the queue ends the lookahead, because the
other consumer must not wait behind messages held here: the consumer checks out with P again
and gives back what it holds. Only a node that dies takes held messages with it; the fifo then
returns them as it returns everything that node's consumers had, counted.

The effect runner also holds here, for any consumer, what its connection cannot take yet (32 MiB
of output unsent: a consumer subscribing to a deep queue is checked out its whole window at
once); that goes out when the connection's writer has drained.

Only the fifo's `Delivery` records are held (msg id, log index, counts), not bodies: the
bodies stay in the log until they are sent, so a stalled consumer of large messages costs
no more memory here than a small one's.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from quorum import fifo

__all__ = ["Lookahead", "EXTRA_MAX"]

EXTRA_MAX = 1000  # held messages per consumer at most (a prefetch's worth, up to this)


def extra(prefetch: int) -> int:
    return min(prefetch, EXTRA_MAX)


class Lookahead:
    """Which consumers have a lookahead (with their prefetch), and the fifo deliveries held
    for them in order. The effect runner fills and drains it; the queue asks it for the credit to
    check out with and takes back what a leaving consumer holds."""

    __slots__ = ("_prefetch", "_held", "held_count")

    def __init__(self) -> None:
        self._prefetch: dict[fifo.ConsumerKey, int] = {}
        self._held: dict[fifo.ConsumerKey, deque[fifo.Delivery]] = {}
        self.held_count = 0  # over every consumer: ready in the queue's counts, not unacked

    def credit(self, key: fifo.ConsumerKey, prefetch: int, alone: bool) -> int:
        """The fifo credit `key` checks out with: its prefetch, plus the lookahead when it
        is alone on the queue and has a prefetch (0 is unlimited: nothing to add)."""
        if prefetch and alone:
            self._prefetch[key] = prefetch
            return prefetch + extra(prefetch)
        self._prefetch.pop(key, None)
        return prefetch

    @property
    def active(self) -> bool:
        return bool(self._prefetch)

    def keys(self) -> list[fifo.ConsumerKey]:
        return list(self._prefetch)

    def prefetch(self, key: fifo.ConsumerKey) -> int | None:
        """`key`'s prefetch while it has a lookahead."""
        return self._prefetch.get(key)

    def holds(self, key: fifo.ConsumerKey) -> bool:
        return key in self._held

    def hold(self, key: fifo.ConsumerKey, deliveries: Iterable[fifo.Delivery]) -> None:
        """Keep `deliveries` (in order, after what `key` holds already) until there is
        room."""
        q = self._held.get(key)
        if q is None:
            q = self._held[key] = deque()
        n = len(q)
        q.extend(deliveries)
        self.held_count += len(q) - n

    def hold_first(self, key: fifo.ConsumerKey, deliveries: list | tuple) -> None:
        """Put back, in order and before what `key` holds, deliveries taken but not sent."""
        q = self._held.get(key)
        if q is None:
            q = self._held[key] = deque()
        q.extendleft(reversed(deliveries))
        self.held_count += len(deliveries)

    def take(self, key: fifo.ConsumerKey, room: int,
             still_out: dict | None) -> list[fifo.Delivery]:
        """Up to `room` held deliveries of `key`, oldest first, skipping what the fifo has
        taken back meanwhile (`still_out`: the msg ids it has checked out to `key`)."""
        q = self._held.get(key)
        if q is None:
            return []
        out: list[fifo.Delivery] = []
        n = len(q)
        while q and len(out) < room:
            d = q.popleft()
            if still_out is not None and d.msg_id in still_out:
                out.append(d)
        if not q or still_out is None:
            del self._held[key]
            q.clear()
        self.held_count -= n - len(q)
        return out

    def end(self, key: fifo.ConsumerKey) -> tuple[int, ...]:
        """`key` has no lookahead any more: the fifo msg ids it held, to give back."""
        self._prefetch.pop(key, None)
        q = self._held.pop(key, None)
        if not q:
            return ()
        self.held_count -= len(q)
        return tuple(d.msg_id for d in q)
