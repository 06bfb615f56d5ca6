"""Publisher-confirm bookkeeping for one channel: sequence numbers, pending counts, coalescing.

Used by `channel.Channel` once the client sent confirm.select. Each publish gets the next sequence
number (from 1). A message routed to k queues is confirmed when all k accepted it (some accept at
once, persistent messages in durable queues only after the journal fsync); one rejection makes it
a nack. Outcomes are buffered and `flush()` (called once per writer wake-up) turns them into as
few basic.ack frames as possible: a contiguous run of acks becomes one `multiple=true` ack.
Never both ack and nack one tag; never confirm a tag twice.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["ConfirmTracker"]

# send(delivery_tag, multiple, ack)
SendConfirm = Callable[[int, bool, bool], None]


class ConfirmTracker:
    __slots__ = ("_seq", "_waiting", "_done", "_base", "_sent_above", "_send", "_on_ready",
                 "_counters")

    def __init__(self, send: SendConfirm, on_ready: Callable[[], None],
                 counters: Any = None) -> None:
        self._seq = 0
        self._waiting: dict[int, list] = {}  # seq -> [queues still to accept, ok so far]
        self._done: dict[int, bool] = {}  # decided but not yet sent: seq -> ack?
        self._base = 0  # every seq <= _base has been sent to the client
        self._sent_above: set[int] = set()  # sent individually, above _base
        self._send = send
        self._on_ready = on_ready  # asks the session for a flush
        self._counters = counters  # server.counters.Counters: messages_confirmed (acks sent)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @property
    def last_seq(self) -> int:
        return self._seq

    def decide_now(self, seq: int, ack: bool) -> None:
        """The message's outcome is known at publish time (unroutable, all in-memory queues)."""
        if not self._done:
            self._on_ready()
        self._done[seq] = ack

    def wait_for(self, seq: int, count: int, ok: bool = True) -> None:
        """`count` queues still have to accept `seq` (each will call `settle`)."""
        self._waiting[seq] = [count, ok]

    def settle(self, seq: int, ok: bool) -> None:
        """One queue accepted (ok) or rejected the message `seq`."""
        entry = self._waiting.get(seq)
        if entry is None:
            return
        entry[0] -= 1
        if not ok:
            entry[1] = False
        if entry[0] <= 0:
            del self._waiting[seq]
            self.decide_now(seq, entry[1])

    def fail_all(self) -> None:
        """Nack everything still waiting (e.g. a queue was deleted or the store failed)."""
        for seq in list(self._waiting):
            del self._waiting[seq]
            self.decide_now(seq, False)

    def has_unconfirmed(self) -> bool:
        return bool(self._waiting or self._done)

    def flush(self) -> None:
        """Send the buffered outcomes, coalescing contiguous acks into one multiple=true ack."""
        if not self._done:
            return
        done, self._done = self._done, {}
        if self._counters is not None:
            self._counters.messages_confirmed += sum(done.values())
        run_hi = 0
        run_n = 0
        for seq in sorted(done):
            ack = done[seq]
            if seq == self._base + 1:
                if ack:
                    run_hi, run_n = seq, run_n + 1
                else:
                    if run_n:
                        self._send(run_hi, run_n > 1, True)
                        run_n = 0
                    self._send(seq, False, False)
                self._base = seq
                if self._sent_above and self._base + 1 in self._sent_above:
                    # Close the run before skipping tags already confirmed one by one, so a
                    # multiple=true ack never covers an earlier individual confirm.
                    if run_n:
                        self._send(run_hi, run_n > 1, True)
                        run_n = 0
                    while self._base + 1 in self._sent_above:
                        self._base += 1
                        self._sent_above.discard(self._base)
                continue
            if run_n:
                self._send(run_hi, run_n > 1, True)
                run_n = 0
            self._send(seq, False, ack)
            self._sent_above.add(seq)
        if run_n:
            self._send(run_hi, run_n > 1, True)
