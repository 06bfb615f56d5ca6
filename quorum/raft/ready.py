"""`Ready`: what a `RaftNode` asks its driver to do, and the contract for doing it.

The driver (`quorum/driver.py`, the simulator in `tests/sim/`) loops:

    rd = node.ready()            # None when there is nothing to do
    1. if rd.snapshot:   persist it (it replaces the log up to rd.snapshot.meta.index) and
                         restore the state machine from rd.snapshot.data
    2. if rd.entries:    append them; if rd.entries[0].index <= the stored last index, first
                         drop the stored entries from rd.entries[0].index on (a conflict repair)
    3. if rd.hard_state: persist it (term and vote must be durable; commit may lag)
    4. make 1-3 durable (fsync), THEN send rd.messages (never before: a vote or an append
       acknowledgement promises that the state is on disk). Only with
       RaftOptions(early_messages=True): rd.early_messages (a leader's Append / Heartbeat /
       InstallSnapshot) may be sent at once, before or while persisting, since the leader
       counts its own entries for commit only after advance() (thesis 10.2.1). Sending them
       after the persist, with the rest, is also correct, just slower.
    5. apply rd.committed in order (then serve rd.read_states whose index is applied); each is durable on a majority and, after step 4, locally.
       It holds every kind of entry: give NORMAL ones to the state machine (Meta(index, term,
       timestamp)); CONFIG ones are informational (the membership took effect when appended,
       see RaftNode.config); NOOP ones only move the applied index.
    6. node.advance(rd)

The steps of one Ready happen in this order and before `ready()` is called again. Messages may
be lost, duplicated or reordered by the transport; the node copes. A crash at any point is safe
as long as the restarted node is built from what steps 1-3 made durable (`Persisted`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from .messages import Entry, HardState, Message, Snapshot

__all__ = ["Ready", "Role", "Persisted", "ReadState"]


class Role(Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class ReadState:
    """A confirmed read point (see reads.py): serve the read `ctx` once `index` is applied."""

    index: int
    ctx: bytes


@dataclass(slots=True)
class Ready:
    """One batch of work. Fields follow the order of the contract in the module docstring."""

    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)
    hard_state: HardState | None = None
    messages: list[Message] = field(default_factory=list)
    early_messages: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    # confirmed read points: serve each once the state machine has applied its index
    read_states: list[ReadState] = field(default_factory=list)
    # soft state, informational: who leads now, and this node's role
    leader: str | None = None
    role: Role = Role.FOLLOWER
    term: int = 0


@dataclass(slots=True)
class Persisted:
    """What a node restarts from: the durable hard state, the latest durable snapshot (None if
    never compacted) and the durable entries after it, in index order without gaps. When the
    node is given a LogReader, `entries` may be just a tail of them (at least the last one);
    the node reads the others back through the reader."""

    hard_state: HardState = field(default_factory=HardState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)
