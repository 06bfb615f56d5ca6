"""AMQPS and the management API over HTTPS, against `amqp-broker` processes with certificates
made at test time (trustme): pika and aio-pika over TLS, mutual TLS refused without a client
certificate and with one from another CA, TLS 1.1 refused, HTTPS, the certificate-expiration
health check and its amqp-brokerctl verb, certificates reloaded on SIGHUP, and a node that
refuses to start with a certificate it cannot use."""

from __future__ import annotations

import asyncio
import datetime
import io
import re
import signal
import socket
import ssl
import threading
import time
from pathlib import Path

import aio_pika
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


@pytest.fixture(scope="module")
def mutual(tmp_path_factory):
    """AMQPS with verify_peer + fail_if_no_peer_cert; the management API also over HTTPS."""
    tmp = tmp_path_factory.mktemp("tls")
    certs = Certs(tmp / "certs")
    config = ("listeners.ssl.default = 127.0.0.1:0\n" + certs.options("ssl_options") +
              "ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n"
              "ssl_options.versions.1 = tlsv1.3\nssl_options.versions.2 = tlsv1.2\n"
              "management.ssl.ip = 127.0.0.1\nmanagement.ssl.port = 0\n" +
              certs.options("management.ssl"))
    b, port, https = _start(tmp, config)
    yield certs, b, port, https
    b.stop()


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


def test_pika_over_amqps_with_a_client_certificate(mutual):
    certs, b, port, _ = mutual
    conn = _pika(port, certs.client_context(cert_from=certs.ca))
    try:
        assert _round_trip(conn, "tls.pika") == b"over tls tls.pika"
    finally:
        conn.close()


def test_aio_pika_over_amqps(mutual):
    certs, b, port, _ = mutual

    async def body() -> bytes:
        ctx = certs.client_context(cert_from=certs.ca)
        conn = await aio_pika.connect(f"amqps://guest:guest@localhost:{port}/", ssl_context=ctx,
                                      timeout=10)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("tls.aio", auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio over tls"), "tls.aio")
            msg = await q.get(timeout=10)
            await msg.ack()
            return msg.body

    assert asyncio.run(body()) == b"aio over tls"


def _refused(port: int, ctx: ssl.SSLContext) -> None:
    # refused by the server (pika: AMQPConnectionError), or the client refuses the server's
    # certificate (pika lets the SSLError through)
    with pytest.raises((AMQPConnectionError, ssl.SSLError)):
        conn = _pika(port, ctx)
        conn.close()


def _wait_log(b: Broker, text: str, after: int = 0, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = b.log_path.read_text()[after:]
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not logged:\n{b.log_tail()}")


def test_mutual_tls_refuses_a_client_without_certificate(mutual):
    certs, b, port, _ = mutual
    mark = len(b.log_path.read_text())
    _refused(port, certs.client_context())
    log = _wait_log(b, "TLS handshake with 127.0.0.1:", mark)
    assert "certificate" in log.lower()


def test_mutual_tls_refuses_a_certificate_from_another_ca(mutual):
    certs, b, port, _ = mutual
    mark = len(b.log_path.read_text())
    _refused(port, certs.client_context(cert_from=trustme.CA()))
    _wait_log(b, "TLS handshake with 127.0.0.1:", mark)
    # and the broker still serves clients with a good certificate
    conn = _pika(port, certs.client_context(cert_from=certs.ca))
    conn.close()


def _tls11_client(certs: Certs) -> ssl.SSLContext:
    ctx = certs.client_context(cert_from=certs.ca)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL refuses TLS 1.1 at the default level
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    return ctx


def _can_speak_tls11(certs: Certs) -> bool:
    """Whether this machine's OpenSSL can do a TLS 1.1 handshake at all (a local server that
    allows it), so that the broker's refusal below is the broker's doing."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    certs.server.configure_cert(server)
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    server.minimum_version = ssl.TLSVersion.TLSv1_1
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            sock, _ = listener.accept()
            with server.wrap_socket(sock, server_side=True):
                pass
        except (OSError, ssl.SSLError):
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=5) as raw:
            with _tls11_client(certs).wrap_socket(raw, server_hostname="localhost") as tls:
                return tls.version() == "TLSv1.1"
    except (OSError, ssl.SSLError):
        return False
    finally:
        listener.close()
        t.join(5)


def test_tls_1_1_is_refused_and_1_2_accepted(mutual):
    certs, b, port, _ = mutual
    if not _can_speak_tls11(certs):
        pytest.skip("this OpenSSL build cannot speak TLS 1.1 even to a server that allows it")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with pytest.raises(ssl.SSLError):
            _tls11_client(certs).wrap_socket(raw, server_hostname="localhost")
    tls12 = certs.client_context(cert_from=certs.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with tls12.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() == "TLSv1.2"
            tls.sendall(b"AMQP\x00\x00\x09\x01")
            assert tls.recv(7)[:1] == b"\x01"  # a method frame: connection.start


def test_management_api_over_https(mutual):
    certs, b, port, https = mutual
    conn = _pika(port, certs.client_context(cert_from=certs.ca))
    try:
        with httpx.Client(base_url=f"https://localhost:{https}", auth=("guest", "guest"),
                          verify=certs.client_context()) as api:
            listeners = {ln["protocol"]: ln["port"] for ln in api.get("/api/overview").json()["listeners"]}
            assert listeners["amqp/ssl"] == port and listeners["https"] == https
            [row] = api.get("/api/connections").json()
            # RabbitMQ's (Erlang's) names, as 3.10 shows a TLS 1.3 connection
            assert (row["ssl"], row["ssl_protocol"], row["ssl_hash"], row["ssl_key_exchange"]) \
                == (True, "tlsv1.3", "aead", "any")
            assert row["ssl_cipher"] in ("aes_256_gcm", "aes_128_gcm", "chacha20_poly1305")
            assert re.fullmatch(r"OU=Testing cert #\S+,O=trustme v[\d.]+", row["peer_cert_subject"])
            assert row["peer_cert_issuer"].startswith("OU=Testing CA #")
            assert row["peer_cert_validity"] == '2000-01-01T00:00:00Z - {generalTime,"30000101000000Z"}'
            assert api.get("/api/health/checks/certificate-expiration/1/days").json() == \
                {"status": "ok"}
        stranger = ssl.create_default_context()
        trustme.CA().configure_trust(stranger)
        with pytest.raises(httpx.ConnectError):  # an HTTPS client that does not trust the CA
            httpx.get(f"https://localhost:{https}/api/overview", verify=stranger)
    finally:
        conn.close()


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
