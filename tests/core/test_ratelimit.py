"""The token bucket behind the per-connection rate limits (core/ratelimit.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_broker.core.ratelimit import TokenBucket


def test_a_burst_passes_then_each_operation_costs_one_over_the_rate():
    b = TokenBucket(10.0, now=0.0)
    b.take(0.0, 10)
    assert b.wait_time(0.0) == 0.0  # one second's worth passes at once
    assert not b.in_debt
    b.take(0.0)
    assert b.in_debt
    assert b.wait_time(0.0) == pytest.approx(0.1)
    assert b.wait_time(0.05) == pytest.approx(0.05)
    assert b.wait_time(0.1) == 0.0
    assert not b.in_debt  # known paid back once asked


def test_idle_time_refills_no_more_than_the_burst():
    b = TokenBucket(10.0, burst=5, now=0.0)
    b.take(0.0, 5)
    b.take(1000.0, 5)  # a long pause gave back 5, not 10,000
    assert b.wait_time(1000.0) == 0.0
    b.take(1000.0, 1)
    assert b.wait_time(1000.0) == pytest.approx(0.1)


def test_a_rate_must_be_positive():
    with pytest.raises(ValueError):
        TokenBucket(0.0)


@given(rate=st.integers(1, 1000),
       steps=st.lists(st.tuples(st.floats(0, 2, allow_nan=False), st.integers(0, 50)),
                      min_size=1, max_size=40))
def test_a_caller_that_waits_out_the_debt_stays_under_rate_times_time_plus_burst(rate, steps):
    """Whoever waits `wait_time` before each batch never does more than burst + rate * elapsed
    operations, whatever the batches."""
    b = TokenBucket(float(rate), now=0.0)
    now, done = 0.0, 0
    for gap, n in steps:
        now += gap
        now += b.wait_time(now)  # the reader waits before reading the next batch
        assert b.wait_time(now) == pytest.approx(0.0, abs=1e-9)
        b.take(now, n)
        done += n
        assert done - n <= b.burst + rate * now + 1e-6  # before this batch: within the bound
