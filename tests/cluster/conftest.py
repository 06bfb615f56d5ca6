"""Fixtures: one 3-node `LocalCluster` (compat_tests/support/cluster.py: real `amqp-broker`
processes on loopback) per module, and `wait_until` for what a cluster learns a moment later."""

from __future__ import annotations

import time

import pytest

from compat_tests.support.cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def wait_until(predicate, timeout: float = 10.0, what: str = "condition"):
    """Poll `predicate` until it returns something true; fail the test with `what` if not."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
