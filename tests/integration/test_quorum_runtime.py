"""The node quorum runtime in-process: a one-member group through the real driver and WAL.

Checks what the broker relies on but cannot see through a client: proposals resolve through
callbacks, log compaction (snapshots) never lets go of the log entry of a message still in the
queue (its body lives there), and a restarted runtime rebuilds the same state from snapshot +
log tail and reads the bodies back from the log. Also the pure machine
wrapper: snapshot/restore round trip, dead letters carry their bodies.
"""

from __future__ import annotations

import pytest
import trio

from amqp_broker.cluster import QuorumRuntime
from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_machine import (DeadLettered, QuorumMachine, decode_payload,
                                               encode_payload)
from quorum import fifo
from quorum.fifo import ConsumerKey, Dequeue, DequeueReply, Discard, Enqueue, Meta, QueueConfig

HOLDER = ConsumerKey("", "holder", "n")
GETTER = ConsumerKey("", "getter", "n")


def _msg(i: int) -> Message:
    return Message.from_publish("", "q", b"\x00\x00", b"body-%d" % i)


def _enq(i: int) -> bytes:
    m = _msg(i)
    return fifo.encode_command(Enqueue(None, None, m.size, encode_payload(m)))


def _run_ops(rt: QuorumRuntime, ops: list[bytes]):
    """Propose `ops` in order; return the replies once all applied."""
    replies: list = [None] * len(ops)
    done = trio.Event()
    left = [len(ops)]

    def cb(i):
        def _cb(reply, err):
            replies[i] = err or reply
            left[0] -= 1
            if not left[0]:
                done.set()
        return _cb

    for i, data in enumerate(ops):
        rt.propose("g", data, cb(i))
    return done, replies


async def _start(nursery, path, machine, snapshot_every=64) -> QuorumRuntime:
    rt = QuorumRuntime(str(path), "n", snapshot_every=snapshot_every)
    ready = trio.Event()
    rt.add_group("g", machine, lambda g, effects: None, ready.set)
    await nursery.start(rt.run)
    with trio.fail_after(10):
        await ready.wait()
    return rt


def test_machine_payload_round_trip():
    m = Message.from_publish("ex", "rk", b"\x10\x00\x02", b"x" * 100)
    back = decode_payload(encode_payload(m))
    assert (back.exchange, back.routing_key, back.properties, back.body) == (
        "ex", "rk", m.properties, m.body)
    assert back.persistent


def test_machine_snapshot_restore_and_dead_letter_bodies():
    log: dict[int, bytes] = {}  # the Raft log the machine reads bodies back from
    machine = QuorumMachine(QueueConfig(name="q", dead_letter_exchange="dlx"), reader=log.get)
    state = machine.init()
    for i in range(1, 4):
        m = _msg(i)
        log[i] = fifo.encode_command(Enqueue(None, None, m.size, encode_payload(m)))
        state, _, _ = machine.apply(Meta(i, 1, 0), machine.decode(log[i]), state)
    state, reply, _ = machine.apply(Meta(4, 1, 0), Dequeue(GETTER), state)
    dq, got = reply
    assert isinstance(dq, DequeueReply) and got.body == b"body-1"
    assert machine.log_reads == 0  # from the read cache
    state, _, effects = machine.apply(Meta(5, 1, 0), Discard(GETTER, (dq.delivery.msg_id,)),
                                      state)
    dead = [e for e in effects if isinstance(e, DeadLettered)]
    # delivered once already, so no longer cached: read back from the log
    assert [m.body for m in dead[0].messages] == [b"body-1"]
    assert machine.log_reads == 1
    assert dead[0].effect.reason == "rejected"
    data = machine.snapshot(state)
    assert b"body-" not in data  # snapshots carry no bodies
    again = machine.restore(data)
    assert sorted(state.fifo.live.live()) == [2, 3]
    assert fifo.digest(again.fifo) == fifo.digest(state.fifo)
    machine.cache.clear()
    assert [machine.body(again, i).body for i in (2, 3)] == [b"body-2", b"body-3"]


def _reading(rt: QuorumRuntime, machine: QuorumMachine) -> QuorumMachine:
    machine.reader = lambda index: rt.driver.entry_data("g", index)
    return machine


async def _until(check) -> None:
    with trio.fail_after(10):  # the snapshot is written after the replies resolve
        while not check():
            await trio.sleep(0.01)


