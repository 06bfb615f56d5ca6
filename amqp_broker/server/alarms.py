"""Memory and disk alarms, and connection.blocked / connection.unblocked (RabbitMQ's flow).

`run_alarms` (a task started by `node.run_node`) samples the process's resident memory and the
data directory's free space four times a second (a publisher at full speed brings a few
hundred MB in a second). While an alarm is set, `Broker.alarm_active` is
true: every connection that advertised the `connection.blocked` capability is told
`connection.blocked(reason)`, and sessions that have published stop reading from their socket
(consumers keep flowing, so queues can drain). When all alarms clear, blocked connections get
`connection.unblocked` and reading resumes.

RSS is what the kernel charges the process, but memory Python frees stays in the C allocator's
heap and is not always given back, so the RSS of a broker whose queues have drained or were
deleted need not fall (and the alarm would never clear): while the memory alarm is set, each
sample first asks glibc to return its free pages (`malloc_trim`; a no-op where there is no
glibc), and every couple of seconds so does a sample that finds `TRIM_ABOVE` more bytes free in
the allocator's heaps (`mallinfo2`) than at the last trim, so memory returns after a backlog is
consumed or its queue deleted.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from typing import TYPE_CHECKING, Callable

import trio

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["run_alarms", "disk_limit_bytes", "memory_limit_bytes", "rss_bytes"]

_log = logging.getLogger(__name__)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _find_malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _find_malloc_trim()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _find_mallinfo2():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return None
    fn.restype = _MallInfo2
    return fn


_mallinfo2 = _find_mallinfo2()
# Free bytes in the allocator's heaps above which a periodic check trims them.
TRIM_ABOVE = 16 * 1024 * 1024
_TRIM_EVERY = 8  # alarm samples (4 a second): a check every 2 s
# ... but only once the process used less than TRIM_BUSY of a core over the last TRIM_QUIET
# checks. A busy broker reuses its free heap at once, and a page given back costs a fault (on this
# VM a host fault) when it is touched again: trimming every 2 s under load cost 64 KiB quorum e2e
# 12-18%, and a trim in each short pause between bursts costs the next burst the same. A few
# seconds after the load stops the heap is trimmed (RSS goes back, as after a drain or a delete).
TRIM_BUSY = 0.25
TRIM_QUIET = 2


class CpuMeter:
    """The process's CPU time (all threads) as a share of one core since the last reading."""

    def __init__(self, cpu: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cpu, self._clock = cpu, clock
        self._last = (cpu(), clock())

    def share(self) -> float:
        cpu, now = self._cpu(), self._clock()
        used, elapsed = cpu - self._last[0], now - self._last[1]
        self._last = (cpu, now)
        return used / elapsed if elapsed > 0 else 0.0


def free_heap_bytes() -> int | None:
    """Bytes the C allocator holds free in its heaps (None where unknown)."""
    return None if _mallinfo2 is None else _mallinfo2().fordblks


_trimmed_at = 0  # free heap bytes at the last trim (trimmed pages still count as free)


def trim_if_worth_it() -> bool:
    """Trim when the heaps hold `TRIM_ABOVE` more free bytes than at the last trim (trimmed
    pages still count as free, so the level alone would trim forever); True if it did."""
    global _trimmed_at
    free = free_heap_bytes()
    if free is None:
        return False
    if free <= _trimmed_at + TRIM_ABOVE:
        _trimmed_at = min(_trimmed_at, free)
        return False
    release_free_memory()
    _trimmed_at = free
    return True


def release_free_memory() -> None:
    """Give the allocator's free pages back to the OS (glibc), so RSS shows what is in use."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * _PAGE
    except (ValueError, OSError, AttributeError):
        return 0


def memory_limit_bytes(watermark: float) -> int:
    """A watermark <= 1 is a fraction of physical memory, above 1 an absolute byte count."""
    if watermark > 1:
        return int(watermark)
    return int(_total_memory() * watermark)


def _disk_free(path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def disk_limit_bytes(settings) -> int:
    """disk_free_limit in bytes: `.relative` (a multiple of physical memory) when set, else
    `.absolute`."""
    if settings.disk_free_limit_relative is not None:
        return int(_total_memory() * settings.disk_free_limit_relative)
    return settings.disk_free_limit


def check_alarms(broker: "Broker") -> set[str]:
    s = broker.settings
    disk_limit = disk_limit_bytes(s)
    active: set[str] = set()
    limit = memory_limit_bytes(s.memory_high_watermark)
    used = rss_bytes()
    if limit and used > limit:
        active.add("memory")
    free = _disk_free(s.data_dir)
    if free is not None and free < disk_limit:
        active.add("disk")
    # the readings, as RabbitMQ's node fields, for the management API's /api/nodes
    broker.resource_usage = {"mem_used": used, "mem_limit": limit,
                             "disk_free": free if free is not None else 0,
                             "disk_free_limit": disk_limit}
    return active


async def run_alarms(broker: "Broker", interval: float = 0.25) -> None:
    samples = 0
    meter = CpuMeter()
    quiet = 0  # checks in a row that found the broker quiet
    while True:
        samples += 1
        # Under a memory alarm trim every time, else every 2 s if enough was freed and the
        # broker has been quiet; in a worker thread: a trim of large heaps takes 20-50 ms, a
        # stall of every connection in the loop (ctypes lets go of the GIL while glibc works).
        if "memory" in broker.alarms:
            await trio.to_thread.run_sync(release_free_memory)
        elif samples % _TRIM_EVERY == 0:
            quiet = quiet + 1 if meter.share() < TRIM_BUSY else 0
            if quiet >= TRIM_QUIET:
                await trio.to_thread.run_sync(trim_if_worth_it)
        active = check_alarms(broker)
        if active != broker.alarms:
            if active:
                _log.warning("resource alarm set: %s; blocking publishers", ", ".join(sorted(active)))
            else:
                _log.info("resource alarms cleared; unblocking publishers")
            broker.set_alarms(active)
        await trio.sleep(interval)
