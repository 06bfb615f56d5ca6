"""The shared steps of the quorum queue machine: hand ready messages to consumers,
expire, enforce length limits, take messages back, switch the single active consumer,
and the timer / release-cursor bookkeeping done after every command.

Called by the command handlers in `machine.py`; everything here mutates the
`QueueState` in place and appends effects to the list it is given.
"""
from __future__ import annotations

from .commands import ConsumerKey, Meta
from .consumers import QUIESCING, SUSPECTED, UP, Consumer
from .effects import ConsumerActive, Deliver, Delivery, ReleaseCursor, SetTimer
from .messages import Message
from . import partitions as rules
from .state import QueueState, active_consumer

__all__ = ["deliver", "hand_out", "enforce_limits", "over_limit", "update_publish_block", "return_msgs", "unsend", "complete",
           "update_or_remove", "activate_next", "sort_waiting", "finish", "delivery_of",
           "is_unused", "remove_consumer", "add_waiting", "drop_waiting", "next_timer"]


def delivery_of(msg_id: int, m: Message) -> Delivery:
    return Delivery(msg_id, m.index, m.size, m.acquired, m.delivery_failed)


def deliver(meta: Meta, q: QueueState, effects: list) -> None:
    """Give ready messages to consumers in service-queue order until either runs out.

    Expired messages are only found at the head, as in rabbit_fifo: cost O(1) per
    delivery.  One `Deliver` per consumer, in the order consumers were first served.
    Called after nearly every command: the common "nothing to do" cases return early.
    A partitioned queue applies its partition rules and delivers by partition instead."""
    if q.parts is not None:
        deliver_partitioned(meta, q, effects)
        return
    ready, sq = q.ready, q.sq
    head = ready.peek()
    if head is None or (head.expiry is None and not sq):
        return  # nothing ready, or nobody waiting and nothing at the head to expire
    ts = meta.timestamp
    cons = q.consumers
    sends: dict | None = None
    expired: list[Message] | None = None
    while True:
        while head is not None and head.expiry is not None and ts >= head.expiry:
            if expired is None:
                expired = []
            expired.append(ready.pop())
            head = ready.peek()
        if head is None:
            break
        key = sq.pop()
        if key is None:
            break
        c = cons.get(key)
        if c is None:
            continue
        c.in_sq = False
        if c.credit <= 0 or c.status != UP:
            continue
        if sends is None:
            sends = {}
        hand_out(q, c, ready.pop(), sends)
        if c.credit > 0:
            sq.push(c)
        head = ready.peek()
    if expired:
        q.dlx.discard(expired, "expired", q.config, q.live, effects)
    if sends:
        for key, out in sends.items():
            effects.append(Deliver(key, tuple(out)))


def hand_out(q: QueueState, c: Consumer, msg: Message, sends: dict) -> None:
    """Check `msg` out to `c` (one credit) and add its `Delivery` to `sends[c.key]`."""
    mid = c.next_msg_id
    c.next_msg_id = mid + 1
    c.checked_out[mid] = msg
    c.credit -= 1
    c.delivery_count += 1
    q.checked_bytes += msg.size
    out = sends.get(c.key)
    if out is None:
        out = sends[c.key] = []
    out.append(Delivery(mid, msg.index, msg.size, msg.acquired, msg.delivery_failed))


def over_limit(q: QueueState) -> bool:
    """Ready plus held dead-lettered messages above max-length / max-length-bytes."""
    cfg = q.config
    if cfg.max_length is None and cfg.max_bytes is None:
        return False
    if cfg.max_length is not None and len(q.ready) + len(q.dlx) > cfg.max_length:
        return True
    return cfg.max_bytes is not None and q.ready.bytes + q.dlx.bytes > cfg.max_bytes


_LOW_LIMIT = 0.8  # rabbit_fifo ?LOW_LIMIT: reject-publish lifts below 80% of the limits


def update_publish_block(q: QueueState) -> bool:
    """overflow reject-publish as rabbit_fifo's evaluate_limit: publishing is blocked once the
    queue is over its limits (so it may hold max-length + 1) and stays blocked until ready plus
    held dead letters fall to 80% of them (rounded down). Returns the (new) blocked state;
    called at the end of every command (`finish`) and before an enqueue."""
    cfg = q.config
    if cfg.max_length is None and cfg.max_bytes is None or cfg.drops_head:
        q.publish_blocked = False
        return False
    if not q.publish_blocked:
        q.publish_blocked = over_limit(q)
    elif _below_soft_limit(q):
        q.publish_blocked = False
    return q.publish_blocked


