"""Tunables of a `RaftNode`, fixed for its lifetime. Passed in by the driver or the simulator."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RaftOptions"]


@dataclass(frozen=True, slots=True)
class RaftOptions:
    # A follower campaigns after a random number of ticks in [election_tick, 2 * election_tick).
    election_tick: int = 10
    # The leader sends heartbeats every heartbeat_tick ticks; must be < election_tick.
    heartbeat_tick: int = 1
    # Batching: at most this many entries / data bytes in one Append (at least one entry).
    max_append_entries: int = 512
    max_append_bytes: int = 1 << 20
    # Pipelining: unacknowledged Appends per follower in REPLICATE state.
    max_inflight: int = 64
    # Pre-vote (thesis 9.6): a node rejoining from a partition does not bump terms.
    pre_vote: bool = True
    # The leader steps down when it has not heard from a majority for election_tick ticks, and
    # followers ignore vote requests while they hear from a leader (leader lease).
    check_quorum: bool = True
    # With a LogReader: how many applied, durable entries stay in memory for followers that
    # lag a little; older ones are read back from the durable log when needed.
    memory_entries: int = 1024
    # ... and at most about this many bytes of their data (large entries: fewer of them).
    memory_bytes: int = 8 << 20
    # Put a leader's Append / Heartbeat / InstallSnapshot in Ready.early_messages, to be sent
    # before its own fsync completes (thesis 10.2.1). Off: everything is in Ready.messages.
    early_messages: bool = False
    # Asynchronous writes (etcd's AsyncStorageWrites): `advance(rd)` means "handed to storage",
    # not "durable"; the driver calls `persisted(index, term)` once rd.entries are on disk, and
    # sends rd.messages only then. Meanwhile the node keeps stepping and handing out Readies
    # (each with only newer entries), and Ready.committed holds only entries already durable
    # here. A leader's commit and a follower's learning of it no longer wait behind a write.
    async_writes: bool = False
    # Follower acks: a follower sends its AppendResp for new entries to the other voters too,
    # and a follower that knows a majority of voters holds an entry of the current term
    # (itself durably, the others by their acks) commits it without waiting for the leader's
    # next Append to carry the commit index: one network hop less before a follower applies.
    follower_acks: bool = False
    # At most this many committed entries per Ready (a restart may have many to re-apply).
    max_committed_per_ready: int = 8192
    # Snapshot data larger than this goes out in several InstallSnapshot messages.
    max_snapshot_chunk: int = 4 << 20

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_tick < self.election_tick:
            raise ValueError("need 0 < heartbeat_tick < election_tick")
        if self.max_append_entries < 1 or self.max_inflight < 1 or self.max_snapshot_chunk < 1:
            raise ValueError("max_append_entries, max_inflight, max_snapshot_chunk must be >= 1")
