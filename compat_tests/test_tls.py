"""TLS as clients see it, the same against this broker and RabbitMQ 3.10: pika and aio-pika over
AMQPS with mutual TLS, a client without a certificate or with one from another CA refused,
TLS 1.1 refused and 1.2 accepted, the management API over HTTPS with the connection's TLS facts
in RabbitMQ's names, and the certificate-expiration health check.

Certificates come from compat_tests/support/tls.py. Against this broker the test starts one
with those lines; against a given broker URL it needs the oracle's TLS listener: COMPAT_TLS_DIR
(the files it was configured with), COMPAT_TLS_PORT and COMPAT_TLS_MGMT_PORT, which
scripts/run-tests.sh sets (skipped without them). This broker's own TLS features (SIGHUP
reload, refusing to start with a bad file, amqp-brokerctl) are in tests/integration/test_tls.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import httpx
import pika
import pytest
from pika.exceptions import AMQPConnectionError

from compat_tests.support.launcher import Broker
from compat_tests.support.tls import TlsFiles, make_tls_files, tls_config


@dataclass(frozen=True)
class Target:
    amqps_port: int
    https_port: int
    files: TlsFiles


@pytest.fixture(scope="module")
def tls(launched_broker, tmp_path_factory):
    if launched_broker is None:  # a broker URL was given: its TLS listener, if we know it
        names = ("COMPAT_TLS_DIR", "COMPAT_TLS_PORT", "COMPAT_TLS_MGMT_PORT")
        if not all(os.environ.get(n) for n in names):
            pytest.skip("no TLS listener known for the given broker: set " + ", ".join(names))
        yield Target(int(os.environ["COMPAT_TLS_PORT"]), int(os.environ["COMPAT_TLS_MGMT_PORT"]),
                     TlsFiles(Path(os.environ["COMPAT_TLS_DIR"])))
        return
    where = tmp_path_factory.mktemp("tls")
    files = make_tls_files(where / "certs")
    broker = Broker(where / "broker", config=tls_config(files, "127.0.0.1:0", 0)).start()
    log = broker.log_path.read_text()
    amqps = int(re.search(r"AMQP 0-9-1 over TLS listening on \S+:(\d+)", log).group(1))
    https = int(re.search(r"management API on https://\S+?:(\d+)/api", log).group(1))
    yield Target(amqps, https, files)
    broker.stop()


def _context(tls: Target, client: Path | None = None, **settings) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(tls.files.cacertfile))
    if client is not None:
        ctx.load_cert_chain(str(client))
    for key, value in settings.items():
        setattr(ctx, key, value)
    return ctx


def _pika(tls: Target, ctx: ssl.SSLContext, name: str = "compat.tls") -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", tls.amqps_port, ssl_options=pika.SSLOptions(ctx, "localhost"),
        connection_attempts=1, socket_timeout=10,
        client_properties={"connection_name": name}))


def test_pika_over_amqps_with_a_client_certificate(tls):
    conn = _pika(tls, _context(tls, tls.files.client))
    try:
        ch = conn.channel()
        ch.queue_declare("compat.tls.pika", auto_delete=True)
        ch.confirm_delivery()
        ch.basic_publish("", "compat.tls.pika", b"over tls")
        _, _, body = ch.basic_get("compat.tls.pika", auto_ack=True)
        assert body == b"over tls"
    finally:
        conn.close()


def test_aio_pika_over_amqps(tls):
    async def body() -> bytes:
        conn = await aio_pika.connect(f"amqps://guest:guest@localhost:{tls.amqps_port}/",
                                      ssl_context=_context(tls, tls.files.client), timeout=10)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("compat.tls.aio", auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio over tls"), q.name)
            msg = await q.get(timeout=10)
            await msg.ack()
            return msg.body

    assert asyncio.run(body()) == b"aio over tls"


@pytest.mark.parametrize("client", [None, "stranger"], ids=["no-certificate", "another-ca"])
def test_mutual_tls_refuses_the_client(tls, client):
    ctx = _context(tls, tls.files.stranger if client else None)
    # pika: AMQPConnectionError when the server ends the handshake; an SSLError may come first
    with pytest.raises((AMQPConnectionError, ssl.SSLError)):
        _pika(tls, ctx).close()


def _tls11_client(tls: Target, client: Path) -> ssl.SSLContext:
    ctx = _context(tls, client)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL refuses TLS 1.1 at its default level
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    return ctx


def _can_speak_tls11(tls: Target) -> bool:
    """Whether this machine's OpenSSL does a TLS 1.1 handshake at all (with a local server that
    allows it), so that a refusal below is the broker's doing."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(tls.files.certfile), str(tls.files.keyfile))
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
            with _tls11_client(tls, tls.files.client).wrap_socket(
                    raw, server_hostname="localhost") as conn:
                return conn.version() == "TLSv1.1"
    except (OSError, ssl.SSLError):
        return False
    finally:
        listener.close()
        t.join(5)


