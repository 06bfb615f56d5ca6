"""Random-log runner for the fifo property tests.

`run(config, ops)` turns abstract operations into concrete commands (choosing message
ids from the current state), applies them, follows every message through the effects
in a ledger, and checks the invariants after each step.  A failure raises AssertionError
with the step number; the recorded `Harness.log` can then be kept as a named scenario.
"""
from __future__ import annotations

from quorum.fifo import (DUPLICATE, OK, OUT_OF_SEQUENCE, REJECTED, Cancel, Checkout,
                         ConsumerDown, ConsumerKey, Credit, DeadLetter, Deliver, Dequeue,
                         DequeueReply, Discard, DlxSettle, Enqueue, NodeDown, NodeUp, Purge,
                         QueueConfig, Requeue, Return, Settle, Tick, Unsent, UpdateConfig,
                         active_consumer)

from .harness import Harness

KEYS = [ConsumerKey("c1", "ch-1", "node-a"), ConsumerKey("c2", "ch-2", "node-b"),
        ConsumerKey("c3", "ch-3", "node-a"), ConsumerKey("get", "ch-4", "node-b")]
PUBLISHERS = ["pub-1", "ch-2"]
NODES = ["node-a", "node-b"]


class Ledger:
    """Where every message should be, learnt only from replies and effects."""

    def __init__(self) -> None:
        self.alive: dict[int, None] = {}      # log index -> present in the queue
        self.held: dict[int, int] = {}        # dlx_id -> index (at-least-once)
        self.hi: dict[int, bool] = {}         # index -> high priority
        self.deliveries: dict[int, int] = {}  # index -> times delivered so far
        self.last_first: dict[bool, int] = {}  # level -> last first-delivered index
        self.out: dict[ConsumerKey, dict[int, int]] = {}   # consumer -> msg_id -> index
        self.max_limit: int | None = 0      # highest delivery limit seen (None: unlimited)
        self.unsent: set[int] = set()       # indexes given back unsent, not yet out again

    def delivered(self, key: ConsumerKey, msg_id: int, d, limit) -> None:
        idx = d.index
        assert idx in self.alive, f"delivered a message not in the queue: {idx}"
        for k, ids in self.out.items():
            assert idx not in ids.values(), f"{idx} delivered twice (also to {k})"
        assert d.acquired == self.deliveries.get(idx, 0), "delivery count mismatch"
        # a lowered limit is applied at the next return, as in RabbitMQ: compare with
        # the highest limit in force during the run
        assert self.max_limit is None or d.acquired <= self.max_limit, \
            "delivered past the delivery limit"
        if d.acquired == 0 and idx in self.unsent:  # back at the head, never counted
            self.unsent.discard(idx)
        elif d.acquired == 0:     # FIFO / monotonic per priority level for first deliveries
            level = self.hi[idx]
            assert idx > self.last_first.get(level, 0), "first deliveries out of order"
            self.last_first[level] = idx
        self.deliveries[idx] = d.acquired + 1
        self.out.setdefault(key, {})[msg_id] = idx

    def note_limit(self, limit: int | None) -> None:
        self.max_limit = None if limit is None or self.max_limit is None \
            else max(self.max_limit, limit)

    def gone(self, idx: int) -> None:
        assert idx in self.alive, f"message {idx} left twice"
        del self.alive[idx]


def _pick(ids: list[int], n: int) -> tuple[int, ...]:
    return tuple(ids[:n]) if n >= 0 else tuple(reversed(ids[:-n]))


