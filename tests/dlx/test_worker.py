"""DlxWorker against a fake port: prefetch, confirms from every target, retries, settles."""

from __future__ import annotations

import pytest

from dlx.worker import DlxWorker


class FakePort:
    """Targets answer at once (ok/refuse) or later (`hold=True`); routing is a dict."""

    def __init__(self) -> None:
        self.now = 0
        self.held: set[int] = set()
        self.routes: dict[str, list[str]] | None = {"k": ["t1"]}   # None: exchange missing
        self.cycles: list[str] = []
        self.full: set[str] = set()
        self.refuse: set[str] = set()
        self.hold = False
        self.pending: list = []           # (target, body, callback) when hold
        self.accepted: list[tuple[str, str]] = []
        self.settled: list[int] = []
        self.timers: list[int] = []
        self.dlx: str | None = "dlx"

    def now_ms(self): return self.now
    def is_held(self, i): return i in self.held

    def prepare(self, reason, message):
        return None if self.dlx is None else (reason, message)

    def route(self, prepared):
        if self.routes is None:
            raise LookupError("no exchange")
        return list(self.routes.get("k", [])), list(self.cycles)

    def has_room(self, q): return q not in self.full

    def publish(self, q, prepared, cb):
        if q == "gone":
            return False
        if self.hold:
            self.pending.append((q, prepared[1], cb))
        elif q in self.refuse:
            cb(False)
        else:
            self.accepted.append((q, prepared[1]))
            cb(True)
        return True

    def settle(self, ids):
        self.settled.extend(ids)
        self.held.difference_update(ids)

    def schedule(self, at): self.timers.append(at)


def _worker(port, n, prefetch=32):
    w = DlxWorker(port, prefetch=prefetch, retry_ms=500)
    port.held.update(range(1, n + 1))
    w.load([(i, "rejected", f"m{i}") for i in range(1, n + 1)])
    return w


def test_all_confirmed_are_settled_in_order():
    p = FakePort()
    w = _worker(p, 5)
    assert p.settled == [1, 2, 3, 4, 5]
    assert [b for _, b in p.accepted] == ["m1", "m2", "m3", "m4", "m5"]
    assert len(w) == 0 and p.timers == []


def test_prefetch_limits_messages_in_flight():
    p = FakePort()
    p.hold = True
    w = _worker(p, 10, prefetch=3)
    assert [b for _, b, _ in p.pending] == ["m1", "m2", "m3"]
    _, _, cb = p.pending.pop(0)
    cb(True)
    assert p.settled == [1]
    assert [b for _, b, _ in p.pending] == ["m2", "m3", "m4"]
    assert len(w) == 9


def test_settles_only_when_every_target_confirmed():
    p = FakePort()
    p.routes = {"k": ["t1", "t2"]}
    p.hold = True
    _worker(p, 1)
    (q1, _, cb1), (q2, _, cb2) = p.pending
    cb1(True)
    assert p.settled == []
    cb2(True)
    assert p.settled == [1]


def test_refused_target_is_retried_alone_on_the_poll():
    p = FakePort()
    p.routes = {"k": ["t1", "t2"]}
    p.refuse = {"t2"}
    w = _worker(p, 1)
    assert p.settled == [] and p.timers == [500]
    assert p.accepted == [("t1", "m1")]
    p.refuse.clear()
    p.now = 500
    w.on_timer(500)
    assert p.accepted == [("t1", "m1"), ("t2", "m1")]   # t1 not sent twice
    assert p.settled == [1]


def test_full_target_is_not_published_until_it_has_room():
    p = FakePort()
    p.full = {"t1"}
    w = _worker(p, 2)
    assert p.accepted == [] and p.settled == [] and len(w) == 2
    w.on_timer(500)
    assert p.accepted == []          # still full: nothing offered
    p.full.clear()
    w.on_timer(1000)
    assert p.settled == [1, 2]


def test_missing_exchange_keeps_messages_until_it_exists():
    p = FakePort()
    p.routes = None
    w = _worker(p, 3)
    assert p.settled == [] and len(w) == 3 and p.timers
    p.routes = {"k": ["t1"]}
    w.on_timer(p.timers[-1])
    assert p.settled == [1, 2, 3]


