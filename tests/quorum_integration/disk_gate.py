"""Helpers for driving a lone `NodeDriver` against a real log: a sender for a node with no
peers, and an fdatasync that can be held closed (in the WAL's worker thread) to see what the
driver does while a batch waits for the disk."""

from __future__ import annotations

import os
import threading


class NoPeers:
    def send(self, peer: str, group: str, data: bytes) -> bool:
        return False


class FsyncGate:
    """An fdatasync that blocks while the gate is closed (`open.clear()`); `waiting` is set
    once a call is held."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()

    def __call__(self, fd: int) -> None:
        if not self.open.is_set():
            self.waiting.set()
            self.open.wait(30)
        os.fdatasync(fd)