@pytest.mark.trio
async def test_compaction_keeps_live_bodies_across_restart(tmp_path):
    config = QueueConfig(name="q")
    async with trio.open_nursery() as nursery:
        rt = await _start(nursery, tmp_path, QuorumMachine(config))
        # 3 messages held (checked out, unsettled) at the head of the log ...
        ops = [_enq(i) for i in range(3)]
        ops += [fifo.encode_command(Dequeue(HOLDER)) for _ in range(3)]
        # ... then many messages that come and go, so the log is worth compacting
        for i in range(3, 400):
            ops += [_enq(i), fifo.encode_command(Dequeue(GETTER, settled=True))]
        done, replies = _run_ops(rt, ops)
        with trio.fail_after(20):
            await done.wait()
        assert not any(isinstance(r, BaseException) for r in replies)
        # a snapshot is held back (release cursor) but the log is kept from index 1
        await _until(lambda: rt.driver.raft("g").applied_index >= len(ops))
        assert rt.log.state("g").first_index == 1
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        machine = QuorumMachine(config)
        rt = await _start(nursery, tmp_path, machine)
        _reading(rt, machine)
        state = rt.driver.state("g")
        held = state.fifo.consumers[HOLDER].checked_out
        assert sorted(machine.body(state, m.index).body for m in held.values()) == [
            b"body-0", b"body-1", b"body-2"]
        assert machine.log_reads == 3  # a restarted machine's cache is empty: from the log
        assert len(state.fifo.ready) == 0
        # settled, they no longer hold the log: the next compaction lets it go
        ops = [fifo.encode_command(fifo.Settle(HOLDER, tuple(held)))]
        for i in range(400, 500):
            ops += [_enq(i), fifo.encode_command(Dequeue(GETTER, settled=True))]
        done, replies = _run_ops(rt, ops)
        with trio.fail_after(20):
            await done.wait()
        await _until(lambda: rt.log.state("g").first_index > 800)
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        rt = await _start(nursery, tmp_path, QuorumMachine(config))
        assert rt.driver.state("g").fifo.messages_total() == 0
        nursery.cancel_scope.cancel()


def test_quorum_queue_is_exported_whatever_the_import_order():
    import subprocess
    import sys

    import amqp_broker.queues as queues
    from amqp_broker.queues.quorum import QuorumQueue
    assert queues.QuorumQueue is QuorumQueue and "QuorumQueue" in queues.__all__
    for first in ("dlx", "amqp_broker.server.dlx_port", "amqp_broker.queues.quorum",
                  "amqp_broker.cluster"):
        code = (f"import {first}; from amqp_broker.queues import QuorumQueue; "
                "print(QuorumQueue.queue_type)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.stdout.strip() == "quorum", out.stderr


def test_leader_applies_its_own_enqueue_without_decoding_it_again():
    machine = QuorumMachine(QueueConfig(name="q"))
    state = machine.init()
    mine = [_msg(i) for i in range(3)]
    sent = []
    for m in mine:
        cmd = Enqueue(None, None, m.size, encode_payload(m))
        data = fifo.encode_command(cmd)
        machine.outbox.append((data, cmd, m))
        sent.append((data, cmd))
    # the very data object: the same command and message come back
    assert machine.decode(sent[0][0]) is sent[0][1]
    state, _, _ = machine.apply(Meta(1, 1, 0), sent[0][1], state)
    assert machine.cache.get(1) is mine[0]
    # equal bytes read back from the log (another object): decoded, message still reused
    copy = bytes(bytearray(sent[1][0]))
    cmd = machine.decode(copy)
    assert cmd is not sent[1][1] and cmd == sent[1][1]
    state, _, _ = machine.apply(Meta(2, 1, 0), cmd, state)
    assert machine.cache.get(2) is mine[1]
    # out of step (another leader's entry): decoded from the log, shortcut dropped
    other = Enqueue(None, None, 1, encode_payload(_msg(99)))
    state, _, _ = machine.apply(Meta(3, 1, 0), machine.decode(fifo.encode_command(other)), state)
    assert machine.cache.get(3) == other.payload and not machine.outbox


def test_broker_entry_point_raises_the_gc_threshold_but_never_lowers_it():
    import gc

    from amqp_broker.cli import broker as rt_mod
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, saved[1], saved[2])
        rt_mod._tune_gc()
        assert gc.get_threshold() == (rt_mod._GC_GEN0, saved[1], saved[2])
        gc.set_threshold(rt_mod._GC_GEN0 * 2, saved[1], saved[2])
        rt_mod._tune_gc()
        assert gc.get_threshold()[0] == rt_mod._GC_GEN0 * 2
        gc.set_threshold(0, saved[1], saved[2])  # 0: collection disabled, left alone
        rt_mod._tune_gc()
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*saved)
