"""Fixtures for the compat suite: which broker to test, client connections, unique names.

Broker choice: `--broker-url URL`, else env `BROKER_URL`, else this project's `amqp-broker` is
started as a subprocess (compat_tests/support/launcher.py) with its management API for the
session.  If that start fails, every test errors with the broker's log tail: a broken start is a
failure, never a skip.  A URL that does not answer is an error too (the run asked for it).
Management API: `--mgmt-url URL`, else env `MGMT_URL`, else the launched broker's; against a
given broker URL without one, the tests that need it are skipped (`mgmt_url` is None).
Markers: `rabbitmq4` (skipped against RabbitMQ 3.x) and `ours_only` (skipped against a real
RabbitMQ), decided from the server-properties of connection.start.
"""

from __future__ import annotations

import functools
import os
import re
import time
import urllib.parse
import uuid

import kombu
import pika
import pytest

from compat_tests.support import (LaunchError, Names, ServerInfo, launch_our_broker, pika_connections,
                                  management_client, pika_parameters, probe_server, run_aio)

_TEST_TIMEOUT = 60  # seconds per test unless the test says otherwise


def pytest_addoption(parser):
    parser.addoption("--broker-url", default=None,
                     help="AMQP URL of the broker under test (default: env BROKER_URL, "
                          "else start amqp-broker on a free port)")
    parser.addoption("--mgmt-url", default=None,
                     help="management API of the broker under test (default: env MGMT_URL, "
                          "else the started amqp-broker's)")


def pytest_configure(config):
    config.addinivalue_line("markers", "rabbitmq4: RabbitMQ 4.x behaviour; skipped against RabbitMQ 3.x")
    config.addinivalue_line("markers", "ours_only: needs this broker; skipped against a real RabbitMQ")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "compat_tests" in str(item.fspath) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(_TEST_TIMEOUT))


