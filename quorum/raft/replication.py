"""Log replication for `RaftNode` (a mixin; state lives on the node, see node.py).

Leader side: batched, pipelined Appends driven by each follower's `Progress`; fast repair from
the follower's (hint_index, hint_term); commit by counting voters' matches, only for entries of
the current term (Raft section 5.4.2, Figure 8); InstallSnapshot when the follower's next entry
was compacted away. Follower side: accept or reject Appends, learn the commit index, restore
snapshots. Raft sections 5.3, 5.4, 7. With `RaftOptions.follower_acks` followers also send
their acks to each other and commit from a majority of them (`_commit_by_peer_acks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .majority import committed_index
from .membership import promote as promote_config
from .messages import (Append, AppendResp, Entry, EntryKind, Heartbeat, HeartbeatResp,
                       InstallSnapshot, Snapshot, TimeoutNow, decode_config)
from .progress import Progress, ProgressState
from .ready import Role

if TYPE_CHECKING:
    from .node import RaftNode

__all__ = []

_PROBE = ProgressState.PROBE
_REPLICATE = ProgressState.REPLICATE
_SNAPSHOT = ProgressState.SNAPSHOT


class ReplicationMixin:
    # ---- appending to our own log ----------------------------------------------------------

    def _append_entries(self: RaftNode, entries: list[Entry]) -> None:
        """Append to the log; config entries take effect now, truncated ones are undone."""
        log, configs = self._log, self._configs
        first = entries[0].index
        changed = configs.last_index >= first
        configs.truncate(first)
        log.append(entries)
        for e in entries:
            if e.kind is EntryKind.CONFIG:
                configs.push(e.index, decode_config(e.data))
                changed = True
        ts = entries[-1].timestamp
        if ts > self._last_ts:
            self._last_ts = ts
        if changed:
            self._on_config_change()

    def _on_config_change(self: RaftNode) -> None:
        config = self._configs.current
        self._config = config
        if self._role is not Role.LEADER:
            return
        for peer in self._members():
            if peer not in self._prs:
                self._prs[peer] = Progress(self._log.last_index + 1)
        # A removed peer keeps getting our entries until its removal commits, so that it
        # usually learns it is out and stays quiet instead of campaigning (thesis 4.2.3).
        self._prune_removed()
        if self._transfer_target is not None and self._transfer_target not in config.voters:
            self._transfer_target = None

    def _prune_removed(self: RaftNode) -> None:
        if self._configs.last_index > self._log.commit:
            return
        members = self._members()
        for peer in list(self._prs):
            if peer not in members:
                del self._prs[peer]

    def _append_as_leader(self: RaftNode, entries: list[Entry]) -> None:
        # The leader's own copy counts for commit only once durable (advance), so its Appends
        # may go out before its own fsync (thesis 10.2.1): see Ready.early_messages.
        self._append_entries(entries)
        self._bcast_pending = True  # sent from ready(): one Append per follower per batch

    def _on_own_entries_durable(self: RaftNode) -> None:
        if self._prs[self.id].update(self._log.stable) and self._maybe_commit():
            self._bcast_append(allow_empty=True)

    # ---- leader: sending -----------------------------------------------------------------

    def _bcast_append(self: RaftNode, allow_empty: bool = False) -> None:
        for peer in self._prs:
            if peer != self.id:
                self._fill(peer, allow_empty)

    def _fill(self: RaftNode, peer: str, allow_empty: bool = False) -> None:
        """Send to `peer` as much as its progress state and inflight window allow."""
        sent = self._send_append(peer, allow_empty)
        while sent and self._prs[peer].state is _REPLICATE:
            sent = self._send_append(peer, False)

    def _send_append(self: RaftNode, peer: str, allow_empty: bool) -> bool:
        pr = self._prs[peer]
        if pr.is_paused(self._opts.max_inflight):
            return False
        log = self._log
        if pr.next > log.last_index + 1:
            pr.next = log.last_index + 1
        prev = pr.next - 1
        prev_term = log.term(prev)
        if prev_term is None:  # compacted away: only a snapshot can help
            return self._send_snapshot(peer, pr)
        hi = min(log.last_index + 1, pr.next + self._opts.max_append_entries)
        entries = log.slice(pr.next, hi, self._opts.max_append_bytes) if pr.next < hi else []
        if not entries and not allow_empty:
            return False
        self._send(Append(peer, self.id, self._term, prev, prev_term, tuple(entries), log.commit))
        if pr.state is _REPLICATE:
            if entries:
                last = entries[-1].index
                pr.next = last + 1
                pr.inflights.append(last)
        else:
            pr.paused = True
        return bool(entries)

    def _send_snapshot(self: RaftNode, peer: str, pr: Progress) -> bool:
        snap = self._snapshot
        if snap is None:
            raise AssertionError("log compacted without a snapshot")
        size, data = self._opts.max_snapshot_chunk, snap.data
        if len(data) <= size:
            self._send(InstallSnapshot(peer, self.id, self._term, snap))
        else:
            for off in range(0, len(data), size):
                part = Snapshot(snap.meta, data[off:off + size])
                self._send(InstallSnapshot(peer, self.id, self._term, part, off,
                                           off + size >= len(data)))
        pr.become_snapshot(snap.meta.index)
        return False

    def _bcast_heartbeat(self: RaftNode) -> None:
        commit = self._log.commit
        for peer, pr in self._prs.items():
            if peer != self.id:
                self._send(Heartbeat(peer, self.id, self._term, min(pr.match, commit)))

    # ---- leader: answers -------------------------------------------------------------------

    def _on_append_resp(self: RaftNode, m: AppendResp) -> None:
        pr = self._prs.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        if m.reject:
            if self._on_reject(pr, m):
                self._fill(m.frm, allow_empty=True)
            return
        if not pr.update(m.index):
            if pr.state is _REPLICATE:
                pr.free_to(m.index)
            return
        if pr.state is _PROBE:
            pr.become_replicate()
        elif pr.state is _SNAPSHOT:
            if pr.match >= pr.pending_snapshot:
                pr.become_replicate()
        else:
            pr.free_to(m.index)
        if self._maybe_commit():
            self._bcast_append(allow_empty=True)  # tell everyone the new commit index
        else:
            self._fill(m.frm)
        if self._role is not Role.LEADER:
            return
        if m.frm == self._transfer_target and pr.match == self._log.last_index:
            self._send(TimeoutNow(m.frm, self.id, self._term))
        if m.frm in self._config.learners:
            self._catch_up_round(pr)
            if m.frm in self._config.auto_promote:
                self._maybe_auto_promote()

    def _on_reject(self: RaftNode, pr: Progress, m: AppendResp) -> bool:
        """Move `next` back using the hint; False if the answer is stale."""
        if pr.state is _SNAPSHOT:
            return False
        if pr.state is _REPLICATE:
            if m.index <= pr.match:
                return False
        elif m.index != pr.next - 1:
            return False
        nxt = m.hint_index
        if m.hint_term:
            mine = self._log.last_index_of_term(m.hint_term, m.index)
            if mine is not None:
                nxt = mine + 1
        pr.become_probe()
        pr.next = max(pr.match + 1, min(nxt, m.index))
        return True

    def _on_heartbeat_resp(self: RaftNode, m: HeartbeatResp) -> None:
        pr = self._prs.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        if m.ctx:
            self._on_read_ack(m)
        if pr.state is _PROBE:
            pr.paused = False
        elif pr.state is _REPLICATE:
            if len(pr.inflights) >= self._opts.max_inflight:
                pr.inflights.popleft()  # an Append may be lost: make room to resend
        else:
            pr.snapshot_wait += 1
            if pr.snapshot_wait * self._opts.heartbeat_tick >= self._opts.election_tick:
                pr.become_probe()  # the snapshot or its answer was probably lost: try again
        if pr.match < self._log.last_index:
            self._fill(m.frm, allow_empty=True)

    def _maybe_commit(self: RaftNode) -> bool:
        log = self._log
        index = committed_index(self._config.voters, {p: pr.match for p, pr in self._prs.items()})
        # only an entry of our own term commits by counting (Raft 5.4.2, Figure 8)
        if index > log.commit and log.term(index) == self._term:
            log.commit = index
            self._after_commit()
            return True
        return False

    def _after_commit(self: RaftNode) -> None:
        if self._reads_waiting:
            self._on_term_committed()
        if self.id not in self._config.voters and self._log.commit >= self._configs.last_index:
            self._hand_off_and_step_down()
            return
        self._prune_removed()
        self._maybe_auto_promote()

    def _hand_off_and_step_down(self: RaftNode) -> None:
        """We were removed and that is committed: nudge the most caught-up voter, then leave."""
        self._bcast_append(allow_empty=True)  # spread the commit index first
        best = None
        for peer in self._config.voters:
            pr = self._prs.get(peer)
            if pr is not None and (best is None or pr.match > self._prs[best].match):
                best = peer
        if best is not None and self._prs[best].match == self._log.last_index:
            self._send(TimeoutNow(best, self.id, self._term))
        self._become_follower(self._term, None)

    def _maybe_auto_promote(self: RaftNode) -> None:
        log = self._log
        if self._pending_conf_index > log.commit or self._transfer_target is not None:
            return
        for peer in self._config.auto_promote:
            if self.caught_up(peer):
                self._propose_config(promote_config(self._config, peer), self._last_ts)
                return

    def caught_up(self: RaftNode, peer: str) -> bool:
        """Leader: whether learner `peer` may be promoted without holding the group back: it
        holds every committed entry, or its last round of catching up (to the commit index
        when the round began) took no more than an election timeout and the round under way
        is not older than one (Raft thesis 4.2.1; a learner that caught up once and then went
        silent is not promoted into a voter that is down).
        Under a steady stream of commands a learner's acks always trail the commit index a
        little, so the first test alone may never pass. Used by the queues' membership
        reconciliation (`amqp_broker.cluster.runtime`) and by `auto_promote` (the metadata
        group's joins)."""
        pr = self._prs.get(peer)
        return pr is not None and (pr.match >= self._log.commit or (
            pr.caught_up and pr.catch_up_ticks <= self._opts.election_tick))

    def _catch_up_round(self: RaftNode, pr: Progress) -> None:
        """A learner acked: end its round if it reached the round's target, start the next."""
        if pr.catch_up_target and pr.match >= pr.catch_up_target:
            pr.caught_up = pr.catch_up_ticks <= self._opts.election_tick
            pr.catch_up_target = 0
        if not pr.catch_up_target:
            pr.catch_up_target, pr.catch_up_ticks = self._log.commit, 0

    # ---- follower ------------------------------------------------------------------------

    def _on_append(self: RaftNode, m: Append) -> None:
        log = self._log
        if m.prev_index < log.commit:
            self._send(AppendResp(m.frm, self.id, self._term, log.commit))
            return
        term = log.term(m.prev_index)
        if term != m.prev_term:
            if term is None:
                hint_index, hint_term = log.last_index + 1, 0
            else:
                hint_index, hint_term = log.first_index_of_term(m.prev_index), term
            self._send(AppendResp(m.frm, self.id, self._term, m.prev_index, True,
                                  hint_index, hint_term))
            return
        pos = log.find_conflict(m.entries)
        if pos < len(m.entries):
            self._append_entries(list(m.entries[pos:]))
        last_new = m.prev_index + len(m.entries)
        log.commit_to(min(m.commit, last_new))
        self._send(AppendResp(m.frm, self.id, self._term, last_new))
        if m.entries and self._opts.follower_acks and self.id in self._config.voters:
            # the same promise to the other voters (sent, like the leader's copy, only once
            # the entries are durable): with theirs they may commit without the leader
            for peer in self._config.voters:
                if peer != self.id and peer != m.frm:
                    self._send(AppendResp(peer, self.id, self._term, last_new))

    def _on_peer_ack(self: RaftNode, m: AppendResp) -> None:
        """Another follower of this term has the leader's entries up to m.index durably."""
        if m.frm not in self._config.voters or m.frm == self._leader:
            return
        acks = self._peer_acks
        if m.index > acks.get(m.frm, 0):
            acks[m.frm] = m.index
            self._commit_by_peer_acks()

    def _commit_by_peer_acks(self: RaftNode) -> None:
        """Commit what a majority of voters is known to hold: this node durably (`stable`)
        and the other followers by their acks of this term (the leader, whose own write may
        still be under way, is not counted). Only an entry of the current term commits so
        (Raft 5.4.2); ours at that index came from this term's leader, and so did each
        acking follower's, so they are the same entry, and so is everything before it."""
        log = self._log
        match = dict(self._peer_acks)
        match[self.id] = log.stable if self.id in self._config.voters else 0
        index = min(committed_index(self._config.voters, match), log.stable)
        if index > log.commit and log.term(index) == self._term:
            log.commit_to(index)

    def _on_heartbeat(self: RaftNode, m: Heartbeat) -> None:
        self._log.commit_to(min(m.commit, self._log.last_index))
        self._send(HeartbeatResp(m.frm, self.id, self._term, m.ctx))

    def _on_install_snapshot(self: RaftNode, m: InstallSnapshot) -> None:
        log = self._log
        snapshot = m.snapshot if m.offset == 0 and m.done else self._assemble(m)
        if snapshot is None:
            return  # more chunks to come, or one was lost
        meta = snapshot.meta
        if meta.index <= log.commit:
            self._send(AppendResp(m.frm, self.id, self._term, log.commit))
            return
        if log.term(meta.index) == meta.term:
            # we already have the entries: just learn that they are committed
            log.commit_to(meta.index)
        else:
            log.restore(snapshot)
            self._snapshot = snapshot
            self._configs.reset(meta.index, meta.config)
            self._on_config_change()
        self._send(AppendResp(m.frm, self.id, self._term, meta.index))

    def _assemble(self: RaftNode, m: InstallSnapshot) -> Snapshot | None:
        """Collect the chunks of one snapshot in whatever order the network hands them over
        (all chunks are sent at once, so they may be reordered or duplicated; a lost one is
        filled in by the leader's resend); the whole snapshot once every byte is in."""
        part = m.snapshot
        got = self._snap_chunks
        if got is None or got.meta != part.meta:
            if got is not None and part.meta.index < got.meta.index:
                return None  # a late chunk of an older snapshot
            got = self._snap_chunks = _Chunks(part.meta)
        data = got.add(m.offset, part.data, m.done)
        if data is None:
            return None
        self._snap_chunks = None
        return Snapshot(part.meta, data)


class _Chunks:
    """A chunked snapshot being received: chunk bytes by offset, and its size once the last
    chunk (`done`) arrived."""

    __slots__ = ("meta", "parts", "size", "have")

    def __init__(self, meta) -> None:
        self.meta = meta
        self.parts: dict[int, bytes] = {}
        self.size: int | None = None
        self.have = 0

    def add(self, offset: int, data: bytes, done: bool) -> bytes | None:
        """Take one chunk; the whole data once every byte is in, else None."""
        if offset not in self.parts:
            self.parts[offset] = data
            self.have += len(data)
        if done:
            self.size = offset + len(data)
        if self.size is None or self.have != self.size:
            return None
        out = b"".join(self.parts[o] for o in sorted(self.parts))
        if len(out) != self.size:  # chunks cut two different ways overlap: start again
            self.parts.clear()
            self.have, self.size = 0, None
            return None
        return out
