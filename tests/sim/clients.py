"""Simulated client processes of the quorum queue simulation (`queue_world.QueueWorld`):
publishers and consumers living on a node, and the monitor that reports dead ones.

They talk to the queue only as a broker channel would: commands proposed through the leader
their node knows (`world.propose`), Confirm effects from the leader, Deliver effects run on
their own node. A process dies with its node (or at random); it never comes back, a new one
with a new pid takes its place.

- `Publisher`: Enqueue(pid, seq) with seq 1, 2, 3...; every unconfirmed enqueue is proposed
  again, in seq order, when its node sees a new leader or term, or when neither a send nor a
  confirm happened for STALE_MS (a confirm lost on a cut link); the fifo drops duplicates by
  seq and refuses gaps, so resending is always safe. Resending on a short timeout instead
  would flood a leader that is slow to commit, and make it slower still.
- `Consumer`: Checkout with a prefetch, then settles what it is given a little later, or
  sometimes returns it (`quorum.fifo.return_commands` on its node's replica, as the broker's
  requeue does: a Return, or Requeues when the delivery limit is unlimited).
- `Monitor`: ConsumerDown(pid) for every dead process, and again whenever the leader runs a
  Monitor effect naming a dead pid (a late command of the dead process re-created it).
"""

from __future__ import annotations

from quorum.fifo import (Checkout, ConsumerDown, ConsumerKey, Enqueue, Return, Settle,
                         encode_command, return_commands)
from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_machine import encode_payload

from .queue_checker import QueueViolation

STALE_MS = 2000  # no outcome for this long although the leader still leads: propose again
BACKOFF_MS = 20  # no leader reachable: try again this much later
ACK_DELAY_MS = 15  # a consumer settles or returns a delivery within this long
RETURN_P = 0.1  # during chaos, the share of due deliveries a consumer returns instead


class _Sent:
    __slots__ = ("data", "index", "term", "leader", "at")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.index: int | None = None  # None: not proposed (no leader reachable)
        self.term = 0
        self.leader = ""
        self.at = -BACKOFF_MS


class Outbox:
    """Commands of one process, each proposed through the leader until its entry is seen
    committed in the term it was proposed in (what resolves a proposal in the driver). It is
    proposed again when another entry took its index, when the leader it went to stopped
    leading that term (the driver's NotLeader / LeadershipLost: outcome unknown), or after
    STALE_MS: every command sent this way is idempotent (msg ids are never reused)."""

    def __init__(self, world, origin: str | None) -> None:
        self.world = world
        self.origin = origin  # the node the process runs on; None: wherever the leader is
        self._sent: list[_Sent] = []

    def send(self, data: bytes) -> None:
        s = _Sent(data)
        self._sent.append(s)
        self._propose(s)

    def holds(self, data: bytes) -> bool:
        return any(s.data == data for s in self._sent)

    @property
    def idle(self) -> bool:
        return not self._sent

    def stop(self) -> None:
        """The process died: it sends nothing more (what it sent may still commit)."""
        self._sent.clear()

    def poll(self) -> None:
        if not self._sent:
            return
        world, now = self.world, self.world.now
        keep = []
        for s in self._sent:
            if s.index is not None:
                term = world.committed_term(s.index)
                if term == s.term:
                    continue  # done
                if (term is None and now - s.at < STALE_MS
                        and world.still_leads(s.leader, s.term)):
                    keep.append(s)
                    continue
                s.index = None  # replaced, or the outcome is unknown: propose again
            if now - s.at >= BACKOFF_MS:
                self._propose(s)
            keep.append(s)
        self._sent = keep

    def _propose(self, s: _Sent) -> None:
        s.at = self.world.now
        got = self.world.propose(self.origin, s.data)
        if got is not None:
            s.index, s.term, s.leader = got