def _below_soft_limit(q: QueueState) -> bool:
    cfg = q.config
    if cfg.max_length is not None and len(q.ready) + len(q.dlx) > int(cfg.max_length * _LOW_LIMIT):
        return False
    return cfg.max_bytes is None or q.ready.bytes + q.dlx.bytes <= int(cfg.max_bytes * _LOW_LIMIT)


def enforce_limits(q: QueueState, effects: list) -> None:
    """overflow drop-head (and reject-publish-dlx): drop from the head until within limits."""
    cfg = q.config
    if (cfg.max_length is None and cfg.max_bytes is None) or not cfg.drops_head:
        return  # the common case, checked first: no limit at all
    dropped = []
    while over_limit(q):
        m = q.ready.pop()
        if m is None:
            break
        dropped.append(m)
    q.dlx.discard(dropped, "maxlen", q.config, q.live, effects)


def return_msgs(q: QueueState, c: Consumer, msg_ids, failed: bool, tail: bool,
                effects: list) -> None:
    """Take `msg_ids` back from `c` (in the order given), counting the delivery.

    Past the delivery limit a message is dead-lettered (reason delivery_limit).  Else it
    goes back near the head, or to the tail when `tail` (unlimited delivery limit)."""
    limit = q.config.delivery_limit
    dead = []
    n = 0
    for mid in msg_ids:
        m = c.checked_out.pop(mid, None)
        if m is None:
            continue
        n += 1
        q.checked_bytes -= m.size
        m.acquired += 1
        if failed:
            m.delivery_failed += 1
        if limit is not None and m.acquired > limit:
            dead.append(m)
        elif tail:
            q.ready.push_tail(m)
        else:
            q.ready.push_return(m)
    c.add_credit(n)
    q.dlx.discard(dead, "delivery_limit", q.config, q.live, effects)


def unsend(q: QueueState, c: Consumer, msg_ids) -> None:
    """Take back `msg_ids` (in the order given) that `c`'s channel never sent: back in front
    of their level as if never handed out (returns of messages that were sent, such as a
    ConsumerDown's, still go before them), neither counted nor flagged redelivered. `c`'s
    credit stays as it was: it is leaving, or checks out again with its prefetch next."""
    back = _take_back(q, c, msg_ids)
    if q.parts is not None:  # a partition keeps its own order: near the head, as a return
        for m in back:
            q.ready.push_return(m)
    else:
        q.ready.push_head(back)


def complete(q: QueueState, c: Consumer, msg_ids) -> list[Message]:
    """Remove settled messages from `c`; returns them (the caller frees or dead-letters)."""
    done = _take_back(q, c, msg_ids)
    c.add_credit(len(done))
    return done


def _take_back(q: QueueState, c: Consumer, msg_ids) -> list[Message]:
    """`msg_ids` that `c` still has checked out, no longer its own, in the order given."""
    out = []
    for mid in msg_ids:
        m = c.checked_out.pop(mid, None)
        if m is not None:
            q.checked_bytes -= m.size
            out.append(m)
    return out


def update_or_remove(meta: Meta, q: QueueState, c: Consumer, effects: list) -> None:
    """After a consumer changed: drop finished ones, park a drained quiescing SAC
    consumer, or put it (back) in the service queue if it can take messages. A SAC consumer
    that waits is not served, also when its cancelled self holds its key in `consumers`."""
    if q.consumers.get(c.key) is not c:
        return
    if c.once and c.credit == 0 and not c.checked_out:
        remove_consumer(meta, q, c)
    elif c.status == QUIESCING and not c.checked_out:
        del q.consumers[c.key]
        q.sq.remove(c)
        c.status = UP
        add_waiting(q, c)
        effects.append(ConsumerActive(c.key, False))
    elif c.status == UP and c.credit > 0 and not c.in_sq and not c.once:
        q.sq.push(c)


def remove_consumer(meta: Meta, q: QueueState, c: Consumer) -> None:
    del q.consumers[c.key]
    q.sq.remove(c)
    q.last_active = meta.timestamp


def sort_waiting(q: QueueState) -> None:
    """SAC waiting list: up first, then priority desc, credit desc, attach order."""
    q.waiting.sort(key=lambda c: (c.status != UP, -c.priority if c.status == UP else 0,
                                  -c.credit if c.status == UP else 0, c.seq))


