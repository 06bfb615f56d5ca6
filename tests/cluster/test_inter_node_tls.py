"""`inter_node_tls = true`: a cluster whose inter-node links run over mutual TLS with the
ssl_options files (certificates made at test time by trustme). The cluster forms and replicates
a quorum queue across nodes; the distribution port speaks only TLS and accepts only a
certificate of the cluster's CA."""

from __future__ import annotations

import socket
import ssl

import pika
import pytest
import trustme

from compat_tests.support.cluster import LocalCluster

from .conftest import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    where = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    node = ca.issue_cert("localhost", "127.0.0.1")
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    node.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
    node.private_key_pem.write_to_path(str(where / "key.pem"))
    return ca, where


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory, certs):
    _, where = certs
    config = (f"inter_node_tls = true\nssl_options.cacertfile = {where}/ca.pem\n"
              f"ssl_options.certfile = {where}/cert.pem\nssl_options.keyfile = {where}/key.pem\n")
    with LocalCluster(tmp_path_factory.mktemp("tls-cluster"), 2, config=config) as c:
        yield c


def test_a_quorum_queue_replicates_over_tls_links(tls_cluster):
    a = pika.BlockingConnection(pika.URLParameters(tls_cluster.urls[0]))
    ch = a.channel()
    ch.confirm_delivery()
    ch.queue_declare("tls.qq", durable=True, arguments={"x-queue-type": "quorum"})
    ch.basic_publish("", "tls.qq", b"across", pika.BasicProperties(delivery_mode=2))
    a.close()
    b = pika.BlockingConnection(pika.URLParameters(tls_cluster.urls[1]))
    got = []

    def fetched() -> bool:
        method, _, body = b.channel().basic_get("tls.qq", auto_ack=True)
        if method:
            got.append(body)
        return bool(got)

    wait_until(fetched, what="the message on node 2")
    assert got == [b"across"]
    b.close()


def _accepted(port: int, ctx: ssl.SSLContext) -> bool:
    """Whether the node keeps a TLS connection made with `ctx` open (waiting for the link's
    first frame) rather than refusing it (an alert, or a close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"\0")  # TLS 1.3: a refused client certificate shows on first use
                tls.settimeout(2)
                try:
                    return tls.recv(1) != b""  # b"": closed on us
                except socket.timeout:
                    return True  # still waiting for the rest of a frame
        except (ssl.SSLError, ConnectionError):
            return False


def _client(ca: trustme.CA, cert_from: trustme.CA | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ca.configure_trust(ctx)
    if cert_from is not None:
        cert_from.issue_cert("intruder.example").configure_cert(ctx)
    return ctx


def test_the_distribution_port_requires_a_certificate_of_the_cluster_ca(tls_cluster, certs):
    ca, _ = certs
    port = tls_cluster.node(0).dist_port
    assert _accepted(port, _client(ca, ca))
    assert not _accepted(port, _client(ca, None))  # no client certificate
    assert not _accepted(port, _client(ca, trustme.CA()))  # one from another CA
