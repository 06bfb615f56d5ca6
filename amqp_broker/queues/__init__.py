"""Queue types: the one interface the server and mgmt call on any queue (`base.QueueType`), the message model (`message`) and
the in-memory classic queue (`classic`), the Raft-replicated quorum queue (`quorum`). See
`base.py` for how the server drives a queue."""

from amqp_broker.queues.arguments import (
    OVERFLOW_DROP_HEAD,
    OVERFLOW_REJECT_PUBLISH,
    OVERFLOW_REJECT_PUBLISH_DLX,
    check_dead_letter_exchange_type,
    check_declare_arguments,
    check_server_named,
    parse_consumer_priority,
    parse_queue_arguments,
    queue_type_module,
    queue_type_of,
)
from amqp_broker.queues.base import (
    REASON_DELIVERY_LIMIT,
    REASON_EXPIRED,
    REASON_MAXLEN,
    REASON_REJECTED,
    Confirm,
    ConfirmSink,
    Consumer,
    DeadLetter,
    Delivery,
    GetReply,
    Placement,
    QueueJournal,
    QueueType,
    queue_key,
)
from amqp_broker.queues.classic import ClassicQueue
from amqp_broker.queues.consumers import ConsumerSet
from amqp_broker.queues.message import Entry, Message, parse_basic_properties
from amqp_broker.queues.quorum import QuorumQueue

__all__ = [
    "ClassicQueue",
    "ConsumerSet",
    "OVERFLOW_DROP_HEAD",
    "OVERFLOW_REJECT_PUBLISH",
    "OVERFLOW_REJECT_PUBLISH_DLX",
    "parse_consumer_priority",
    "check_dead_letter_exchange_type",
    "check_declare_arguments",
    "check_server_named",
    "queue_type_module",
    "queue_type_of",
    "parse_queue_arguments",
    "queue_key",
    "Confirm",
    "ConfirmSink",
    "Consumer",
    "DeadLetter",
    "Delivery",
    "Entry",
    "GetReply",
    "Message",
    "Placement",
    "QueueJournal",
    "QueueType",
    "QuorumQueue",
    "REASON_DELIVERY_LIMIT",
    "REASON_EXPIRED",
    "REASON_MAXLEN",
    "REASON_REJECTED",
    "parse_basic_properties",
]
