"""Offset bookkeeping of the streaming source: which deliveries form which batch, what to ack.

Pure (no pyspark, no threads, no I/O).  `consumer.py` feeds deliveries in with `receive()` from its
I/O thread (under its own lock); `source.py` calls `ack_upto`, `admit` and `rows_between` from Spark's
`latestOffset` / `commit` / `partitions`.  This is the protocol of SPARK.md 3.3:

- every delivery belongs to a *session* (one AMQP channel); delivery tags are channel-scoped, so a
  tag is only ever acked in the session that received it, and a new session forgets the old one;
- `seq` is the connector offset, assigned when a delivery is admitted to a batch, monotonic for the
  whole query (also across sessions and restarts: it resumes from the checkpointed start);
- a range whose rows are not in the buffer belongs to a dead session (or a previous process):
  it is replayed as empty and the broker redelivers those messages.
"""

from __future__ import annotations

import bisect
import collections
import json
from itertools import accumulate, islice
from operator import itemgetter


Delivery = tuple  # (session, tag, row, size): see `delivery`
SESSION, TAG, ROW, SIZE = range(4)


def delivery(session: int, tag: int, row: tuple, size: int) -> Delivery:
    """One received message: its channel's session, delivery tag, row (the columns after
    `seq`, which is assigned only on admission) and size for maxBytesPerBatch.  A plain tuple of
    atomic values, like the row: Python's garbage collector stops tracking those, and the
    ledger holds a whole prefetch window of them (a NamedTuple stays tracked for good)."""
    return (session, tag, row, size)


def offset_json(seq: int) -> dict:
    """The offset Spark checkpoints: a dict of primitives with a stable key order."""
    return {"seq": int(seq)}


def offset_seq(offset: dict | str | None) -> int:
    if offset is None:
        return 0
    if isinstance(offset, str):
        offset = json.loads(offset)
    return int(offset.get("seq", 0))


class Ledger:
    """Buffer of admitted-but-unacked deliveries plus the queue of received, unadmitted ones.

    The admitted ones are two parallel lists, their seqs (increasing) and their deliveries, so
    admitting, acking and slicing a batch of 30,000 rows is a few list operations rather than a
    Python loop over the rows.  Every buffered delivery belongs to the current session:
    `new_session` empties the buffer and `receive` drops late deliveries of older ones."""

    def __init__(self) -> None:
        self.session = 0
        self.admitted_upto = 0
        self._seqs: list[int] = []
        self._held: list[Delivery] = []
        self.pending: collections.deque[Delivery] = collections.deque()
        # AvailableNow: how many more messages this query may admit (None = unbounded).
        self.remaining: int | None = None
        self.needs_recount = False

    def new_session(self) -> int:
        """A fresh channel: everything unacked on the old one is requeued by the broker, so drop it.
        Under AvailableNow the target must then be counted again (`needs_recount`): which of the
        last acks reached the broker before the connection died is unknown, so the rows that
        come back cannot be counted here."""
        self.session += 1
        if self.remaining is not None:
            self.needs_recount = True
        self._seqs.clear()
        self._held.clear()
        self.pending.clear()
        return self.session

    def receive(self, delivery: Delivery) -> bool:
        """A delivery arrived; ignored if it belongs to a session that is already gone."""
        if delivery[SESSION] != self.session:
            return False
        self.pending.append(delivery)
        return True

    def resume_from(self, start: int) -> None:
        """Spark's start offset: seq never goes backwards, even in a new process."""
        if self.admitted_upto < start:
            self.admitted_upto = start

    def ack_upto(self, seq: int) -> int | None:
        """Forget admitted rows with seq <= `seq`; return the delivery tag to ack with
        multiple=True (tags grow within a session: the last one covers the rest), or None when
        nothing is covered."""
        n = bisect.bisect_right(self._seqs, seq)
        if not n:
            return None
        tag = self._held[n - 1][TAG]
        del self._seqs[:n], self._held[:n]
        return tag

    def wanted(self, max_rows: int | None) -> int | None:
        """How many messages the next batch could take (None = as many as there are)."""
        caps = [c for c in (max_rows, self.remaining) if c is not None]
        return min(caps) if caps else None

    def admit(self, max_rows: int | None, max_bytes: int | None) -> int:
        """Move pending deliveries into the buffer under the caps; return the new end seq.
        The byte cap always lets one message through so a huge message cannot stall the query."""
        cap = self.wanted(max_rows)
        taken = len(self.pending) if cap is None else min(cap, len(self.pending))
        if max_bytes is not None and taken > 1:
            sizes = accumulate(map(itemgetter(SIZE), islice(self.pending, taken)))
            taken = max(1, bisect.bisect_right(list(sizes), max_bytes))
        if taken:
            popleft = self.pending.popleft
            self._held += [popleft() for _ in range(taken)]
            self._seqs += range(self.admitted_upto + 1, self.admitted_upto + taken + 1)
            self.admitted_upto += taken
        if self.remaining is not None:
            self.remaining = max(0, self.remaining - taken)
        return self.admitted_upto

    def rows_between(self, start: int, end: int) -> tuple[list[int], list[tuple]]:
        """The batch (start, end]: the seqs present and their rows (columns after `seq`); the
        missing ones (dead session, previous process) are simply absent, so an unknown range
        replays as empty."""
        self.resume_from(end)
        lo = bisect.bisect_right(self._seqs, start)
        hi = bisect.bisect_right(self._seqs, end, lo)
        return self._seqs[lo:hi], [d[ROW] for d in self._held[lo:hi]]

    def unacked(self) -> int:
        return len(self._seqs)
