"""Message journal: recovery in order with redelivered flags, torn tail at every byte offset,
group commit (one fsync for many appends), confirms only after fsync, compaction keeps order,
disk errors are fatal."""

import os
import shutil

import pytest
import trio
import trio.testing

from amqp_broker.queues import ClassicQueue, Message, queue_key
from amqp_broker.server.output_batch import OutputBatch
from amqp_broker.store import MessageJournal, StoreFatalError
from amqp_broker.store.journal import REMOVALS_DELAY
from amqp_broker.store.journal_codec import ENQUEUE_DELIVERED
from amqp_broker.store.journal_index import replay
from amqp_broker.store.records import scan

from queues.helpers import consumer, msg  # tests/queues (pytest puts tests/ on sys.path)
from store.support import whole


class CountingFsync:
    def __init__(self, fail=False):
        self.calls = 0
        self.fail = fail

    def __call__(self, fd):
        self.calls += 1
        if self.fail:
            raise OSError(5, "EIO")
        os.fsync(fd)


def opened(path, **kw):
    j = MessageJournal(str(path), **kw)
    return j, j.open()


def durable_queue(journal, name="q", **kw):
    return ClassicQueue(name, "/", durable=True, journal=journal, **kw)


def test_recovery_in_order_with_redelivered(tmp_path):
    j, recovered = opened(tmp_path)
    assert recovered == {}
    q = durable_queue(j)
    for i in range(6):
        q.publish(msg(b"p%d" % i, persistent=True), 0)
    q.publish(msg(b"transient"), 0)
    c = consumer("c", prefetch=3)
    q.add_consumer(c, 0)
    ds = q.dispatch(0)  # p0, p1, p2 delivered
    q.settle([ds[1].entry.msg_id])  # p1 acked
    j.flush_sync()
    j.close()

    j2, recovered = opened(tmp_path)
    entries = whole(recovered[queue_key("/", "q")])
    assert [(m.body, redelivered) for _, m, redelivered in entries] == [
        (b"p0", True), (b"p2", True), (b"p3", False), (b"p4", False), (b"p5", False)]
    assert all(m.persistent for _, m, _ in entries)
    q2 = durable_queue(j2)
    q2.restore(recovered[queue_key("/", "q")], 1000)
    q2.add_consumer(consumer("c"), 1000)
    ds = q2.dispatch(1000)
    assert [(d.entry.message.body, d.entry.redelivered) for d in ds] == [
        (b"p0", True), (b"p2", True), (b"p3", False), (b"p4", False), (b"p5", False)]
    assert q2.publish(msg(b"new", persistent=True), 1000)
    assert q2.get(1000, no_ack=True).msg_id > max(i for i, _, _ in entries)


def test_drop_queue_forgets_messages(tmp_path):
    j, _ = opened(tmp_path)
    for name in ("a", "b"):
        durable_queue(j, name).publish(msg(b"x", persistent=True), 0)
    j.drop_queue(queue_key("/", "a"))
    j.flush_sync()
    j.close()
    _, recovered = opened(tmp_path)
    assert list(recovered) == [queue_key("/", "b")]


def _build_journal(path):
    j, _ = opened(path)
    q = durable_queue(j)
    for i in range(4):
        q.publish(msg(b"m%d" % i, persistent=True), 0)
    q.add_consumer(consumer("c", prefetch=2), 0)
    ds = q.dispatch(0)
    q.settle([ds[0].entry.msg_id])
    j.flush_sync()
    j.close()


