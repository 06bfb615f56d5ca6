"""This broker's own TLS features, against `amqp-broker` processes with certificates made at test
time (trustme): the certificate-expiration check through amqp-brokerctl, certificates reloaded
on SIGHUP, and a node that refuses to start with a certificate it cannot use. What clients see
of TLS (AMQPS with pika and aio-pika, mutual TLS, TLS 1.1 refused, HTTPS, the health check) is
in compat_tests/test_tls.py, which also runs against RabbitMQ 3.10."""

from __future__ import annotations

import datetime
import io
import re
import signal
import ssl
import time
from pathlib import Path

import httpx
import pika
import pytest
import trustme
from pika.exceptions import AMQPConnectionError

from amqp_broker.cli import ctl
from compat_tests.support.launcher import Broker, LaunchError

_TLS_PORT = re.compile(r"AMQP 0-9-1 over TLS listening on \S+:(\d+)")
_HTTPS_PORT = re.compile(r"management API on https://\S+?:(\d+)/api")


class Certs:
    """A CA and a server certificate for localhost / 127.0.0.1, as files under `where`."""

    def __init__(self, where: Path, not_after: datetime.datetime | None = None) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.server = self.ca.issue_cert("localhost", "127.0.0.1", not_after=not_after)
        self.cacertfile, self.certfile, self.keyfile = (where / "ca.pem", where / "cert.pem",
                                                        where / "key.pem")
        self.ca.cert_pem.write_to_path(str(self.cacertfile))
        self.server.cert_chain_pems[0].write_to_path(str(self.certfile))
        self.server.private_key_pem.write_to_path(str(self.keyfile))

    def client_context(self, cert_from: trustme.CA | None = None, **versions) -> ssl.SSLContext:
        """A client context trusting this CA, presenting a certificate issued by `cert_from`."""
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        if cert_from is not None:
            cert_from.issue_cert("client@example.com").configure_cert(ctx)
        for key, value in versions.items():
            setattr(ctx, key, value)
        return ctx

    def options(self, prefix: str) -> str:
        return (f"{prefix}.cacertfile = {self.cacertfile}\n{prefix}.certfile = {self.certfile}\n"
                f"{prefix}.keyfile = {self.keyfile}\n")


def _start(tmp: Path, config: str) -> tuple[Broker, int, int]:
    b = Broker(tmp, config=config).start()
    log = b.log_path.read_text()
    https = _HTTPS_PORT.search(log)
    return b, int(_TLS_PORT.search(log).group(1)), int(https.group(1)) if https else 0


def _pika(port: int, ctx: ssl.SSLContext) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, ssl_options=pika.SSLOptions(ctx, "localhost"),
        connection_attempts=1, socket_timeout=10, blocked_connection_timeout=10))


def _round_trip(conn: pika.BlockingConnection, queue: str) -> bytes:
    ch = conn.channel()
    ch.queue_declare(queue, auto_delete=True)
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"over tls " + queue.encode())
    _, _, body = ch.basic_get(queue, auto_ack=True)
    return body


def _refused(port: int, ctx: ssl.SSLContext) -> None:
    # refused by the server (pika: AMQPConnectionError), or the client refuses the server's
    # certificate (pika lets the SSLError through)
    with pytest.raises((AMQPConnectionError, ssl.SSLError)):
        _pika(port, ctx).close()


def _wait_log(b: Broker, text: str, after: int = 0, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = b.log_path.read_text()[after:]
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not logged:\n{b.log_tail()}")


@pytest.fixture
def expiring(tmp_path):
    """AMQPS (verify_none) with a server certificate that expires in 10 days."""
    certs = Certs(tmp_path / "certs", not_after=datetime.datetime.now(datetime.timezone.utc)
                  + datetime.timedelta(days=10))
    b, port, _ = _start(tmp_path, "listeners.ssl.tls = 127.0.0.1:0\n" +
                        certs.options("ssl_options"))
    yield certs, b, port
    b.stop()


def test_certificate_expiration_check_and_ctl_verb(expiring):
    certs, b, port = expiring
    with httpx.Client(base_url=b.mgmt_url, auth=("guest", "guest")) as api:
        assert api.get("/api/health/checks/certificate-expiration/1/weeks").status_code == 200
        r = api.get("/api/health/checks/certificate-expiration/2/weeks")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "failed" and body["reason"] == "Certificates expiring"
        [row] = body["expired"]
        assert (row["protocol"], row["port"], row["certfile"]) == ("amqp/ssl", port,
                                                                  str(certs.certfile))
        assert len(row["certfile_expires_on"]) == 1 and row["cacertfile_expires_on"] == []
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d{1,2}:\d\d:\d\d", row["certfile_expires_on"][0])
        bad = api.get("/api/health/checks/certificate-expiration/2/fortnights")
        assert bad.status_code == 400
    out = io.StringIO()
    assert ctl.main(["--url", b.mgmt_url, "check_certificate_expiration", "--within", "1",
                     "--unit", "weeks"], out=out) == 0
    out = io.StringIO()
    assert ctl.main(["--url", b.mgmt_url, "check_certificate_expiration", "--within", "30",
                     "--unit", "days"], out=out) == 69
    assert str(certs.certfile) in out.getvalue()


def test_sighup_reloads_the_certificates(expiring, tmp_path):
    certs, b, port = expiring
    old = _pika(port, certs.client_context())
    fresh = Certs(tmp_path / "new")
    for src, dst in ((fresh.certfile, certs.certfile), (fresh.keyfile, certs.keyfile),
                     (fresh.cacertfile, certs.cacertfile)):
        dst.write_bytes(src.read_bytes())
    mark = len(b.log_path.read_text())
    b.proc.send_signal(signal.SIGHUP)
    _wait_log(b, "certificates reloaded", mark)
    conn = _pika(port, fresh.client_context())  # the new certificate is served
    conn.close()
    _refused(port, certs.client_context())  # the old CA no longer matches
    assert _round_trip(old, "tls.old") == b"over tls tls.old"  # open connections carry on
    old.close()
    with httpx.Client(base_url=b.mgmt_url, auth=("guest", "guest")) as api:  # a 1-year cert now
        assert api.get("/api/health/checks/certificate-expiration/1/months").status_code == 200


def test_a_certificate_the_node_cannot_use_stops_the_start(tmp_path):
    certs = Certs(tmp_path / "certs")
    certs.keyfile.write_text("not a key\n")
    with pytest.raises(LaunchError) as info:
        _start(tmp_path, "listeners.ssl.default = 127.0.0.1:0\n" + certs.options("ssl_options"))
    assert f"ssl_options: cannot use certfile {certs.certfile} with keyfile {certs.keyfile}" in \
        str(info.value)
