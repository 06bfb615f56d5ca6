"""The alarm sampler's heap trim (`server/alarms.trim_if_worth_it`) on this machine's glibc:
it trims once freed memory piles up, and not again until more is freed. Run in a fresh
interpreter: a long test session's heap (other tests' holes and arenas) would decide where
the blocks go."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from amqp_broker.server import alarms

ROOT = Path(__file__).resolve().parents[2]

_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
from amqp_broker.server import alarms
alarms.trim_if_worth_it()  # whatever start-up left behind
# 64 MiB in the C heap (not pymalloc), each block pinned by a small live one after it, so that
# freeing them leaves holes the allocator keeps rather than a top it shrinks itself
held, pins = [], []
for _ in range(1024):
    held.append(bytes(64 * 1024))
    pins.append(bytes(1024))
before = alarms.free_heap_bytes()
del held
assert alarms.free_heap_bytes() > before + alarms.TRIM_ABOVE, "freed blocks not counted"
assert alarms.trim_if_worth_it(), "did not trim"
assert not alarms.trim_if_worth_it(), "trimmed again with nothing new freed"
assert len(pins) == 1024
print("ok")
"""


@pytest.mark.skipif(alarms.free_heap_bytes() is None, reason="needs glibc >= 2.33 (mallinfo2)")
def test_trims_once_freed_memory_piles_up_then_not_again():
    # The pins make holes only where the allocator puts each pin right after its block; on a
    # start-up heap with small holes of its own (CI had one) the blocks sit side by side, merge
    # into the top chunk when freed and glibc trims them itself. Fixing glibc's own thresholds
    # keeps the freed blocks in the heap whatever the layout, so the check is about our trim.
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_=str(1 << 30), MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    out = subprocess.run([sys.executable, "-c", _CHECK, str(ROOT)], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_cpu_meter_gives_the_share_of_a_core_since_the_last_reading():
    """The periodic trim waits until the broker was quiet for `TRIM_QUIET` checks (under
    `TRIM_BUSY`): the meter says how busy,
    as CPU seconds over wall seconds since the previous reading, all threads together."""
    cpu, clock = [10.0], [100.0]
    meter = alarms.CpuMeter(cpu=lambda: cpu[0], clock=lambda: clock[0])
    cpu[0], clock[0] = 11.5, 102.0          # 1.5 s of CPU in 2 s: busy
    assert meter.share() == pytest.approx(0.75) and meter.share() == 0.0   # no time passed
    cpu[0], clock[0] = 11.6, 104.0          # 0.1 s in 2 s: quiet, a trim may run
    share = meter.share()
    assert share == pytest.approx(0.05) and share < alarms.TRIM_BUSY
    real = alarms.CpuMeter()
    sum(range(2_000_000))                    # burn some CPU: the real clocks count it
    assert real.share() > alarms.TRIM_BUSY