def materialise(h: Harness, op: tuple, seqs: dict):
    """An abstract op -> a concrete command for the current state."""
    kind = op[0]
    q = h.q
    if kind == "enq":
        _, p, size, prio, ttl, resend = op
        pub = PUBLISHERS[p]
        if resend and seqs.get(pub):
            seq = max(1, seqs[pub] - resend + 1) if resend < 3 else seqs[pub] + 2
        else:
            seqs[pub] = seqs.get(pub, 0) + 1
            seq = seqs[pub]
        return Enqueue(pub, seq, size, b"", prio, ttl, True)
    if kind == "checkout":
        _, c, prefetch, prio, credited = op
        return Checkout(KEYS[c], prefetch, prio, credited)
    with_key = ("settle", "return", "discard", "requeue", "credit", "cancel", "unsent")
    key = KEYS[op[1]] if kind in with_key else None
    c = q.consumers.get(key) if key is not None else None
    ids = list(c.checked_out) if c is not None else []
    if kind in ("settle", "return", "discard"):
        chosen = _pick(ids, op[2]) if ids else (op[2] % 5,)
        return {"settle": Settle, "return": Return, "discard": Discard}[kind](key, chosen)
    if kind == "requeue":
        return Requeue(key, ids[0] if ids else 0, b"")
    if kind == "unsent":  # a channel's lookahead gives back its newest, in order
        return Unsent(key, tuple(sorted(ids)[-op[2]:]) if ids else (op[2],))
    if kind == "credit":
        dc = c.delivery_count if c is not None else 0
        return Credit(key, op[2], dc, op[3])
    if kind == "cancel":
        return Cancel(key, op[2])
    if kind == "dequeue":
        return Dequeue(KEYS[3], op[1])
    if kind == "down":
        pid = ["ch-1", "ch-2", "ch-3", "ch-4", "pub-1"][op[1]]
        seqs.pop(pid, None)        # a new process with that id would start again at 1
        return ConsumerDown(pid)
    if kind == "nodedown":
        return NodeDown(NODES[op[1]])
    if kind == "nodeup":
        return NodeUp(NODES[op[1]])
    if kind == "purge":
        return Purge()
    if kind == "tick":
        return Tick()
    if kind == "dlxsettle":
        return DlxSettle(tuple(list(q.dlx.held)[:op[1]]))
    if kind == "config":
        return UpdateConfig(op[1])
    raise AssertionError(op)


def _account(h: Harness, led: Ledger, cmd, a, before_ready: list[int], pre_blocked: bool,
             was_alo: bool) -> None:
    meta_index = h.index
    limit = h.q.config.delivery_limit
    if isinstance(cmd, Enqueue):
        if a.reply == OK:
            led.alive[meta_index] = None
            led.hi[meta_index] = cmd.priority is not None and cmd.priority > 4
            if not h.q.config.drops_head:
                assert not pre_blocked, "accepted while publishing is blocked"
        elif a.reply == REJECTED:
            assert pre_blocked, "rejected while publishing is not blocked"
        else:
            assert a.reply in (DUPLICATE, OUT_OF_SEQUENCE)
    if isinstance(cmd, Unsent):
        c = h.q.consumers.get(cmd.consumer)
        for mid in cmd.msg_ids:
            idx = led.out.get(cmd.consumer, {}).get(mid)
            if idx is not None and (c is None or mid not in c.checked_out):
                del led.out[cmd.consumer][mid]
                led.deliveries[idx] -= 1
                led.unsent.add(idx)
    if isinstance(cmd, (Settle,)):
        for mid in cmd.msg_ids:
            idx = led.out.get(cmd.consumer, {}).pop(mid, None)
            if idx is not None:
                led.gone(idx)
    if isinstance(cmd, (Return, Discard, Requeue, Cancel, ConsumerDown, NodeDown)):
        _returned(h, led, cmd)
    if isinstance(cmd, Dequeue) and isinstance(a.reply, DequeueReply) and a.reply.delivery:
        d = a.reply.delivery
        led.delivered(cmd.consumer, d.msg_id, d, limit)
        if cmd.settled:
            led.out[cmd.consumer].pop(d.msg_id)
            led.gone(d.index)
    if isinstance(cmd, Purge):
        assert a.reply == len(before_ready)
        for idx in before_ready:
            led.gone(idx)
    if isinstance(cmd, UpdateConfig) and was_alo and not h.q.config.at_least_once:
        for idx in led.held.values():      # documented: held dead letters are deleted
            led.gone(idx)
        led.held.clear()
    if isinstance(cmd, DlxSettle):
        for i in cmd.dlx_ids:
            led.gone(led.held.pop(i))
    for e in a.effects:
        if isinstance(e, Deliver):
            for d in e.msgs:
                led.delivered(e.consumer, d.msg_id, d, limit)
        elif isinstance(e, DeadLetter):
            for m in e.msgs:
                if m.dlx_id is not None:
                    led.held[m.dlx_id] = m.index
                else:
                    led.gone(m.index)


