"""The driver applies a pass's committed entries while the next batch is being fsynced, but
never a command before the fsync that made it durable has returned: with the disk's
fdatasync held, proposals stay unapplied (no reply, no state change), and they all apply
once it is released (`quorum.driver.NodeDriver.run_once`)."""

from __future__ import annotations

import random

import pytest
import trio

from quorum.driver import NodeDriver
from quorum.log import AsyncLog
from quorum.log.disk import OsDisk
from quorum.raft import KvMachine, KvSet, RaftOptions
from tests.quorum_integration.disk_gate import FsyncGate, NoPeers

pytestmark = pytest.mark.trio


async def _until(pred) -> None:
    while not pred():
        await trio.sleep(0.01)


async def test_nothing_applies_before_its_fsync_returns(tmp_path):
    gate = FsyncGate()
    log = AsyncLog.open(str(tmp_path), disk=OsDisk(fdatasync=gate))
    log.jobs.max_bytes = -1  # every batch in a worker thread, where the gate holds its fsync
    driver = NodeDriver("solo", log, NoPeers(), tick_interval=0.01,
                        options=RaftOptions(election_tick=3, heartbeat_tick=1),
                        rng=random.Random(5))
    driver.add_group("kv", KvMachine(), ["solo"])
    replies = []
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            await _until(lambda: driver.status("kv").is_leader)
            await driver.propose("kv", KvMachine.encode(KvSet("warm", "up")))
            gate.open.clear()
            driver.propose_nowait("kv", KvMachine.encode(KvSet("a", "1")),
                                  lambda reply, err: replies.append(("a", err)))
            await trio.to_thread.run_sync(gate.waiting.wait, 30)
            # the first batch is stuck in fdatasync; a second one queues behind it
            driver.propose_nowait("kv", KvMachine.encode(KvSet("b", "2")),
                                  lambda reply, err: replies.append(("b", err)))
            for _ in range(20):  # passes and ticks go by: still nothing may apply
                await trio.sleep(0.01)
                assert replies == []
                assert "a" not in driver.state("kv") and "b" not in driver.state("kv")
            gate.open.set()
            await _until(lambda: len(replies) == 2)
        nursery.cancel_scope.cancel()
    log.close()
    assert replies == [("a", None), ("b", None)]
    assert driver.state("kv")["a"][0] == "1" and driver.state("kv")["b"][0] == "2"