def test_tls_1_1_is_refused_and_1_2_accepted(tls):
    if not _can_speak_tls11(tls):
        pytest.skip("this OpenSSL build cannot speak TLS 1.1 even to a server that allows it")
    with socket.create_connection(("127.0.0.1", tls.amqps_port), timeout=10) as raw:
        with pytest.raises(ssl.SSLError):
            _tls11_client(tls, tls.files.client).wrap_socket(raw, server_hostname="localhost")
    tls12 = _context(tls, tls.files.client, maximum_version=ssl.TLSVersion.TLSv1_2)
    with socket.create_connection(("127.0.0.1", tls.amqps_port), timeout=10) as raw:
        with tls12.wrap_socket(raw, server_hostname="localhost") as conn:
            assert conn.version() == "TLSv1.2"
            conn.sendall(b"AMQP\x00\x00\x09\x01")
            assert conn.recv(7)[:1] == b"\x01"  # a method frame: connection.start


@pytest.fixture
def https(tls):
    with httpx.Client(base_url=f"https://localhost:{tls.https_port}/api",
                      auth=("guest", "guest"), verify=_context(tls), timeout=30) as client:
        yield client


def test_management_api_over_https_shows_the_tls_connection(tls, https):
    listeners = https.get("/overview").json()["listeners"]
    assert {"amqp/ssl", "https"} <= {ln["protocol"] for ln in listeners}
    assert tls.amqps_port in [ln["port"] for ln in listeners if ln["protocol"] == "amqp/ssl"]
    assert https.get("/health/checks/protocol-listener/amqps").json() == {
        "status": "ok", "protocol": "amqp/ssl"}
    # named, because RabbitMQ may still list an earlier test's closed connection for a tick
    conn = _pika(tls, _context(tls, tls.files.client), name="compat.tls.listed")
    try:
        rows: list = []
        deadline = time.monotonic() + 20  # RabbitMQ lists a connection after its stats tick
        while not rows and time.monotonic() < deadline:
            rows = [r for r in https.get("/connections").json() if r.get("ssl") and
                    r["client_properties"].get("connection_name") == "compat.tls.listed"]
            time.sleep(0.2)
        [row] = rows
        assert (row["ssl_protocol"], row["ssl_hash"], row["ssl_key_exchange"]) == (
            "tlsv1.3", "aead", "any")
        assert row["ssl_cipher"] in ("aes_256_gcm", "aes_128_gcm", "chacha20_poly1305")
        assert re.fullmatch(r"OU=Testing cert #\S+,O=trustme v[\d.]+", row["peer_cert_subject"])
        assert row["peer_cert_issuer"].startswith("OU=Testing CA #")
    finally:
        conn.close()


def test_certificate_expiration_check(tls, https):
    # the server certificate expires in 10 days (support/tls.py)
    assert https.get("/health/checks/certificate-expiration/1/weeks").json() == {"status": "ok"}
    r = https.get("/health/checks/certificate-expiration/2/weeks")
    assert r.status_code == 503
    body = r.json()
    assert (body["status"], body["reason"]) == ("failed", "Certificates expiring")
    [row] = body["expired"]  # the AMQPS listener (RabbitMQ does not check the HTTPS one)
    assert (row["protocol"], row["port"], row["interface"]) == ("amqp/ssl", tls.amqps_port,
                                                               "127.0.0.1")
    assert (row["certfile"], row["cacertfile"]) == (str(tls.files.certfile),
                                                    str(tls.files.cacertfile))
    [date] = row["certfile_expires_on"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d{1,2}:\d\d:\d\d", date)
    assert row["cacertfile_expires_on"] == []
    assert https.get("/health/checks/certificate-expiration/2/fortnights").status_code == 400
