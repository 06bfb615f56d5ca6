"""The partition rules of a partitioned queue (seed 001): who owns which partition, when a
partition is paused for a handoff, and when that handoff ends.

Pure and message-blind: it knows consumers only by `ConsumerKey` and time only as the leader
timestamp passed in, so every replica that applies the same log takes the same decisions.
Whether the old owner still holds messages of a partition is asked of the caller
(`delivery.deliver_partitioned`, which also moves the messages); this module only says what the
partition map is and what must happen next.

The four steps of a graceful handoff map onto a partition's states:
- `active`: the owner gets the partition's messages.
- `handing-off`: delivery from the partition is paused (step 1); the owner may still ack or
  nack what it holds (step 2) until it holds nothing (graceful) or the leader time passes
  `deadline` (forced: the caller returns the held messages, redelivered); then the `target`
  becomes the owner (step 3) and delivery resumes (step 4).
- `unassigned`: no owner; the messages wait.

Assignment (`rebalance`) is balanced and sticky: each member consumer (attach order) gets
floor(N/M) or ceil(N/M) partitions, a partition stays with its owner while the owner is under
its quota, and only the surplus moves. With more consumers than partitions the extra ones own
nothing (standby) until an owner leaves. A change in the member set schedules a rebalance at
`now + rebalance_delay`; further changes before then join the same rebalance.
"""
from __future__ import annotations

from .commands import ConsumerKey

__all__ = ["ACTIVE", "HANDING_OFF", "UNASSIGNED", "Partition", "Partitions", "sync",
           "due", "rebalance", "handing_off", "complete", "next_time", "owned",
           "assignment"]

ACTIVE = "active"
HANDING_OFF = "handing-off"
UNASSIGNED = "unassigned"


class Partition:
    """owner: who holds (or, handing off, still may ack) this partition's deliveries.
    target: handing-off only, who gets it next (None: unassigned afterwards).
    deadline: handing-off only, leader time (ms) at which the handoff is forced."""
    __slots__ = ("owner", "target", "state", "deadline")

    def __init__(self, owner: ConsumerKey | None = None, target: ConsumerKey | None = None,
                 state: str = UNASSIGNED, deadline: int | None = None) -> None:
        self.owner = owner
        self.target = target
        self.state = state
        self.deadline = deadline

    def to_wire(self) -> list:
        return [None if self.owner is None else list(self.owner),
                None if self.target is None else list(self.target), self.state, self.deadline]

    @classmethod
    def from_wire(cls, w: list) -> "Partition":
        return cls(None if w[0] is None else ConsumerKey(*w[0]),
                   None if w[1] is None else ConsumerKey(*w[1]), w[2], w[3])


class Partitions:
    """The partition map of one queue.  members: the consumers that may own partitions, in
    attach order.  rebalance_at: leader time of the pending rebalance, or None.  The counters
    are replicated so every replica reports the same numbers."""
    __slots__ = ("parts", "members", "rebalance_at", "started", "graceful", "forced",
                 "cursor", "_owned", "_handing")

    def __init__(self, n: int) -> None:
        self.parts = [Partition() for _ in range(n)]
        self.members: list[ConsumerKey] = []
        self.rebalance_at: int | None = None
        self.started = 0      # handoffs begun (an owned partition paused)
        self.graceful = 0     # ended with nothing held (or called off: back to its owner)
        self.forced = 0       # ended at the deadline with messages still held
        # per member: where its round robin over its partitions goes on (delivery.py)
        self.cursor: dict[ConsumerKey, int] = {}
        self._owned: dict[ConsumerKey, list[int]] | None = None   # cache, not replicated
        self._handing = False                                         # cached with _owned

    def __len__(self) -> int:
        return len(self.parts)

    def changed(self) -> None:
        self._owned = None

    @property
    def handoffs(self) -> bool:
        """Is any partition handing off? (cached with the owner table)"""
        owned(self, None)
        return self._handing

    def to_wire(self) -> list:
        return [[p.to_wire() for p in self.parts], [list(k) for k in self.members],
                self.rebalance_at, self.started, self.graceful, self.forced,
                [[list(k), v] for k, v in self.cursor.items()]]

    @classmethod
    def from_wire(cls, w: list) -> "Partitions":
        ps = cls(0)
        ps.parts = [Partition.from_wire(p) for p in w[0]]
        ps.members = [ConsumerKey(*k) for k in w[1]]
        ps.rebalance_at, ps.started, ps.graceful, ps.forced = w[2:6]
        ps.cursor = {ConsumerKey(*k): v for k, v in w[6]}
        return ps


