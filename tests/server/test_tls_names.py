"""amqp_broker/tls.py: the names a TLS connection's row shows (Erlang's, as RabbitMQ 3.10) and
the certificate dates the expiry check reads; no sockets."""

from __future__ import annotations

import datetime

import pytest
import trustme

from amqp_broker.tls import _erlang_suite, _validity_time, certificate_dates


@pytest.mark.parametrize("openssl, erlang", [
    ("TLS_AES_256_GCM_SHA384", ("any", "aes_256_gcm", "aead")),  # seen on 3.10.8
    ("TLS_AES_128_GCM_SHA256", ("any", "aes_128_gcm", "aead")),
    ("TLS_CHACHA20_POLY1305_SHA256", ("any", "chacha20_poly1305", "aead")),
    ("ECDHE-ECDSA-AES256-GCM-SHA384", ("ecdhe_ecdsa", "aes_256_gcm", "aead")),
    ("ECDHE-RSA-AES128-SHA256", ("ecdhe_rsa", "aes_128_cbc", "sha256")),
    ("ECDHE-RSA-CHACHA20-POLY1305", ("ecdhe_rsa", "chacha20_poly1305", "aead")),
])
def test_cipher_suites_in_erlang_names(openssl, erlang):
    assert _erlang_suite(openssl) == erlang


def test_validity_times_as_rabbitmq_prints_them():
    assert _validity_time("Jan  1 00:00:00 2000 GMT") == "2000-01-01T00:00:00Z"
    assert _validity_time("Jan  1 00:00:00 3000 GMT") == '{generalTime,"30000101000000Z"}'


def test_certificate_dates_and_what_cannot_be_read(tmp_path):
    ca = trustme.CA()
    until = datetime.datetime(2031, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)
    cert = ca.issue_cert("localhost", not_after=until)
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    (tmp_path / "empty.pem").write_text("no pem here\n")
    assert certificate_dates(str(tmp_path / "cert.pem")) == [until]
    assert certificate_dates(str(tmp_path / "empty.pem")) == \
        "The certificate file provided does not contain any PEM entry."
    assert certificate_dates(str(tmp_path / "key.pem")).startswith(
        "The certificate file provided contains a ")
    assert certificate_dates(str(tmp_path / "missing.pem")).startswith("cannot read ")