def test_space_allocated_ahead_is_not_a_torn_tail(tmp_path, caplog):
    """The open journal has space allocated ahead of its writes (cheaper fdatasyncs): a
    crash leaves it as zeros after the last record. Recovery keeps every message, cuts the
    zeros without calling them a torn write, and a torn record before them is still one."""
    src = tmp_path / "src"
    j, _ = opened(src)
    q = durable_queue(j)
    for i in range(3):
        q.publish(msg(b"m%d" % i, persistent=True), 0)
    j.flush_sync()
    data = (src / "messages.journal").read_bytes()  # as a crash would leave it
    end = j.statistics()["file_bytes"]
    assert len(data) > end and not data[end:].strip(b"\0")
    j.close()
    assert (src / "messages.journal").read_bytes() == data[:end]  # a clean close cuts it

    for name, torn in (("zeros", b""), ("torn", data[4:30])):
        work = tmp_path / name
        work.mkdir()
        (work / "messages.journal").write_bytes(data[:end] + torn + data[end + len(torn):])
        caplog.clear()
        j, recovered = opened(work)
        assert [m.body for _, m, _ in whole(recovered[queue_key("/", "q")])] == [b"m0", b"m1", b"m2"]
        assert os.path.getsize(work / "messages.journal") == end
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert [("cut a torn tail" in w) for w in warned] == ([True] if torn else [])
        j.close()


def test_torn_tail_at_every_byte_offset(tmp_path):
    src = tmp_path / "src"
    _build_journal(src)
    data = (src / "messages.journal").read_bytes()
    for cut in range(len(data) + 1):
        work = tmp_path / f"cut{cut}"
        work.mkdir()
        (work / "messages.journal").write_bytes(data[:cut])
        expected, valid_end = replay(data[:cut])
        j, recovered = opened(work)
        got = {q: [(i, m.body, r) for i, m, r in whole(es)] for q, es in recovered.items()}
        want = {q: [(i, m.body, r) for i, (m, r) in sorted(ms.items())] for q, ms in expected.items()}
        assert got == want, cut
        assert os.path.getsize(work / "messages.journal") == valid_end  # torn tail cut off
        # the journal keeps working after the cut
        durable_queue(j, "after").publish(msg(b"z", persistent=True), 0)
        j.flush_sync()
        j.close()
        _, again = opened(work)
        assert [m.body for _, m, _ in whole(again[queue_key("/", "after")])] == [b"z"]
        shutil.rmtree(work)


@pytest.mark.trio
async def test_group_commit_one_fsync_for_many_appends(tmp_path):
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    base = fsync.calls
    confirmed = []
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        q = durable_queue(j)
        for i in range(100):
            q.publish(msg(b"%d" % i, persistent=True), 0)
            j.call_when_durable(j.appended_seq, lambda i=i: confirmed.append(i))
        assert confirmed == []  # nothing confirmed before the fsync
        assert j.durable_seq == 0
        await j.wait_durable(j.appended_seq)
        assert fsync.calls - base == 1
        assert confirmed == list(range(100))
        # already durable: called at once
        j.call_when_durable(5, lambda: confirmed.append("now"))
        assert confirmed[-1] == "now"
        nursery.cancel_scope.cancel()
    j.close()
    _, recovered = opened(tmp_path)
    assert len(recovered[queue_key("/", "q")]) == 100


@pytest.mark.trio
async def test_batches_while_a_flush_is_in_progress(tmp_path):
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    base = fsync.calls
    q = durable_queue(j)
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        q.publish(msg(b"first", persistent=True), 0)
        first = j.appended_seq
        await trio.sleep(0)  # the flusher takes the first batch
        for i in range(50):
            q.publish(msg(b"%d" % i, persistent=True), 0)
        await j.wait_durable(j.appended_seq)
        assert j.durable_seq >= first
        assert fsync.calls - base <= 2  # 51 appends, at most two batches
        nursery.cancel_scope.cancel()
    j.close()


@pytest.mark.trio
async def test_fsync_error_stops_the_journal(tmp_path):
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    fsync.fail = True
    q = durable_queue(j)
    q.publish(msg(b"x", persistent=True), 0)
    seq = j.appended_seq
    with pytest.raises(BaseExceptionGroup) as err:  # both run() and the waiter fail
        async with trio.open_nursery() as nursery:
            await nursery.start(j.run)
            await j.wait_durable(seq)
    assert err.group_contains(StoreFatalError)
    with pytest.raises(StoreFatalError):
        await j.wait_durable(seq)
    j.close()


