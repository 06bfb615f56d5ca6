"""Static settings of the protocol layer: what the server advertises and proposes in tune.

Built once by the server shell (from `Settings`) and passed to every `ServerConnection`.

About `product`/`version`: kombu (and so Celery) reads them. With product "RabbitMQ" and version
>= 3.3 kombu assumes RabbitMQ's non-spec QoS semantics and Celery sends `basic.qos(global=True)`,
which quorum queues refuse. With any other product kombu assumes spec (per-consumer) semantics,
which is what we implement, so the default product is deliberately not "RabbitMQ". A compat
profile that must look like RabbitMQ can pass product="RabbitMQ" explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ProtocolConfig", "default_server_properties", "DEFAULT_PRODUCT", "DEFAULT_VERSION"]

DEFAULT_PRODUCT = "amqp-broker"
DEFAULT_VERSION = "0.1.0"


def default_server_properties(
    product: str = DEFAULT_PRODUCT,
    version: str = DEFAULT_VERSION,
    *,
    platform: str = "Python/trio",
    connection_blocked: bool = False,
) -> dict:
    """The connection.start server-properties table, with RabbitMQ's capability names.

    `connection_blocked` stays False until the server really sends connection.blocked
    (advertising it without implementing it was LavinMQ's mistake).
    """
    return {
        "product": product,
        "version": version,
        "platform": platform,
        "copyright": "Copyright (c) the amqp-broker authors",
        "information": "Licensed under the MPL 2.0",
        "capabilities": {
            "publisher_confirms": True,
            "exchange_exchange_bindings": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "authentication_failure_close": True,
            "per_consumer_qos": True,
            "direct_reply_to": True,
            "connection.blocked": connection_blocked,
        },
    }


@dataclass(frozen=True)
class ProtocolConfig:
    """What the server advertises in connection.start and proposes in connection.tune.

    channel_max / frame_max / heartbeat: 0 means "no limit" / "no limit" / "disabled", as in the
    spec. frame_max must be 0 or >= 4096 (FRAME_MIN_SIZE). `mechanisms` may list only
    PLAIN, AMQPLAIN and ANONYMOUS (the ones the protocol layer can parse).
    """

    server_properties: dict = field(default_factory=default_server_properties)
    mechanisms: str = "PLAIN AMQPLAIN"
    locales: str = "en_US"
    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    #: Seconds from the first tick() until connection.open must have been answered.
    handshake_timeout: float = 10.0
    #: Largest message body accepted, judged on the content header's declared size (bytes).
    max_message_size: int = 16 * 1024 * 1024
