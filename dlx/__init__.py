"""Dead lettering: x-death headers (``deaths``), cycle detection (``cycles``), the at-least-once
worker (``worker``, pure; ``port`` binds it to a quorum queue of the broker).

``deaths`` and ``cycles`` are pure: queue implementations call ``dead_letter`` to build the
republished message's headers and routing keys, route it on the DLX with
``amqp_broker.core.Topology.route(..., internal_ok=True)``, then drop looping targets with
``split_cycles``.
"""

from .cycles import is_death_cycle, split_cycles
from .deaths import REASONS, DeadLettered, dead_letter, x_death_entries
from .worker import DEFAULT_PREFETCH, DlxPort, DlxWorker

__all__ = ["REASONS", "DeadLettered", "dead_letter", "is_death_cycle", "split_cycles", "x_death_entries",
           "DlxWorker", "DlxPort", "DEFAULT_PREFETCH"]
