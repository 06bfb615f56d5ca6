"""`DiskJobs`: small jobs on the trio thread while they are quick; large ones, compactions and
every job of a slow disk in a worker thread; a disk that becomes quick again gets jobs back."""

import threading
import time

import pytest

from quorum.log.diskjobs import DiskJobs

pytestmark = pytest.mark.trio


def _where(pause: float = 0.0):
    def job():
        if pause:
            time.sleep(pause)
        return threading.current_thread() is threading.main_thread()
    return job


async def test_small_jobs_run_inline_large_ones_and_compactions_in_a_thread():
    jobs = DiskJobs(max_bytes=1000)
    assert await jobs.run(_where(), 10) is True
    assert await jobs.run(_where(), 1000) is True
    assert await jobs.run(_where(), 1001) is False
    assert await jobs.run(_where(), None) is False
    assert (jobs.inline, jobs.threaded) == (2, 2)


async def test_a_slow_disk_sends_small_jobs_to_the_thread_and_a_quick_one_brings_them_back():
    jobs = DiskJobs(max_bytes=1000, max_seconds=0.002)
    ran_inline = [await jobs.run(_where(0.02), 10) for _ in range(3)]
    assert ran_inline == [True, False, False]  # one slow job inline, then the thread
    assert jobs.average > 0.002
    ran_inline = [await jobs.run(_where(), 10) for _ in range(40)]
    assert ran_inline[0] is False and ran_inline[-1] is True
    assert jobs.average < 0.002


async def test_large_jobs_do_not_count_in_the_average():
    jobs = DiskJobs(max_bytes=1000, max_seconds=0.002)
    await jobs.run(_where(0.02), 5000)
    assert jobs.average == 0.0
    assert await jobs.run(_where(), 10) is True


async def test_a_failing_job_raises_from_either_place():
    def fail():
        raise OSError("disk gone")
    jobs = DiskJobs(max_bytes=1000)
    for nbytes in (10, None):
        with pytest.raises(OSError, match="disk gone"):
            await jobs.run(fail, nbytes)

