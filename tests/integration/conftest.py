"""Fixtures: an `amqp-broker` process per test module (compat_tests' launcher, management off),
a fresh one per restart/kill test, and pika connections (compat_tests.support.pika_connections)."""

from __future__ import annotations

import pika
import pytest

from compat_tests.support.launcher import Broker
from compat_tests.support.pika_util import pika_connections


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker"), management=False).start()
    yield b
    b.stop()


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker of the test's own (for restart and kill tests)."""
    b = Broker(tmp_path, management=False)
    yield b
    b.kill()


@pytest.fixture
def connect(request):
    """`connect(b=None, **overrides)`: a pika BlockingConnection to broker `b` (default: the
    module's `broker`, started only when asked for); closed after the test."""
    with pika_connections() as open_conn:
        def _connect(b: Broker | None = None, **overrides) -> pika.BlockingConnection:
            return open_conn((b or request.getfixturevalue("broker")).url, **overrides)
        yield _connect


@pytest.fixture
def ch(connect):
    return connect().channel()
