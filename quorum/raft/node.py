"""`RaftNode`: one member of one Raft group, IO-free (etcd RawNode style).

The driver feeds it peer messages (`step`), clock ticks (`tick`) and client requests
(`propose`, membership changes, `transfer_leadership`, `compact`), then collects the work to do
with `ready()` and confirms it with `advance()`; see ready.py for the exact contract. The node
never reads a clock, never does IO and draws randomness only from the `rng` it is given.

Callers: `quorum/driver.py` (the trio loop), `tests/sim/` and `tests/raft/`. The logic is split
into mixins by concept: election.py (ticks, votes, roles), replication.py (appends, commit,
snapshots) and reads.py (ReadIndex); this module holds construction, the public API and
message dispatch.

Fields (shared with the mixins): `_term`, `_vote`, `_leader`, `_role`; `_log` (RaftLog);
`_configs` (ConfigHistory) and `_config` (its current value); `_prs` (leader only: Progress per
member, including itself); `_votes` (candidate only); `_msgs` (outbox for the next Ready);
`_snapshot` (latest snapshot, sent to followers that need it); `_election_elapsed`,
`_heartbeat_elapsed`, `_timeout` (ticks); `_transfer_target`; `_pending_conf_index` (last
config entry the leader appended; one change at a time); `_last_ts` (largest entry timestamp);
`_early` (leader traffic that may precede the fsync, with options.early_messages);
`_reads`, `_reads_waiting`, `_read_states` (ReadIndex, see reads.py); `_snap_chunks` (a
chunked snapshot being received); `_peer_acks` (follower, with options.follower_acks: the
other voters' acks of this term, see replication.py).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from .election import ElectionMixin
from .errors import ConfigChangeInProgress, NotLeader, ProposalDropped
from .log import LogReader, RaftLog
from .membership import ConfigHistory, make_config
from .membership import add_learner as _add_learner_config
from .membership import promote as _promote_config
from .membership import remove as _remove_config
from .messages import (Append, AppendResp, ConfigState, Entry, EntryKind, HardState, Heartbeat,
                       HeartbeatResp, InstallSnapshot, Message, PreVote, PreVoteResp, Snapshot,
                       SnapshotMeta, TimeoutNow, Vote, VoteResp, decode_config, encode_config)
from .options import RaftOptions
from .ready import Persisted, ReadState, Ready, Role
from .reads import ReadsMixin
from .replication import ReplicationMixin

__all__ = ["RaftNode"]

_LEADER_MESSAGES = (Append, Heartbeat, InstallSnapshot)


class RaftNode(ElectionMixin, ReplicationMixin, ReadsMixin):
    """One Raft member. Not thread-safe; all calls come from one driver loop."""

    def __init__(
        self,
        id: str,
        voters: Iterable[str] = (),
        *,
        rng: random.Random,
        persisted: Persisted | None = None,
        options: RaftOptions | None = None,
        learners: Iterable[str] = (),
        applied: int = 0,
        reader: LogReader | None = None,
        config_history: tuple[int, list[tuple[int, ConfigState]]] | None = None,
    ) -> None:
        """Build a node from its durable state.

        `voters`/`learners` are the bootstrap membership, used only when `persisted` has no
        snapshot; every founding member must be given the same one. A node that joins later
        starts with none and learns the membership from the leader's log or snapshot.
        `applied` is how far the caller's state machine already is (at least the snapshot);
        committed entries after it are handed out again in `Ready.committed`.
        With a `reader` (the durable log), the node keeps only the last
        `options.memory_entries` applied entries in memory and reads older ones back when a
        lagging follower needs them; `persisted.entries` may then start anywhere after the
        snapshot as long as they reach the last durable entry. Without one, it keeps every
        entry since the last snapshot (`compact`) in memory.
        """
        self.id = id
        self._rng = rng
        self._opts = options or RaftOptions()
        p = persisted or Persisted()
        self._log = log = RaftLog(p.snapshot, list(p.entries), reader)
        self._snapshot: Snapshot | None = p.snapshot
        base = p.snapshot.meta.config if p.snapshot else make_config(voters, learners)
        self._configs = ConfigHistory(log.snap_index, base)
        self._last_ts = 0
        # config entries take effect when appended, so rebuild their history from the log
        known = 0
        if config_history is not None and log.snap_index < config_history[0] <= log.last_index:
            known, items = config_history
            for index, config in items:
                if index > log.snap_index:
                    self._configs.push(index, config)
        for e in log.read_range(max(log.snap_index, known) + 1, log.last_index + 1):
            if e.kind is EntryKind.CONFIG:
                self._configs.push(e.index, decode_config(e.data))
        if log.last_index > log.snap_index:
            self._last_ts = log.entry(log.last_index).timestamp
        self._config: ConfigState = self._configs.current
        hs = p.hard_state
        self._term = hs.term
        self._vote = hs.vote
        log.commit = max(log.snap_index, known, min(hs.commit, log.last_index))
        log.applied = max(log.snap_index, min(applied, log.commit))
        self._prev_hs = HardState(hs.term, hs.vote, log.commit)
        self._msgs: list[Message] = []
        self._early: list[Message] = []  # leader replication traffic, see Ready.early_messages
        self._early_ok = self._opts.early_messages
        self._reads: list = []  # leader: pending read_index requests, oldest first
        self._reads_waiting: list[bytes] = []  # leader: reads waiting for a current-term commit
        self._read_states: list[ReadState] = []  # confirmed, for the next Ready
        self._snap_chunks = None  # follower: a chunked snapshot being received (_Chunks)
        self._bcast_pending = False
        self._pending_conf_index = 0
        self._role = Role.FOLLOWER
        self._leader: str | None = None
        self._reset(self._term)

    # ---- inspection ------------------------------------------------------------------------

    @property
    def term(self) -> int:
        return self._term

    @property
    def vote(self) -> str | None:
        return self._vote

    @property
    def leader(self) -> str | None:
        """The leader of the current term as far as this node knows, else None."""
        return self._leader

    @property
    def role(self) -> Role:
        return self._role

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def ticks_matter(self) -> bool:
        """Whether `tick` can change anything: not for a leader with no other member and no
        leadership transfer (no one to send heartbeats to, no quorum to lose), so a driver may
        leave such a group alone while it has no other work."""
        return not (self._role is Role.LEADER and len(self._prs) == 1
                    and self._transfer_target is None)

    @property
    def config(self) -> ConfigState:
        """The membership in force: that of the last config entry in the log, committed or not."""
        return self._config

    @property
    def commit_index(self) -> int:
        return self._log.commit

    @property
    def applied_index(self) -> int:
        return self._log.applied

    @property
    def last_index(self) -> int:
        return self._log.last_index

    @property
    def snapshot_meta(self) -> SnapshotMeta | None:
        return self._snapshot.meta if self._snapshot else None

    def config_history(self, upto: int) -> list[tuple[int, ConfigState]]:
        """The membership and its changes up to entry `upto` (applied), to save beside a
        checkpoint of the state machine there (see `__init__`)."""
        return self._configs.upto(upto)

    def log_term(self, index: int) -> int | None:
        """Term of entry `index`, None if compacted away or not present."""
        return self._log.term(index)

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries lo..hi-1 after the snapshot (read back through the reader if need be)."""
        return self._log.slice(max(lo, self._log.snap_index + 1), min(hi, self._log.last_index + 1))

    def status(self) -> dict:
        """A plain-data summary for logs, metrics and the management API."""
        st = {
            "id": self.id, "term": self._term, "role": self._role.value, "leader": self._leader,
            "commit": self._log.commit, "applied": self._log.applied,
            "last_index": self._log.last_index, "snapshot_index": self._log.snap_index,
            "entries_in_memory": self._log.held_entries(),
            "voters": list(self._config.voters), "learners": list(self._config.learners),
        }
        if self._role is Role.LEADER:
            st["progress"] = {p: {"match": pr.match, "next": pr.next, "state": pr.state.value}
                              for p, pr in self._prs.items()}
        return st

    # ---- input -----------------------------------------------------------------------------

    def step(self, m: Message) -> None:
        """Take one message from a peer. Stale, duplicated and misaddressed ones are ignored.
        May be called between `ready()` and `advance()`."""
        if m.to != self.id:
            return
        if m.term > self._term:
            if not self._accept_higher_term(m):
                return
        elif m.term < self._term:
            self._answer_lower_term(m)
            return
        self._dispatch(m)

    def _accept_higher_term(self, m: Message) -> bool:
        if isinstance(m, (PreVote, Vote)):
            transfer = isinstance(m, Vote) and m.transfer
            if self._in_lease() and not transfer:
                return False  # we hear from a live leader: do not let a stray node disrupt it
        if isinstance(m, PreVote) or (isinstance(m, PreVoteResp) and m.granted):
            return True  # pre-votes never change our term
        self._become_follower(m.term, m.frm if isinstance(m, _LEADER_MESSAGES) else None)
        return True

    def _answer_lower_term(self, m: Message) -> None:
        if isinstance(m, (Append, Heartbeat)):
            # A leader of an older term: our answer at a higher term makes it step down. Needed
            # with pre-vote/check-quorum, where a node may have moved on to a term that the
            # others will only learn from us.
            self._send(AppendResp(m.frm, self.id, self._term, 0, True))
        elif isinstance(m, PreVote):
            self._send(PreVoteResp(m.frm, self.id, self._term, False))

    def _dispatch(self, m: Message) -> None:
        if isinstance(m, _LEADER_MESSAGES):
            if self._role is Role.LEADER:
                raise AssertionError(f"two leaders in term {self._term}: {self.id}, {m.frm}")
            if self._role is not Role.FOLLOWER:
                self._become_follower(self._term, m.frm)
            self._leader = m.frm
            self._election_elapsed = 0
            if isinstance(m, Append):
                self._on_append(m)
            elif isinstance(m, Heartbeat):
                self._on_heartbeat(m)
            else:
                self._on_install_snapshot(m)
        elif isinstance(m, AppendResp):
            if self._role is Role.LEADER:
                self._on_append_resp(m)
            elif self._role is Role.FOLLOWER and not m.reject:
                self._on_peer_ack(m)
        elif isinstance(m, HeartbeatResp):
            if self._role is Role.LEADER:
                self._on_heartbeat_resp(m)
        elif isinstance(m, (PreVote, Vote)):
            self._on_vote_request(m)
        elif isinstance(m, (PreVoteResp, VoteResp)):
            self._on_vote_response(m)
        elif isinstance(m, TimeoutNow):
            if self._role is not Role.LEADER and self._promotable():
                self._real_campaign(transfer=True)

    def propose(self, data: bytes, now_ms: int) -> int:
        """Append one command; returns its index. `now_ms` is the leader's clock, stored in the
        entry (made monotonic: never below an earlier entry's). Raises NotLeader or
        ProposalDropped. The entry is only a proposal until it shows up in Ready.committed."""
        return self.propose_many((data,), now_ms)

    def propose_many(self, datas: Iterable[bytes], now_ms: int,
                     kind: EntryKind = EntryKind.NORMAL) -> int:
        """Append several commands at once (one Append per follower); returns the last index.
        `kind` is NORMAL, or FORWARDED for commands another replica passed on (the driver)."""
        self._check_can_propose()
        ts = max(now_ms, self._last_ts)
        base = self._log.last_index + 1
        term = self._term
        entries = [Entry(base + i, term, kind, d, ts) for i, d in enumerate(datas)]
        if not entries:
            raise ValueError("nothing to propose")
        self._append_as_leader(entries)
        return entries[-1].index

    def _check_can_propose(self) -> None:
        if self._role is not Role.LEADER:
            raise NotLeader(self._leader)
        if self._transfer_target is not None:
            raise ProposalDropped(f"transferring leadership to {self._transfer_target}")

    # ---- membership (leader only, one change at a time) ------------------------------------

    def add_learner(self, node: str, now_ms: int, auto_promote: bool = True) -> int:
        """Add `node` as a non-voter. With auto_promote the leader later proposes its promotion
        by itself, once the learner is `caught_up`. Returns the entry index."""
        return self._propose_config(_add_learner_config(self._config, node, auto_promote), now_ms)

    def promote(self, node: str, now_ms: int) -> int:
        """Make learner `node` a voter now (the caller judged it caught up)."""
        return self._propose_config(_promote_config(self._config, node), now_ms)

    def remove(self, node: str, now_ms: int) -> int:
        """Remove a voter or learner. Removing the leader itself works: it keeps leading without
        counting itself until the change commits, then hands over and steps down."""
        return self._propose_config(_remove_config(self._config, node), now_ms)

    def _propose_config(self, config: ConfigState, now_ms: int) -> int:
        self._check_can_propose()
        if self._pending_conf_index > self._log.commit:
            raise ConfigChangeInProgress("a membership change is not yet committed")
        index = self._log.last_index + 1
        self._pending_conf_index = index
        ts = max(now_ms, self._last_ts)
        self._append_as_leader([Entry(index, self._term, EntryKind.CONFIG,
                                      encode_config(config), ts)])
        return index

    # ---- leadership transfer ---------------------------------------------------------------

    def transfer_leadership(self, to: str) -> None:
        """Hand leadership to voter `to` (thesis 3.10): stop taking proposals, bring `to` up to
        date, then tell it to campaign at once. Given up after election_tick ticks."""
        if self._role is not Role.LEADER:
            raise NotLeader(self._leader)
        if to == self.id:
            return
        if to not in self._config.voters:
            raise ValueError(f"{to} is not a voter")
        self._transfer_target = to
        self._election_elapsed = 0
        if self._prs[to].match == self._log.last_index:
            self._send(TimeoutNow(to, self.id, self._term))
        else:
            self._fill(to, allow_empty=True)

    def _abort_transfer(self) -> None:
        self._transfer_target = None

    @property
    def transfer_target(self) -> str | None:
        return self._transfer_target

    # ---- snapshots -------------------------------------------------------------------------

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The state machine's state up to applied entry `index` is captured in `data` (ra's
        release cursor). The node drops entries up to `index` from memory and sends this
        snapshot to followers that need those entries. The caller persists the returned
        snapshot itself and may then delete its stored entries up to `index`."""
        log = self._log
        if index > log.applied:
            raise ValueError(f"snapshot index {index} beyond applied {log.applied}")
        if index <= log.snap_index:
            if self._snapshot is None:
                raise ValueError("nothing to compact")
            return self._snapshot
        meta = SnapshotMeta(index, log.term(index), self._configs.at(index))
        snap = Snapshot(meta, data)
        log.compact(index)
        self._configs.compact(index)
        self._snapshot = snap
        return snap

    # ---- output ----------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        if self._early_ok and self._role is Role.LEADER and isinstance(m, _LEADER_MESSAGES):
            self._early.append(m)
        else:
            self._msgs.append(m)

    def _members(self) -> list[str]:
        c = self._config
        out = list(c.voters) + [n for n in c.learners if n not in c.voters]
        if self.id not in out:
            out.append(self.id)
        return out

    def _flush(self) -> None:
        if self._bcast_pending:
            self._bcast_pending = False
            if self._role is Role.LEADER:
                self._bcast_append()

    def has_ready(self) -> bool:
        self._flush()
        log = self._log
        return bool(
            self._msgs or self._early or self._read_states or log.unstable_snapshot is not None
            or log.handed < log.last_index or self._appliable() > log.applied
            or self._prev_hs != HardState(self._term, self._vote, log.commit)
        )

    def only_commits_ready(self) -> bool:
        """Is the next Ready one that only hands out committed entries to apply (and the
        commit index in its hard state): nothing to write, send, install or answer? So a
        lone leader's Ready after `advance` made its own entries durable and committed."""
        self._flush()
        log = self._log
        return (not (self._msgs or self._early or self._read_states)
                and log.unstable_snapshot is None and log.handed >= log.last_index
                and self._appliable() > log.applied
                and self._prev_hs.term == self._term and self._prev_hs.vote == self._vote)

    def ready(self) -> Ready | None:
        """The next batch of work (see ready.py for the contract), or None if there is none.
        Call `advance(ready)` when done, before calling `ready()` again."""
        if not self.has_ready():
            return None
        log = self._log
        hs = HardState(self._term, self._vote, log.commit)
        rd = Ready(
            snapshot=log.unstable_snapshot,
            entries=log.unstable_entries(),
            hard_state=hs if hs != self._prev_hs else None,
            messages=self._msgs,
            early_messages=self._early,
            read_states=self._read_states,
            committed=self._committed_batch(),
            leader=self._leader,
            role=self._role,
            term=self._term,
        )
        self._msgs = []
        self._early = []
        self._read_states = []
        return rd

    def _appliable(self) -> int:
        """The last entry a Ready may hand out to apply: committed and, with asynchronous
        writes, durable here too (a follower may learn the commit before its own write ends)."""
        log = self._log
        return min(log.commit, log.stable) if self._opts.async_writes else log.commit

    def _committed_batch(self) -> list[Entry]:
        log = self._log
        top = self._appliable()
        if top <= log.applied:
            return []
        hi = min(top, log.applied + self._opts.max_committed_per_ready)
        return log.slice(log.applied + 1, hi + 1)

    def advance(self, rd: Ready) -> None:
        """The driver has done everything `rd` asked for. With `RaftOptions.async_writes`:
        it has taken rd.entries to write (and will call `persisted` when they are durable)
        and holds rd.messages until then; the rest is done."""
        log = self._log
        if rd.snapshot is not None and log.unstable_snapshot is rd.snapshot:
            log.unstable_snapshot = None
        if rd.entries:
            last = rd.entries[-1]
            if self._opts.async_writes:
                log.hand_to(last.index)
            else:
                self.persisted(last.index, last.term)
        if rd.hard_state is not None:
            self._prev_hs = rd.hard_state
        if rd.committed:
            log.applied = max(log.applied, rd.committed[-1].index)
        log.trim(min(log.applied, log.stable) - self._opts.memory_entries, self._opts.memory_bytes)

    def persisted(self, index: int, term: int) -> None:
        """Entries up to `index` (of `term`) are durable here: a leader counts them for commit,
        and committed ones become appliable. Ignored if they were replaced meanwhile. Called
        by `advance` itself, unless `RaftOptions.async_writes`."""
        log = self._log
        before = log.stable
        log.stable_to(index, term)
        if log.stable > before:
            if self._role is Role.LEADER:
                self._on_own_entries_durable()
            elif self._peer_acks:
                self._commit_by_peer_acks()
