"""The one error the storage layer raises: the node must stop.

Who catches it: the server's top-level nursery, which turns it into a shutdown (DESIGN.md:
"a write or fsync error stops the node rather than continuing"). Raised by `metadata.py` and
`journal.py` when a write, fsync, truncate or rename fails; after that no durability promise
can be kept, so nothing is retried.
"""

from __future__ import annotations

__all__ = ["StoreFatalError"]


class StoreFatalError(Exception):
    """A write or fsync failed; `__cause__` is the OSError. Stop the node."""
