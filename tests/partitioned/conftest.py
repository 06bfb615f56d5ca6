"""Fixtures: one `amqp-broker` process per module (compat_tests' launcher, management and
metrics on), pika connections to it."""

from __future__ import annotations

import pytest

from compat_tests.support.launcher import Broker
from compat_tests.support.pika_util import pika_connections


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture
def ch(broker):
    with pika_connections() as open_conn:
        yield open_conn(broker.url).channel()
