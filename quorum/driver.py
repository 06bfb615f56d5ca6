"""`NodeDriver`: the trio loop that runs every Raft group hosted on one node.

Used by the queue adapters and the test suite's demo node (`tests/quorum_integration/`). It
owns nothing but glue: the IO-free `quorum.raft.RaftNode` per group, the node's shared
`quorum.log.AsyncLog` and a transport (anything with ``send(peer, group, data) -> bool``,
normally `quorum.transport.Transport`, whose `on_frame` is `NodeDriver.deliver`).

One loop iteration, for all groups with work at once (see `quorum.raft.ready`):
  1. take the inputs queued since the last iteration: peer messages, proposals, ticks;
  2. `ready()` of every group; append entries / hard state / snapshots to the shared WAL;
  3. apply the committed entries that an earlier pass already made durable (all of them,
     except a follower's entries committed in the same Ready that appends them): resolve
     proposals, run effects -- while the WAL thread writes and fsyncs step 2's batch;
  4. one `wait_durable` for the whole batch: one fdatasync covers every group (group commit);
  5. send the messages (only now: they promise that state is on disk; with
     RaftOptions(early_messages=True) a leader's Appends go out before step 4);
  6. apply the rest of the committed entries;
  7. `advance()`; compact a group whose log grew `snapshot_every` entries past its snapshot.
Inputs that arrive while the loop waits for the disk are batched into the next iteration.
A one-member group commits its entries at `advance()`, so they are applied (step 3) in the
next pass, overlapped with that pass's fsync; when no input waits, in the same pass, right
after `advance()` (`RaftNode.only_commits_ready`): nothing is applied, confirmed or delivered
before the fsync that made it durable has returned.

Who runs a pass: the driver's own task, or the task whose input called for it. A session's
reader holds the wake-ups over the handling of what it read (`hold` / `release`) and then,
when no other task is ready to run, runs the pass itself (`run_held`), as the classic
journal's write of a publish is done at the end of the reader's batch: a task step and a pass
of trio's run loop less per message. Under load other readers are ready too, and the driver's
task runs the pass after them, one write for what they all proposed.
Such a pass is shielded from the reader's cancellation, its failure is raised in the
driver's task, and when its batch goes to the WAL writer task (a large one, or the writer
was busy) the rest of it waits for the disk in the driver's nursery while the reader goes
on reading. One pass at a time (`_passing`).

Compaction: every `snapshot_every` applied entries, to the point `quorum.replica.compaction_point`
names: the applied index, or for a machine with a `release_cursor` (a quorum queue, whose bodies
live in the log) an earlier snapshot it held back until no live message is below it.

Effects: an effect that is a `quorum.raft.LocalEffect` runs on every replica, any other only
on the leader; after a snapshot received from the leader, the machine's optional
`snapshot_installed(state)` effects run first (deliveries decided by the entries it covers).
That choice, applying, snapshot install and the compaction rule live in `quorum/replica.py`
(IO-free, shared with the cluster simulator in tests/sim/).

Proposing on any replica (`submit`): a follower or learner wraps the command in a `Forward`
envelope (its node id and a sequence number; `quorum/replica.py`) and sends it to the leader it
knows of (held until one is known); the leader appends it as a FORWARDED entry. Every replica
applies the inner command; the replica it came from resolves its callback when it applies the
entry itself, with the reply its own state machine computed. A forwarded command whose entry
has not come back when the term changes, or after `forward_timeout` seconds, fails with
`LeadershipLost` (outcome unknown): the caller resends what is safe to resend.

The hard state is written only when the term or vote changed, or together with entries: a
lagging commit index is safe to lose.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterable, Protocol

import msgspec
import trio

from .log import AsyncLog, LogError, StoredSnapshot
from .proposals import LeadershipLost, ProposalCallback, _CallbackWaiter, _Waiter
from .raft import (Append, Entry, EntryKind, HardState, NotLeader, Persisted, RaftError, RaftNode, RaftOptions,
                   Ready, Snapshot, SnapshotMeta, decode_config, decode_config_history, decode_entry,
                   decode_message, encode_config, encode_config_history, entry_pieces,
                   encode_message)
from .raft.machine import StateMachine
from .replica import (Forward, apply_entries, checkpoint_due, compaction_point, encode_forward,
                      install_snapshot, release_floor, unwrap_forward)
from .signal import Signal

__all__ = ["NodeDriver", "Sender", "GroupStatus", "LeadershipLost", "ProposalCallback",
           "FORWARD_PREFIX"]

# Frames for groups not hosted yet (`NodeDriver._keep_early`): how many groups, frames, seconds.
_EARLY_GROUPS, _EARLY_FRAMES, _EARLY_SECONDS = 256, 64, 5.0

# Transport frames whose group id starts with this carry a `replica.Forward` for the group named by the
# rest; Raft groups are never named so.
FORWARD_PREFIX = "\x01"



_log = logging.getLogger(__name__)


class Sender(Protocol):
    def send(self, peer: str, group: str, data: bytes) -> bool: ...


EffectsHandler = Callable[[str, list[Any]], None]
LeaderHandler = Callable[[str | None], None]


@dataclass
class _Group:
    id: str
    raft: RaftNode
    machine: StateMachine
    state: Any
    on_effects: EffectsHandler | None
    waiters: dict[int, _Waiter] = field(default_factory=dict)
    proposals: list[tuple[bytes, _Waiter | None]] = field(default_factory=list)
    inbox: list[Any] = field(default_factory=list)
    reads: list[tuple[bytes, _Waiter]] = field(default_factory=list)  # not yet asked
    read_waiters: dict[bytes, _Waiter] = field(default_factory=dict)  # asked, unconfirmed
    read_ready: list[tuple[int, _Waiter]] = field(default_factory=list)  # confirmed at index
    controls: list[tuple[Callable[[RaftNode, int], Any], _Waiter]] = field(default_factory=list)
    on_leader: LeaderHandler | None = None
    leader_seen: str | None = None
    forwards: dict[int, tuple[_CallbackWaiter, int]] = field(default_factory=dict)  # seq -> (w, deadline tick)
    unsent: list[bytes] = field(default_factory=list)  # our envelopes waiting for a known leader
    relayed: list[bytes] = field(default_factory=list)  # envelopes to append (if leading) or pass on
    installed: list[Any] = field(default_factory=list)  # effects of a snapshot just received
    leader_commit: int = 0  # the highest commit index a leader's Append told this follower
    applied_to: int = 0  # the last index of the batch whose effects are being run
    checkpoints: list[int] = field(default_factory=list)  # indexes of checkpoint files, in order
    checkpoint_at: int = 0  # index of the newest checkpoint taken (the next counts from it)
    checkpointing: bool = False  # a checkpoint file is being written
    promoting: bool = False  # a checkpoint is being read back to compact to it
    promotion: tuple[int, bytes] | None = None  # ... and here it is, for `_maybe_compact`


class _Reader:
    """The durable log as the Raft node's `LogReader` for one group (entries it dropped from
    memory, read back for lagging followers or for replay after a restart)."""

    __slots__ = ("_log", "_group")

    def __init__(self, log: AsyncLog, group: str) -> None:
        self._log = log
        self._group = group

    def entries(self, lo: int, hi: int) -> list[Entry]:
        return [decode_entry(p) for _, _, p in self._log.entries(self._group, lo, hi - 1)]


@dataclass(frozen=True, slots=True)
class GroupStatus:
    leader: str | None
    is_leader: bool
    term: int
    commit: int
    applied: int
    last_index: int


class NodeDriver:
    def __init__(
        self,
        node_id: str,
        log: AsyncLog,
        sender: Sender,
        *,
        options: RaftOptions | None = None,
        tick_interval: float = 0.05,
        snapshot_every: int = 4096,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        forward_timeout: float = 10.0,
    ) -> None:
        self.node_id = node_id
        self.log = log
        self.sender = sender
        self._options = options or RaftOptions()
        self._tick_interval = tick_interval
        self._snapshot_every = snapshot_every
        self._rng = rng or random.Random()
        self._clock = clock
        # entered around each on_effects call (the broker's OutputBatch: what the effects
        # queue for clients is written at its end)
        self.effects_batch: ContextManager[Any] = nullcontext()
        self._groups: dict[str, _Group] = {}
        self._dirty: dict[str, None] = {}  # ordered set of groups with input since last pass
        # groups a tick may change (`RaftNode.ticks_matter`, or forwards to expire); an idle
        # one-member group is not among them, so a pass of ticks skips it (kept up to date
        # after every pass for the groups it ran: nothing else changes a group)
        self._ticking: dict[str, None] = {}
        # the ticker waits on it while no group ticks (`_ticking` empty: every group a lone
        # leader, as on a single node); fired when one does
        self._tick_wanted = Signal()
        self._ticks = 0
        self._wake = trio.Event()
        # A pass runs in the driver's task, or in a task that held the wake-ups (`hold`) and
        # runs the pass its batch called for (`run_held`); never two at once. While a pass
        # runs or a holder works, `_mark` wakes nobody: the one that finishes looks at
        # `_dirty` (see `_passes`, `release`).
        self._passing = False
        self._pass_done = Signal()
        self._held = 0
        self._in_held_pass = False
        self._handed_off = False  # a held pass's end waits for the disk in the driver's nursery
        self._failed: BaseException | None = None  # a held pass failed: the driver raises it
        self._read_seq = 0
        self._early: dict[str, tuple[float, list]] = {}  # see _keep_early
        self._fwd_seq = 0
        self._tick_total = 0
        self._forward_ticks = max(1, int(forward_timeout / tick_interval))
        self.iterations = 0
        self.applied_entries = 0
        # asynchronous writes: (token, group, its Ready's messages, its last entry) in token
        # order, for Readies whose write is not durable yet; `_tail` is the last one's token
        self._writing: deque[tuple[int, _Group, list, Entry | None]] = deque()
        self._tail = 0
        self._nursery: trio.Nursery | None = None  # for checkpoint writes, while `run` runs

    # -- groups -------------------------------------------------------------------------------
    def add_group(self, group: str, machine: StateMachine, voters: Iterable[str] = (),
                  learners: Iterable[str] = (), on_effects: EffectsHandler | None = None,
                  on_leader: LeaderHandler | None = None) -> None:
        """Host `group` on this node, restarting it from the log if it has durable state.
        `voters` is the bootstrap membership (ignored once the group has a snapshot).
        `on_leader(leader or None)` is called from the loop whenever the leader this replica
        knows of changes."""
        persisted, state, checkpoint, checkpoints = self._load(group, machine)
        snap = persisted.snapshot
        applied = checkpoint.index if checkpoint else snap.meta.index if snap else 0
        history = (checkpoint.index, decode_config_history(checkpoint.meta)) if checkpoint else None
        raft = RaftNode(self.node_id, voters, rng=self._rng, persisted=persisted,
                        options=self._options, learners=learners, applied=applied,
                        reader=_Reader(self.log, group), config_history=history)
        self._groups[group] = g = _Group(group, raft, machine, state, on_effects,
                                         on_leader=on_leader)
        self._ticking[group] = None
        self._tick_wanted.fire()
        g.applied_to = applied  # the restored state's place in the log
        g.checkpoint_at = checkpoint.index if checkpoint else 0
        g.checkpoints = checkpoints
        self._mark(group)
        kept = self._early.pop(group, None)
        if kept is not None and time.monotonic() - kept[0] <= _EARLY_SECONDS:
            for peer, frame_group, data in kept[1]:
                self.deliver(peer, frame_group, data)

    def _load(self, group: str, machine: StateMachine
              ) -> tuple[Persisted, Any, StoredSnapshot | None, list[int]]:
        """The group's durable state, its machine's state, the checkpoint that state was
        restored from (None: from the snapshot, or from nothing), and the indexes of the
        checkpoints kept (that one and older ones, later compaction points). Checkpoint files
        the snapshot passed, or that cannot be used, are removed."""
        st = self.log.state(group)
        stored = self.log.read_snapshot(group) if st.snapshot_index else None
        snap = None
        state = machine.init()
        if stored is not None and stored.index == st.snapshot_index:
            snap = Snapshot(SnapshotMeta(stored.index, stored.term, decode_config(stored.meta)), stored.data)
            state = machine.restore(stored.data)
        elif st.snapshot_index:
            raise LogError(f"group {group!r}: log compacted to {st.snapshot_index} but its "
                           f"snapshot file is missing or corrupt")
        entries: list[Entry] = []
        if st.last_index >= st.first_index:
            # only a tail: the node reads older entries back through its reader when needed
            lo = max(st.first_index, st.last_index - self._options.memory_entries + 1)
            entries = [decode_entry(p) for _, _, p in self.log.entries(group, lo, st.last_index)]
        kept = self.log.checkpoint_indexes(group)
        unusable = [i for i in kept if not st.snapshot_index < i <= st.last_index]
        kept = [i for i in kept if st.snapshot_index < i <= st.last_index]
        checkpoint = None
        while kept and checkpoint is None:
            cp = self.log.read_checkpoint(group, kept[-1])
            if cp is not None and self.log.term(group, cp.index) == cp.term:
                checkpoint = cp
            else:  # damaged, or not this log's
                unusable.append(kept.pop())
        if unusable:
            self.log.drop_checkpoints_now(group, unusable)
        if checkpoint is not None:
            # taken at an applied (so committed and durable) entry: its state replaces the
            # snapshot's plus the replay of every entry up to it
            state = machine.restore(checkpoint.data)
        return (Persisted(HardState(st.term, st.vote, st.commit), snap, entries), state,
                checkpoint, kept)

    def remove_group(self, group: str, delete: bool = False) -> int:
        """Stop hosting `group` here; its waiters fail with NotLeader. With `delete`, its
        durable state is deleted too (the id must never be used again); returns the log
        token to `log.wait_durable` for, 0 without `delete`."""
        g = self._groups.pop(group, None)
        self._dirty.pop(group, None)
        self._ticking.pop(group, None)
        if g is None:
            return 0
        err = NotLeader(None)
        for w in [*g.waiters.values(), *(w for _, w in g.proposals if w is not None),
                  *g.read_waiters.values(), *(w for _, w in g.reads),
                  *(w for _, w in g.read_ready), *(w for _, w in g.controls),
                  *(w for w, _ in g.forwards.values())]:
            w.fail(err)
        return self.log.delete_group(group) if delete else 0

    def groups(self) -> list[str]:
        return list(self._groups)

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def entry_data(self, group: str, index: int) -> bytes | None:
        """The command bytes of entry `index` (e.g. a message body a Deliver effect names),
        a forwarded command unwrapped: from the Raft node's memory, else from the durable
        log; None if compacted away."""
        g = self._groups[group]
        r = g.raft
        meta = r.snapshot_meta
        if index > r.last_index or (meta is not None and index <= meta.index):
            return None
        got = r.entries(index, index + 1)
        if got:
            e = got[0]
        else:
            ents = self.log.entries(group, index, index)
            if not ents:
                return None
            e = decode_entry(ents[0][2])
        return unwrap_forward(e.data) if e.kind is EntryKind.FORWARDED else e.data

    def entry_range(self, group: str, lo: int, hi: int) -> list[tuple[int, bytes]]:
        """(index, `entry_data`) of entries lo..hi (inclusive) in one read, leaving out the
        part compacted away."""
        r = self._groups[group].raft
        meta = r.snapshot_meta
        if meta is not None and lo <= meta.index:
            lo = meta.index + 1
        hi = min(hi, r.last_index)
        if lo > hi:
            return []
        forwarded = EntryKind.FORWARDED
        return [(e.index, unwrap_forward(e.data) if e.kind is forwarded else e.data)
                for e in r.entries(lo, hi + 1)]

    def status(self, group: str) -> GroupStatus:
        r = self._groups[group].raft
        return GroupStatus(r.leader, r.is_leader, r.term, r.commit_index, r.applied_index, r.last_index)

    def behind(self, group: str) -> bool:
        """Is this replica applying entries the leader committed a while ago, with more of
        them still to come (catching up after a partition, a pause or a restart)? Effects
        run meanwhile may be stale (e.g. a delivery a later entry takes back)."""
        g = self._groups[group]
        return g.leader_commit > g.applied_to

    def raft(self, group: str) -> RaftNode:
        """The group's Raft node, for inspection. Change it only through `control`."""
        return self._groups[group].raft

    async def control(self, group: str, fn: Callable[[RaftNode, int], Any]) -> Any:
        """Run `fn(raft_node, now_ms)` inside the loop (membership changes, leadership
        transfer, ...) and return its result or raise its exception, e.g.
        ``await driver.control("q1", lambda r, now: r.add_learner("n4", now))``."""
        g = self._groups[group]
        w = _Waiter()
        g.controls.append((fn, w))
        self._mark(group)
        await w.event.wait()
        if w.error is not None:
            raise w.error
        return w.reply

    def state(self, group: str) -> Any:
        return self._groups[group].state

    # -- inputs -------------------------------------------------------------------------------
    def deliver(self, peer: str, group: str, data: bytes) -> None:
        """A frame from the transport. Undecodable frames are dropped; frames of a group this
        node does not host (yet) are kept a few seconds (`_keep_early`)."""
        if group.startswith(FORWARD_PREFIX):
            g = self._groups.get(group[1:])
            if g is None:
                self._keep_early(group[1:], peer, group, data)
                return
            g.relayed.append(data)  # checked when it is applied; a leader appends it as is
            self._mark(g.id)
            return
        g = self._groups.get(group)
        if g is None:
            self._keep_early(group, peer, group, data)
            return
        try:
            msg = decode_message(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if type(msg) is Append and msg.commit > g.leader_commit:
            g.leader_commit = msg.commit
        g.inbox.append(msg)
        self._mark(group)

    def _keep_early(self, group: str, peer: str, frame_group: str, data: bytes) -> None:
        """A new group is created on every member at about the same time (e.g. from a
        replicated declaration), and the first member's vote request may arrive before the
        others host it: keep such frames (a few, briefly) for `add_group` to feed in, instead
        of waiting an election timeout for the next one."""
        now = time.monotonic()
        early = self._early
        kept = early.get(group)
        if kept is None:
            if len(early) >= _EARLY_GROUPS:
                for name in [n for n, (t, _) in early.items() if now - t > _EARLY_SECONDS]:
                    del early[name]
                if len(early) >= _EARLY_GROUPS:
                    return
            kept = early[group] = (now, [])
        if len(kept[1]) < _EARLY_FRAMES:
            kept[1].append((peer, frame_group, data))

    async def propose(self, group: str, data: bytes) -> Any:
        """Propose one command; returns the state machine's reply once it is committed and
        applied here. Raises `NotLeader` (with `leader_hint`) when this node does not lead the
        group, or when the entry was replaced by another leader's; raises `LeadershipLost` when
        this node stepped down before the entry committed (outcome unknown). Cancelling the
        wait does not withdraw the command: it may still commit."""
        g = self._groups[group]
        if not g.raft.is_leader:
            raise NotLeader(g.raft.leader)
        w = _Waiter()
        g.proposals.append((data, w))
        self._mark(group)
        await w.event.wait()
        if w.error is not None:
            raise w.error
        return w.reply

    def propose_nowait(self, group: str, data: bytes, callback: ProposalCallback | None = None) -> None:
        """Like `propose` without a waiting task: `callback(reply, None)` once committed and
        applied, or `callback(None, error)` (the same errors as `propose`), called from the
        driver loop; raises `NotLeader` at once when this node does not lead the group."""
        g = self._groups[group]
        if not g.raft.is_leader:
            raise NotLeader(g.raft.leader)
        self._add_proposal(g, data, callback)

    def _add_proposal(self, g: _Group, data: bytes, callback: ProposalCallback | None) -> None:
        # nothing to tell without a callback: no waiter at all (the common publish case)
        w = _CallbackWaiter(callback) if callback is not None else None
        g.proposals.append((data, w))  # type: ignore[arg-type]
        self._mark(g.id)

    def submit(self, group: str, data: bytes, callback: ProposalCallback | None = None) -> None:
        """Propose on whichever replica this is: as `propose_nowait` on the leader, else
        forwarded to the leader (see the module docstring). `callback(reply, None)` once this
        replica has applied it, or `callback(None, LeadershipLost)` when the outcome is unknown."""
        g = self._groups[group]
        if g.raft.is_leader:
            self._add_proposal(g, data, callback)
            return
        seq = 0
        if callback is not None:
            self._fwd_seq += 1
            seq = self._fwd_seq
            w = _CallbackWaiter(callback)
            w.term = g.raft.term
            g.forwards[seq] = (w, self._tick_total + self._forward_ticks)
        g.unsent.append(encode_forward(Forward(self.node_id, seq, data)))
        self._mark(group)

    def _pass_on(self, g: _Group, now_ms: int) -> None:
        """Forwarded envelopes: append them when leading, else send them to the leader."""
        raft = g.raft
        if raft.is_leader:
            batch = g.relayed + g.unsent if g.unsent else g.relayed
            g.relayed, g.unsent = [], []
            if batch:
                try:
                    raft.propose_many(batch, now_ms, EntryKind.FORWARDED)
                except RaftError:
                    pass  # e.g. transferring leadership: their senders time out and resend
            return
        leader = raft.leader
        if leader is None or leader == self.node_id:
            g.relayed.clear()  # nobody to pass them to; their senders resend
            return
        send = self.sender.send
        for env in (*g.relayed, *g.unsent):
            send(leader, FORWARD_PREFIX + g.id, env)
        g.relayed.clear()
        g.unsent.clear()

    def _expire_forwards(self, g: _Group) -> None:
        """Fail forwarded commands sent under an older term or not back in time."""
        term, now = g.raft.term, self._tick_total
        gone = [seq for seq, (w, deadline) in g.forwards.items() if w.term != term or now >= deadline]
        if gone:
            err = LeadershipLost(g.raft.leader)
            for seq in gone:
                g.forwards.pop(seq)[0].fail(err)

    async def wait_linearizable(self, group: str) -> None:
        """Return once this node's state machine for `group` reflects every command committed
        before the call (Raft ReadIndex): read `state(group)` right after for a linearizable
        read. Leader only: raises `NotLeader`, or `LeadershipLost` if it steps down meanwhile."""
        g = self._groups[group]
        if not g.raft.is_leader:
            raise NotLeader(g.raft.leader)
        w = _Waiter()
        self._read_seq += 1
        g.reads.append((b"r%d" % self._read_seq, w))
        self._mark(group)
        await w.event.wait()
        if w.error is not None:
            raise w.error

    def wake(self, group: str | None = None) -> None:
        if group is not None:
            self._mark(group)
        else:
            self._wake.set()

    @property
    def pass_due(self) -> bool:
        """Input arrived since the last pass, so another runs soon (most often a write)."""
        return bool(self._dirty)

    def _mark(self, group: str) -> None:
        self._dirty[group] = None
        if not (self._held or self._passing):
            self._wake.set()

    # -- passes run by the task whose input called for them (module docstring, "Who runs") ---
    def hold(self) -> None:
        """Until `release`: what is proposed wakes no task; the holder runs the pass."""
        self._held += 1

    def release(self) -> bool:
        """End a `hold`. True: a pass is due, and the caller is to `await run_held()` now
        (before any other await). False: none is, or it is another task's: a pass is running
        now, whose task looks for more work when it ends; or other tasks are ready to run (under
        load, other connections' readers), and the driver's task runs the pass after them,
        with what they propose (one write and fdatasync for all: a pass run by each reader
        alone wrote more, smaller batches, and a quorum queue's consumer fell behind its
        publisher). An exception leaving a hold: `release()` then `wake()`."""
        self._held -= 1
        if self._held or self._passing or not self._dirty:
            return False
        if trio.lowlevel.current_statistics().tasks_runnable:
            self._wake.set()
            return False
        return True

    async def run_held(self) -> None:
        """The pass `release` called for, in the caller's task; shielded from its
        cancellation (a pass must finish). A failure is the node's: it is raised in the
        driver's task, as one of its own passes would be."""
        if self._passing or self._failed is not None or not self._dirty:
            return
        with trio.CancelScope(shield=True):
            self._in_held_pass = True
            try:
                await self._passes()
            except Exception as exc:
                self._failed = exc
                self._wake.set()
            finally:
                self._in_held_pass = False

    async def _passes(self) -> None:
        """A pass, then a second at once if it left work (most often the commit that its
        write made known: a one-member group commits on `advance`; applied now rather than
        a pass of the loop later). Only two, so the loop still yields between passes under
        load: work left after them wakes the driver's task."""
        self._passing = True
        try:
            await self.run_once()
            if self._dirty and not self._handed_off:
                await self.run_once()
        finally:
            if not self._handed_off:
                self._passes_done()

    def _passes_done(self) -> None:
        self._passing = False
        self._pass_done.fire()
        if self._dirty and not self._held:
            self._wake.set()

    # -- the loop -----------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the WAL writer, the ticker and the ready loop until cancelled or the log fails."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self._options.async_writes:
                self.log.on_durable = self._on_durable
            await nursery.start(self.log.run)
            nursery.start_soon(self._ticker)
            task_status.started()
            try:
                await self._loop()
            finally:
                self._nursery = None

    async def _ticker(self) -> None:
        """A tick every `tick_interval` while a group can use it. With none (every group a
        lone leader: every queue of a single node) the ticker waits instead: an idle single
        node woke 49 times a second, 10.6 without these (perf stat, epoll_wait)."""
        while True:
            if not self._ticking:
                await self._tick_wanted.wait()
            await trio.sleep(self._tick_interval)
            self._ticks += 1
            self._tick_total += 1
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._passing:  # a held pass, waiting for the disk: this one comes after
                await self._pass_done.wait()
            if self._failed is not None:
                raise self._failed
            await self._passes()

    async def run_once(self) -> None:
        """One pass over every group with work. Public for tests that step a driver by hand."""
        self.iterations += 1
        if self._writing:
            self._finish_writes()
        ticks, self._ticks = self._ticks, 0
        if ticks:
            # every group that a tick may change, and those with work; an idle one-member
            # group (every queue of a single node) is skipped: 300 idle queues of a single
            # node took 9-12% of a core, 4.4-6.1% without their ticks
            names = [*self._ticking, *(name for name in self._dirty if name not in self._ticking)]
        else:
            names = list(self._dirty)
        self._dirty.clear()
        try:
            await self._run_groups(names, ticks)
        finally:
            if not self._handed_off:
                self._update_ticking(names)

    def _update_ticking(self, names: list[str]) -> None:
        groups, ticking = self._groups, self._ticking
        for name in names:
            g = groups.get(name)
            if g is not None and (g.raft.ticks_matter or g.forwards):
                ticking[name] = None
            else:
                ticking.pop(name, None)
        if ticking:
            self._tick_wanted.fire()

    async def _run_groups(self, names: list[str], ticks: int) -> None:
        """The pass itself, over the groups `names` (see the module docstring)."""
        now_ms = int(self._clock() * 1000)
        readies: list[tuple[_Group, Ready]] = []
        promotions: list[_Group] = []
        for name in names:
            g = self._groups.get(name)
            if g is None:
                continue
            self._feed(g, ticks, now_ms)
            rd = g.raft.ready()
            if rd is not None:
                readies.append((g, rd))
            elif g.promotion is not None:  # a checkpoint read back, and no Ready to wait for
                promotions.append(g)
        for g in promotions:
            await self._maybe_compact(g)
        if not readies:
            return
        token = 0
        tokens = []
        for g, rd in readies:
            tokens.append(await self._persist(g, rd))
            token = max(token, tokens[-1])
        if token:
            self.log.flush()  # a small batch with the writer idle: durable on return
        send = self.sender.send
        for g, rd in readies:  # a leader's replication traffic may precede its own fsync
            for m in rd.early_messages:
                send(m.to, g.id, encode_message(m))
        if self._options.async_writes:
            await self._finish_pass(readies, tokens)
            return
        # Pipelining: what this pass commits was made durable by an earlier pass (entries
        # below this Ready's own), so apply it while the disk writes this pass's batch.
        rest: list[list[Entry]] = []
        for g, rd in readies:
            committed = rd.committed
            if committed and rd.snapshot is None:
                cut = _durable_prefix(committed, rd.entries)
                self._apply(g, committed[:cut] if cut < len(committed) else committed)
                committed = committed[cut:]
            rest.append(committed)
        if token and self._in_held_pass and self.log.durable < token and self._nursery is not None:
            # The writer task has the batch (a large one, or it was busy): the rest of the
            # pass waits for the disk in the driver's nursery, not in the held pass's task (a
            # publisher's reader, which goes on reading meanwhile, as with the driver's own
            # passes). No pass starts before it ends (`_passing`).
            self._handed_off = True
            self._nursery.start_soon(self._end_handed_off, readies, rest, token, names)
            return
        await self._end_pass(readies, rest, token)

    async def _end_handed_off(self, readies: list[tuple[_Group, Ready]], rest: list[list[Entry]],
                              token: int, names: list[str]) -> None:
        try:
            await self._end_pass(readies, rest, token)
        finally:
            self._handed_off = False
            self._update_ticking(names)
            self._passes_done()

    async def _end_pass(self, readies: list[tuple[_Group, Ready]], rest: list[list[Entry]],
                        token: int) -> None:
        """The pass after its batch is written: wait for the disk, then send, apply the rest
        and advance."""
        if token:
            await self.log.wait_durable(token)
        send = self.sender.send
        for g, rd in readies:
            for m in rd.messages:
                send(m.to, g.id, encode_message(m))
        for (g, rd), committed in zip(readies, rest):
            if self._groups.get(g.id) is not g:
                continue  # removed during this pass (e.g. by an effect): nothing to finish
            self._apply_ready(g, rd, committed)
            raft = g.raft
            raft.advance(rd)
            if not self._dirty and raft.only_commits_ready():
                # A lone leader committed what this pass wrote (at `advance`): apply it now,
                # as the next pass would, without that pass's round over every input. Only
                # when no input waits: that goes with the next pass, which applies these
                # entries while the disk writes the new ones.
                rd = raft.ready()
                self._apply_ready(g, rd, rd.committed)
                raft.advance(rd)
            await self._after_advance(g)

    def _apply_ready(self, g: _Group, rd: Ready, committed: list[Entry]) -> None:
        if g.installed:  # a received snapshot's effects come before its later entries
            installed, g.installed = g.installed, []
            if g.on_effects is not None:
                g.on_effects(g.id, installed)
        self._apply(g, committed)
        for rs in rd.read_states:
            w = g.read_waiters.pop(rs.ctx, None)
            if w is not None:
                g.read_ready.append((rs.index, w))
        if (g.waiters or g.read_waiters or g.read_ready) and not g.raft.is_leader:
            self._abandon(g)

    async def _finish_pass(self, readies: list[tuple[_Group, Ready]], tokens: list[int]) -> None:
        """Asynchronous writes (`RaftOptions.async_writes`): finish the pass without waiting
        for the disk. Ready.committed is durable here already, so it is applied now; each
        Ready's messages (AppendResps, votes: promises about the disk) are held until its
        write and every earlier one are durable (`_finish_writes`), and only then does the
        node learn that its entries are (`persisted`). Inputs that arrive meanwhile (a
        follower's answer, so the leader's commit; the commit index, so a follower's apply)
        are handled by the next pass at once, not after this write."""
        for (g, rd), token in zip(readies, tokens):
            if self._groups.get(g.id) is not g:
                continue
            self._apply_ready(g, rd, rd.committed)
            g.raft.advance(rd)
            last = rd.entries[-1] if rd.entries else None
            wait = max(token, self._tail)
            if self._writing or wait > self.log.durable:
                self._tail = wait  # never overtake an earlier Ready's messages
                self._writing.append((wait, g, rd.messages, last))
            else:
                send = self.sender.send
                for m in rd.messages:
                    send(m.to, g.id, encode_message(m))
                if last is not None:
                    g.raft.persisted(last.index, last.term)
            await self._after_advance(g)

    def _finish_writes(self) -> None:
        """Asynchronous writes: send the messages of the Readies whose writes are durable now,
        in order, and tell their nodes (`persisted`)."""
        durable, writing, send = self.log.durable, self._writing, self.sender.send
        while writing and writing[0][0] <= durable:
            _, g, messages, last = writing.popleft()
            if self._groups.get(g.id) is not g:
                continue
            for m in messages:
                send(m.to, g.id, encode_message(m))
            if last is not None:
                g.raft.persisted(last.index, last.term)
            self._dirty[g.id] = None  # it may commit (leader) or apply now

    def _on_durable(self, upto: int) -> None:
        if self._writing and self._writing[0][0] <= upto:
            self._wake.set()

    async def _after_advance(self, g: _Group) -> None:
        if g.raft.leader != g.leader_seen:
            g.leader_seen = g.raft.leader
            if g.unsent:
                self._mark(g.id)  # a leader to send them to, at last
            if g.on_leader is not None:
                try:
                    g.on_leader(g.leader_seen)
                except Exception:  # never stop the loop
                    _log.exception("group %s: leader callback failed", g.id)
        if g.read_ready:
            self._serve_reads(g)
        await self._maybe_compact(g)
        if g.raft.has_ready():
            self._mark(g.id)

    def _feed(self, g: _Group, ticks: int, now_ms: int) -> None:
        raft = g.raft
        inbox, g.inbox = g.inbox, []
        for m in inbox:
            raft.step(m)
        for _ in range(ticks):
            raft.tick()
        if g.controls:
            controls, g.controls = g.controls, []
            for fn, w in controls:
                try:
                    w.resolve(fn(raft, now_ms))
                except Exception as e:  # handed to the caller, never kills the loop
                    w.fail(e)
        if g.reads:
            reads, g.reads = g.reads, []
            for ctx, w in reads:
                try:
                    raft.read_index(ctx)
                except RaftError as e:
                    w.fail(e)
                    continue
                g.read_waiters[ctx] = w
        if g.relayed or g.unsent:
            self._pass_on(g, now_ms)
        if g.forwards and ticks:
            self._expire_forwards(g)
        if g.proposals:
            props, g.proposals = g.proposals, []
            try:
                last = raft.propose_many([d for d, _ in props], now_ms)
            except RaftError as e:
                for _, w in props:
                    if w is not None:
                        w.fail(e)
                return
            first = last - len(props) + 1
            term = raft.term
            waiters = g.waiters
            for i, (_, w) in enumerate(props):
                if w is not None:  # None: propose_nowait without a callback
                    w.term = term
                    waiters[first + i] = w

    async def _persist(self, g: _Group, rd: Ready) -> int:
        """Queue this Ready's durable state in the WAL; returns the token to wait for.
        Nothing for a group removed during an earlier await of the pass (its queue deleted):
        no record may follow its DELETE."""
        token = 0
        log = self.log
        if self._groups.get(g.id) is not g:
            return 0
        if rd.snapshot is not None:
            token = await log.save_snapshot(g.id, _stored(rd.snapshot), discard=True)
            if self._groups.get(g.id) is not g:
                return 0
            g.state, g.installed = install_snapshot(g.machine, rd.snapshot.data)
            # the state is applied up to the snapshot: without this a replica that caught up
            # through a snapshot with nothing after it stayed `behind` for good, and a quorum
            # queue held its deliveries for as long (found by the Jepsen-style test)
            g.applied_to = max(g.applied_to, rd.snapshot.meta.index)
            await self._passed_checkpoint(g, rd.snapshot.meta.index)
        if rd.entries:
            token = log.append(g.id, [(e.index, e.term, entry_pieces(e)) for e in rd.entries],
                               flush=False)  # run_once flushes the pass's writes at once
        hs = rd.hard_state
        if hs is not None:
            term, vote, _ = log.hard_state(g.id)
            if rd.entries or term != hs.term or vote != hs.vote:
                token = log.set_hard_state(g.id, hs.term, hs.vote, hs.commit, flush=False)
        return token

    def _apply(self, g: _Group, committed: list[Entry]) -> None:
        if not committed or self._groups.get(g.id) is not g:
            return  # nothing, or the group was removed meanwhile (e.g. by an effect)
        waiters = g.waiters
        forwards = g.forwards
        if waiters or forwards:
            raft, me = g.raft, self.node_id

            def resolve(e: Entry, reply: Any, fw: Forward | None) -> None:
                if fw is not None and fw.seq and fw.origin == me:
                    got = forwards.pop(fw.seq, None)
                    if got is not None:
                        got[0].resolve(reply)
                w = waiters.pop(e.index, None)
                if w is not None:
                    if w.term == e.term:
                        w.resolve(reply)
                    else:
                        w.fail(NotLeader(raft.leader))
        else:
            resolve = None
        g.state, effects_out = apply_entries(g.machine, g.state, committed, g.raft.is_leader,
                                             resolve)
        g.applied_to = committed[-1].index
        self.applied_entries += len(committed)
        if effects_out and g.on_effects is not None:
            with self.effects_batch:
                g.on_effects(g.id, effects_out)

    def _abandon(self, g: _Group) -> None:
        """No longer leader: nothing would resolve the waiters until later entries commit at
        their indexes, which may never happen if their proposers wait on us. Tell them now."""
        waiters, g.waiters = g.waiters, {}
        reads, g.read_waiters = g.read_waiters, {}
        ready, g.read_ready = g.read_ready, []
        err = LeadershipLost(g.raft.leader)
        for w in [*waiters.values(), *reads.values(), *(w for _, w in ready)]:
            w.fail(err)

    def _serve_reads(self, g: _Group) -> None:
        applied = g.raft.applied_index
        keep = []
        for index, w in g.read_ready:
            if index <= applied:
                w.resolve(None)
            else:
                keep.append((index, w))
        g.read_ready = keep

    async def _maybe_compact(self, g: _Group) -> None:
        raft = g.raft
        meta = raft.snapshot_meta
        snap_index = meta.index if meta else 0
        applied = raft.applied_index
        point = None
        if g.promotion is not None:  # a checkpoint read back: compact to it
            point, g.promotion = g.promotion, None
            if not snap_index < point[0] <= applied:
                point = None
        if point is None:
            point = compaction_point(g.machine, g.state, applied, applied - snap_index,
                                     self._snapshot_every)
            if point is not None and point[0] <= snap_index:
                return  # a cursor held since before a compaction to a checkpoint past it
        if point is None:
            await self._maybe_promote(g, snap_index)
            await self._maybe_checkpoint(g, applied - max(snap_index, g.checkpoint_at))
            return
        snap = raft.compact(*point)
        await self.log.save_snapshot(g.id, _stored(snap), discard=False)
        await self._passed_checkpoint(g, snap.meta.index)

    async def _passed_checkpoint(self, g: _Group, snap_index: int) -> None:
        """A snapshot at `snap_index` is durable: the checkpoints at or before it are of no
        more use (a restart starts from the snapshot), so their files go. One still being
        written is dropped by its writer."""
        gone = [i for i in g.checkpoints if i <= snap_index]
        if gone:
            g.checkpoints = [i for i in g.checkpoints if i > snap_index]
            await self._in_background(self.log.drop_checkpoints, g.id, gone)

    async def _maybe_promote(self, g: _Group, snap_index: int) -> None:
        """Compact to the newest checkpoint that the machine's `release_floor` allows (ra's
        several release cursors): a queue draining a deep backlog lets the log below it go
        as its consumers pass each checkpoint, not only once it is nearly empty. The file is
        read in the background; the next `_maybe_compact` compacts to it."""
        if g.promoting or not g.checkpoints or g.checkpoints[0] > g.raft.applied_index:
            return
        floor = release_floor(g.machine, g.state)
        if floor is None:
            return
        below = [i for i in g.checkpoints if snap_index < i <= floor]
        if not below:
            return
        index = below[-1]
        g.promoting = True

        async def read() -> None:
            try:
                cp = await trio.to_thread.run_sync(self.log.read_checkpoint, g.id, index)
            finally:
                g.promoting = False
            if self._groups.get(g.id) is not g:
                return
            if cp is None or self.log.term(g.id, index) != cp.term:
                # damaged (or passed meanwhile): the next one down may serve
                g.checkpoints = [i for i in g.checkpoints if i != index]
                await self.log.drop_checkpoints(g.id, [index])
                return
            g.promotion = (index, cp.data)
            self._mark(g.id)
        await self._in_background(read)

    async def _maybe_checkpoint(self, g: _Group, since: int) -> None:
        """Write a checkpoint if the machine wants one: in the background when the driver runs
        (a deep queue's is hundreds of MB), one at a time per group."""
        if g.checkpointing or since <= 0:
            return
        data = checkpoint_due(g.machine, g.state, since)
        if data is None:
            return
        raft = g.raft
        index = raft.applied_index
        term = raft.log_term(index)
        if term is None:
            return
        cp = StoredSnapshot(index, term, encode_config_history(raft.config_history(index)), data)
        g.checkpointing = True
        g.checkpoint_at = index  # the next one counts from here, written or not yet

        async def write() -> None:
            try:
                await self.log.save_checkpoint(g.id, cp)
            finally:
                g.checkpointing = False
            meta = raft.snapshot_meta
            if meta is not None and meta.index >= index:
                await self.log.drop_checkpoints(g.id, [index])  # compacted past it meanwhile
            elif self._groups.get(g.id) is g:
                g.checkpoints.append(index)
        await self._in_background(write)

    async def _in_background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run the async `fn(*args)` in the driver's nursery (a failure of the log stops the
        node, as one in the loop does); at once when the driver is stepped by hand (tests)."""
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)
        else:
            await fn(*args)

    def statistics(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "applied": self.applied_entries,
                "groups": len(self._groups), "log": self.log.statistics()}


def _durable_prefix(committed: list[Entry], appending: list[Entry]) -> int:
    """How many of `committed` are below the entries this pass appends: those were
    appended and fsynced by an earlier pass (or are from the restart's durable log)."""
    if not appending:
        return len(committed)
    first = appending[0].index
    if committed[-1].index < first:
        return len(committed)
    n = 0
    for e in committed:
        if e.index >= first:
            break
        n += 1
    return n


def _stored(snap: Snapshot) -> StoredSnapshot:
    return StoredSnapshot(snap.meta.index, snap.meta.term, encode_config(snap.meta.config), snap.data)
