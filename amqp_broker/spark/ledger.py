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

import collections
import json


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
    """Buffer of admitted-but-unacked deliveries plus the queue of received, unadmitted ones."""

    def __init__(self) -> None:
        self.session = 0
        self.admitted_upto = 0
        self.buffer: collections.OrderedDict[int, Delivery] = collections.OrderedDict()
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
        self.buffer.clear()
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
        multiple=True, or None when nothing of the current session is covered."""
        tag = None
        while self.buffer:
            first = next(iter(self.buffer))
            if first > seq:
                break
            delivery = self.buffer.pop(first)
            if delivery[SESSION] == self.session:
                tag = delivery[TAG] if tag is None else max(tag, delivery[TAG])
        return tag

    def wanted(self, max_rows: int | None) -> int | None:
        """How many messages the next batch could take (None = as many as there are)."""
        caps = [c for c in (max_rows, self.remaining) if c is not None]
        return min(caps) if caps else None

    def admit(self, max_rows: int | None, max_bytes: int | None) -> int:
        """Move pending deliveries into the buffer under the caps; return the new end seq.
        The byte cap always lets one message through so a huge message cannot stall the query."""
        cap = self.wanted(max_rows)
        taken = size = 0
        while self.pending and (cap is None or taken < cap):
            nxt = self.pending[0]
            if max_bytes is not None and taken and size + nxt[SIZE] > max_bytes:
                break
            self.pending.popleft()
            self.admitted_upto += 1
            self.buffer[self.admitted_upto] = nxt
            taken += 1
            size += nxt[SIZE]
        if self.remaining is not None:
            self.remaining = max(0, self.remaining - taken)
        return self.admitted_upto

    def rows_between(self, start: int, end: int) -> tuple[list[int], list[tuple]]:
        """The batch (start, end]: the seqs present and their rows (columns after `seq`); the
        missing ones (dead session, previous process) are simply absent, so an unknown range
        replays as empty."""
        self.resume_from(end)
        seqs, rows = [], []
        get = self.buffer.get
        for seq in range(start + 1, end + 1):
            delivery = get(seq)
            if delivery is not None:
                seqs.append(seq)
                rows.append(delivery[ROW])
        return seqs, rows

    def unacked(self) -> int:
        return len(self.buffer)
