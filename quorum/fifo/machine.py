"""`apply(meta, cmd, state) -> Applied`: the quorum queue state machine.

Called by the Raft driver (`quorum/driver.py`) for every committed log entry, on every
replica, in log order.  Pure and deterministic: no clock but `meta.timestamp`, no randomness,
no iteration over sets of strings.  Mutates `state` in place; one short handler per
command, each ending with the shared steps of `delivery.py`.
"""
from __future__ import annotations

from dataclasses import replace

from .commands import (UNLIMITED_PREFETCH, Cancel, Checkout, Command, ConsumerDown, Credit,
                       Dequeue, Discard, DlxSettle, Enqueue, Meta, NodeDown, NodeUp, Purge,
                       QueueConfig, Requeue, Return, Settle, Tick, Unsent, UpdateConfig)
from .consumers import CANCELLED, QUIESCING, SUSPECTED, UP, Consumer, Enqueuer
from .delivery import (activate_next, add_waiting, complete, deliver, delivery_of,
                       drop_waiting, enforce_limits, finish, is_unused, remove_consumer,
                       return_msgs, sort_waiting, unsend, update_or_remove,
                       update_publish_block)
from .effects import (DUPLICATE, NOT_FOUND, OK, OUT_OF_SEQUENCE, REJECTED, UNSUPPORTED,
                      Applied, CancelReply, CheckoutReply, Confirm, CreditReply,
                      DequeueReply, Monitor, QueueExpired, RejectPublish)
from .messages import Message, is_high
from .state import QueueState, active_consumer

__all__ = ["apply"]


def apply(meta: Meta, cmd: Command, q: QueueState) -> Applied:
    handler = _HANDLERS.get(type(cmd))
    if handler is None:
        # a command from a newer version: ignore rather than diverge by crashing
        return Applied("unknown_command", [])
    return handler(meta, cmd, q)


def _done(meta: Meta, q: QueueState, effects: list, reply=OK) -> Applied:
    """The tail of most commands: deliver, enforce limits, re-arm timer and cursor."""
    deliver(meta, q, effects)
    enforce_limits(q, effects)
    finish(meta, q, effects)
    return Applied(reply, effects)


def _enqueue(meta: Meta, cmd: Enqueue, q: QueueState) -> Applied:
    effects: list = []
    pub, seq = cmd.publisher, cmd.seq
    tracked = pub is not None and seq is not None
    if tracked:
        enq = q.enqueuers.get(pub)
        if enq is None:
            # sequences start at 1, so a lost first entry shows up as a gap, never as
            # a "duplicate" confirmed without being enqueued
            enq = q.enqueuers[pub] = Enqueuer(1)
            effects.append(Monitor(pub))
        if seq < enq.next_seq:          # resent after a leader change: already in
            effects.append(Confirm(pub, (seq,)))
            return Applied(DUPLICATE, effects)
        if seq > enq.next_seq:          # an earlier one is missing: publisher resends
            return Applied(OUT_OF_SEQUENCE, effects)
        enq.next_seq = seq + 1
    cfg = q.config
    limited = cfg.max_length is not None or cfg.max_bytes is not None
    if limited and update_publish_block(q):
        # reject-publish: blocked once over the limits (the queue may hold max-length + 1),
        # until back to 80% of them (`update_publish_block`)
        if tracked:
            effects.append(RejectPublish(pub, (seq,)))
        finish(meta, q, effects)
        return Applied(REJECTED, effects)
    ttl = cfg.msg_ttl
    if cmd.ttl is not None:
        ttl = cmd.ttl if ttl is None else min(ttl, cmd.ttl)
    # TTL 0: expires unless consumed at once (within the same leader millisecond)
    expiry = None if ttl is None else meta.timestamp + max(ttl, 1)
    if q.parts is None:
        q.ready.push(Message(meta.index, cmd.size, expiry, _level(cfg, cmd.priority),
                             cmd.persistent))
    else:
        # a key keeps its order: no priority, no expiry (an expired head would reorder)
        part = cmd.partition if cmd.partition is not None else 0
        q.ready.push(Message(meta.index, cmd.size, None, False, cmd.persistent,
                             part=part % len(q.parts)))
    q.live.add(meta.index)
    deliver(meta, q, effects)
    if limited:  # the common unlimited queue skips the call
        enforce_limits(q, effects)
    if tracked:
        effects.append(Confirm(pub, (seq,)))
    finish(meta, q, effects)
    return Applied(OK, effects)


