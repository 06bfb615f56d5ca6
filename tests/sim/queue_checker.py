"""The quorum queue's guarantees, checked while the simulation runs (`queue_world.QueueWorld`
feeds it) and at the end:

- no confirmed message is lost: after healing, restarting and draining, every message a
  publisher got a Confirm for was removed from the queue by a consumer's Settle;
- FIFO per publisher: first deliveries (acquired 0) of one publisher's messages are decided
  in publish order (deliveries decided by the same entry count as simultaneous: one Deliver
  per consumer loses the order between consumers);
- x-delivery-count: a message's first delivery has acquired 0 and every later one a higher
  count than the one before; nothing is delivered after its Settle applied;
- each delivery runs on one node, the consumer's;
- replicas agree: every replica decides the same deliveries for an entry, holds the body of
  every message it delivers, and has the same state (digest of the machine's snapshot) at the
  same applied index, whether it got there by entries or by a snapshot;
- no duplicate enqueue of one (publisher, seq) while the publisher lives. (Once its
  ConsumerDown applied, the fifo forgot its sequence, so a late resend of its seq 1 is
  enqueued again: at-least-once allows that copy, counted in `stats["dup_after_down"]`.)

Messages are followed as copies: a copy is born by an applied Enqueue, moves to a new index
with a Requeue and ends with a Settle. The ledger is kept by the first replica to apply each
index, from the state just before the entry: every index is applied entry by entry somewhere
before any snapshot covers it, and in log order.
"""

from __future__ import annotations

from collections import Counter

from amqp_broker.queues.quorum_machine import decode_payload
from quorum.fifo import OK, ConsumerDown, Enqueue, Requeue, Settle

from .checker import SafetyViolation


# What a replica's body reader returns for an index below its snapshot (see `on_decision`).
COMPACTED = object()


class QueueViolation(SafetyViolation):
    pass


class _Copy:
    __slots__ = ("ident", "born", "dup", "last_index", "last_acquired")

    def __init__(self, ident: bytes, born: int, dup: bool) -> None:
        self.ident = ident  # the body: b"<publisher pid>:<seq>"
        self.born = born
        self.dup = dup  # a second copy of a dead publisher's seq (see the module docstring)
        self.last_index = 0  # the entry that decided its last delivery (0: none yet)
        self.last_acquired = -1


