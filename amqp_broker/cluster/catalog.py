"""The quorum queue -> Raft group map that nodes kept before the metadata was a Raft group.

Read once by `server/recovery.py` when it imports an older data directory: the metadata
records of quorum queues now carry their group id (and members), so nothing writes this file
any more. It was ``<data_dir>/quorum/queues.json``: {"<vhost>\\0<queue>": "<group id>"}.
"""

from __future__ import annotations

import json
import os

__all__ = ["read_catalog"]


def read_catalog(directory: str) -> dict[str, str]:
    """The old map of (``vhost\\0name``) -> group id; empty when there is none."""
    path = os.path.join(directory, "queues.json")
    try:
        with open(path, "rb") as f:
            return dict(json.loads(f.read() or b"{}"))
    except FileNotFoundError:
        return {}
