"""SyncThread: the log's blocking calls on a thread of their own, in order; a call's exception
comes back to the caller; a call once handed over finishes even when its caller is cancelled."""

import threading

import pytest
import trio

from quorum.log.sync_thread import SyncThread


@pytest.mark.trio
async def test_results_in_order_and_exceptions_come_back():
    thread = SyncThread("test")
    seen = []

    def job(n):
        seen.append((n, threading.current_thread().name))
        return n * 2

    assert [await thread.run(job, n) for n in range(5)] == [0, 2, 4, 6, 8]
    assert [n for n, _ in seen] == list(range(5)) and {name for _, name in seen} == {"test"}

    def failing():
        raise OSError(5, "EIO")

    with pytest.raises(OSError, match="EIO"):
        await thread.run(failing)
    assert await thread.run(job, 7) == 14  # the thread survives a failed job
    thread.close()


@pytest.mark.trio
async def test_a_cancelled_caller_still_waits_for_its_job():
    thread = SyncThread("test")
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    done_when_caller_left = []

    def slow_write():
        started.set()
        release.wait(10)
        finished.set()

    scope = trio.CancelScope()

    async def caller():
        with scope:
            try:
                await thread.run(slow_write)
            finally:
                done_when_caller_left.append(finished.is_set())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.to_thread.run_sync(started.wait, 10)
        scope.cancel()  # while the job runs
        await trio.sleep(0.05)
        assert done_when_caller_left == []  # still waiting for its write
        release.set()
    assert done_when_caller_left == [True]  # it returned only once the write was done
    thread.close()