def drop_waiting(q: QueueState, key: ConsumerKey) -> bool:
    """Take the SAC waiting entries under `key` out; True if there was one."""
    before = len(q.waiting)
    q.waiting = [w for w in q.waiting if w.key != key]
    return len(q.waiting) != before


def add_waiting(q: QueueState, c: Consumer) -> None:
    drop_waiting(q, c.key)
    q.waiting.append(c)
    sort_waiting(q)


def _install(q: QueueState, nxt: Consumer) -> Consumer:
    """Make the waiting consumer `nxt` the active one. A cancelled consumer re-subscribed
    under the same key may still hold unacked messages: it keeps them, with the new
    settings, rather than being replaced (which would lose them)."""
    old = q.consumers.get(nxt.key)
    if old is None:
        q.consumers[nxt.key] = nxt
        return nxt
    old.priority, old.prefetch, old.credited = nxt.priority, nxt.prefetch, nxt.credited
    old.status, old.once = UP, False
    old.credit = max(0, (0 if nxt.credited else nxt.prefetch) - len(old.checked_out))
    return old


def activate_next(q: QueueState, effects: list) -> None:
    """Single active consumer: activate the best waiting consumer when none is active,
    or let a higher-priority waiting one take over (at once if the active consumer has
    nothing unacked, else once it has drained: `quiescing`)."""
    if not q.config.single_active_consumer:
        return
    nxt = q.waiting[0] if q.waiting and q.waiting[0].status == UP else None
    if nxt is None:
        return
    act = active_consumer(q)
    if act is None:
        q.waiting.pop(0)
        nxt = _install(q, nxt)
        if nxt.credit > 0 and not nxt.in_sq:
            q.sq.push(nxt)
        effects.append(ConsumerActive(nxt.key, True))
    elif nxt.priority > act.priority:
        if not act.checked_out:
            q.waiting.pop(0)
            del q.consumers[act.key]
            q.sq.remove(act)
            act.status = UP
            nxt = _install(q, nxt)
            if nxt.credit > 0 and not nxt.in_sq:
                q.sq.push(nxt)
            add_waiting(q, act)
            effects.append(ConsumerActive(act.key, False))
            effects.append(ConsumerActive(nxt.key, True))
        elif act.status != QUIESCING:
            act.status = QUIESCING
            q.sq.remove(act)


def next_timer(q: QueueState) -> int | None:
    """Leader time at which a `Tick` is next needed (head expiry, x-expires, or a
    partitioned queue's rebalance or handoff deadline)."""
    head = q.ready.peek()
    at = head.expiry if head is not None else None
    cfg = q.config
    if cfg.expires is not None and q.last_active is not None and is_unused(q):
        # x-expires fires when leader time is strictly past last_active + expires
        qt = q.last_active + cfg.expires + 1
        at = qt if at is None else min(at, qt)
    if q.parts is not None:
        pt = rules.next_time(q.parts, q.config.rebalance_delay)
        if pt is not None:
            at = pt if at is None else min(at, pt)
    return at


def finish(meta: Meta, q: QueueState, effects: list) -> None:
    """Bookkeeping after each command: re-arm the timer and move the release cursor,
    emitting an effect only when either changed."""
    if q.publish_blocked or q.config.max_length is not None or q.config.max_bytes is not None:
        update_publish_block(q)
    at = next_timer(q)
    if at != q.timer_at:
        q.timer_at = at
        effects.append(SetTimer(at))
    s = q.live.smallest()
    if s != q.released:
        q.released = s
        effects.append(ReleaseCursor(meta.index, s))


def is_unused(q: QueueState) -> bool:
    return not q.waiting and not any(c.status != SUSPECTED for c in q.consumers.values())


# -- partitioned queues (seed 001): the rules of `partitions.py` carried out on the messages --


def held(c: Consumer, i: int) -> list[int]:
    """The msg ids of partition `i` that consumer `c` holds unacked, in delivery order."""
    return [mid for mid, m in c.checked_out.items() if m.part == i]


def _apply_partition_rules(meta: Meta, q: QueueState, effects: list) -> None:
    """Bring the partition map up to date with the consumers and the leader time: members,
    a due rebalance, handoffs that are over (nothing held) or past their deadline."""
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


def deliver_partitioned(meta: Meta, q: QueueState, effects: list) -> None:
    """Apply the partition rules, then give each consumer with credit messages from its
    active partitions, one at a time round robin over consumers and, per consumer, over its
    partitions (so a prefetch window spans partitions).  One `Deliver` per consumer."""
    _apply_partition_rules(meta, q, effects)
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
