"""basic.ack / nack / reject / recover and basic.qos as clients see them: multiple, requeue and
the redelivered flag, unknown and double acks (406, channel closed), prefetch per consumer and
per channel (global), prefetch_size (540)."""

from compat_tests.support import channel_closed, connection_closed, consume_n, get_n, wait_until


def _setup(conn, names, n):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    for i in range(n):
        ch.basic_publish("", q, b"m%d" % i)
    return ch, q


def _ready(conn, q) -> int:
    return conn.channel().queue_declare(q, passive=True).method.message_count


def _tags(got):
    return [m.delivery_tag for m, _, _ in got]


def test_ack_single_removes_only_that_message(conn, names):
    ch, q = _setup(conn, names, 2)
    _, got = consume_n(ch, q, 2)
    ch.basic_ack(got[1][0].delivery_tag)
    ch.close()
    again = get_n(conn.channel(), q, 1)
    assert [(m.redelivered, b) for m, _, b in again] == [(True, b"m0")]


def test_ack_multiple_covers_lower_tags(conn, names):
    ch, q = _setup(conn, names, 3)
    _, got = consume_n(ch, q, 3)
    ch.basic_ack(got[1][0].delivery_tag, multiple=True)  # acks 1 and 2
    ch.close()
    again = get_n(conn.channel(), q, 1)
    assert [b for _, _, b in again] == [b"m2"]


def test_ack_zero_multiple_acks_everything(conn, names):
    ch, q = _setup(conn, names, 3)
    consume_n(ch, q, 3)
    ch.basic_ack(0, multiple=True)
    ch.close()
    assert _ready(conn, q) == 0


def test_nack_requeue_redelivers_with_flag(conn, names):
    ch, q = _setup(conn, names, 1)
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    ch.basic_nack(m.delivery_tag, requeue=True)
    (m2, _, body), = get_n(ch, q, 1, auto_ack=False)
    assert (m2.redelivered, body, m2.delivery_tag) == (True, b"m0", 2)


def test_nack_without_requeue_drops(conn, names):
    ch, q = _setup(conn, names, 1)
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    ch.basic_nack(m.delivery_tag, requeue=False)
    assert _ready(conn, q) == 0


def test_nack_multiple(conn, names):
    ch, q = _setup(conn, names, 3)
    _, got = consume_n(ch, q, 3)
    ch.basic_nack(got[2][0].delivery_tag, multiple=True, requeue=False)
    ch.close()
    assert _ready(conn, q) == 0


def test_reject_requeue_and_discard(conn, names):
    ch, q = _setup(conn, names, 2)
    (m1, _, _), (m2, _, _) = get_n(ch, q, 2, auto_ack=False)
    ch.basic_reject(m1.delivery_tag, requeue=True)
    ch.basic_reject(m2.delivery_tag, requeue=False)
    again = get_n(ch, q, 1)
    assert [(m.redelivered, b) for m, _, b in again] == [(True, b"m0")]
    assert _ready(conn, q) == 0


def test_requeued_message_keeps_its_place_at_the_head(conn, names):
    ch, q = _setup(conn, names, 3)
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=True)
    assert [b for _, _, b in get_n(ch, q, 3)] == [b"m0", b"m1", b"m2"]


def test_unknown_delivery_tag_is_406_channel(conn, names):
    ch, q = _setup(conn, names, 0)
    ch.basic_ack(42)
    with channel_closed(406, "PRECONDITION_FAILED - unknown delivery tag 42"):
        ch.queue_declare(q, passive=True)
    assert conn.is_open


def test_double_ack_is_406(conn, names):
    ch, q = _setup(conn, names, 1)
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    ch.basic_ack(m.delivery_tag)
    ch.basic_ack(m.delivery_tag)
    with channel_closed(406, f"PRECONDITION_FAILED - unknown delivery tag {m.delivery_tag}"):
        ch.queue_declare(q, passive=True)


def test_ack_of_auto_acked_delivery_is_406(conn, names):
    ch, q = _setup(conn, names, 1)
    (m, _, _), = get_n(ch, q, 1, auto_ack=True)
    ch.basic_ack(m.delivery_tag)
    with channel_closed(406, "PRECONDITION_FAILED - unknown delivery tag 1"):
        ch.queue_declare(q, passive=True)


