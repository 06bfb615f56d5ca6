"""Exceptions raised by `RaftNode` calls made by the driver (propose, membership, transfer)."""

from __future__ import annotations

__all__ = ["RaftError", "NotLeader", "ProposalDropped", "ConfigChangeInProgress"]


class RaftError(Exception):
    """Base of the errors below."""


class NotLeader(RaftError):
    """This node cannot accept the request; `leader_hint` is the leader it knows of, or None."""

    def __init__(self, leader_hint: str | None) -> None:
        super().__init__(f"not leader (leader hint: {leader_hint})")
        self.leader_hint = leader_hint


class ProposalDropped(RaftError):
    """The leader refuses proposals for now, e.g. while it transfers leadership away."""


class ConfigChangeInProgress(RaftError):
    """A membership change is already in the log and not yet committed (one at a time), or the
    requested change makes no sense for the current membership (the message says which)."""
