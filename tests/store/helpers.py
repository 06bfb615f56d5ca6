"""Builders for the store tests (kept separate from tests/queues: tests/ is not a package)."""

from __future__ import annotations

from pamqp import commands, header

from amqp_broker.queues import Consumer, Message


def msg(body: bytes = b"x", *, persistent=False, priority=None, expiration=None, headers=None) -> Message:
    kw = {"delivery_mode": 2} if persistent else {}
    if priority is not None:
        kw["priority"] = priority
    if expiration is not None:
        kw["expiration"] = str(expiration)
    if headers is not None:
        kw["headers"] = headers
    raw = header.ContentHeader(0, 0, commands.Basic.Properties(**kw)).marshal()[12:]
    return Message.from_publish("ex", "rk", raw, body)


def consumer(tag: str, *, prefetch: int | None = None) -> Consumer:
    left = [prefetch]

    def take_credit() -> bool:
        if left[0] is None:
            return True
        if left[0] <= 0:
            return False
        left[0] -= 1
        return True

    return Consumer(tag, tag, take_credit=take_credit)
