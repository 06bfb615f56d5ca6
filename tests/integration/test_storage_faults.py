"""Storage faults fail stop, against `amqp-broker` processes whose disk "breaks" on demand: a C
library preloaded into the broker (tests/faults/fsync_eio.c, built here with the C compiler)
makes fsync / fdatasync on the message journal or on the quorum WAL fail with EIO once the test
arms it. The publish in flight is never confirmed, the node stops with one clear log line and a
non-zero exit code, and the messages confirmed before are there after a restart on a healthy
disk. Unit-level fault tests (CrashDisk, injected fsync) are in tests/store and tests/log."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pika
import pytest
from pika.exceptions import AMQPError

from compat_tests.support.launcher import Broker, LaunchError

_SOURCE = Path(__file__).resolve().parents[1] / "faults" / "fsync_eio.c"


@pytest.fixture(scope="module")
def fault_library(tmp_path_factory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the fsync fault library")
    out = tmp_path_factory.mktemp("faults") / "fsync_eio.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(_SOURCE), "-ldl"],
                   check=True)
    return out


@pytest.mark.parametrize("where, arguments", [
    ("messages.journal", {}),                      # classic queue: the message journal
    ("/wal/", {"x-queue-type": "quorum"}),         # quorum queue: the shared Raft WAL
], ids=["journal", "quorum-wal"])
def test_an_fsync_error_is_never_confirmed_and_stops_the_node(tmp_path, fault_library, where,
                                                               arguments):
    armed = tmp_path / "disk-broken"
    env = {"LD_PRELOAD": str(fault_library), "FSYNC_FAULT_ARMED": str(armed),
           "FSYNC_FAULT_MATCH": where}
    node = Broker(tmp_path, management=False, env=env).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(node.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("faulty", durable=True, arguments=arguments)
        persistent = pika.BasicProperties(delivery_mode=2)
        ch.basic_publish("", "faulty", b"confirmed before", persistent)  # raises if not acked
        armed.touch()
        with pytest.raises(AMQPError):  # no basic.ack: the connection is lost instead
            ch.basic_publish("", "faulty", b"in flight", persistent)
        assert node.proc.wait(20) == 1
        log = node.log_tail(20)
        assert "CRITICAL" in log and "storage failure, stopping the node" in log
        assert where in log and "Input/output error" in log
        assert "Traceback" not in node.log_path.read_text()
    finally:
        node.kill()
    armed.unlink()  # a healthy disk again
    node.start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(node.url))
        ch = conn.channel()
        _, _, body = ch.basic_get("faulty", auto_ack=True)
        assert body == b"confirmed before"
        conn.close()
    finally:
        node.stop()


@pytest.mark.parametrize("arguments, what", [
    ({}, "message journal"),
    ({"x-queue-type": "quorum"}, "WAL"),
], ids=["journal", "quorum-wal"])
def test_a_damaged_confirmed_message_makes_the_node_refuse_to_start(tmp_path, arguments, what):
    node = Broker(tmp_path, management=False).start()
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("kept", durable=True, arguments=arguments)
    for i in range(3):  # confirmed one by one: one write and fsync each
        ch.basic_publish("", "kept", b"message %d" % i, pika.BasicProperties(delivery_mode=2))
    conn.close()
    node.stop()
    files = [p for p in node.data_dir.rglob("*") if p.is_file()
             and b"message 0" in p.read_bytes()]
    assert len(files) == 1, files  # the journal, or the quorum WAL
    data = bytearray(files[0].read_bytes())
    data[data.index(b"message 0")] ^= 0xFF  # bit rot in the first, long confirmed, message
    files[0].write_bytes(bytes(data))
    with pytest.raises(LaunchError) as info:
        node.start()
    text = str(info.value)
    assert "CRITICAL" in text and f"cannot start: {what}" in text
    assert "damaged record at offset" in text and "refusing to start" in text
    assert node.proc.returncode == 1 and "Traceback" not in text