class QueueChecker:
    def __init__(self) -> None:
        self.published: dict[bytes, None] = {}
        self.confirmed: dict[bytes, None] = {}
        self.settled: dict[bytes, int] = {}  # ident -> index of the Settle that removed it
        self._enqueued: dict[bytes, int] = {}  # ident -> index of its first copy
        self._copies: dict[int, _Copy] = {}  # current log index of a live message -> copy
        self._downed: dict[str, None] = {}  # pids whose ConsumerDown applied
        self._next = 1  # the ledger's next index
        self._taken: list[int] = []  # indexes a Settle / Requeue about to apply takes
        # (entry index, consumer, msg id) -> (message index, acquired, body)
        self._decisions: dict[tuple, tuple] = {}
        # publisher -> [last entry index, max seq first delivered before it, max seq at it]
        self._order: dict[bytes, list[int]] = {}
        self._digests: dict[int, bytes] = {}
        self.stats: Counter = Counter()

    # -- clients ---------------------------------------------------------------------------
    def on_publish(self, ident: bytes) -> None:
        self.published[ident] = None

    def on_confirm(self, ident: bytes) -> None:
        if ident not in self.published:
            raise QueueViolation(f"confirm for {ident!r}, never published")
        self.confirmed[ident] = None

    # -- the ledger, from the first replica to apply each index ----------------------------
    def first_to_apply(self, index: int) -> bool:
        if index > self._next:
            raise QueueViolation(f"index {index} applied before anyone applied {self._next}")
        return index == self._next

    def before(self, index: int, cmd, fifo) -> None:
        """`cmd` is about to be applied at `index` to the fifo state `fifo`."""
        t = type(cmd)
        self._taken = []
        if t is Settle or t is Requeue:
            c = fifo.consumers.get(cmd.consumer)
            if c is not None:
                ids = cmd.msg_ids if t is Settle else (cmd.msg_id,)
                self._taken = [c.checked_out[m].index for m in ids if m in c.checked_out]

    def after(self, index: int, cmd, reply) -> None:
        self._next = index + 1
        t = type(cmd)
        if t is Enqueue:
            if reply == OK:
                self._born(index, cmd)
        elif t is Settle:
            for i in self._taken:
                copy = self._copies.pop(i)
                self.settled.setdefault(copy.ident, index)
                self.stats["settled"] += 1
        elif t is Requeue:
            for i in self._taken:
                self._copies[index] = self._copies.pop(i)
                self.stats["requeued"] += 1
        elif t is ConsumerDown:
            self._downed[cmd.pid] = None

    def skip(self, index: int) -> None:
        """Not a fifo command (config change, leader no-op): only the index moves."""
        self._next = index + 1

    def _born(self, index: int, cmd: Enqueue) -> None:
        ident = decode_payload(cmd.payload).body
        first = self._enqueued.setdefault(ident, index)
        dup = first != index
        if dup:
            if cmd.publisher not in self._downed:
                raise QueueViolation(f"{ident!r} enqueued twice, at {first} and {index},"
                                     f" while its publisher lives")
            self.stats["dup_after_down"] += 1
        self._copies[index] = _Copy(ident, index, dup)

    # -- deliveries ------------------------------------------------------------------------
    def on_decision(self, node: str, index: int, eff, body, first: bool) -> None:
        """A Deliver decided by entry `index`, as replica `node` computed it; `body(index)`
        reads a message back as the broker does (read cache, else the node's log), or
        COMPACTED: a replica re-applying an entry after a snapshot (a restart, a snapshot from
        the leader) may decide again to deliver a message that later entries settle, and whose
        entry the release cursor let go; the first replica to decide it must find its body."""
        for d in eff.msgs:
            msg = body(d.index)
            if msg is COMPACTED and not first:
                self.stats["stale_decisions_compacted"] += 1
                continue
            if msg is None or msg is COMPACTED:
                raise QueueViolation(f"{node} delivers index {d.index} (entry {index}) to"
                                     f" {eff.consumer} but holds no body for it")
            key = (index, eff.consumer, d.msg_id)
            mine = (d.index, d.acquired, msg.body)
            if not first:
                seen = self._decisions.get(key)
                if seen != mine:
                    raise QueueViolation(f"{node} decides {key} -> {mine}, another replica"
                                         f" {seen}")
                continue
            self._decisions[key] = mine
            copy = self._copies.get(d.index)
            if copy is None:
                raise QueueViolation(f"entry {index} delivers index {d.index} ({msg.body!r})"
                                     f" which holds no live message (settled: entry"
                                     f" {self.settled.get(msg.body)})")
            if copy.ident != msg.body:
                raise QueueViolation(f"index {d.index} holds {copy.ident!r}, delivered as"
                                     f" {msg.body!r}")
            self._count(index, copy, d.acquired)

    def _count(self, index: int, copy: _Copy, acquired: int) -> None:
        self.stats["decided"] += 1
        if copy.last_index == 0:
            if acquired != 0:
                raise QueueViolation(f"first delivery of {copy.ident!r} at entry {index} has"
                                     f" acquired={acquired}")
            if not copy.dup:
                self._fifo(index, copy.ident)
        else:
            self.stats["redelivered"] += 1
            if acquired <= copy.last_acquired:
                raise QueueViolation(f"{copy.ident!r} delivered again at entry {index} with"
                                     f" acquired={acquired}, after {copy.last_acquired} at"
                                     f" entry {copy.last_index}")
        copy.last_index, copy.last_acquired = index, acquired

    def _fifo(self, index: int, ident: bytes) -> None:
        pub, _, seq_s = ident.rpartition(b":")
        seq = int(seq_s)
        o = self._order.get(pub)
        if o is None:
            self._order[pub] = [index, 0, seq]
            return
        if index > o[0]:
            o[0], o[1], o[2] = index, max(o[1], o[2]), seq
        elif index < o[0]:
            raise QueueViolation(f"ledger out of order: entry {index} after {o[0]}")
        else:
            o[2] = max(o[2], seq)
        if seq <= o[1]:
            raise QueueViolation(f"FIFO: {ident!r} first delivered at entry {index}, after a"
                                 f" later message of its publisher (seq {o[1]})")

    def on_run(self, node: str, eff) -> None:
        """Replica `node` runs a Deliver (hands the messages to the consumer process)."""
        if node != eff.consumer.node:
            raise QueueViolation(f"{node} runs a delivery for {eff.consumer}")
        self.stats["run"] += len(eff.msgs)

    # -- replica state -----------------------------------------------------------------------
    def on_digest(self, node: str, index: int, digest: bytes, record: bool) -> None:
        """The machine state of `node` at applied `index`; `record` adds it for comparison."""
        seen = self._digests.get(index)
        if seen is None:
            if record:
                self._digests[index] = digest
        elif seen != digest:
            raise QueueViolation(f"replicas differ: {node}'s queue state at index {index}")

    # -- the end ---------------------------------------------------------------------------
    def check_end(self) -> None:
        lost = [i for i in self.confirmed if i not in self.settled]
        if lost:
            where = {i: [ix for ix, c in self._copies.items() if c.ident == i] for i in lost[:5]}
            raise QueueViolation(f"{len(lost)} confirmed messages never settled, e.g. {where}"
                                 f" (live at indexes)")
        if self._copies:
            some = list(self._copies.items())[:5]
            raise QueueViolation(f"{len(self._copies)} messages still in the queue: {some}")