def _returned(h: Harness, led: Ledger, cmd) -> None:
    """Messages the machine took back from consumers: forget their msg ids."""
    q = h.q
    for key in list(led.out):
        c = q.consumers.get(key)
        live_ids = c.checked_out if c is not None else {}
        for mid, idx in list(led.out[key].items()):
            if mid not in live_ids:
                del led.out[key][mid]
                if isinstance(cmd, Requeue) and key == cmd.consumer and mid == cmd.msg_id:
                    # same message, new log index
                    led.gone(idx)
                    led.alive[h.index] = None
                    led.hi[h.index] = False
                    led.deliveries[h.index] = led.deliveries.pop(idx)


def check(h: Harness, led: Ledger) -> None:
    q = h.q
    where = [m.index for m in (*q.ready.returns, *q.ready.hi, *q.ready.lo)]
    for c in q.consumers.values():
        where += [m.index for m in c.checked_out.values()]
        assert c.credit >= 0
        if not c.credited and not c.once:
            assert c.credit == 0 or len(c.checked_out) + c.credit <= c.prefetch, "prefetch"
        if c.status == "up" and c.credit > 0 and not c.once:
            assert c.in_sq, "a consumer with credit is not in the service queue"
        if c.in_sq:
            assert len(q.ready) == 0 or c.status != "up" or c.credit == 0, \
                "ready messages left while a consumer can take them"
    where += [m.index for _r, m in q.dlx.held.values()]
    assert len(where) == len(set(where)), "a message is in two places"
    assert sorted(where) == sorted(led.alive), "the queue lost or invented messages"
    assert q.live.live() == sorted(where), "live index tracker out of step"
    assert q.ready.bytes == sum(m.size for m in (*q.ready.returns, *q.ready.hi, *q.ready.lo))
    assert len(q.ready) == len(q.ready.returns) + len(q.ready.hi) + len(q.ready.lo) + sum(
        len(level) for level in q.ready.strict.values()), "ready count out of step"
    assert q.checked_bytes == sum(m.size for c in q.consumers.values()
                                  for m in c.checked_out.values())
    for key, ids in led.out.items():
        c = q.consumers.get(key)
        assert sorted(ids) == sorted(c.checked_out if c is not None else {})
    cfg = q.config
    if cfg.max_length is not None and cfg.drops_head:
        assert len(q.ready) + len(q.dlx) <= cfg.max_length
    if cfg.max_bytes is not None and cfg.drops_head:
        assert q.ready.bytes + q.dlx.bytes <= cfg.max_bytes
    if cfg.single_active_consumer:
        active = [c for c in q.consumers.values() if c.status in ("up", "quiescing")]
        assert len(active) <= 1 and (not active or active[0] is active_consumer(q))
        # a consumer may wait under the key of its own cancelled self (unacked left)
        assert all(w.key not in q.consumers or q.consumers[w.key].status == "cancelled"
                   for w in q.waiting)
    assert len(q.sq) == sum(1 for c in q.consumers.values() if c.in_sq)


def _reject_publish_blocked(q, blocked: bool) -> bool:
    """The model of overflow reject-publish (rabbit_fifo): blocked once over the limits,
    unblocked only at or below 80% of them (rounded down)."""
    cfg = q.config
    if (cfg.max_length is None and cfg.max_bytes is None) or cfg.drops_head:
        return False
    n, b = len(q.ready) + len(q.dlx), q.ready.bytes + q.dlx.bytes
    if not blocked:
        return ((cfg.max_length is not None and n > cfg.max_length)
                or (cfg.max_bytes is not None and b > cfg.max_bytes))
    soft = ((cfg.max_length is None or n <= int(cfg.max_length * 0.8))
            and (cfg.max_bytes is None or b <= int(cfg.max_bytes * 0.8)))
    return not soft


def run(config: QueueConfig, ops: list[tuple]) -> tuple[Harness, list]:
    h = Harness(config, ts=0)
    blocked = False
    led = Ledger()
    seqs: dict = {}
    applied = []
    led.note_limit(h.q.config.delivery_limit)
    for step, (dt, op) in enumerate(ops):
        cmd = materialise(h, op, seqs)
        before_ready = [m.index for m in (*h.q.ready.returns, *h.q.ready.hi, *h.q.ready.lo)]
        blocked = _reject_publish_blocked(h.q, blocked)
        was_alo = h.q.config.at_least_once
        a = h(cmd, h.ts + dt)
        led.note_limit(h.q.config.delivery_limit)
        applied.append(a)
        try:
            _account(h, led, cmd, a, before_ready, blocked, was_alo)
            check(h, led)
        except AssertionError as e:
            raise AssertionError(f"step {step}: {cmd}: {e}") from e
    return h, applied
