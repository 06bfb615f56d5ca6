"""Which broker is behind the URL: read `connection.start` server-properties once per session.

Used by conftest.py to skip `rabbitmq4` tests on RabbitMQ 3.x and `ours_only` tests on a real
RabbitMQ, and by tests that document version-dependent behaviour.
"""

from __future__ import annotations

import dataclasses
import re

import pika


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    product: str
    version: str
    capabilities: dict
    properties: dict

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])

    @property
    def is_rabbitmq(self) -> bool:
        """True for a real RabbitMQ.  Our broker may advertise product 'RabbitMQ' for kombu's
        sake, so it is told apart by a `amqp_broker` key in its properties or its platform."""
        if self.properties.get("amqp_broker") or "python" in str(self.properties.get("platform", "")).lower():
            return False
        return self.product == "RabbitMQ"

    @property
    def is_rabbitmq3(self) -> bool:
        return self.is_rabbitmq and self.version_tuple[:1] == (3,)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_server(url: str) -> ServerInfo:
    """Open one connection, copy the server-properties, close it."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        props = dict(conn._impl.server_properties)  # pika keeps them only on the impl
    finally:
        conn.close()
    return ServerInfo(
        product=_text(props.get("product", "")),
        version=_text(props.get("version", "")),
        capabilities=dict(props.get("capabilities") or {}),
        properties=props,
    )
