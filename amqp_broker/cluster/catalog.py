"""Which Raft group holds which quorum queue on this node: a small durable name map.

Used by `runtime.QuorumRuntime` when a quorum queue is declared, recovered or deleted. Each
declaration gets a fresh group id, so a queue deleted and declared again never meets the log
of its previous incarnation. The map is one JSON file, replaced atomically (write, fsync,
rename, fsync the directory) on every change; changes are rare (declare/delete only).
"""

from __future__ import annotations

import json
import os
import uuid

from quorum.log.disk import OsDisk

__all__ = ["GroupCatalog"]


class GroupCatalog:
    def __init__(self, directory: str) -> None:
        self._path = os.path.join(directory, "queues.json")
        self._groups: dict[str, str] = {}
        if os.path.exists(self._path):
            with open(self._path, "rb") as f:
                self._groups = dict(json.loads(f.read() or b"{}"))

    @staticmethod
    def _key(vhost: str, name: str) -> str:
        return f"{vhost}\x00{name}"

    def group_for(self, vhost: str, name: str) -> str:
        """The queue's group id, creating (and persisting) a new one if it has none."""
        key = self._key(vhost, name)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = f"qq:{uuid.uuid4().hex}"
            self._save()
        return group

    def forget(self, vhost: str, name: str) -> str | None:
        group = self._groups.pop(self._key(vhost, name), None)
        if group is not None:
            self._save()
        return group

    def groups(self) -> dict[str, str]:
        return dict(self._groups)

    def _save(self) -> None:
        OsDisk().replace_file(self._path, (json.dumps(self._groups, sort_keys=True).encode(),))
