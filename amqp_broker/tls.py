"""TLS for the node's listeners: server contexts built from `ssl_options`, reloadable in place,
and the expiry dates of the certificate files they use.

Who calls it: `server/listener.py` (AMQPS), `server/node.py` (builds one `ServerTls` per TLS
listener kind, reloads them on SIGHUP), `mgmt/httpserver.py` (HTTPS) and `mgmt/health.py` (the
certificate-expiration check). It sits at the bottom, beside `settings.py`: it knows `ssl`, trio
and the `cryptography` certificate parser, nothing of the broker.

RabbitMQ's options map onto Python's `ssl` as follows: `verify_none` does not ask for a client
certificate; `verify_peer` asks for one and checks it against `cacertfile` when one is sent;
with `fail_if_no_peer_cert = true` as well, a client without one is refused. `versions` may
name TLS 1.2 and 1.3 only: anything older is refused at the handshake.
"""

from __future__ import annotations

import datetime
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

import trio

__all__ = ["TLS_VERSIONS", "TlsError", "TlsOptions", "ServerTls", "certificate_dates",
           "connection_facts", "link_contexts", "server_context"]

_log = logging.getLogger(__name__)

# rabbitmq.conf names -> the versions the context may speak (older ones are never enabled)
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "tlsv1.2": ssl.TLSVersion.TLSv1_2,
    "tlsv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsError(ValueError):
    """A TLS setting or file that cannot be used; the text names the file and the problem."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """`ssl_options.*` (or `management.ssl.*`) as rabbitmq.conf gives them."""

    certfile: str | None = None
    keyfile: str | None = None
    cacertfile: str | None = None
    verify: str = "verify_none"  # or "verify_peer"
    fail_if_no_peer_cert: bool = False
    versions: tuple[str, ...] = ("tlsv1.3", "tlsv1.2")


def server_context(options: TlsOptions) -> ssl.SSLContext:
    """A server-side context for `options`; TlsError says which file could not be used."""
    if not options.certfile or not options.keyfile:
        raise TlsError("a TLS listener needs both certfile and keyfile")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    wanted = sorted(TLS_VERSIONS[v] for v in options.versions)
    ctx.minimum_version, ctx.maximum_version = wanted[0], wanted[-1]
    try:
        ctx.load_cert_chain(options.certfile, options.keyfile)
    except (OSError, ssl.SSLError) as err:
        raise TlsError(f"cannot use certfile {options.certfile} with keyfile "
                       f"{options.keyfile}: {err}") from None
    if options.cacertfile:
        try:
            ctx.load_verify_locations(cafile=options.cacertfile)
        except (OSError, ssl.SSLError) as err:
            raise TlsError(f"cannot use cacertfile {options.cacertfile}: {err}") from None
    if options.verify == "verify_peer":
        if not options.cacertfile:
            raise TlsError("verify_peer needs a cacertfile to check client certificates against")
        ctx.verify_mode = (ssl.CERT_REQUIRED if options.fail_if_no_peer_cert
                           else ssl.CERT_OPTIONAL)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def link_contexts(options: TlsOptions) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(accepting side, dialling side) of the cluster's inter-node links over TLS: both ends
    present `certfile` and require the other's certificate to chain to `cacertfile` (mutual
    TLS whatever `verify` says; node names are not host names, so no host name check)."""
    if not options.cacertfile:
        raise TlsError("inter-node TLS needs a cacertfile to check the other nodes against")
    accepting = server_context(options)
    accepting.verify_mode = ssl.CERT_REQUIRED
    dialling = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    dialling.check_hostname = False
    dialling.verify_mode = ssl.CERT_REQUIRED
    wanted = sorted(TLS_VERSIONS[v] for v in options.versions)
    dialling.minimum_version, dialling.maximum_version = wanted[0], wanted[-1]
    dialling.load_cert_chain(options.certfile, options.keyfile)
    dialling.load_verify_locations(cafile=options.cacertfile)
    return accepting, dialling


class ServerTls:
    """The context one kind of listener wraps its accepted sockets with. `reload()` re-reads
    the files; connections accepted afterwards use the new certificates, open ones keep
    theirs. A reload that fails keeps the previous context (and says why)."""

    def __init__(self, options: TlsOptions, name: str) -> None:
        self.options = options
        self.name = name  # "amqp/ssl", "https": for log lines
        self.context = server_context(options)

    def reload(self) -> bool:
        try:
            self.context = server_context(self.options)
        except TlsError as err:
            _log.error("%s: certificates not reloaded, the previous ones stay in use: %s",
                       self.name, err)
            return False
        _log.info("%s: certificates reloaded from %s", self.name, self.options.certfile)
        return True

    async def handshake(self, stream: trio.abc.Stream, peer: str,
                        timeout: float | None) -> trio.SSLStream | None:
        """The TLS handshake on an accepted stream, within `timeout` seconds; None (stream
        closed, the reason logged) when it fails."""
        tls = trio.SSLStream(stream, self.context, server_side=True)
        why = "timed out"
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            try:
                await tls.do_handshake()
                return tls
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                cause = err.__cause__
                why = str(cause) if cause is not None else "connection closed by the client"
        _log.info("%s: TLS handshake with %s failed: %s", self.name, peer, why)
        await trio.aclose_forcefully(tls)
        return None