class Publisher:
    def __init__(self, world, pid: str, node: str) -> None:
        self.world = world
        self.pid = pid
        self.node = node
        self.alive = True
        self.next_seq = 1
        self.pending: dict[int, bytes] = {}  # seq -> encoded Enqueue, unconfirmed, seq order
        self._view: tuple | None = None  # (leader, term) its node knew at the last send
        self._sent_at = 0
        self._confirmed_at = 0
        self._failed = False  # the last send found no leader

    def publish(self) -> None:
        seq = self.next_seq
        self.next_seq += 1
        body = b"%s:%d" % (self.pid.encode(), seq)
        payload = encode_payload(Message.from_publish("", "q", b"\x00\x00", body))
        data = encode_command(Enqueue(self.pid, seq, len(body), payload))
        self.pending[seq] = data
        self.world.checker.on_publish(body)
        if not self._failed:  # else the next resend carries it, after the earlier ones
            self._send([data])

    def on_confirm(self, seqs: tuple[int, ...]) -> None:
        self._confirmed_at = self.world.now
        for seq in seqs:
            if self.pending.pop(seq, None) is not None:
                self.world.checker.on_confirm(b"%s:%d" % (self.pid.encode(), seq))

    def poll(self) -> None:
        if not self.pending:
            return
        w = self.world
        view = w.leader_view(self.node)
        quiet = w.now - max(self._sent_at, self._confirmed_at)
        if view != self._view or quiet >= STALE_MS or (self._failed and quiet >= BACKOFF_MS):
            self._send(list(self.pending.values()))

    def die(self) -> None:
        self.alive = False
        self.pending.clear()
        self.world.monitor.down(self.pid)

    def _send(self, datas: list[bytes]) -> None:
        w = self.world
        self._view = w.leader_view(self.node)
        self._sent_at = w.now
        self._failed = False
        for data in datas:
            if w.propose(self.node, data) is None:
                self._failed = True
                return


class Consumer:
    def __init__(self, world, pid: str, node: str, prefetch: int) -> None:
        self.world = world
        self.pid = pid
        self.key = ConsumerKey("ctag", pid, node)
        self.node = node
        self.alive = True
        self.outbox = Outbox(world, node)
        self.unacked: dict[int, int] = {}  # msg_id -> when it is settled or returned (ms)
        self.seen: dict[int, int] = {}  # msg_id -> message index, of every delivery taken
        self.received = 0
        self.outbox.send(encode_command(Checkout(self.key, prefetch)))

    def deliver(self, msgs) -> None:
        """A Deliver effect run on this consumer's node."""
        w = self.world
        for d in msgs:
            known = self.seen.get(d.msg_id)
            if known is not None:
                if known != d.index:
                    raise QueueViolation(f"{self.key} got msg id {d.msg_id} for index"
                                         f" {d.index}, earlier for {known}")
                continue  # sent again (after a snapshot install): a channel drops it
            self.seen[d.msg_id] = d.index
            self.received += 1
            self.unacked[d.msg_id] = w.now + w.rng.randint(0, ACK_DELAY_MS)

    def poll(self, returns: bool) -> None:
        now = self.world.now
        due = [mid for mid, at in self.unacked.items() if at <= now]
        if due:
            for mid in due:
                del self.unacked[mid]
            if returns and self.world.rng.random() < RETURN_P:
                self._return(tuple(due))
            else:
                self.outbox.send(encode_command(Settle(self.key, tuple(due))))
        self.outbox.poll()

    def _return(self, ids: tuple[int, ...]) -> None:
        replica = self.world.replicas[self.node]
        for cmd in return_commands(replica.state.fifo, Return(self.key, ids), replica.payload):
            self.outbox.send(encode_command(cmd))
        self.world.checker.stats["returned"] += len(ids)

    def die(self) -> None:
        self.alive = False
        self.unacked.clear()
        self.outbox.stop()
        self.world.monitor.down(self.pid)


class Monitor:
    def __init__(self, world) -> None:
        self.dead: dict[str, None] = {}
        self.outbox = Outbox(world, None)

    def down(self, pid: str) -> None:
        self.dead[pid] = None
        data = encode_command(ConsumerDown(pid))
        if not self.outbox.holds(data):
            self.outbox.send(data)

    def on_monitor(self, pid: str) -> None:
        """The leader runs a Monitor effect for `pid`."""
        if pid in self.dead:
            self.down(pid)
