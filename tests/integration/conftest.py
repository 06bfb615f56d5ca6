"""Fixtures: a broker process per test module on a free port, and pika/aio-pika helpers."""

from __future__ import annotations

import pika
import pytest

from .broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("broker")
    b = BrokerProcess(work / "data", work / "broker.log").start()
    yield b
    b.stop()


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker of the test's own (for restart and kill tests)."""
    b = BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
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
