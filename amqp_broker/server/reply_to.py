"""Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to pseudo queue).

A requester consumes from "amq.rabbitmq.reply-to" with no-ack; `register` gives that consumer a
unique name "amq.rabbitmq.reply-to.<token>". When the requester publishes with reply_to set to the
pseudo queue, the channel rewrites the property to the generated name (`name_for`). A reply
published to the default exchange with that routing key goes straight to the consumer
(`deliver`), never through a queue. Owned by `broker.Broker`.
"""

from __future__ import annotations

import secrets
from typing import Any

__all__ = ["ReplyTo", "REPLY_TO"]

REPLY_TO = "amq.rabbitmq.reply-to"


class ReplyTo:
    def __init__(self) -> None:
        self._by_name: dict[str, tuple[Any, str]] = {}  # name -> (channel, consumer tag)
        self._by_channel: dict[int, str] = {}  # id(channel) -> name

    def register(self, channel: Any, tag: str) -> str:
        name = f"{REPLY_TO}.{secrets.token_urlsafe(18)}"
        self._by_name[name] = (channel, tag)
        self._by_channel[id(channel)] = name
        return name

    def unregister(self, channel: Any, tag: str) -> None:
        name = self._by_channel.pop(id(channel), None)
        if name is not None:
            self._by_name.pop(name, None)

    def name_for(self, channel: Any) -> str | None:
        """The reply name of a channel consuming from the pseudo queue, or None."""
        return self._by_channel.get(id(channel))

    def deliver(self, routing_key: str, message: Any) -> bool:
        target = self._by_name.get(routing_key)
        if target is None:
            return False
        channel, tag = target
        channel.deliver_direct(tag, message)
        return True