@pytest.fixture(scope="session")
def launched_broker(request, tmp_path_factory):
    """Our `amqp-broker` process when no broker URL was given, else None."""
    if request.config.getoption("--broker-url") or os.environ.get("BROKER_URL"):
        yield None
        return
    try:
        broker = launch_our_broker(tmp_path_factory.mktemp("amqp-broker"))
    except LaunchError as e:
        pytest.fail(f"cannot start our broker: {e}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def broker_url(request, launched_broker) -> str:
    if launched_broker is not None:
        return launched_broker.url
    return request.config.getoption("--broker-url") or os.environ["BROKER_URL"]


@pytest.fixture(scope="session")
def mgmt_url(request, launched_broker) -> str | None:
    """Base URL of the management API of the broker under test, or None when it is unknown
    (a broker URL was given without --mgmt-url / MGMT_URL)."""
    url = request.config.getoption("--mgmt-url") or os.environ.get("MGMT_URL")
    if url:
        return url.rstrip("/")
    return launched_broker.mgmt_url if launched_broker is not None else None


@pytest.fixture(scope="session")
def server_info(broker_url) -> ServerInfo:
    return probe_server(broker_url)


@pytest.fixture(autouse=True)
def _skip_by_server(request, server_info):
    if request.node.get_closest_marker("rabbitmq4") and server_info.is_rabbitmq3:
        pytest.skip(f"RabbitMQ 4.x behaviour; server is {server_info.product} {server_info.version}")
    if request.node.get_closest_marker("ours_only") and server_info.is_rabbitmq:
        pytest.skip(f"checks this broker only; server is {server_info.product} {server_info.version}")


@pytest.fixture
def pika_params(broker_url):
    """A factory of pika.URLParameters for the broker, with keyword overrides."""
    return functools.partial(pika_parameters, broker_url)


@pytest.fixture
def pika_connect(broker_url):
    """Open pika BlockingConnections (keyword overrides go to the parameters); all are closed
    after the test."""
    with pika_connections() as connect:
        yield functools.partial(connect, broker_url)


@pytest.fixture
def conn(pika_connect) -> pika.BlockingConnection:
    return pika_connect()


@pytest.fixture
def ch(conn):
    return conn.channel()


@pytest.fixture
def confirm_ch(conn):
    """A channel in confirm mode: each basic_publish returns once the broker has routed (and
    confirmed) the message, so counts and orders observed afterwards do not race the publishes;
    an unroutable mandatory publish raises UnroutableError, a nack NackError."""
    channel = conn.channel()
    channel.confirm_delivery()
    return channel


@pytest.fixture
def restricted_conn(api, broker_url):
    """`restricted_conn(prefix)` adds a user (password "pw") who may configure, write and read in
    vhost "/" only the resources whose names start with `prefix`, and returns (user, a pika
    connection as that user).  After the test the connections are closed and the users deleted
    (over the management API, so skipped without one)."""
    vhost = urllib.parse.quote("/", safe="")
    users: list[str] = []
    with pika_connections() as connect:
        def _open(prefix: str) -> tuple[str, pika.BlockingConnection]:
            user = f"compat-user-{uuid.uuid4().hex[:8]}"
            created = api.put(f"/users/{user}", json={"password": "pw", "tags": ""})
            assert created.status_code in (201, 204), created.text
            users.append(user)
            pattern = "^" + re.escape(prefix)
            perms = {"configure": pattern, "write": pattern, "read": pattern}
            set_perms = api.put(f"/permissions/{vhost}/{user}", json=perms)
            assert set_perms.status_code in (201, 204), set_perms.text
            return user, connect(broker_url, credentials=pika.PlainCredentials(user, "pw"))
        yield _open
    for user in users:
        api.delete(f"/users/{user}")


@pytest.fixture
def names(request, broker_url):
    n = Names(request.node.name)
    yield n
    n.cleanup(broker_url)


@pytest.fixture
def aio(broker_url):
    """`aio(body)` runs `await body(aio_pika_connection)` on a fresh event loop and returns its
    result (pytest here runs without an asyncio plugin)."""
    def _run(body, timeout: float = 20.0):
        return run_aio(broker_url, body, timeout)
    return _run


@pytest.fixture
def kombu_conn(broker_url):
    c = kombu.Connection(broker_url, transport="pyamqp", connect_timeout=10)
    yield c
    c.release()


# -- policies over the management API (test_dead_letter_policies, test_policy_precedence) ---
@pytest.fixture
def api(mgmt_url):
    """An httpx client on the management API's /api (MGMT_USER / MGMT_PASSWORD, default
    guest/guest); skips when the broker under test has no known management API."""
    if mgmt_url is None:
        pytest.skip("no management API for the given broker URL: pass --mgmt-url or set MGMT_URL")
    auth = (os.environ.get("MGMT_USER", "guest"), os.environ.get("MGMT_PASSWORD", "guest"))
    with management_client(mgmt_url + "/api", auth) as c:
        yield c


@pytest.fixture
def policy(api, names):
    """`policy(definition, *queues)` sets (or replaces) this test's policy on `queues` and waits
    until the broker lists it on them; removed after the test."""
    name = names.queue().replace("compat.", "pol.", 1)
    vhost = urllib.parse.quote("/", safe="")

    def _set(definition: dict, *queues: str) -> None:
        pattern = "^(" + "|".join(q.replace(".", r"\.") for q in queues) + ")$"
        body = {"pattern": pattern, "definition": definition, "priority": 900,
                "apply-to": "queues"}
        assert api.put(f"/policies/{vhost}/{name}", json=body).status_code in (201, 204)
        for q in queues:
            _wait_policy(api, vhost, q, name)
        time.sleep(float(os.environ.get("POLICY_SETTLE", "0.3")))  # quorum queues apply the new config through their log

    yield _set
    api.delete(f"/policies/{vhost}/{name}")


def _wait_policy(api, vhost: str, queue: str, name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = api.get(f"/queues/{vhost}/{urllib.parse.quote(queue, safe='')}")
        if r.status_code == 200 and r.json().get("policy") == name:
            return
        time.sleep(0.1)
    pytest.fail(f"policy {name} not applied to {queue}")
