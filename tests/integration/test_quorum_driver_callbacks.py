"""A `propose_nowait` callback that raises does not stop the node's driver loop, nor the
other callbacks of the same batch (`quorum.driver._CallbackWaiter`)."""

from __future__ import annotations

import logging
import random

import pytest
import trio

from quorum.driver import NodeDriver
from quorum.log import AsyncLog
from quorum.raft import KvMachine, KvSet, RaftOptions

pytestmark = pytest.mark.trio


class _NoPeers:
    def send(self, peer: str, group: str, data: bytes) -> bool:
        return False


async def test_raising_callback_is_logged_and_the_loop_goes_on(tmp_path, caplog):
    log = AsyncLog.open(str(tmp_path))
    driver = NodeDriver("solo", log, _NoPeers(), tick_interval=0.01,
                        options=RaftOptions(election_tick=3, heartbeat_tick=1),
                        rng=random.Random(3))
    driver.add_group("kv", KvMachine(), ["solo"])
    results = []

    def boom(reply, err):
        raise RuntimeError("callback bug")

    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            while not driver.status("kv").is_leader:
                await trio.sleep(0.01)
            with caplog.at_level(logging.ERROR, logger="quorum.driver"):
                driver.propose_nowait("kv", KvMachine.encode(KvSet("a", "1")), boom)
                driver.propose_nowait("kv", KvMachine.encode(KvSet("b", "2")),
                                      lambda reply, err: results.append((reply, err)))
                # a later proposal still commits: the loop survived
                await driver.propose("kv", KvMachine.encode(KvSet("c", "3")))
        nursery.cancel_scope.cancel()
    log.close()
    assert results == [(None, None)]
    assert driver.state("kv")["c"][0] == "3"
    assert any("failed" in r.getMessage() for r in caplog.records)
