"""How a batch's rows get from the source's runner process to the executors that read them.

The runner holds each input partition's rows as one Arrow IPC buffer and serves it over TCP; the
partition Spark ships to an executor carries only where to fetch it and a one-time-per-query
secret.  Carried inside the partition instead, every byte of every message went through Spark's
task serialization (pickled in the runner, copied into the JVM, serialized into the task, sent to
the Python worker): about a fifth of a 1 KiB source query's time on two cores (SPARK-PIPELINE.md).

A slice stays available until the batch it belongs to is acked (Spark committed it), so a task
retried on another executor fetches the same rows.  A runner that died takes its slices with it;
Spark then restarts the query, and the batch replays from the broker as before.

Pure sockets and threads, no pyspark: `source.py` owns a `SliceServer` in the runner, and
`fetch` runs in `read()` on the executors.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
import socket
import struct
import threading

log = logging.getLogger(__name__)

_REQUEST = struct.Struct(">16sQ")  # secret, slice id
_ANSWER = struct.Struct(">BQ")  # status, length of what follows
_OK, _MISSING, _FAILED = 0, 1, 2
_TIMEOUT = 60.0  # also how long a request waits for its slice to be built


class HandoffError(RuntimeError):
    """An executor could not fetch its rows from the source's runner."""


def advertised_host() -> str:
    """The address executors reach this runner at: `SPARK_LOCAL_IP` when set (Spark binds its
    own driver there too), else this host's name as it resolves, else loopback."""
    host = os.environ.get("SPARK_LOCAL_IP")
    if host:
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class SliceServer:
    """The runner's side.  `reserve` a slice for a batch, then `fill` it with the slice's IPC
    buffer (or the error that stopped building it): a request that comes first waits for it, so
    Spark can launch the tasks while the rows are still being built.  `release_upto` once Spark
    committed the batch.  Serves each connection on its own short-lived thread."""

    def __init__(self, host: str | None = None) -> None:
        host = host or advertised_host()
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._sock = socket.create_server((host, 0), family=family)
        except OSError as exc:
            raise HandoffError(
                f"the source cannot listen on {host!r} to hand rows to the executors ({exc}): set "
                "the source option rowServerHost (or SPARK_LOCAL_IP) to an address of the driver "
                "host that executors reach, or rowTransfer=inline") from exc
        self.address = (host, self._sock.getsockname()[1])
        self.secret = secrets.token_bytes(16)
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        # id -> [batch end seq, IPC buffer | error text | None while being built]
        self._slices: dict[int, list] = {}
        self._closed = False
        threading.Thread(target=self._accept, name="amqp-source-handoff", daemon=True).start()

    def reserve(self, batch_end: int) -> int:
        with self._cond:
            slice_id = next(self._ids)
            self._slices[slice_id] = [batch_end, None]
        return slice_id

    def fill(self, slice_id: int, data) -> None:
        """The slice's IPC buffer (any bytes-like object), or a `str` saying why there is none."""
        with self._cond:
            held = self._slices.get(slice_id)
            if held is not None:
                held[1] = data
            self._cond.notify_all()

    def release_upto(self, seq: int) -> None:
        """Forget the slices of batches ending at or before `seq` (committed and acked)."""
        with self._cond:
            for slice_id in [k for k, (end, _) in self._slices.items() if end <= seq]:
                del self._slices[slice_id]
            self._cond.notify_all()

    def held(self) -> int:
        with self._cond:
            return len(self._slices)

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        except OSError:
            pass
        self._sock.close()
        with self._cond:
            self._slices.clear()
            self._cond.notify_all()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _wait_for(self, slice_id: int):
        """The slice's contents once built; None if it is not (or no longer) held."""
        def settled() -> bool:  # built, failed, or released
            held = self._slices.get(slice_id)
            return held is None or held[1] is not None

        with self._cond:
            self._cond.wait_for(settled, timeout=_TIMEOUT)
            held = self._slices.get(slice_id)
            return None if held is None else held[1]

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(_TIMEOUT)
                secret, slice_id = _REQUEST.unpack(_recv_exact(conn, _REQUEST.size))
                if not hmac.compare_digest(secret, self.secret):
                    return  # not ours: close without an answer
                data = self._wait_for(slice_id)
                if data is None:
                    conn.sendall(_ANSWER.pack(_MISSING, 0))
                elif isinstance(data, str):
                    text = data.encode()
                    conn.sendall(_ANSWER.pack(_FAILED, len(text)) + text)
                else:
                    conn.sendall(_ANSWER.pack(_OK, len(data)))
                    conn.sendall(data)
            except OSError as exc:
                log.debug("amqp source: a slice request failed: %s", exc)


def fetch(address: tuple[str, int], secret: bytes, slice_id: int) -> bytearray:
    """The executor's side: the slice's IPC buffer."""
    try:
        with socket.create_connection(address, timeout=_TIMEOUT) as conn:
            conn.sendall(_REQUEST.pack(secret, slice_id))
            status, length = _ANSWER.unpack(_recv_exact(conn, _ANSWER.size))
            data = _recv_exact(conn, length)
    except OSError as exc:
        raise HandoffError(
            f"cannot fetch this task's rows from the source's runner at {address[0]}:{address[1]}: "
            f"{exc}. Executors must reach the driver host on that port; otherwise set the "
            "source option rowTransfer=inline") from exc
    if status == _MISSING:
        raise HandoffError(f"the source's runner at {address[0]}:{address[1]} does not hold slice "
                           f"{slice_id} (its batch was committed, or it timed out building it)")
    if status == _FAILED:
        raise HandoffError(f"the source's runner could not build slice {slice_id}: "
                           f"{data.decode(errors='replace')}")
    return data


def _recv_exact(conn: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = conn.recv_into(view[got:])
        if not n:
            raise ConnectionError(f"connection closed after {got} of {size} bytes")
        got += n
    return buf
