"""Dead lettering inside the quorum queue state machine (like rabbit_fifo_dlx).

At-most-once (the default): a dead message leaves the queue at once and a `DeadLetter`
effect asks the leader to republish it to the dead-letter exchange.  No DLX configured:
the message is dropped.  At-least-once (dead-letter-strategy at-least-once, overflow
reject-publish and a DLX): the message stays here, still counted against the queue's
limits, until the DLX worker (`dlx/worker.py`) settles it with `DlxSettle` after every
target queue confirmed it.  Used by `delivery.py` and `machine.py`.
"""
from __future__ import annotations

from .commands import QueueConfig
from .effects import DeadLetter, DeadMsg
from .messages import LiveIndexes, Message

__all__ = ["DlxState"]


class DlxState:
    """Messages held for at-least-once dead lettering, in discard order."""
    __slots__ = ("held", "next_id", "bytes")

    def __init__(self) -> None:
        self.held: dict[int, tuple[str, Message]] = {}
        self.next_id = 1
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.held)

    def discard(self, msgs: list[Message], reason: str, cfg: QueueConfig,
                live: LiveIndexes, effects: list) -> None:
        """Dead-letter `msgs` (already removed from ready/checked-out) for `reason`."""
        if not msgs:
            return
        if cfg.dead_letter_exchange is None:
            for m in msgs:
                live.remove(m.index)
            return
        if cfg.at_least_once:
            dead = []
            for m in msgs:
                i = self.next_id
                self.next_id += 1
                self.held[i] = (reason, m)
                self.bytes += m.size
                dead.append(DeadMsg(m.index, m.size, m.acquired, m.persistent, i))
        else:
            dead = [DeadMsg(m.index, m.size, m.acquired, m.persistent, None) for m in msgs]
            for m in msgs:
                live.remove(m.index)
        effects.append(DeadLetter(reason, tuple(dead), cfg.dead_letter_exchange,
                                  cfg.dead_letter_routing_key, cfg.at_least_once))

    def settle(self, ids: tuple[int, ...], live: LiveIndexes) -> int:
        n = 0
        for i in ids:
            entry = self.held.pop(i, None)
            if entry is not None:
                self.bytes -= entry[1].size
                live.remove(entry[1].index)
                n += 1
        return n

    def drop_all(self, live: LiveIndexes) -> None:
        """Strategy switched away from at-least-once: held messages are deleted (doc)."""
        for _reason, m in self.held.values():
            live.remove(m.index)
        self.held.clear()
        self.bytes = 0

    def pending(self) -> list[tuple[int, str, Message]]:
        """What a (new) DLX worker must republish, in discard order."""
        return [(i, r, m) for i, (r, m) in self.held.items()]

    def to_wire(self) -> list:
        return [[[i, r, m.to_wire()] for i, (r, m) in self.held.items()], self.next_id]

    @classmethod
    def from_wire(cls, w: list) -> "DlxState":
        d = cls()
        for i, r, m in w[0]:
            msg = Message.from_wire(m)
            d.held[i] = (r, msg)
            d.bytes += msg.size
        d.next_id = w[1]
        return d
