"""What a connection has queued for its socket: frames, with large bodies by reference.

Used by `connection.py` (and `handshake.py`, its base) for all output, and by `fastpath.py`'s
`write_content`. Frames are written into `buf`, a bytearray; a body of `BY_REFERENCE` bytes or
more is not copied into it but queued as a piece of its own (`attach`), and the session sends
the pieces with one vectored write (`take`). A 64 KiB delivery so costs no copy in Python and
no growth of a large bytearray.
"""

from __future__ import annotations

__all__ = ["Output", "BY_REFERENCE"]

BY_REFERENCE = 16384  # smaller bodies are cheaper to copy than to queue as an iovec of their own


class Output:
    __slots__ = ("buf", "_pieces", "_queued")

    def __init__(self) -> None:
        self.buf = bytearray()  # written to directly; replaced by a fresh one after `attach`
        self._pieces: list = []  # finished pieces, in order, before `buf`
        self._queued = 0  # their bytes

    def __len__(self) -> int:
        return self._queued + len(self.buf)

    def attach(self, piece: bytes | memoryview) -> None:
        """Queue `piece` (not copied) after everything written so far."""
        if self.buf:
            self._pieces.append(self.buf)
            self._queued += len(self.buf)
            self.buf = bytearray()
        self._pieces.append(piece)
        self._queued += len(piece)

    def take(self) -> list:
        """Everything queued, as pieces to write in order; the output is empty afterwards."""
        pieces = self._pieces
        if self.buf:
            pieces.append(self.buf)
            self.buf = bytearray()
        self._pieces = []
        self._queued = 0
        return pieces

    def mark(self) -> tuple[int, int]:
        """Where the output ends now (see `take_since`)."""
        return len(self._pieces), len(self.buf)

    def take_since(self, mark: tuple[int, int]) -> bytes:
        """Take back the bytes queued after `mark`."""
        n, at = mark
        if n == len(self._pieces):
            data = bytes(self.buf[at:])
            del self.buf[at:]
            return data
        # the buffer at the mark became piece n: its first `at` bytes are the buffer again
        first = self._pieces[n]
        rest = [first[at:], *self._pieces[n + 1:], self.buf]
        del self._pieces[n:]
        self.buf = bytearray(first[:at])
        self._queued = sum(len(p) for p in self._pieces)
        return b"".join(rest)
