"""Certificates for the TLS compat tests, made with trustme, and the rabbitmq.conf lines that
serve them: the same lines configure this broker (compat_tests/test_tls.py starts one) and a
RabbitMQ oracle (scripts/run-tests.sh passes them to .ci/rabbitmq.sh as RMQ_EXTRA_CONF).

    python -m compat_tests.support.tls DIR AMQPS_LISTENER HTTPS_PORT > DIR/tls.conf

writes the files into DIR and prints the lines. The server certificate is valid for localhost
and 127.0.0.1 and expires in 10 days (the certificate-expiration check has something to find);
AMQPS asks for a client certificate and refuses a client without one (verify_peer +
fail_if_no_peer_cert), TLS 1.2 and 1.3 only.
"""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import trustme

__all__ = ["TlsFiles", "make_tls_files", "tls_config"]

SERVER_CERT_DAYS = 10


@dataclass(frozen=True)
class TlsFiles:
    directory: Path

    @property
    def cacertfile(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def certfile(self) -> Path:
        return self.directory / "server_certificate.pem"

    @property
    def keyfile(self) -> Path:
        return self.directory / "server_key.pem"

    @property
    def client(self) -> Path:
        """Key and certificate of a client, issued by the CA."""
        return self.directory / "client.pem"

    @property
    def stranger(self) -> Path:
        """Key and certificate of a client, issued by another CA."""
        return self.directory / "stranger.pem"


def make_tls_files(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory)
    ca = trustme.CA()
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=SERVER_CERT_DAYS)
    server = ca.issue_cert("localhost", "127.0.0.1", not_after=until)
    ca.cert_pem.write_to_path(str(files.cacertfile))
    server.cert_chain_pems[0].write_to_path(str(files.certfile))
    server.private_key_pem.write_to_path(str(files.keyfile))
    ca.issue_cert("client@example.com").private_key_and_cert_chain_pem.write_to_path(
        str(files.client))
    trustme.CA().issue_cert("client@example.com").private_key_and_cert_chain_pem.write_to_path(
        str(files.stranger))
    os.chmod(directory, 0o755)  # a broker running as another user reads them too
    for path in directory.iterdir():
        os.chmod(path, 0o644)
    return files


def tls_config(files: TlsFiles, amqps_listener: str, https_port: int) -> str:
    """rabbitmq.conf lines: AMQPS on `amqps_listener` ([IP:]PORT) with mutual TLS, and the
    management API over HTTPS on 127.0.0.1:`https_port` (0: any free port, this broker only)."""
    options = (f"cacertfile = {files.cacertfile}\ncertfile = {files.certfile}\n"
               f"keyfile = {files.keyfile}\n")
    prefixed = lambda prefix: "".join(f"{prefix}.{line}\n" for line in options.splitlines())  # noqa: E731
    return (f"listeners.ssl.default = {amqps_listener}\n" + prefixed("ssl_options") +
            "ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n"
            "ssl_options.versions.1 = tlsv1.3\nssl_options.versions.2 = tlsv1.2\n"
            f"management.ssl.ip = 127.0.0.1\nmanagement.ssl.port = {https_port}\n" +
            prefixed("management.ssl"))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m compat_tests.support.tls DIR AMQPS_LISTENER HTTPS_PORT")
    print(tls_config(make_tls_files(Path(sys.argv[1])), sys.argv[2], int(sys.argv[3])), end="")
