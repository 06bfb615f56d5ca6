"""Proposals waiting for their outcome in `quorum.driver.NodeDriver`.

A proposal is resolved with the state machine's reply once its entry is committed and
applied, or failed (`NotLeader`, `LeadershipLost`, a log failure). Two kinds: `_Waiter` for a
task that awaits the outcome (`NodeDriver.propose`), `_CallbackWaiter` for a callback called
from the driver loop (`NodeDriver.propose_nowait`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import trio

from .raft import RaftError

__all__ = ["LeadershipLost", "ProposalCallback"]

_log = logging.getLogger("quorum.driver")

ProposalCallback = Callable[[Any, BaseException | None], None]


class LeadershipLost(RaftError):
    """This node stopped leading while the proposal was in its log but not yet committed: it
    may still commit under the new leader, or not. The outcome is unknown (so no confirm and
    no nack); `leader_hint` names the new leader if known."""

    def __init__(self, leader_hint: str | None) -> None:
        super().__init__(f"leadership lost, outcome unknown (leader hint: {leader_hint})")
        self.leader_hint = leader_hint


class _Waiter:
    """A proposal waiting to be committed and applied."""

    __slots__ = ("term", "event", "reply", "error")

    def __init__(self) -> None:
        self.term = 0
        self.event = trio.Event()
        self.reply: Any = None
        self.error: BaseException | None = None

    def resolve(self, reply: Any) -> None:
        self.reply = reply
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


class _CallbackWaiter:
    """A proposal whose outcome is a callback, not a waiting task: `fn(reply, None)` or
    `fn(None, error)` (or nothing at all without `fn`), called from the driver loop. An
    exception from `fn` is logged and dropped: it must not stop the loop (every group on
    the node would stall) nor the other callbacks of the same batch."""

    __slots__ = ("term", "fn")

    def __init__(self, fn: ProposalCallback | None) -> None:
        self.term = 0
        self.fn = fn

    def resolve(self, reply: Any) -> None:
        self._call(reply, None)

    def fail(self, error: BaseException) -> None:
        self._call(None, error)

    def _call(self, reply: Any, error: BaseException | None) -> None:
        if self.fn is None:
            return
        try:
            self.fn(reply, error)
        except Exception:
            _log.exception("proposal callback %r failed", self.fn)
