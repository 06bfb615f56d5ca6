"""`DiskJobs`: where a blocking write + fdatasync runs, on the trio thread or in a worker thread.

Used by the WAL writer (`quorum.log.wal`) and the classic message journal
(`amqp_broker.store.journal`). At a low message rate every batch is one message, and handing
it to `trio.to_thread` costs the loop 100-150 µs of CPU each time (the thread cache's wake-ups,
the GIL going back and forth, the loop's wake-up when the result comes back): more than the
write and a fast disk's fdatasync (0.1-0.3 ms here, waiting, not CPU). So a small job runs
inline while the moving average of small jobs stays under 1 ms; a large job (framing and
CRCs of big bodies; at full load most batches are large), or any job once the disk turns
slow, goes to a worker thread, where the loop goes on meanwhile and never stalls for long.
Small jobs sent to the thread are timed too, so a disk that becomes fast again brings them
back inline.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, Callable

import trio

__all__ = ["DiskJobs"]

INLINE_MAX_BYTES = 64 * 1024    # larger batches are framed and written in a worker thread
INLINE_MAX_SECONDS = 0.001      # a moving average above this sends every job to the thread
_WEIGHT = 0.2                   # of the newest job in the moving average


class DiskJobs:
    def __init__(self, max_bytes: int = INLINE_MAX_BYTES, max_seconds: float = INLINE_MAX_SECONDS) -> None:
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.average = 0.0   # seconds a job took, moving average
        self.inline = 0      # jobs run on the trio thread (statistics)
        self.threaded = 0    # jobs run in a worker thread

    def takes_inline(self, nbytes: int | None) -> bool:
        """Whether `run` would run a job that writes `nbytes` on the trio thread."""
        return nbytes is not None and nbytes <= self.max_bytes and self.average < self.max_seconds

    def run_inline(self, job: Callable[[], Any]) -> Any:
        """Run `job()` here, now, timed into the average (for a caller that checked
        `takes_inline` and must not yield)."""
        self.inline += 1
        start = perf_counter()
        try:
            return job()
        finally:
            self._took(perf_counter() - start)

    async def run(self, job: Callable[[], Any], nbytes: int | None) -> Any:
        """Run `job()` and return its result; `nbytes` is what it writes (None: always a worker
        thread, e.g. a compaction). Inline there is no checkpoint: callers loop back to a wait."""
        if self.takes_inline(nbytes):
            return self.run_inline(job)
        small = nbytes is not None and nbytes <= self.max_bytes
        self.threaded += 1
        result, took = await trio.to_thread.run_sync(_timed, job)
        if small:  # the average is of small jobs alone: a big batch is slow on any disk
            self._took(took)
        return result

    def _took(self, seconds: float) -> None:
        self.average += _WEIGHT * (seconds - self.average)


def _timed(job: Callable[[], Any]) -> tuple[Any, float]:
    start = perf_counter()
    result = job()
    return result, perf_counter() - start