def _merge(q: QueueState, c: Consumer, cmd: Checkout, prefetch: int) -> None:
    """Re-subscription of an existing consumer: new settings, status up, credit what the
    prefetch leaves after its unacked messages."""
    q.sq.remove(c)
    c.priority, c.credited, c.prefetch = cmd.priority, cmd.credited, prefetch
    c.status, c.once = UP, False
    c.credit = max(0, (0 if cmd.credited else prefetch) - len(c.checked_out))


def _checkout(meta: Meta, cmd: Checkout, q: QueueState) -> Applied:
    effects: list = []
    key = cmd.consumer
    prefetch = cmd.prefetch or UNLIMITED_PREFETCH
    c = q.find(key)
    if c is None:
        effects.append(Monitor(key.pid, key.node))
    if not q.config.single_active_consumer:
        if c is None:
            c = q.consumers[key] = Consumer(key, cmd.priority, cmd.credited, prefetch,
                                             meta.index)
        else:
            _merge(q, c, cmd, prefetch)
        update_or_remove(meta, q, c, effects)
    else:
        act = active_consumer(q)
        if c is not None and (c is act or (act is None and key in q.consumers)):
            drop_waiting(q, key)  # re-subscribed: a suspected incarnation waiting is this one
            _merge(q, c, cmd, prefetch)
            update_or_remove(meta, q, c, effects)
        else:
            c = Consumer(key, cmd.priority, cmd.credited, prefetch, meta.index)
            add_waiting(q, c)
        activate_next(q, effects)
    c = q.find(key)
    active = q.consumers.get(key) is c and c.status in (UP, QUIESCING)
    reply = CheckoutReply(c.next_msg_id, c.credit, len(c.checked_out), active)
    return _done(meta, q, effects, reply)


def _dequeue(meta: Meta, cmd: Dequeue, q: QueueState) -> Applied:
    # a get would bypass partition ownership
    if q.config.single_active_consumer or q.parts is not None:
        return Applied(UNSUPPORTED, [])
    effects: list = []
    q.last_active = meta.timestamp          # a get keeps the queue from expiring
    deliver(meta, q, effects)        # expires the head (nobody else can take messages)
    m = q.ready.pop()
    if m is None:
        finish(meta, q, effects)
        return Applied(DequeueReply(None, 0), effects)
    key = cmd.consumer
    c = q.consumers.get(key)
    if c is None:
        c = q.consumers[key] = Consumer(key, 0, False, 1, meta.index, once=True)
        c.credit = 0
        if not cmd.settled:
            effects.append(Monitor(key.pid, key.node))
    mid = c.next_msg_id
    c.next_msg_id += 1
    d = delivery_of(mid, m)
    if cmd.settled:
        q.live.remove(m.index)
    else:
        c.checked_out[mid] = m
        q.checked_bytes += m.size
    update_or_remove(meta, q, c, effects)
    finish(meta, q, effects)
    return Applied(DequeueReply(d, len(q.ready)), effects)


