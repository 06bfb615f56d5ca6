"""What one replica does with its state machine, without any IO: apply committed entries and
pick the effects this replica runs, install a received snapshot, decide when to compact or
checkpoint.

Called by `quorum/driver.py` (the trio loop of a node) and by the deterministic cluster
simulator (`tests/sim/`), so that the simulator runs the very rules the driver runs:
- every committed NORMAL entry is applied in log order, and so is the command inside a
  FORWARDED entry (a `Forward` envelope: proposed on another replica, see `NodeDriver.submit`);
  CONFIG and NOOP entries only move the index (the proposer of any entry still gets its
  outcome through `on_reply`);
- a leader keeps every effect, a follower only the `LocalEffect`s (deliveries, which the effect
  handler then keeps for the consumer's node with `quorum.fifo.should_run`);
- a snapshot received from the leader replaces the state (`machine.restore`), and the
  machine's optional `snapshot_installed(state)` gives the effects to run for it: entries the
  snapshot covers were never applied here, so the local effects they decided (deliveries to
  this node's consumers) must be produced again (a restart restores its own durable snapshot
  with plain `machine.restore`: the processes those effects were for died with the node);
- a group compacts once `every` entries were applied since its snapshot (`compaction_point`):
  to the applied index, unless the machine's optional `compactable(state, since)` says not
  yet; a machine with `release_cursor(state, applied, since, every)` names the point itself (a snapshot
  of an earlier state it held back until the log below it was no longer needed, as ra's
  release cursor: a quorum queue keeps its bodies in the log);
- a machine with `checkpoint(state, since)` may, when the log is not compacted, hand over a
  snapshot of the applied state to keep beside the log (`checkpoint_due`; ra's checkpoints):
  a restart then restores the newest and applies only the later entries, where without it a
  queue with a deep backlog, whose log cannot be compacted, would apply all of them again;
  and once the machine's `release_floor(state)` reaches a checkpoint, the log is compacted to
  it (ra's several release cursors: a draining backlog gives its log back step by step).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import msgspec

from .raft import Entry, EntryKind, LocalEffect, Meta
from .raft.machine import StateMachine

__all__ = ["apply_entries", "install_snapshot", "compaction_due", "compaction_point", "checkpoint_due", "release_floor", "unwrap_forward", "Forward", "encode_forward"]

_log = logging.getLogger(__name__)


class Forward(msgspec.Struct, array_like=True, frozen=True):
    """A command proposed on a replica that does not lead: `seq` 0 when nobody waits."""

    origin: str
    seq: int
    data: bytes


encode_forward = msgspec.msgpack.Encoder().encode
_decode_forward = msgspec.msgpack.Decoder(Forward).decode



def unwrap_forward(data: bytes) -> bytes:
    """The command inside a FORWARDED entry's envelope."""
    return _decode_forward(data).data


ReplyHandler = Callable[[Entry, Any, "Forward | None"], None]


def apply_entries(machine: StateMachine, state: Any, committed: list[Entry], is_leader: bool,
                  on_reply: ReplyHandler | None = None) -> tuple[Any, list[Any]]:
    """Apply `committed` (consecutive, in order) to `state`; returns the new state and the
    effects this replica runs. `on_reply(entry, reply, envelope)` is called after each entry
    (reply None for a CONFIG or NOOP entry; the `Forward` envelope of a FORWARDED one, else
    None). Hot path: one `machine.apply` per entry, nothing else."""
    apply, decode = machine.apply, machine.decode
    normal, forwarded = EntryKind.NORMAL, EntryKind.FORWARDED
    out: list[Any] = []
    for e in committed:
        reply = fw = None
        kind = e.kind
        if kind is normal or kind is forwarded:
            data = e.data
            if kind is forwarded:
                try:
                    fw = _decode_forward(data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    _log.error("undecodable forwarded entry %d: skipped", e.index)
                    continue
                data = fw.data
            state, reply, effects = apply(Meta(e.index, e.term, e.timestamp), decode(data),
                                          state)
            if is_leader:
                out += effects
            elif effects:
                out += [eff for eff in effects if isinstance(eff, LocalEffect)]
        if on_reply is not None:
            on_reply(e, reply, fw)
    return state, out


def install_snapshot(machine: StateMachine, data: bytes) -> tuple[Any, list[Any]]:
    """The state a replica continues from after receiving a snapshot from the leader, and the
    (local) effects to run for it, before those of any later entry."""
    state = machine.restore(data)
    installed = getattr(machine, "snapshot_installed", None)  # optional, like compactable
    return state, (installed(state) if installed is not None else [])


def compaction_due(machine: StateMachine, state: Any, since: int, every: int) -> bool:
    """Whether to compact now, `since` entries after the last snapshot."""
    if since < every:
        return False
    gate = getattr(machine, "compactable", None)  # optional: the machine may say "not yet"
    return gate is None or gate(state, since)


def compaction_point(machine: StateMachine, state: Any, applied: int, since: int,
                     every: int) -> tuple[int, bytes] | None:
    """(index, snapshot data) to compact the log to now, `since` entries after the last
    snapshot, with the state applied up to `applied`; None: not now. Asked after every
    batch; a machine with a release cursor decides alone (it may compact early)."""
    cursor = getattr(machine, "release_cursor", None)  # optional, like compactable
    if cursor is not None:
        return cursor(state, applied, since, every)
    if since < every:
        return None
    if not compaction_due(machine, state, since, every):
        return None
    return applied, machine.snapshot(state)


def checkpoint_due(machine: StateMachine, state: Any, since: int) -> bytes | None:
    """Snapshot data for a checkpoint at the applied index (kept beside the log, which it
    does not compact, so that a restart applies only the entries after it), `since` entries
    after the last snapshot or checkpoint; None: not now, or the machine takes none."""
    take = getattr(machine, "checkpoint", None)  # optional, like release_cursor
    return None if take is None else take(state, since)


def release_floor(machine: StateMachine, state: Any) -> int | None:
    """The highest index the log may now be compacted to with a checkpoint taken there
    earlier (its state then becomes the snapshot); None: the machine does not say."""
    floor = getattr(machine, "release_floor", None)  # optional, with checkpoint
    return None if floor is None else floor(state)
