"""The quorum queue state machine, in the manner of RabbitMQ's rabbit_fifo.

`apply(meta, cmd, state) -> Applied(reply, effects)` is called by the Raft driver for
every committed entry on every replica; the quorum adapter builds commands and runs
effects (`Deliver` locally on the consumer's node, the rest on the leader).  Pure: no
IO, no clock but `meta.timestamp`, deterministic.  See the module docstrings for details:
commands.py (inputs), effects.py (outputs), state.py (state, snapshots), machine.py.
"""
from .codec import decode_command, encode_command, encode_enqueue
from .commands import (AT_LEAST_ONCE, AT_MOST_ONCE, DEFAULT_HANDOFF_TIMEOUT,
                       DEFAULT_REBALANCE_DELAY, DROP_HEAD, REJECT_PUBLISH,
                       REJECT_PUBLISH_DLX, UNLIMITED_PREFETCH, Cancel, Checkout, Command,
                       ConsumerDown, ConsumerKey, Credit, Dequeue, Discard, DlxSettle,
                       Enqueue, Meta, NodeDown, NodeUp, Purge, QueueConfig, Requeue, Return,
                       Settle, Tick, Unsent, UpdateConfig)
from .effects import (DUPLICATE, NOT_FOUND, OK, OUT_OF_SEQUENCE, REJECTED, UNSUPPORTED,
                      Applied, CancelReply, CheckoutReply, Confirm, ConsumerActive,
                      CreditReply, DeadLetter, DeadMsg, Deliver, Delivery, DequeueReply,
                      Monitor, QueueExpired, RejectPublish, ReleaseCursor, SetTimer,
                      should_run)
from .hooks import FifoMachine, leader_effects, return_commands, snapshot_installed_effects
from .machine import apply
from .state import (QueueState, active_consumer, digest, handoff_counts, init, overview,
                    partition_overview, restore, snapshot, suspected_nodes)

__all__ = [
    "apply", "FifoMachine", "return_commands", "leader_effects", "snapshot_installed_effects", "should_run", "init", "snapshot", "restore", "digest", "overview",
    "active_consumer", "partition_overview", "handoff_counts", "QueueState", "encode_command", "encode_enqueue", "decode_command",
    "suspected_nodes",
    # commands
    "Meta", "ConsumerKey", "QueueConfig", "Command", "Enqueue", "Checkout", "Dequeue",
    "Settle", "Return", "Requeue", "Discard", "Credit", "Cancel", "ConsumerDown",
    "NodeDown", "NodeUp", "Purge", "Tick", "UpdateConfig", "DlxSettle", "Unsent",
    "DROP_HEAD", "REJECT_PUBLISH", "REJECT_PUBLISH_DLX", "AT_MOST_ONCE", "AT_LEAST_ONCE",
    "UNLIMITED_PREFETCH", "DEFAULT_HANDOFF_TIMEOUT", "DEFAULT_REBALANCE_DELAY",
    # effects and replies
    "Applied", "Delivery", "DeadMsg", "Deliver", "Confirm", "RejectPublish", "DeadLetter",
    "ReleaseCursor", "SetTimer", "Monitor", "ConsumerActive", "QueueExpired",
    "CheckoutReply", "DequeueReply", "CancelReply", "CreditReply",
    "OK", "DUPLICATE", "OUT_OF_SEQUENCE", "REJECTED", "NOT_FOUND", "UNSUPPORTED",
]
