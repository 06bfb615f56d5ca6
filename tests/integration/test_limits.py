"""Limits against an `amqp-broker` process: vhost and user limits set with amqp-brokerctl's
verbs (set_vhost_limits / clear_vhost_limits / set_user_limits / clear_user_limits), kept in the
replicated metadata across a restart, and the node-wide connection_max. What clients see when a
limit is reached is pinned in compat_tests/test_limits.py (which also runs on RabbitMQ 3.10)."""

from __future__ import annotations

import io

import httpx
import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker, ProbableAccessDeniedError

from amqp_broker.cli import ctl
from compat_tests.support.launcher import Broker
from compat_tests.support.pika_util import pika_connections


def _ctl(node: Broker, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = ctl.main(["--url", node.mgmt_url, *argv], out=out)
    return code, out.getvalue()


def test_limits_set_with_ctl_survive_a_restart(tmp_path):
    node = Broker(tmp_path).start()
    try:
        assert _ctl(node, "add_vhost", "lim")[0] == 0
        assert _ctl(node, "set_permissions", "-p", "lim", "guest", ".*", ".*", ".*")[0] == 0
        assert _ctl(node, "set_vhost_limits", "-p", "lim",
                    '{"max-connections": 1, "max-queues": 5}')[0] == 0
        assert _ctl(node, "set_vhost_limits", "-p", "lim", '{"max-connections": 1}')[0] == 0
        assert _ctl(node, "add_user", "lu", "pw")[0] == 0
        assert _ctl(node, "set_permissions", "lu", ".*", ".*", ".*")[0] == 0
        assert _ctl(node, "set_user_limits", "lu", '{"max-channels": 1}')[0] == 0
        assert _ctl(node, "set_user_limits", "lu", '{"max-connections": 3}')[0] == 0
        assert _ctl(node, "set_user_limits", "lu", "[1]")[0] == 65  # not a JSON object
        node.restart()
        code, out = _ctl(node, "list_vhost_limits", "-p", "lim", "-q")
        assert (code, out) == (0, '{"max-connections": 1}\n')  # set_vhost_limits replaced
        code, out = _ctl(node, "list_user_limits", "--user", "lu")
        assert (code, out) == (0, 'lu\t{"max-channels": 1, "max-connections": 3}\n')  # merged
        with pika_connections() as connect:
            base = node.url.rsplit("/", 1)[0]
            connect(base + "/lim")
            with pytest.raises(ProbableAccessDeniedError):
                connect(base + "/lim", connection_attempts=1)
            conn = connect(node.url, credentials=pika.PlainCredentials("lu", "pw"))
            conn.channel()
            with pytest.raises(ConnectionClosedByBroker) as info:
                conn.channel()
            assert info.value.reply_code == 530
        assert _ctl(node, "clear_vhost_limits", "-p", "lim")[0] == 0
        assert _ctl(node, "clear_user_limits", "lu", "max-channels")[0] == 0
        with httpx.Client(base_url=node.mgmt_url + "/api", auth=("guest", "guest")) as api:
            assert api.get("/vhost-limits").json() == []
            assert api.get("/user-limits").json() == [{"user": "lu",
                                                        "value": {"max-connections": 3}}]
        assert _ctl(node, "clear_user_limits", "lu", "all")[0] == 0
        assert _ctl(node, "list_user_limits")[1] == ""
    finally:
        node.stop()


def test_connection_max_refuses_connections_beyond_it(tmp_path):
    node = Broker(tmp_path, management=False, config="connection_max = 2\n").start()
    try:
        with pika_connections() as connect:
            connect(node.url)
            connect(node.url)
            with pytest.raises(ProbableAccessDeniedError) as info:
                connect(node.url, connection_attempts=1)
            assert "NOT_ALLOWED - connection refused: node connection limit (2) is reached" in \
                str(info.value)
    finally:
        node.stop()
