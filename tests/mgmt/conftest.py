"""Fixtures: one `amqp-broker` process with the management API and metrics per module
(compat_tests' launcher: the node users run, with its store and quorum runtime), authenticated and
anonymous httpx clients, pika connections, unique names."""

from __future__ import annotations

import itertools
import os

import httpx
import pytest

from compat_tests.support.launcher import Broker
from compat_tests.support.pika_util import pika_connections

_seq = itertools.count()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # rates sampled every 200 ms, so message_stats tests wait that long, not 5 s
    with Broker(tmp_path_factory.mktemp("mgmt-node"),
                config="collect_statistics_interval = 200\n").start() as n:
        yield n


@pytest.fixture
def api(node):
    with httpx.Client(base_url=node.mgmt_url + "/api", auth=("guest", "guest"), timeout=30) as c:
        yield c


@pytest.fixture
def anon(node):
    with httpx.Client(base_url=node.mgmt_url + "/api", timeout=30) as c:
        yield c


@pytest.fixture
def name():
    return f"t{os.getpid()}-{next(_seq)}"


@pytest.fixture
def amqp(node):
    """`amqp(url=None)`: a pika BlockingConnection to `url` (default: the node's); closed after
    the test."""
    with pika_connections() as connect:
        yield lambda url=None: connect(url or node.url)
