"""Fixtures: an `amqp-broker` process per test module (compat_tests' launcher, management off),
a fresh one per restart/kill test, and pika helpers."""

from __future__ import annotations

import pika
import pytest

from compat_tests.support.launcher import Broker


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
def connect(broker):
    opened = []

    def _connect(b=None, **kw) -> pika.BlockingConnection:
        params = pika.URLParameters((b or broker).url)
        params.connection_attempts = 1
        for k, v in kw.items():
            setattr(params, k, v)
        c = pika.BlockingConnection(params)
        opened.append(c)
        return c

    yield _connect
    for c in opened:
        if c.is_open:
            try:
                c.close()
            except Exception:
                pass


@pytest.fixture
def ch(connect):
    return connect().channel()