@pytest.mark.trio
async def test_compaction_keeps_live_messages_in_order(tmp_path):
    j, _ = opened(tmp_path, compact_min_bytes=4096, segment_bytes=1024)
    q = durable_queue(j)
    c = consumer("c")
    q.add_consumer(c, 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        kept = []
        for i in range(400):
            q.publish(msg(b"%04d" % i + b"." * 50, persistent=True), 0)
            (d,) = q.dispatch(0)
            # written before it is acked (an ack of a message whose record is still to be
            # written cancels the record: nothing of it would reach the file)
            await j.wait_durable(j.appended_seq)
            if i % 10 == 0:
                kept.append(d.entry.msg_id)  # left unacked: must survive
            else:
                q.settle([d.entry.msg_id])
        await j.wait_durable(j.appended_seq)
        nursery.cancel_scope.cancel()
    assert j.compactions >= 1
    stats = j.statistics()
    assert stats["file_bytes"] < 4096 * 3
    j.close()
    _, recovered = opened(tmp_path)
    entries = whole(recovered[queue_key("/", "q")])
    assert [i for i, _, _ in entries] == kept
    assert all(redelivered for _, _, redelivered in entries)
    assert [m.body[:4] for _, m, _ in entries] == [b"%04d" % (i - 1) for i in kept]


@pytest.mark.trio
async def test_appends_during_compaction_survive(tmp_path):
    j, _ = opened(tmp_path, compact_min_bytes=1, segment_bytes=1)  # a segment file a batch
    q = durable_queue(j)
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        q.publish(msg(b"a", persistent=True), 0)
        await j.wait_durable(j.appended_seq)  # the oldest segment: "a", live
        q.publish(msg(b"x" * 500, persistent=True), 0)
        await j.wait_durable(j.appended_seq)  # written (an ack before that cancels it instead)
        q.get(0, no_ack=False)   # "a" delivered, left unacked
        q.settle([q.get(0, no_ack=False).msg_id])  # "x" acked: garbage > live
        q.publish(msg(b"b", persistent=True), 0)  # its flush copies "a" forward
        await trio.sleep(0)  # the copy starts in its thread
        q.publish(msg(b"c", persistent=True), 0)  # appended while it runs
        await j.wait_durable(j.appended_seq)
        nursery.cancel_scope.cancel()
    assert j.compactions >= 1
    assert j.statistics()["deleted_segments"] >= 2   # "a"'s first segment and "x"'s
    j.close()
    _, recovered = opened(tmp_path)
    got = [(m.body, redelivered) for _, m, redelivered in whole(recovered[queue_key("/", "q")])]
    assert got == [(b"a", True), (b"b", False), (b"c", False)]


def test_recovered_message_matches_original(tmp_path):
    j, _ = opened(tmp_path)
    original = msg(b"body", persistent=True, priority=4, expiration=60000, headers={"h": "v"})
    j.enqueued("k", 7, original)
    j.flush_sync()
    j.close()
    _, recovered = opened(tmp_path)
    ((msg_id, m, redelivered),) = whole(recovered["k"])
    assert (msg_id, redelivered) == (7, False)
    assert isinstance(m, Message)
    assert (m.exchange, m.routing_key, m.properties, m.body) == (
        original.exchange, original.routing_key, original.properties, original.body)
    assert (m.persistent, m.priority, m.expiration_ms, m.headers) == (True, 4, 60000, {"h": "v"})


@pytest.mark.trio
async def test_acks_alone_wait_for_company_then_share_an_fsync(tmp_path, autojump_clock):
    """Removals (acks) nobody waits on are not flushed at once: they go with the next record
    that must be flushed, or after REMOVALS_DELAY (virtual time: the clock jumps when all
    tasks wait)."""
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        j.enqueued("q", 1, msg(b"a", persistent=True))
        await j.wait_durable(j.appended_seq)
        base = fsync.calls
        ack = j.removed("q", [1])
        await trio.sleep(REMOVALS_DELAY / 5)
        assert fsync.calls == base and j.durable_seq < ack  # waiting for company
        j.enqueued("q", 2, msg(b"b", persistent=True))  # a publish: flushed now, the ack with it
        await j.wait_durable(j.appended_seq)
        assert fsync.calls == base + 1 and j.durable_seq > ack
        alone = j.removed("q", [2])
        await j.wait_durable(alone)  # no company came: flushed after the delay
        assert fsync.calls == base + 2
        nursery.cancel_scope.cancel()
    j.close()
    _, recovered = opened(tmp_path)
    assert "q" not in recovered  # both acks are in the file: nothing comes back


@pytest.mark.trio
async def test_a_removal_waits_its_own_delay_after_an_earlier_one_went_with_a_publish(
        tmp_path, autojump_clock):
    """The flusher's sleep keeps the deadline of an earlier removal that a publish took along;
    it wakes then, but a removal that came later still waits its own REMOVALS_DELAY."""
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        j.enqueued("q", 1, msg(b"a", persistent=True))
        j.enqueued("q", 2, msg(b"b", persistent=True))
        await j.wait_durable(j.appended_seq)
        j.removed("q", [1])                     # due at t0 + REMOVALS_DELAY
        await trio.sleep(REMOVALS_DELAY / 5)
        j.enqueued("q", 3, msg(b"c", persistent=True))   # takes the removal along
        await j.wait_durable(j.appended_seq)
        base = fsync.calls
        await trio.sleep(REMOVALS_DELAY / 2)
        start = trio.current_time()
        late = j.removed("q", [2])              # due REMOVALS_DELAY from now
        await trio.sleep(REMOVALS_DELAY * 0.6)  # past the first removal's deadline
        assert fsync.calls == base and j.durable_seq < late
        await j.wait_durable(late)
        assert fsync.calls == base + 1
        assert trio.current_time() - start == pytest.approx(REMOVALS_DELAY, abs=1e-6)
        nursery.cancel_scope.cancel()
    j.close()
    _, recovered = opened(tmp_path)
    assert [i for i, _, _ in whole(recovered["q"])] == [3]


def test_a_message_delivered_before_its_record_is_written_costs_no_delivered_record(tmp_path):
    """Delivered while its enqueue record waits in the pending batch (a consumer that keeps
    up): the enqueue record says so itself (ENQUEUE_DELIVERED), and recovery brings the
    message back redelivered, as with a DELIVERED record of its own. A message delivered
    after its record was written gets a DELIVERED record."""
    j, _ = opened(tmp_path)
    q = durable_queue(j)
    q.add_consumer(consumer("c", prefetch=10), 0)
    q.publish(msg(b"early", persistent=True), 0)
    q.dispatch(0)
    j.flush_sync()
    path = os.path.join(str(tmp_path), "messages.journal")
    with open(path, "rb") as f:
        first = f.read()
    (payload,), _ = scan(first)   # (the space allocated ahead reads as no record)
    assert payload[1] == ENQUEUE_DELIVERED   # one record: no DELIVERED after it
    q2 = durable_queue(j, "q2")
    q2.publish(msg(b"late", persistent=True), 0)
    j.flush_sync()
    q2.add_consumer(consumer("c2", prefetch=10), 0)
    q2.dispatch(0)
    j.flush_sync()
    j.close()
    _, recovered = opened(tmp_path)
    got = {q: [(m.body, redelivered) for _, m, redelivered in whole(r)]
           for q, r in recovered.items()}
    assert got == {queue_key("/", "q"): [(b"early", True)],
                   queue_key("/", "q2"): [(b"late", True)]}


@pytest.mark.trio
async def test_a_message_acked_before_its_batch_is_written_is_never_written(tmp_path):
    """As RabbitMQ's message store: a persistent message consumed and acked while its enqueue
    record still waits in the pending batch costs no write (neither the enqueue nor the
    removal), and its publisher confirm still comes when that batch is durable, never
    earlier. A batch whose records were all cancelled needs no write and no fsync. What was
    not acked is written at the right place: read back from the file, and recovered."""
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    path = os.path.join(str(tmp_path), "messages.journal")
    q = durable_queue(j)
    q.add_consumer(consumer("c", prefetch=None), 0)
    confirmed = []
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        base, size = fsync.calls, j.statistics()["file_bytes"]
        for i in range(6):                        # no checkpoint: one pending batch
            q.publish(msg(b"body-%d-" % i + b"x" * 1000, persistent=True), 0)
            j.call_when_durable(j.appended_seq, lambda i=i: confirmed.append(i))
        delivered = q.dispatch(0)
        assert [d.entry.msg_id for d in delivered] == list(range(1, 7))
        q.settle([1, 2, 4, 6])                    # acked before the flusher ran
        assert confirmed == []
        await j.wait_durable(j.appended_seq)
        assert confirmed == list(range(6))
        assert fsync.calls - base == 1
        assert j.statistics()["cancelled"] == 4
        written = j.statistics()["file_bytes"] - size
        assert 2000 < written < 2 * 1000 + 600   # two enqueue records (+ delivered records)
        assert [m.body[:7] for m in j.read(q.key, [3, 5])] == [b"body-2-", b"body-4-"]
        base = fsync.calls
        q.remove_consumer("c", "c", 0)
        for i in range(6, 9):                     # all fetched with no-ack before the flush
            q.publish(msg(b"%d" % i, persistent=True), 0)
            j.call_when_durable(j.appended_seq, lambda i=i: confirmed.append(i))
        assert [q.get(0, no_ack=True).msg_id for _ in range(3)] == [7, 8, 9]
        await j.wait_durable(j.appended_seq)
        assert confirmed == list(range(9))
        assert fsync.calls == base                # nothing to write
        nursery.cancel_scope.cancel()
    j.close()
    _, recovered = opened(tmp_path)
    assert [(i, m.body[:7]) for i, m, _ in whole(recovered[q.key])] == [
        (3, b"body-2-"), (5, b"body-4-")]


@pytest.mark.parametrize("size", [0, 1, 255, 256, 4095, 4096, 65535, 65536, 200_000])
def test_an_enqueue_record_is_peeked_without_decoding_its_body(size):
    from amqp_broker.store.journal_codec import encode_enqueue, peek_enqueue
    from amqp_broker.store.records import joined

    m = msg(b"b" * size, persistent=True, priority=3, expiration=750)
    properties, body_size = peek_enqueue(joined(encode_enqueue("/\x00q", 9, m)))
    assert (properties, body_size) == (m.properties, size)


@pytest.mark.parametrize("size", [4095, 4096, 65535, 65536, 200_000])
def test_a_large_body_is_written_as_it_is_and_the_record_is_the_same(size):
    """A body of SPLIT_BODY bytes or more is not copied into its record: the record is (head,
    the body object itself), and head + body are exactly the msgpack encoding of the whole
    record, so readers (and files of earlier versions) see no difference."""
    import msgspec

    from amqp_broker.store.journal_codec import SPLIT_BODY, decode_enqueue, encode_enqueue
    from amqp_broker.store.records import frame, frame_pieces, joined

    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    m = msg(body, persistent=True, priority=3)
    payload = encode_enqueue("/\x00q", 9, m)
    whole = msgspec.msgpack.encode((1, "/\x00q", 9, m.exchange, m.routing_key, m.properties, body))
    assert joined(payload) == whole
    if size >= SPLIT_BODY:
        assert type(payload) is tuple and payload[1] is m.body
    assert b"".join(frame_pieces([payload, b"small"])) == frame(whole) + frame(b"small")
    queue, msg_id, back = decode_enqueue(joined(payload))
    assert (queue, msg_id, back.body, back.properties) == ("/\x00q", 9, body, m.properties)


def test_written_pages_behind_a_trail_are_dropped_from_the_page_cache(tmp_path, monkeypatch):
    """The journal asks the kernel to drop what it wrote and synced, except the newest
    `_CACHE_TRAIL` bytes, in contiguous page-aligned steps; a compaction starts over on the new
    file. Messages read back from dropped ranges are whole."""
    from amqp_broker.store import files, journal as journal_module

    monkeypatch.setattr(journal_module, "_CACHE_TRAIL", 256 << 10)
    monkeypatch.setattr(journal_module, "_DROP_STEP", 64 << 10)
    dropped: list[tuple[int, int, int]] = []
    real = files.drop_cached
    monkeypatch.setattr(files, "drop_cached",
                        lambda fd, start, stop: (dropped.append((fd, start, stop)),
                                                 real(fd, start, stop)))
    j, _ = opened(tmp_path, compact_min_bytes=1 << 40)
    q = durable_queue(j)
    for i in range(300):   # 300 batches of ~10 KiB
        q.publish(msg(b"%04d" % i + b"x" * 10_000, persistent=True), 0)
        j.flush_sync()
    size = j.statistics()["file_bytes"]  # the file has space allocated ahead of that
    assert dropped and dropped[0][1] == 0
    assert all(a[2] == b[1] for a, b in zip(dropped, dropped[1:]))     # contiguous
    assert all(stop % 4096 == 0 and stop - start >= 64 << 10 for _, start, stop in dropped)
    assert size - (256 << 10) - (64 << 10) - 4096 <= dropped[-1][2] <= size - (256 << 10)
    assert [e.message.body[:4] for e in (q.get(0, no_ack=True) for _ in range(300))] == \
        [b"%04d" % i for i in range(300)]
    dropped.clear()
    j.flush_sync(compact=True)   # the new file starts cached whole; drops start at 0 again
    q.publish(msg(b"y" * 400_000, persistent=True), 0)
    j.flush_sync()
    assert dropped and dropped[0][1] == 0
    j.close()


@pytest.mark.trio
async def test_segments_a_consumer_has_passed_are_deleted_without_copying(tmp_path):
    """A consumer that keeps up, a few hundred messages behind: every older segment file holds
    nothing live by the time newer ones are written, so it is deleted whole (no record is ever
    copied forward), and the files stay a few segments long."""
    j, _ = opened(tmp_path, compact_min_bytes=4096, segment_bytes=4096)
    q = durable_queue(j)
    q.add_consumer(consumer("c"), 0)
    lag: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        for i in range(2000):
            q.publish(msg(b"%05d" % i + b"." * 100, persistent=True), 0)
            (d,) = q.dispatch(0)
            lag.append(d.entry.msg_id)
            if len(lag) > 50:
                q.settle([lag.pop(0)])
            if i % 10 == 0:
                await j.wait_durable(j.appended_seq)
        await j.wait_durable(j.appended_seq)
        stats = j.statistics()
        nursery.cancel_scope.cancel()
    assert stats["deleted_segments"] >= 40
    assert j.compactions == 0
    assert stats["segments"] <= 4 and stats["file_bytes"] <= 4 * 4096 + 200
    j.close()
    _, recovered = opened(tmp_path)
    entries = whole(recovered[queue_key("/", "q")])
    assert [i for i, _, _ in entries] == lag
    assert all(redelivered for _, _, redelivered in entries)


@pytest.mark.trio
async def test_an_old_message_left_behind_is_copied_forward_and_its_segment_deleted(tmp_path):
    """One message never acked pins its segment file: once the files hold more garbage than
    live records it is copied to the newest segment, with its delivered flag, and the old
    files go."""
    j, _ = opened(tmp_path, compact_min_bytes=8192, segment_bytes=2048)
    q = durable_queue(j)
    q.add_consumer(consumer("c"), 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        q.publish(msg(b"left behind", persistent=True), 0)
        (old,) = q.dispatch(0)
        for i in range(1000):
            q.publish(msg(b"%05d" % i + b"." * 100, persistent=True), 0)
            (d,) = q.dispatch(0)
            await j.wait_durable(j.appended_seq)
            q.settle([d.entry.msg_id])
        await j.wait_durable(j.appended_seq)
        nursery.cancel_scope.cancel()
    assert j.compactions >= 1
    assert j.statistics()["file_bytes"] < 8192 + 2 * 2048
    assert not (tmp_path / "messages.journal").exists()
    j.close()
    _, recovered = opened(tmp_path)
    entries = whole(recovered[queue_key("/", "q")])
    assert [(i, m.body, r) for i, m, r in entries] == [(old.entry.msg_id, b"left behind", True)]


@pytest.mark.trio
async def test_a_publish_in_a_batch_is_written_and_synced_at_its_end_without_the_flusher(tmp_path):
    """The owner's `defer_wakeup` (the broker's `OutputBatch.at_end`): a small batch added
    inside it is written and synced when it ends, by the caller, and the flusher task, which
    would have cost a task step and a pass of the run loop, is never woken."""
    fsync = CountingFsync()
    j, _ = opened(tmp_path, fsync=fsync)
    batch = OutputBatch()
    j.defer_wakeup = batch.at_end
    confirmed = []
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        await trio.testing.wait_all_tasks_blocked()
        base, flusher_steps = fsync.calls, j.jobs.inline
        q = durable_queue(j)
        with batch:
            for i in range(3):
                q.publish(msg(b"%d" % i, persistent=True), 0)
            j.call_when_durable(j.appended_seq, lambda: confirmed.append(j.durable_seq))
            assert confirmed == [] and j.durable_seq == 0
        # synchronously at the batch's end, before any other task ran
        assert confirmed == [j.appended_seq] and fsync.calls - base == 1
        assert j.jobs.inline == flusher_steps + 1
        # outside a batch the flusher does it, as before
        q.publish(msg(b"later", persistent=True), 0)
        assert j.durable_seq < j.appended_seq
        await j.wait_durable(j.appended_seq)
        nursery.cancel_scope.cancel()
    j.close()
    _, recovered = opened(tmp_path)
    assert [m.body for _, m, _ in whole(recovered[queue_key("/", "q")])] == [
        b"0", b"1", b"2", b"later"]


@pytest.mark.trio
async def test_a_batch_too_large_to_write_inline_is_left_to_the_flusher(tmp_path):
    j, _ = opened(tmp_path)
    j.jobs.max_bytes = 100   # every batch here is "large": a worker thread's job
    batch = OutputBatch()
    j.defer_wakeup = batch.at_end
    async with trio.open_nursery() as nursery:
        await nursery.start(j.run)
        await trio.testing.wait_all_tasks_blocked()
        q = durable_queue(j)
        with batch:
            q.publish(msg(b"x" * 1000, persistent=True), 0)
        seq = j.appended_seq
        assert j.durable_seq < seq    # not written here
        q.publish(msg(b"y", persistent=True), 0)   # the flusher takes it along
        with trio.fail_after(10):
            await j.wait_durable(j.appended_seq)
        assert j.jobs.threaded == 1   # the flusher, in a worker thread
        nursery.cancel_scope.cancel()
    j.close()
    _, recovered = opened(tmp_path)
    assert [m.body for _, m, _ in whole(recovered[queue_key("/", "q")])] == [b"x" * 1000, b"y"]
