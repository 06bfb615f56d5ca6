"""Durability for classic queues and broker metadata.

- `MetadataStore` (metadata.py): vhosts, durable exchanges/queues/bindings, users, policies;
  every change fsynced before it returns; compacted on open.
- `MessageJournal` (journal.py): persistent messages of durable classic queues, group commit
  (one write + one fdatasync per batch in a trio task), recovery, compaction.
- `StoreFatalError`: a disk error; the server must stop the node.

How the server wires it (sketch):

    meta = MetadataStore(data_dir); meta.open()
    journal = MessageJournal(data_dir); recovered = journal.open()
    for key, spec in meta.items(QUEUE): q = ClassicQueue(..., durable=True, journal=journal)
                                        q.restore(recovered.pop(q.key, []), now_ms)
    for key in recovered: journal.drop_queue(key)      # messages of queues no longer declared
    nursery.start_soon(journal.run)
    # publish: q.publish(msg, now); if msg.persistent and q.durable: seq = journal.appended_seq
    #          journal.call_when_durable(seq, lambda: confirm(...))   or await wait_durable(seq)
"""

from amqp_broker.store.errors import StoreFatalError
from amqp_broker.store.journal import MessageJournal, RecoveredQueues
from amqp_broker.store.metadata import (
    BINDING,
    EXCHANGE,
    POLICY,
    QUEUE,
    USER,
    VHOST,
    MetadataStore,
)

__all__ = [
    "BINDING",
    "EXCHANGE",
    "MessageJournal",
    "MetadataStore",
    "POLICY",
    "QUEUE",
    "RecoveredQueues",
    "StoreFatalError",
    "USER",
    "VHOST",
]
