"""Majority arithmetic over a voter set: the commit index and election outcomes.
Used by `RaftNode`; pure functions over tuples and dicts, no node state."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["committed_index", "vote_result", "has_quorum"]


def committed_index(voters: tuple[str, ...], match: Mapping[str, int]) -> int:
    """The largest index that a majority of `voters` has (missing voters count as 0)."""
    if not voters:
        return 0
    acked = sorted((match.get(v, 0) for v in voters), reverse=True)
    return acked[len(voters) // 2]


def vote_result(voters: tuple[str, ...], votes: Mapping[str, bool]) -> bool | None:
    """True once a majority granted, False once a majority is out of reach, else None."""
    need = len(voters) // 2 + 1
    granted = sum(1 for v in voters if votes.get(v) is True)
    rejected = sum(1 for v in voters if votes.get(v) is False)
    if granted >= need:
        return True
    if len(voters) - rejected < need:
        return False
    return None


def has_quorum(voters: tuple[str, ...], alive: Mapping[str, bool]) -> bool:
    return sum(1 for v in voters if alive.get(v)) >= len(voters) // 2 + 1