def test_no_route_keeps_and_all_cycles_drop():
    p = FakePort()
    p.routes = {}
    w = _worker(p, 1)
    assert p.settled == [] and len(w) == 1
    p.cycles = ["src"]
    w.on_timer(500)
    assert p.settled == [1] and p.accepted == []


def test_no_dlx_configured_keeps_them():
    p = FakePort()
    p.dlx = None
    w = _worker(p, 2)
    assert p.settled == [] and len(w) == 2
    p.dlx = "dlx"
    w.on_timer(500)
    assert p.settled == [1, 2]


def test_deleted_target_counts_as_refusal():
    p = FakePort()
    p.routes = {"k": ["gone"]}
    w = _worker(p, 1)
    assert p.settled == [] and len(w) == 1 and p.timers


def test_messages_no_longer_held_are_forgotten():
    """Strategy switched to at-most-once: the fifo dropped them; the worker follows."""
    p = FakePort()
    p.hold = True
    w = _worker(p, 4, prefetch=2)
    p.held.clear()
    for _, _, cb in list(p.pending):
        cb(True)
    w.pump()
    assert len(w) == 0


def test_add_is_idempotent_and_stop_answers_nothing():
    p = FakePort()
    p.hold = True
    w = _worker(p, 1)
    w.add(1, "rejected", "m1")
    w.pump()
    assert len(p.pending) == 1
    w.stop()
    p.pending[0][2](True)
    assert p.settled == [] and len(w) == 0


def test_late_answer_after_retry_does_not_double_count():
    p = FakePort()
    p.hold = True
    w = _worker(p, 1)
    _, _, cb = p.pending.pop()
    cb(False)
    assert p.timers == [500]
    w.on_timer(500)
    _, _, cb2 = p.pending.pop()
    cb2(True)
    assert p.settled == [1]


@pytest.mark.parametrize("n,prefetch", [(1, 1), (50, 7), (100, 32)])
def test_everything_eventually_settled_once(n, prefetch):
    p = FakePort()
    p.routes = {"k": ["t1", "t2"]}
    p.hold = True
    w = _worker(p, n, prefetch=prefetch)
    turn = 0
    while p.pending:
        q, body, cb = p.pending.pop(0)
        turn += 1
        cb(turn % 3 != 0)   # every third answer is a refusal
        if not p.pending and w.retry_at is not None:
            w.on_timer(w.retry_at)
    assert sorted(p.settled) == list(range(1, n + 1))
    assert len(p.settled) == n and len(w) == 0


def test_confirm_that_never_comes_is_resent_after_the_timeout():
    p = FakePort()
    p.hold = True
    w = DlxWorker(p, retry_ms=500, confirm_timeout_ms=2000)
    p.held.add(1)
    w.load([(1, "expired", "m1")])
    _, _, lost = p.pending.pop()
    assert p.timers == [500]          # polled while a confirm is outstanding
    p.now = 500
    w.on_timer(500)
    assert p.pending == []            # not yet timed out
    p.now = 2500
    w.on_timer(p.timers[-1])
    _, _, cb = p.pending.pop()        # resent
    lost(True)                        # the old answer arrives late: ignored
    assert p.settled == []
    cb(True)
    assert p.settled == [1]


def test_synchronous_confirms_beyond_prefetch_do_not_stall():
    """Targets that confirm at once (transient classic queues) free slots inside pump."""
    p = FakePort()
    w = _worker(p, 7, prefetch=2)
    assert p.settled == [1, 2, 3, 4, 5, 6, 7] and len(w) == 0


def test_refused_ones_are_not_resent_while_fresh_ones_flow():
    """One target refuses m1 at once, the rest confirm at once: m1 is offered once per poll."""
    p = FakePort()
    sent = []
    publish = p.publish

    def counting(q, prepared, cb):
        sent.append(prepared[1])
        if prepared[1] == "m1":
            cb(False)
            return True
        return publish(q, prepared, cb)

    p.publish = counting
    w = _worker(p, 50, prefetch=2)
    assert sent.count("m1") == 1 and p.settled == list(range(2, 51))
    w.on_timer(p.timers[-1])
    assert sent.count("m1") == 2 and len(w) == 1