def test_unknown_tag_in_nack_and_reject_is_406(conn, names):
    for op in ("basic_nack", "basic_reject"):
        ch = conn.channel()
        getattr(ch, op)(7)
        with channel_closed(406, "PRECONDITION_FAILED - unknown delivery tag 7"):
            ch.basic_qos(prefetch_count=1)


def test_ack_on_other_channel_is_406(conn, names):
    ch, q = _setup(conn, names, 1)
    get_n(ch, q, 1, auto_ack=False)
    other = conn.channel()
    other.basic_ack(1)
    with channel_closed(406, "PRECONDITION_FAILED - unknown delivery tag 1"):
        other.basic_qos(prefetch_count=1)
    assert ch.is_open


def test_prefetch_count_limits_unacked(conn, names):
    ch, q = _setup(conn, names, 5)
    ch.basic_qos(prefetch_count=2)
    _, got = consume_n(ch, q, 2)
    # Three stay ready in the queue while two are unacked.
    assert wait_until(conn, lambda: _ready(conn, q) == 3)
    assert len(got) == 2
    ch.basic_ack(got[0][0].delivery_tag)
    assert wait_until(conn, lambda: len(got) == 3)
    assert wait_until(conn, lambda: _ready(conn, q) == 2)
    assert len(got) == 3


def test_prefetch_is_per_consumer_by_default(conn, names):
    ch, q = _setup(conn, names, 5)
    ch.basic_qos(prefetch_count=1)
    _, a = consume_n(ch, q, 1)
    _, b = consume_n(ch, q, 1)
    assert wait_until(conn, lambda: _ready(conn, q) == 3)
    assert (len(a), len(b)) == (1, 1)


def test_global_prefetch_is_shared_by_channel(conn, names):
    ch, q = _setup(conn, names, 5)
    ch.basic_qos(prefetch_count=2, global_qos=True)
    a, b = [], []
    ch.basic_consume(q, lambda c, m, p, body: a.append(m))
    ch.basic_consume(q, lambda c, m, p, body: b.append(m))
    assert wait_until(conn, lambda: len(a) + len(b) == 2)
    assert wait_until(conn, lambda: _ready(conn, q) == 3)
    assert len(a) + len(b) == 2


def test_prefetch_applies_to_consumers_created_afterwards(conn, names):
    ch, q = _setup(conn, names, 0)
    before, after = [], []
    ch.basic_consume(q, lambda c, m, p, body: before.append(body))
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(q, lambda c, m, p, body: after.append(body))
    for i in range(4):
        ch.basic_publish("", q, b"m%d" % i)
    assert wait_until(conn, lambda: len(before) + len(after) == 4)
    # The older consumer is unlimited; the newer one stops at one unacked message.
    assert (len(before), len(after)) == (3, 1)


def test_basic_get_ignores_prefetch(conn, names):
    ch, q = _setup(conn, names, 3)
    ch.basic_qos(prefetch_count=1)
    assert len(get_n(ch, q, 3, auto_ack=False)) == 3


def test_prefetch_size_is_540_connection(conn):
    ch = conn.channel()
    with connection_closed(540, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)"):
        ch.basic_qos(prefetch_size=1000, prefetch_count=1)


def test_recover_requeue_redelivers_unacked(conn, names):
    ch, q = _setup(conn, names, 2)
    got = []
    ch.basic_consume(q, lambda c, m, p, body: got.append((m.redelivered, body)))
    assert wait_until(conn, lambda: len(got) == 2)
    ch.basic_recover(requeue=True)
    assert wait_until(conn, lambda: len(got) == 4)
    assert sorted(got) == [(False, b"m0"), (False, b"m1"), (True, b"m0"), (True, b"m1")]


def test_recover_without_requeue_is_540(conn, names):
    ch, q = _setup(conn, names, 1)
    get_n(ch, q, 1, auto_ack=False)
    with connection_closed(540, "NOT_IMPLEMENTED"):
        ch.basic_recover(requeue=False)