def owned(ps: Partitions, key: ConsumerKey) -> list[int]:
    """The active partitions `key` may be given messages from, ascending."""
    if ps._owned is None:
        table: dict[ConsumerKey, list[int]] = {}
        for i, p in enumerate(ps.parts):
            if p.state == ACTIVE:
                table.setdefault(p.owner, []).append(i)
        ps._owned = table
        ps._handing = any(p.state == HANDING_OFF for p in ps.parts)
    return ps._owned.get(key, [])


def sync(ps: Partitions, up: list[ConsumerKey], now: int, timeout: int) -> None:
    """The consumers able to take messages are now `up` (attach order).  A member that left
    loses its partitions at once (they start handing off to nobody, so what it holds may still
    be acked until the deadline); any change schedules a rebalance."""
    if up == ps.members:
        return
    gone = [k for k in ps.members if k not in up]
    ps.members = list(up)
    for k in gone:
        ps.cursor.pop(k, None)
    for p in ps.parts:
        if p.owner in gone:
            _begin(ps, p, None, now, timeout)
        elif p.state == HANDING_OFF and p.target in gone:
            p.target = None
    if ps.rebalance_at is None:
        ps.rebalance_at = now
    ps.changed()


def due(ps: Partitions, now: int, delay: int) -> bool:
    """A rebalance is pending and `delay` ms have passed since the first change it covers."""
    return ps.rebalance_at is not None and now >= ps.rebalance_at + delay


def assignment(ps: Partitions) -> list[ConsumerKey | None]:
    """The balanced, sticky target owner of every partition (see the module docstring)."""
    members = ps.members
    n = len(ps.parts)
    if not members:
        return [None] * n
    intended = [p.target if p.state == HANDING_OFF else p.owner for p in ps.parts]
    counts = {k: 0 for k in members}
    for k in intended:
        if k in counts:
            counts[k] += 1
    base, extra = divmod(n, len(members))
    # the members already holding the most keep the +1 places: fewer moves
    order = sorted(range(len(members)), key=lambda j: (-counts[members[j]], j))
    quota = {members[j]: base + (1 if r < extra else 0) for r, j in enumerate(order)}
    out: list[ConsumerKey | None] = [None] * n
    have = {k: 0 for k in members}
    for i, k in enumerate(intended):
        if k in have and have[k] < quota[k]:
            out[i] = k
            have[k] += 1
    spare = iter([k for k in members for _ in range(quota[k] - have[k])])
    for i in range(n):
        if out[i] is None:
            out[i] = next(spare)
    return out


def rebalance(ps: Partitions, now: int, timeout: int) -> None:
    """Apply `assignment`: unowned partitions go to their target at once; owned ones that
    move start (or redirect) a handoff; a handoff whose target is its owner again ends."""
    ps.rebalance_at = None
    for p, k in zip(ps.parts, assignment(ps)):
        if p.state == HANDING_OFF:
            if k == p.owner:
                p.state, p.target, p.deadline = ACTIVE, None, None
                ps.graceful += 1
            else:
                p.target = k
        elif p.owner is None:
            p.owner = k
            p.state = UNASSIGNED if k is None else ACTIVE
        elif k != p.owner:
            _begin(ps, p, k, now, timeout)
    ps.changed()


def _begin(ps: Partitions, p: Partition, target: ConsumerKey | None, now: int,
           timeout: int) -> None:
    if p.state == HANDING_OFF:
        p.target = target
        return
    p.state, p.target, p.deadline = HANDING_OFF, target, now + timeout
    ps.started += 1
    ps.changed()


def handing_off(ps: Partitions) -> list[int]:
    return [i for i, p in enumerate(ps.parts) if p.state == HANDING_OFF]


def complete(ps: Partitions, i: int, forced: bool) -> None:
    """End partition `i`'s handoff: its target owns it (step 3) and may be served (step 4)."""
    p = ps.parts[i]
    p.owner, p.target, p.deadline = p.target, None, None
    p.state = UNASSIGNED if p.owner is None else ACTIVE
    if forced:
        ps.forced += 1
    else:
        ps.graceful += 1
    ps.changed()


def next_time(ps: Partitions, delay: int) -> int | None:
    """The leader time at which a `Tick` is next needed: a pending rebalance or a deadline."""
    at = None if ps.rebalance_at is None else ps.rebalance_at + delay
    for p in ps.parts:
        if p.deadline is not None and (at is None or p.deadline < at):
            at = p.deadline
    return at
