"""A pass run by the task whose input called for it (`NodeDriver.hold` / `release` /
`run_held`, what a session's reader does with its publishes): it applies in that task, one pass
at a time with the driver's own, never before its fsync, out of reach of the task's
cancellation, and its failure is the driver's."""

from __future__ import annotations

import random

import pytest
import trio

from quorum.driver import NodeDriver
from quorum.log import AsyncLog
from quorum.log.disk import OsDisk
from quorum.raft import KvMachine, KvSet, RaftOptions
from .disk_gate import FsyncGate, NoPeers

pytestmark = pytest.mark.trio


class _Boom(Exception):
    pass


class _FailingKv(KvMachine):
    """A KvMachine whose apply of the key "boom" raises."""

    def apply(self, meta, command, state):
        if command.key == "boom":
            raise _Boom("apply failed")
        return super().apply(meta, command, state)


def _driver(tmp_path, *, gate: FsyncGate | None = None, snapshot_every: int = 4096,
            machine=KvMachine) -> NodeDriver:
    disk = OsDisk(fdatasync=gate) if gate is not None else OsDisk()
    log = AsyncLog.open(str(tmp_path), disk=disk)
    driver = NodeDriver("solo", log, NoPeers(), tick_interval=0.01,
                        options=RaftOptions(election_tick=3, heartbeat_tick=1),
                        rng=random.Random(5), snapshot_every=snapshot_every)
    driver.add_group("kv", machine(), ["solo"])
    return driver


async def _until(pred) -> None:
    while not pred():
        await trio.sleep(0.01)


def _set(key: str, value: str) -> bytes:
    return KvMachine.encode(KvSet(key, value))


async def _leading(driver: NodeDriver) -> None:
    with trio.fail_after(30):
        await _until(lambda: driver.status("kv").is_leader)
        await driver.propose("kv", _set("warm", "up"))


async def test_a_held_pass_applies_in_the_holders_task(tmp_path):
    driver = _driver(tmp_path)
    replies = []
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _leading(driver)
        passes = driver.iterations
        driver.hold()
        driver.propose_nowait("kv", _set("a", "1"), lambda reply, err: replies.append(err))
        await trio.sleep(0.05)  # held: no task ran a pass meanwhile
        assert driver.iterations == passes and replies == []
        assert driver.release()
        await driver.run_held()
        # written, fsynced, committed and applied by this call, in one pass
        assert replies == [None]
        assert driver.state("kv")["a"][0] == "1"
        assert driver.iterations == passes + 1
        nursery.cancel_scope.cancel()
    driver.log.close()


async def test_release_leaves_the_pass_to_the_driver_when_none_is_due_or_others_are_ready(tmp_path):
    driver = _driver(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _leading(driver)
        driver.hold()
        assert not driver.release()  # nothing proposed: no pass due
        driver.hold()
        driver.hold()
        driver.propose_nowait("kv", _set("a", "1"))
        assert not driver.release()  # still held by the outer hold
        assert driver.release()
        await driver.run_held()
        assert driver.state("kv")["a"][0] == "1"
        # another task is ready to run (under load: other readers): the driver's task runs
        # the pass after it, with whatever it proposes
        replies = []
        driver.hold()
        driver.propose_nowait("kv", _set("b", "2"), lambda reply, err: replies.append(err))
        nursery.start_soon(trio.sleep, 0)
        assert not driver.release()
        with trio.fail_after(10):
            await _until(lambda: replies == [None])
        assert driver.state("kv")["b"][0] == "2"
        nursery.cancel_scope.cancel()
    driver.log.close()


async def test_a_held_pass_leaves_the_wait_for_a_batch_the_writer_took_to_the_driver(tmp_path):
    gate = FsyncGate()
    driver = _driver(tmp_path, gate=gate)
    driver.log.jobs.max_bytes = -1  # every batch to the writer task's worker thread
    replies = []
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _leading(driver)
        gate.open.clear()
        driver.hold()
        driver.propose_nowait("kv", _set("a", "1"), lambda reply, err: replies.append(("a", err)))
        assert driver.release()
        with trio.fail_after(10):
            await driver.run_held()  # returns while the batch waits for its fdatasync
        await trio.to_thread.run_sync(gate.waiting.wait, 30)
        # another proposal meanwhile, unheld: it waits for the pass in flight to end
        driver.propose_nowait("kv", _set("b", "2"), lambda reply, err: replies.append(("b", err)))
        driver.hold()
        driver.propose_nowait("kv", _set("c", "3"), lambda reply, err: replies.append(("c", err)))
        assert not driver.release()  # a pass is in flight: not this task's to run
        for _ in range(20):
            await trio.sleep(0.01)
            assert replies == []
            assert not {"a", "b", "c"} & set(driver.state("kv"))
        gate.open.set()
        with trio.fail_after(30):
            await _until(lambda: len(replies) == 3)
        nursery.cancel_scope.cancel()
    driver.log.close()
    assert replies == [("a", None), ("b", None), ("c", None)]
    assert {k: v[0] for k, v in driver.state("kv").items()} == {"warm": "up", "a": "1", "b": "2",
                                                                 "c": "3"}


async def test_a_held_pass_is_not_cut_short_by_its_tasks_cancellation(tmp_path):
    # snapshot_every=1: each pass compacts, and saving the snapshot waits for a worker thread
    driver = _driver(tmp_path, snapshot_every=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _leading(driver)
        with trio.fail_after(10):  # the warm-up's pass is still saving its snapshot
            await _until(lambda: not driver._passing)
        snapshots = driver.raft("kv").snapshot_meta.index
        with trio.CancelScope() as scope:
            driver.hold()
            driver.propose_nowait("kv", _set("a", "1"))
            assert driver.release()
            scope.cancel()
            await driver.run_held()
        assert scope.cancelled_caught is False  # nothing in the pass saw the cancellation
        st = driver.status("kv")
        assert driver.state("kv")["a"][0] == "1"
        assert st.applied == st.last_index == st.commit
        assert driver.raft("kv").snapshot_meta.index > snapshots  # the compaction finished
        with trio.fail_after(10):
            assert await driver.propose("kv", _set("a", "2")) == "1"  # the group goes on
        nursery.cancel_scope.cancel()
    driver.log.close()


async def test_a_held_pass_that_fails_stops_the_driver_not_the_holder(tmp_path):
    driver = _driver(tmp_path, machine=_FailingKv)
    holder_went_on = False
    failures = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            await _leading(driver)
            driver.hold()
            driver.propose_nowait("kv", _set("boom", "1"))
            assert driver.release()
            await driver.run_held()  # does not raise here
            holder_went_on = True
            await trio.sleep(30)  # the driver's task raises meanwhile
    except* _Boom as group:
        failures.append(group)
    driver.log.close()
    assert holder_went_on and failures
