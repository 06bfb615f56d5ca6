"""Failed logins leak nothing and cost other clients nothing, against an `amqp-broker` process:
an unknown user, a wrong password and `guest` from a non-loopback address get byte-identical
refusals (the reason is only in the node's log, with the peer's address), and 200 failed logins
at once do not stop a canary connection's round trips. That the two refusals cost the same work
(a hash either way) is checked in tests/core/test_users.py; timings are not asserted here."""

from __future__ import annotations

import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pika
import pytest

from compat_tests.support.launcher import Broker
from compat_tests.support.raw import RawClient


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # all interfaces, so that a client can come from a non-loopback address of this machine
    b = Broker(tmp_path_factory.mktemp("logins"), management=False,
               args=("--host", "0.0.0.0")).start()
    yield b
    b.stop()


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (the source of a UDP route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


def _refusal(host: str, port: int, user: str, password: str) -> tuple[bytes, str]:
    """The bytes of the server's answer to start-ok, and the local end's address."""
    with RawClient(f"amqp://{user}:{password}@{host}:{port}/") as raw:
        reply = raw.handshake()
        assert reply is not None and reply.name == "Connection.Close", reply
        local = "%s:%d" % raw.sock.getsockname()[:2]
        return (reply.reply_code, reply.class_id, reply.method_id, reply.reply_text), local


def test_unknown_user_wrong_password_and_remote_guest_get_the_same_refusal(node):
    remote = _non_loopback_address()
    if remote is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    wrong, wrong_from = _refusal("127.0.0.1", node.port, "guest", "not-the-password")
    unknown, unknown_from = _refusal("127.0.0.1", node.port, "no-such-user", "guest")
    remote_guest, remote_from = _refusal(remote, node.port, "guest", "guest")
    assert wrong == unknown == remote_guest == (
        403, 0, 0, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                   "For details see the broker logfile.")
    log = node.log_path.read_text()
    for peer, user, why in ((wrong_from, "guest", "invalid credentials"),
                            (unknown_from, "no-such-user", "invalid credentials"),
                            (remote_from, "guest", "can only connect via localhost")):
        assert re.search(rf"{re.escape(peer)}: PLAIN login refused for user '{user}': .*{why}",
                         log), (peer, user, why)


def test_a_burst_of_failed_logins_does_not_stop_other_clients(node):
    canary = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = canary.channel()
    ch.queue_declare("login.canary", auto_delete=True)
    ch.confirm_delivery()
    burst_over = threading.Event()
    round_trips = 0

    def fail_login(i: int) -> int:
        return _refusal("127.0.0.1", node.port, f"intruder-{i % 7}", f"guess-{i}")[0][0]

    with ThreadPoolExecutor(max_workers=200) as pool:
        futures = [pool.submit(fail_login, i) for i in range(200)]
        pool.submit(lambda: ([f.result() for f in futures], burst_over.set()))
        # the canary keeps going while the burst is on, and its messages all come back
        while not burst_over.is_set() or round_trips < 20:
            ch.basic_publish("", "login.canary", b"%d" % round_trips)
            _, _, body = ch.basic_get("login.canary", auto_ack=True)
            assert body == b"%d" % round_trips
            round_trips += 1
        codes = [f.result() for f in futures]
    assert codes == [403] * 200
    canary.close()
    assert node.log_path.read_text().count("login refused for user 'intruder-") >= 200
