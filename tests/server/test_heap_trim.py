"""The alarm sampler's heap trim (`server/alarms.trim_if_worth_it`) on this process's glibc:
it trims once freed memory piles up, and not again until more is freed."""

from __future__ import annotations

import pytest

from amqp_broker.server import alarms


@pytest.mark.skipif(alarms.free_heap_bytes() is None, reason="needs glibc >= 2.33 (mallinfo2)")
def test_trims_once_freed_memory_piles_up_then_not_again():
    alarms.trim_if_worth_it()  # whatever the test run left behind
    # 64 MiB in the C heap (not pymalloc), each block pinned by a small live one after it, so
    # that freeing them leaves holes the allocator keeps rather than a top it shrinks itself
    held, pins = [], []
    for _ in range(1024):
        held.append(bytes(64 * 1024))
        pins.append(bytes(1024))
    before = alarms.free_heap_bytes()
    del held
    assert alarms.free_heap_bytes() > before + alarms.TRIM_ABOVE
    assert alarms.trim_if_worth_it()
    assert not alarms.trim_if_worth_it()  # nothing new freed since
    assert len(pins) == 1024
