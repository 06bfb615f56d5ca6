"""Shrunk failures of the property tests, kept as named scenarios, plus the helpers the
runtime uses around apply (who runs an effect, leader start, snapshot install)."""
from quorum.fifo import (Checkout, Confirm, ConsumerKey, Deliver, Monitor, QueueConfig, SetTimer,
                         leader_effects, should_run, snapshot_installed_effects)

from .harness import C1, C2, Harness
from .model import KEYS, run

DLX = dict(name="q", dead_letter_exchange="dlx")


def test_lowered_prefetch_is_not_exceeded_after_a_settle():
    cfg = QueueConfig(**DLX)
    log = [(0, ("checkout", 0, 4, 0, False))] + [(0, ("enq", 0, 1, None, None, 0))] * 4 + [
        (0, ("checkout", 0, 2, 0, False)), (0, ("settle", 0, 1))]
    h, _ = run(cfg, log)
    c = h.q.consumers[KEYS[0]]
    assert len(c.checked_out) == 3 and c.credit == 0


def test_credit_command_does_not_raise_a_prefetch_consumer_over_its_prefetch():
    cfg = QueueConfig(delivery_limit=None, **DLX)
    run(cfg, [(0, ("enq", 0, 1, None, None, 0)), (0, ("checkout", 0, 0, 0, False)),
              (0, ("checkout", 2, 1, 0, False)), (0, ("requeue", 0)),
              (0, ("credit", 2, 2, False))])


def test_sac_resubscribe_taking_over_keeps_the_cancelled_consumers_unacked():
    # c1 holds unacked messages, is cancelled, c2 becomes active; c1 subscribes again with a
    # higher priority and takes over: its unacked messages stay checked out to it (they were
    # lost when the new consumer replaced the cancelled one under the same key).
    cfg = QueueConfig(single_active_consumer=True, delivery_limit=None, **DLX)
    enq = (0, ("enq", 0, 1, None, None, 0))
    log = [enq] * 3 + [(0, ("checkout", 0, 0, 0, False)), (0, ("checkout", 1, 0, 0, True)),
                       enq, (0, ("cancel", 0, False)), enq, (0, ("checkout", 0, 0, 1, False))]
    h, _ = run(cfg, log)      # run() checks after every step that no message was lost
    c1 = h.q.consumers[KEYS[0]]
    assert c1.status == "up" and len(c1.checked_out) >= 3


def test_lowered_delivery_limit_applies_at_the_next_return():
    cfg = QueueConfig(delivery_limit=None, **DLX)
    log = [(0, ("enq", 0, 1, None, None, 0)), (0, ("checkout", 0, 1, 0, False)),
           (0, ("return", 0, 1)), (0, ("return", 0, 1)),
           (0, ("config", QueueConfig(delivery_limit=0, **DLX))),
           (0, ("return", 0, 1))]
    h, applied = run(cfg, log)
    assert h.q.messages_total() == 0       # acquired 3 > 0: dead-lettered on that return


def test_leaving_at_least_once_deletes_held_dead_letters():
    cfg = QueueConfig(overflow="reject-publish", dead_letter_strategy="at-least-once", **DLX)
    h, _ = run(cfg, [(0, ("enq", 0, 1, None, 0, 0)), (1, ("enq", 0, 1, None, None, 0)),
                     (0, ("config", QueueConfig(**DLX)))])
    assert len(h.q.dlx) == 0 and h.q.messages_ready() == 1


def test_reject_publish_by_bytes():
    cfg = QueueConfig(max_bytes=20, overflow="reject-publish", **DLX)
    h, applied = run(cfg, [(0, ("enq", 0, 21, None, None, 0)), (0, ("enq", 0, 1, None, None, 0))])
    assert [a.reply for a in applied] == ["ok", "reject_publish"]


def test_should_run_local_deliveries_on_the_consumer_node():
    d = Deliver(ConsumerKey("t", "ch", "node-b"), ())
    members = ["node-a", "node-b"]
    assert should_run(d, "node-b", False, members)
    assert not should_run(d, "node-a", True, members)
    far = Deliver(ConsumerKey("t", "ch", "node-z"), ())      # no replica there
    assert should_run(far, "node-a", True, members)
    assert not should_run(far, "node-b", False, members)
    assert should_run(SetTimer(5), "node-a", True, members)
    assert not should_run(SetTimer(5), "node-b", False, members)


def test_leader_effects_rearm_timer_and_monitor_everyone():
    h = Harness(QueueConfig(msg_ttl=100), ts=0)
    h(Checkout(C1, prefetch=1))
    h(Checkout(C2, prefetch=1))
    h.publish(3)
    effs = leader_effects(h.q)
    assert effs[0] == SetTimer(h.q.ready.peek().expiry)
    assert Monitor("ch-1", "node-a") in effs and Monitor("ch-2", "node-b") in effs
    assert Monitor("pub", None) in effs


def test_snapshot_install_resends_checked_out_messages():
    h = Harness()
    h(Checkout(C1, prefetch=2))
    h.publish(3)
    (d,) = snapshot_installed_effects(h.q)
    assert d.consumer == C1 and [m.index for m in d.msgs] == [2, 3]


def test_fifo_machine_fits_the_raft_driver_protocol():
    from quorum.fifo import Enqueue, FifoMachine, encode_command
    from quorum.raft import LocalEffect, Meta

    m = FifoMachine(QueueConfig(name="q"), created_ms=0)
    state = m.init()
    state, reply, effs = m.apply(Meta(1, 1, 5), m.decode(encode_command(Checkout(C1, 1))),
                                 state)
    assert reply.active
    state, reply, effs = m.apply(Meta(2, 1, 6), m.decode(encode_command(
        Enqueue("p", 1, 3, b"abc"))), state)
    local = [e for e in effs if isinstance(e, LocalEffect)]
    # the delivery for the consumer's node, and the confirm for the publisher's
    assert [type(e) for e in local] == [Deliver, Confirm] and local[0].msgs[0].index == 2
    again = m.restore(m.snapshot(state))
    assert m.snapshot(again) == m.snapshot(state)


def test_replicas_deliver_locally_each_message_exactly_once():
    """Seed 003: three replicas apply the same log; each runs only the deliveries for its
    own node (the leader also those for a node without a replica): every delivery is
    performed by exactly one replica, with no coordination beyond the log."""
    from quorum.fifo import Enqueue, Settle, digest

    members = ["node-a", "node-b", "node-c"]
    keys = [ConsumerKey("t1", "ch-1", "node-b"), ConsumerKey("t2", "ch-2", "node-c"),
            ConsumerKey("t3", "ch-3", "node-z")]
    replicas = {n: Harness(QueueConfig(name="q"), ts=0) for n in members}
    performed: dict = {}
    log = [Checkout(k, prefetch=2) for k in keys]
    log += [Enqueue("p", i + 1, 10) for i in range(9)]
    log += [Settle(keys[0], (0, 1)), Settle(keys[2], (0,))]
    for cmd in log:
        for node, h in replicas.items():
            for e in h(cmd).effects:
                if isinstance(e, Deliver) and should_run(e, node, node == "node-a", members):
                    for d in e.msgs:
                        performed.setdefault((e.consumer, d.msg_id), []).append(node)
    assert len({digest(h.q) for h in replicas.values()}) == 1
    assert len(performed) == 9 and all(len(v) == 1 for v in performed.values())
    assert {v[0] for (k, _), v in performed.items() if k.node == "node-z"} == {"node-a"}
    assert {v[0] for (k, _), v in performed.items() if k.node == "node-b"} == {"node-b"}
