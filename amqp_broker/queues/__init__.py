"""Queue types: the interface the channel code calls (`base`), the message model (`message`) and
the in-memory classic queue (`classic`). See `base.py` for how the server drives a queue."""

from amqp_broker.queues.base import (
    REASON_DELIVERY_LIMIT,
    REASON_EXPIRED,
    REASON_MAXLEN,
    REASON_REJECTED,
    Consumer,
    DeadLetter,
    Delivery,
    QueueJournal,
    QueueType,
)
from amqp_broker.queues.message import Entry, Message, parse_basic_properties

__all__ = [
    "Consumer",
    "DeadLetter",
    "Delivery",
    "Entry",
    "Message",
    "QueueJournal",
    "QueueType",
    "REASON_DELIVERY_LIMIT",
    "REASON_EXPIRED",
    "REASON_MAXLEN",
    "REASON_REJECTED",
    "parse_basic_properties",
]
