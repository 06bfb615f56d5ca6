"""Continuous membership reconciliation of quorum queues (seed 000;
`quorum_queue.continuous_membership_reconciliation.*`): a background task on every node of a
cluster; only the node that leads the metadata acts (`Membership.reconcile_members`), so the
queues' member lists change from one place.

It runs every `interval`, and `trigger_interval` after a node joined, left, went down or came
back; with `replace_unreachable_after` also every `trigger_interval`, so that a member whose
node stays unreachable is replaced once that time has passed. Started by `node.serve_broker`
when the settings enable it and the node is clustered.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

__all__ = ["run_reconciliation"]

_log = logging.getLogger(__name__)


async def run_reconciliation(broker: Any, settings: Any, poll: float = 0.5) -> None:
    membership, runtime = broker.membership, broker.quorum
    last_run = time.monotonic()
    event_at: float | None = time.monotonic()  # a start is a node event too
    seen = frozenset()
    while True:
        await trio.sleep(poll)
        now = time.monotonic()
        up = frozenset(n for n in runtime.nodes if runtime.is_running(n))
        if up != seen:
            seen, event_at = up, now
        due = now - last_run >= settings.interval
        if event_at is not None and now - event_at >= settings.trigger_interval:
            due = True
        if settings.replace_unreachable_after > 0 and now - last_run >= settings.trigger_interval:
            due = True
        if not due:
            continue
        last_run, event_at = now, None
        if not membership.leads_metadata():
            continue
        try:
            membership.reconcile_members(settings.target_group_size, settings.auto_remove,
                                         settings.replace_unreachable_after)
        except Exception:  # never take the node down with it
            _log.exception("membership reconciliation failed")
