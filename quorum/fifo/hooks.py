"""Helpers the runtime (quorum adapter / Raft driver) calls around `apply()`.

- `return_commands`: what to propose for a client requeue (Return, or Requeue entries
  that re-append the payload when the delivery limit is unlimited, as RabbitMQ 4.x).
- `leader_effects`: effects to run when this replica becomes leader.
- `snapshot_installed_effects`: deliveries to resend after installing a snapshot.
- `FifoMachine`: the fifo as a `quorum.raft.StateMachine` for `quorum.driver.NodeDriver`.
Only `FifoMachine.apply` changes a state.
"""
from __future__ import annotations

from typing import Callable

from .codec import decode_command
from .commands import Command, Meta, QueueConfig, Requeue, Return
from .consumers import SUSPECTED
from .delivery import delivery_of, next_timer
from .effects import Deliver, Monitor, SetTimer
from .machine import apply
from .state import QueueState, init, restore, snapshot

__all__ = ["return_commands", "leader_effects", "snapshot_installed_effects", "FifoMachine"]


class FifoMachine:
    """One quorum queue's machine for the Raft driver: entries are `encode_command` bytes.

    The driver passes every `LocalEffect` (`Deliver`) to each replica's effect handler and
    the rest only on the leader; the handler keeps a `Deliver` only if
    `should_run(effect, node, is_leader, members)`.  Log compaction must keep the entries
    at or above the last `ReleaseCursor.smallest_live`: they hold the message bodies."""

    def __init__(self, config: QueueConfig, created_ms: int | None = None) -> None:
        self.config = config
        self.created_ms = created_ms

    def init(self) -> QueueState:
        return init(self.config, self.created_ms)

    def decode(self, data: bytes) -> Command:
        return decode_command(data)

    def apply(self, meta: Meta, command: Command, state: QueueState):
        applied = apply(meta, command, state)
        return state, applied.reply, applied.effects

    def snapshot(self, state: QueueState) -> bytes:
        return snapshot(state)

    def restore(self, data: bytes) -> QueueState:
        return restore(data)

    def snapshot_installed(self, state: QueueState) -> list:
        """Called by the driver (`quorum.replica.install_snapshot`) after a received
        snapshot: the deliveries to send again."""
        return snapshot_installed_effects(state)


def return_commands(q: QueueState, cmd: Return,
                    read_payload: Callable[[int], bytes]) -> list[Command]:
    """What the leader proposes for a client's requeue (RabbitMQ 4.x): with a delivery
    limit the `Return` itself; unlimited, one `Requeue` per message, re-appending its
    payload so the old log entry can be truncated (repeated requeues then cannot pin
    the log).  `read_payload(index)` reads the stored payload of a log entry."""
    if q.config.delivery_limit is not None or q.parts is not None:
        # a partitioned queue keeps a returned message at its place in its partition
        return [cmd]
    c = q.consumers.get(cmd.consumer)
    if c is None:
        return []
    return [Requeue(cmd.consumer, mid, read_payload(c.checked_out[mid].index))
            for mid in cmd.msg_ids if mid in c.checked_out]


def leader_effects(q: QueueState) -> list:
    """Effects a replica runs when it becomes leader (rabbit_fifo's state_enter(leader)):
    re-arm the timer and monitor every known consumer and publisher process."""
    effects: list = [SetTimer(next_timer(q))]
    seen: dict = {}
    for c in [*q.consumers.values(), *q.waiting]:
        seen.setdefault((c.key.pid, c.key.node), None)
    for pid in q.enqueuers:
        seen.setdefault((pid, None), None)
    effects += [Monitor(pid, node) for pid, node in seen]
    effects += [Monitor(None, node) for node in
                dict.fromkeys(c.key.node for c in [*q.consumers.values(), *q.waiting]
                              if c.status == SUSPECTED)]
    return effects


def snapshot_installed_effects(q: QueueState) -> list:
    """After a replica installs a snapshot it may have missed deliveries decided by the
    entries the snapshot covers: resend every checked-out message (the runtime filters
    with `should_run`, and channels drop msg ids they already delivered), as
    rabbit_fifo's snapshot_installed does."""
    return [Deliver(c.key, tuple(delivery_of(i, m) for i, m in c.checked_out.items()))
            for c in q.consumers.values() if c.checked_out]
