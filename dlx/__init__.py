"""Dead lettering, the pure layer: x-death headers (``deaths``), cycle detection (``cycles``) and
the at-least-once worker (``worker``), which reaches the broker only through the ``DlxPort``
interface it defines.

Imports point down only: nothing here imports the broker, trio or ``quorum``; ``deaths`` uses
``amqp_broker.core.fieldtypes.Long`` (core is a bottom layer too) so counts encode as AMQP longs.
Callers: the broker's ``amqp_broker.server.deadletter`` builds the republished copy with
``dead_letter``, routes it on the DLX (``internal_ok=True``) and drops looping targets with
``split_cycles``, for at-most-once and (through ``server.dlx_port.BrokerDlxPort``, the
``DlxPort`` of a quorum queue) for at-least-once.
"""

from .cycles import is_death_cycle, split_cycles
from .deaths import REASONS, DeadLettered, dead_letter, x_death_entries
from .worker import DEFAULT_PREFETCH, DlxPort, DlxWorker

__all__ = ["REASONS", "DeadLettered", "dead_letter", "is_death_cycle", "split_cycles", "x_death_entries",
           "DlxWorker", "DlxPort", "DEFAULT_PREFETCH"]
