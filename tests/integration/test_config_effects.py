"""Settings that take effect on a running node, and settings refused at start-up because they
would change nothing here (rather than being parsed and ignored).

- quorum_queue.property_equivalence.relaxed_checks_on_redeclaration = true (RabbitMQ
  3.11.16+, opt-in; the strict default is in compat_tests/test_quorum.py);
- the consumer-timeout policy key (the x-consumer-timeout argument is in
  compat_tests/test_consumer_timeout.py);
- keys refused at start: the broker exits with the file, line, key and why.
"""

from __future__ import annotations

import time
import urllib.parse

import httpx
import pytest
from pika.exceptions import ChannelClosedByBroker

from compat_tests.support import wait_channel_closed
from compat_tests.support.launcher import Broker, LaunchError

QQ = {"x-queue-type": "quorum"}


@pytest.fixture
def relaxed_broker(tmp_path):
    b = Broker(tmp_path, management=False,
               config="quorum_queue.property_equivalence.relaxed_checks_on_redeclaration = true\n")
    yield b.start()
    b.stop()


def test_relaxed_checks_accept_a_classic_redeclare_of_a_quorum_queue(relaxed_broker, connect):
    conn = connect(relaxed_broker)
    ch = conn.channel()
    ch.queue_declare("relaxed.q", durable=True, arguments={**QQ, "x-expires": 100_000})
    # as classic, implicitly or explicitly, with the shared arguments equal: accepted
    assert ch.queue_declare("relaxed.q", durable=True, arguments={"x-expires": 100_000}).method.queue == "relaxed.q"
    ch.queue_declare("relaxed.q", durable=True,
                     arguments={"x-queue-type": "classic", "x-expires": 100_000, "x-max-priority": 5})
    # a shared argument the queue does not have: still 406
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("relaxed.q", durable=True,
                         arguments={"x-queue-type": "classic", "x-expires": 100_000, "x-message-ttl": 5})
    assert info.value.reply_code == 406
    assert "inequivalent arg 'x-message-ttl' for queue 'relaxed.q'" in info.value.reply_text
    # the queue is still the quorum queue it was
    ch = conn.channel()
    assert ch.queue_declare("relaxed.q", durable=True, arguments={**QQ, "x-expires": 100_000})
    conn.close()


@pytest.fixture
def mgmt_broker(tmp_path):
    b = Broker(tmp_path)
    yield b.start()
    b.stop()


def test_consumer_timeout_policy_applies_to_existing_queues(mgmt_broker, connect):
    conn = connect(mgmt_broker)
    ch = conn.channel()
    ch.queue_declare("ct.policy")
    vhost = urllib.parse.quote("/", safe="")
    with httpx.Client(base_url=mgmt_broker.mgmt_url + "/api", auth=("guest", "guest"), timeout=30) as api:
        r = api.put(f"/policies/{vhost}/ct", json={"pattern": "^ct\\.policy$", "apply-to": "queues",
                                                   "definition": {"consumer-timeout": 1000}})
        assert r.status_code in (201, 204)
        deadline = time.monotonic() + 10
        while api.get(f"/queues/{vhost}/ct.policy").json().get("policy") != "ct":
            assert time.monotonic() < deadline, "policy not applied"
            time.sleep(0.1)
    ch.basic_publish("", "ct.policy", b"x")
    ch.basic_consume("ct.policy", lambda *a: None)  # never acks
    reason = wait_channel_closed(conn, ch)
    assert isinstance(reason, ChannelClosedByBroker)
    assert reason.reply_code == 406
    assert "Timeout value used: 1000 ms" in reason.reply_text
    conn.close()


@pytest.mark.parametrize("line, says", [
    ("quorum_queue.commands_soft_limit = 64",
     "quorum_queue.commands_soft_limit: not supported"),
])
def test_keys_that_would_change_nothing_stop_the_start(tmp_path, line, says):
    b = Broker(tmp_path, management=False, config=line + "\n")
    with pytest.raises(LaunchError) as info:
        b.start()
    assert says in str(info.value)
    assert b.stop() not in (None, 0)  # it exited on its own, with an error status


@pytest.mark.parametrize("line", ["anonymous_login_user = none", "compat_profile = rabbitmq-3.10"])
def test_anonymous_is_not_offered_when_configured_off(tmp_path, line):
    from compat_tests.support.raw import RawClient

    b = Broker(tmp_path, management=False, config=line + "\n").start()
    try:
        with RawClient(b.url) as raw:
            raw.handshake()
            assert "ANONYMOUS" not in raw.start.mechanisms.split()
    finally:
        b.stop()