def _settle(meta: Meta, cmd: Settle, q: QueueState) -> Applied:
    c = q.consumers.get(cmd.consumer)
    if c is None:
        return Applied(OK, [])
    effects: list = []
    for m in complete(q, c, cmd.msg_ids):
        q.live.remove(m.index)
    update_or_remove(meta, q, c, effects)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _return(meta: Meta, cmd: Return, q: QueueState) -> Applied:
    c = q.consumers.get(cmd.consumer)
    if c is None:
        return Applied(OK, [])
    effects: list = []
    # 4.x: with a delivery limit back near the head, unlimited to the tail
    return_msgs(q, c, cmd.msg_ids, False, q.config.delivery_limit is None, effects)
    update_or_remove(meta, q, c, effects)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _unsent(meta: Meta, cmd: Unsent, q: QueueState) -> Applied:
    c = q.consumers.get(cmd.consumer)
    if c is None:
        return Applied(OK, [])
    effects: list = []
    unsend(q, c, cmd.msg_ids)
    update_or_remove(meta, q, c, effects)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _requeue(meta: Meta, cmd: Requeue, q: QueueState) -> Applied:
    c = q.consumers.get(cmd.consumer)
    old = c.checked_out.get(cmd.msg_id) if c is not None else None
    if old is None:
        return Applied(OK, [])
    effects: list = []
    # swap the message for a copy living at this log index, then return it to the tail
    m = Message(meta.index, old.size, old.expiry, False, old.persistent, old.acquired,
                old.delivery_failed, old.part)
    c.checked_out[cmd.msg_id] = m
    q.live.remove(old.index)
    q.live.add(meta.index)
    return_msgs(q, c, (cmd.msg_id,), False, True, effects)
    update_or_remove(meta, q, c, effects)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _discard(meta: Meta, cmd: Discard, q: QueueState) -> Applied:
    c = q.consumers.get(cmd.consumer)
    if c is None:
        return Applied(OK, [])
    effects: list = []
    done = complete(q, c, cmd.msg_ids)
    for m in done:
        m.acquired += 1
        m.delivery_failed += 1
    q.dlx.discard(done, "rejected", q.config, q.live, effects)
    update_or_remove(meta, q, c, effects)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _credit(meta: Meta, cmd: Credit, q: QueueState) -> Applied:
    effects: list = []
    c = q.consumers.get(cmd.consumer)
    if c is None:
        w = q.find(cmd.consumer)
        if w is None or not w.credited:
            return Applied(OK, [])
        # an inactive (waiting) SAC consumer: keep the credit, nothing to deliver
        w.credit = max(0, cmd.delivery_count + cmd.credit - w.delivery_count)
        if cmd.drain:
            w.delivery_count += w.credit
            w.credit = 0
        sort_waiting(q)
        finish(meta, q, effects)
        return Applied(CreditReply(w.delivery_count, w.credit, 0, cmd.drain), effects)
    if not c.credited:
        # prefetch consumers get credit back from settlements only
        return Applied(CreditReply(c.delivery_count, c.credit, len(q.ready), False), [])
    c.credit = max(0, cmd.delivery_count + cmd.credit - c.delivery_count)
    update_or_remove(meta, q, c, effects)
    deliver(meta, q, effects)
    if cmd.drain and c.credit > 0:
        c.delivery_count += c.credit
        c.credit = 0
    enforce_limits(q, effects)
    finish(meta, q, effects)
    return Applied(CreditReply(c.delivery_count, c.credit, len(q.ready), cmd.drain), effects)


def _cancel(meta: Meta, cmd: Cancel, q: QueueState) -> Applied:
    effects: list = []
    key = cmd.consumer
    c = q.consumers.get(key)
    if c is None:
        if not drop_waiting(q, key):
            return Applied(NOT_FOUND, [])
        return _done(meta, q, effects, CancelReply(0))
    n = len(c.checked_out)
    if cmd.remove:
        return_msgs(q, c, list(c.checked_out), False, False, effects)
        remove_consumer(meta, q, c)
    else:
        # keeps its unacked messages until settled, then goes (update_or_remove)
        c.status, c.once, c.credit = CANCELLED, True, 0
        q.sq.remove(c)
        update_or_remove(meta, q, c, effects)
    activate_next(q, effects)
    return _done(meta, q, effects, CancelReply(n))


