"""Fixtures: one `amqp-broker` process with the management API and metrics per module
(compat_tests' launcher: the node users run, with its store and quorum runtime), authenticated and
anonymous httpx clients, pika connections, unique names."""

from __future__ import annotations

import itertools
import os

import httpx
import pika
import pytest

from compat_tests.support.launcher import Broker

_seq = itertools.count()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with Broker(tmp_path_factory.mktemp("mgmt-node")).start() as n:
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
    conns = []

    def connect(url: str | None = None) -> pika.BlockingConnection:
        params = pika.URLParameters(url or node.url)
        params.connection_attempts = 1
        c = pika.BlockingConnection(params)
        conns.append(c)
        return c

    yield connect
    for c in conns:
        if c.is_open:
            try:
                c.close()
            except pika.exceptions.AMQPError:
                pass
