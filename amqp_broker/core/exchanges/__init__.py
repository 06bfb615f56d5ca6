"""Exchange types: direct, fanout, topic, headers, plus the default exchange.

``make_exchange(type, name, ...)`` builds an exchange of a known type; ``EXCHANGE_TYPES`` maps
type names to classes. Used by ``amqp_broker.core.router.Topology``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import ALTERNATE_EXCHANGE_ARG, Exchange
from .direct import DefaultExchange, DirectExchange
from .fanout import FanoutExchange
from .headers import HeadersExchange, headers_match
from .topic import TopicExchange, split_words

__all__ = [
    "ALTERNATE_EXCHANGE_ARG", "EXCHANGE_TYPES", "DefaultExchange", "DirectExchange", "Exchange",
    "FanoutExchange", "HeadersExchange", "TopicExchange", "headers_match", "make_exchange",
    "split_words",
]

EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
}


def make_exchange(
    type_name: str,
    name: str,
    durable: bool = True,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: Mapping[str, Any] | None = None,
) -> Exchange:
    """Build an exchange; ``KeyError`` for an unknown type (the Topology turns it into 503/406)."""
    return EXCHANGE_TYPES[type_name](name, durable, auto_delete, internal, arguments)