def _consumer_down(meta: Meta, cmd: ConsumerDown, q: QueueState) -> Applied:
    effects: list = []
    pid = cmd.pid
    q.enqueuers.pop(pid, None)
    q.waiting = [w for w in q.waiting if w.key.pid != pid]
    for c in [c for c in q.consumers.values() if c.key.pid == pid]:
        # failed deliveries: counted against the delivery limit, back near the head
        return_msgs(q, c, list(c.checked_out), True, False, effects)
        remove_consumer(meta, q, c)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _node_down(meta: Meta, cmd: NodeDown, q: QueueState) -> Applied:
    node = cmd.node
    effects: list = [Monitor(None, node)]
    sac = q.config.single_active_consumer
    for c in [c for c in q.consumers.values() if c.key.node == node]:
        if c.status not in (UP, QUIESCING):
            continue
        c.status = SUSPECTED
        q.sq.remove(c)
        return_msgs(q, c, list(c.checked_out), True, False, effects)
        if sac:
            del q.consumers[c.key]
            add_waiting(q, c)
    for w in q.waiting:
        if w.key.node == node and w.status == UP:
            w.status = SUSPECTED
    sort_waiting(q)
    q.last_active = meta.timestamp
    activate_next(q, effects)
    return _done(meta, q, effects)


def _node_up(meta: Meta, cmd: NodeUp, q: QueueState) -> Applied:
    node = cmd.node
    effects: list = []
    for c in [*q.consumers.values(), *q.waiting]:
        if c.key.node == node and c.status == SUSPECTED:
            c.status = UP
            effects.append(Monitor(c.key.pid, node))
            update_or_remove(meta, q, c, effects)
    sort_waiting(q)
    activate_next(q, effects)
    return _done(meta, q, effects)


def _purge(meta: Meta, cmd: Purge, q: QueueState) -> Applied:
    effects: list = []
    msgs = q.ready.clear()
    for m in msgs:
        q.live.remove(m.index)
    finish(meta, q, effects)
    return Applied(len(msgs), effects)


def _tick(meta: Meta, cmd: Tick, q: QueueState) -> Applied:
    effects: list = []
    deliver(meta, q, effects)
    enforce_limits(q, effects)
    cfg = q.config
    if (cfg.expires is not None and q.last_active is not None and is_unused(q)
            and meta.timestamp > q.last_active + cfg.expires):
        effects.append(QueueExpired(cfg.name))
    finish(meta, q, effects)
    return Applied(OK, effects)


def _update_config(meta: Meta, cmd: UpdateConfig, q: QueueState) -> Applied:
    old = q.config
    new = replace(cmd.config.normalise(), single_active_consumer=old.single_active_consumer,
                  partitions=old.partitions)
    if old.at_least_once and not new.at_least_once:
        q.dlx.drop_all(q.live)       # the documented effect of leaving at-least-once
    q.config = new
    return _done(meta, q, [])


def _dlx_settle(meta: Meta, cmd: DlxSettle, q: QueueState) -> Applied:
    n = q.dlx.settle(cmd.dlx_ids, q.live)
    return _done(meta, q, [], n)


_HANDLERS = {
    Enqueue: _enqueue, Checkout: _checkout, Dequeue: _dequeue, Settle: _settle,
    Return: _return, Requeue: _requeue, Discard: _discard, Credit: _credit,
    Cancel: _cancel, ConsumerDown: _consumer_down, NodeDown: _node_down,
    NodeUp: _node_up, Purge: _purge, Tick: _tick, UpdateConfig: _update_config,
    DlxSettle: _dlx_settle, Unsent: _unsent,
}


def _level(cfg: QueueConfig, priority: int | None) -> bool | int:
    """A message's `hi`: high or not (the quorum queue's two levels), or with strict levels
    (`max_priority`) its level, the priority capped at the maximum."""
    if cfg.max_priority is None:
        return is_high(priority)
    return min(max(priority or 0, 0), cfg.max_priority)