# OpenSSL's attribute names -> the short ones RabbitMQ shows in peer_cert_subject / _issuer
_RDN = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
        "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
        "emailAddress": "emailAddress", "domainComponent": "DC", "serialNumber": "serialNumber"}


def connection_facts(stream: trio.SSLStream) -> dict[str, str | None]:
    """The ssl_* and peer_cert_* keys of a connection row, in RabbitMQ's (Erlang's) names:
    ssl_protocol "tlsv1.3", ssl_cipher "aes_256_gcm", ssl_hash "aead", ssl_key_exchange
    "ecdhe_rsa" ("any" in TLS 1.3), the peer certificate's subject and issuer with the last
    RDN first, and its validity."""
    name, version, _ = stream.cipher() or ("", "", 0)
    kx, cipher, digest = _erlang_suite(name)
    facts: dict[str, str | None] = {
        "ssl_protocol": (stream.version() or version).lower(), "ssl_key_exchange": kx,
        "ssl_cipher": cipher, "ssl_hash": digest,
        "peer_cert_subject": None, "peer_cert_issuer": None, "peer_cert_validity": None}
    cert = stream.getpeercert()
    if cert:
        facts["peer_cert_subject"] = _dn(cert.get("subject", ()))
        facts["peer_cert_issuer"] = _dn(cert.get("issuer", ()))
        facts["peer_cert_validity"] = (f"{_validity_time(cert['notBefore'])} - "
                                       f"{_validity_time(cert['notAfter'])}")
    return facts


def _erlang_suite(name: str) -> tuple[str, str, str]:
    """(key exchange, cipher, hash) from an OpenSSL suite name, as Erlang's ssl names them."""
    if name.startswith("TLS_"):  # TLS 1.3: TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_...
        body = name[4:].rsplit("_", 1)[0].lower()
        return "any", body, "aead"
    parts = name.split("-")
    kx = [p for p in parts if p in ("ECDHE", "DHE", "RSA", "ECDSA", "PSK")]
    rest = [p for p in parts if p not in kx]
    kx_name = "_".join(kx).lower() or "rsa"
    if "CHACHA20" in rest:
        return kx_name, "chacha20_poly1305", "aead"
    algo = next((p for p in rest if p.startswith(("AES", "CAMELLIA", "ARIA"))), "")
    bits = algo.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    family = algo[: len(algo) - len(bits)].lower()
    if "GCM" in rest or "CCM" in rest:
        mode, digest = ("gcm" if "GCM" in rest else "ccm"), "aead"
    else:
        mode = "cbc"
        digest = (rest[-1].lower() if rest and rest[-1].startswith("SHA") else "sha")
    return kx_name, f"{family}_{bits}_{mode}" if family else "", digest


def _dn(rdns: tuple) -> str:
    return ",".join(f"{_RDN.get(key, key)}={value}" for rdn in reversed(rdns)
                    for key, value in rdn)


def _validity_time(text: str) -> str:
    """A certificate time as RabbitMQ prints it: ISO 8601 for UTCTime (years before 2050),
    Erlang's raw term for GeneralizedTime (2050 and later)."""
    when = datetime.datetime.fromtimestamp(ssl.cert_time_to_seconds(text), datetime.timezone.utc)
    if when.year >= 2050:
        return f'{{generalTime,"{when:%Y%m%d%H%M%S}Z"}}'
    return f"{when:%Y-%m-%dT%H:%M:%SZ}"


def certificate_dates(path: str) -> list[datetime.datetime] | str:
    """When each certificate in a PEM file stops being valid (UTC), or why it cannot be read:
    the same outcomes as RabbitMQ's expiry check (a file without PEM entries, a PEM entry that
    is not a certificate, a certificate not yet valid)."""
    from cryptography import x509

    try:
        data = Path(path).read_bytes()
    except OSError as err:
        return f"cannot read {path}: {err.strerror}"
    if b"-----BEGIN " not in data:
        return "The certificate file provided does not contain any PEM entry."
    for kind in set(_pem_kinds(data)) - {"CERTIFICATE"}:
        return f"The certificate file provided contains a {kind} entry"
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as err:
        return f"cannot parse {path}: {err}"
    now = datetime.datetime.now(datetime.timezone.utc)
    dates = []
    for cert in certs:
        if cert.not_valid_before_utc > now:
            return "Certificate is not yet valid"
        dates.append(cert.not_valid_after_utc)
    return dates


def _pem_kinds(data: bytes) -> list[str]:
    kinds = []
    for line in data.splitlines():
        if line.startswith(b"-----BEGIN ") and line.rstrip().endswith(b"-----"):
            kinds.append(line.strip()[11:-5].decode("ascii", "replace"))
    return kinds
