"""Test helpers for tests/fifo: a queue plus a log position and a leader clock.

`h(cmd)` applies one command at the next index and returns the `Applied`; every command
applied is kept in `h.log` so tests can replay it (snapshot checks)."""
from __future__ import annotations

from quorum.fifo import (Applied, ConsumerKey, Deliver, Enqueue, Meta, QueueConfig, apply,
                         init)

C1 = ConsumerKey("ctag-1", "ch-1", "node-a")
C2 = ConsumerKey("ctag-2", "ch-2", "node-b")
C3 = ConsumerKey("ctag-3", "ch-3", "node-c")


class Harness:
    def __init__(self, config: QueueConfig | None = None, ts: int = 1000) -> None:
        self.config = config or QueueConfig(name="q")
        self.created = ts
        self.q = init(self.config, ts)
        self.index = 0
        self.ts = ts
        self.log: list[tuple[Meta, object]] = []
        self.seq = 0

    def __call__(self, cmd, ts: int | None = None) -> Applied:
        if ts is not None:
            self.ts = ts
        self.index += 1
        meta = Meta(self.index, 1, self.ts)
        self.log.append((meta, cmd))
        return apply(meta, cmd, self.q)

    def publish(self, n: int = 1, size: int = 10, publisher: str | None = "pub",
                ts: int | None = None, **kw) -> list[Applied]:
        out = []
        for _ in range(n):
            self.seq += 1
            out.append(self(Enqueue(publisher, self.seq if publisher else None, size,
                                    b"m%d" % self.seq, **kw), ts))
        return out


def effects(applied: Applied | list[Applied], cls) -> list:
    if isinstance(applied, Applied):
        applied = [applied]
    return [e for a in applied for e in a.effects if isinstance(e, cls)]


def delivered(applied: Applied | list[Applied], key: ConsumerKey | None = None) -> list:
    """Deliveries in effect order, optionally for one consumer."""
    return [d for e in effects(applied, Deliver) if key is None or e.consumer == key
            for d in e.msgs]
