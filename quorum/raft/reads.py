"""Linearizable reads without writing to the log: ReadIndex (Raft thesis 6.4), a mixin of
`RaftNode` (state lives on the node: `_reads`, `_reads_waiting`, `_read_states`).

`read_index(ctx)` on the leader notes the commit index, then a round of heartbeats carrying
`ctx` confirms that it is still the leader. Once a majority of voters has answered, the read
comes out in `Ready.read_states` as `ReadState(index, ctx)`: the caller serves the read from
its state machine as soon as it has applied `index`. A leader that has not yet committed an
entry of its own term holds the request back until it has (its commit index might be stale).
Requests still pending when leadership is lost are dropped; the caller times out and retries.
With `RaftOptions.follower_acks` the read point is the leader's last index, not its commit index
(see `_start_read`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import NotLeader
from .majority import has_quorum
from .messages import Heartbeat, HeartbeatResp
from .ready import ReadState, Role

if TYPE_CHECKING:
    from .node import RaftNode

__all__ = []


class _PendingRead:
    __slots__ = ("ctx", "index", "acks")

    def __init__(self, ctx: bytes, index: int, me: str) -> None:
        self.ctx = ctx
        self.index = index
        self.acks = {me: True}


class ReadsMixin:
    def read_index(self: RaftNode, ctx: bytes) -> None:
        """Ask for a linearizable read point; `ctx` (non-empty, unique among pending reads)
        identifies the answer in `Ready.read_states`. Leader only: raises NotLeader."""
        if self._role is not Role.LEADER:
            raise NotLeader(self._leader)
        if not ctx:
            raise ValueError("ctx must be non-empty")
        if self._log.term(self._log.commit) != self._term:
            self._reads_waiting.append(ctx)
            return
        self._start_read(ctx)

    def _start_read(self: RaftNode, ctx: bytes) -> None:
        # With follower acks a follower may commit (and apply, and answer for) an entry before
        # the leader knows it is committed: the read point is then the leader's last entry,
        # which holds every entry a follower can commit on its own (one of this term's leader)
        log = self._log
        read = _PendingRead(ctx, log.last_index if self._opts.follower_acks else log.commit,
                            self.id)
        self._reads.append(read)
        if self._release_reads(read):
            return
        commit = self._log.commit
        for peer in self._config.voters:
            pr = self._prs.get(peer)
            if peer != self.id and pr is not None:
                self._send(Heartbeat(peer, self.id, self._term, min(pr.match, commit), ctx))

    def _on_read_ack(self: RaftNode, m: HeartbeatResp) -> None:
        for read in self._reads:
            if read.ctx == m.ctx:
                read.acks[m.frm] = True
                self._release_reads(read)
                return

    def _release_reads(self: RaftNode, read: _PendingRead) -> bool:
        """If `read` is confirmed, so is every read asked before it: hand them all out."""
        if not has_quorum(self._config.voters, read.acks):
            return False
        while self._reads:
            first = self._reads.pop(0)
            self._read_states.append(ReadState(first.index, first.ctx))
            if first is read:
                break
        return True

    def _on_term_committed(self: RaftNode) -> None:
        """An entry of our term committed: start the reads that waited for it."""
        waiting, self._reads_waiting = self._reads_waiting, []
        for ctx in waiting:
            self._start_read(ctx)
