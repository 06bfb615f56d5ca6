"""encode_command / decode_command round trips for every command type."""
from hypothesis import given, settings, strategies as st

from quorum.fifo import (Cancel, Checkout, ConsumerDown, ConsumerKey, Credit, Dequeue, Discard,
                         DlxSettle, Enqueue, NodeDown, NodeUp, Purge, QueueConfig, Requeue,
                         Return, Settle, Tick, UpdateConfig, decode_command, encode_command)

from .settings import EXAMPLES

_text = st.text(max_size=12)
_opt_int = st.none() | st.integers(min_value=-1, max_value=2**40)
_ids = st.lists(st.integers(min_value=0, max_value=2**32), max_size=5).map(tuple)
keys = st.builds(ConsumerKey, _text, _text, _text)
configs = st.builds(QueueConfig, _text, _opt_int, _opt_int,
                    st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]),
                    _opt_int, _opt_int, _opt_int, st.none() | _text, st.none() | _text,
                    st.sampled_from(["at-most-once", "at-least-once"]), st.booleans())

commands = st.one_of(
    st.builds(Enqueue, st.none() | _text, st.none() | st.integers(0, 2**40),
              st.integers(0, 2**27), st.binary(max_size=64), st.none() | st.integers(0, 255),
              _opt_int, st.booleans()),
    st.builds(Checkout, keys, st.integers(0, 65535), st.integers(-10, 10), st.booleans()),
    st.builds(Dequeue, keys, st.booleans()),
    st.builds(Settle, keys, _ids), st.builds(Return, keys, _ids),
    st.builds(Discard, keys, _ids),
    st.builds(Requeue, keys, st.integers(0, 2**32), st.binary(max_size=32)),
    st.builds(Credit, keys, st.integers(0, 2**31), st.integers(0, 2**32), st.booleans()),
    st.builds(Cancel, keys, st.booleans()), st.builds(ConsumerDown, _text),
    st.builds(NodeDown, _text), st.builds(NodeUp, _text), st.just(Purge()), st.just(Tick()),
    st.builds(UpdateConfig, configs), st.builds(DlxSettle, _ids),
)


@settings(max_examples=EXAMPLES * 3)
@given(commands)
def test_round_trip(cmd):
    data = encode_command(cmd)
    back = decode_command(data)
    assert back == cmd and type(back) is type(cmd)
    assert type(back).__name__ != "Checkout" or isinstance(back.consumer, ConsumerKey)


def test_enqueue_is_compact():
    data = encode_command(Enqueue("ch-1", 12345, 1024, b"x" * 1024, None, None, True))
    assert len(data) < 1024 + 24


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.none() | _text, st.none() | st.integers(0, 2**40), st.integers(0, 2**27),
       st.lists(st.sampled_from([0, 1, 7, 200, 4096, 60_000]), min_size=1, max_size=3),
       st.none() | st.integers(0, 255), _opt_int, st.booleans(),
       st.none() | st.integers(0, 64))
def test_an_enqueue_encoded_from_payload_pieces_is_the_command_encoding(
        publisher, seq, size, piece_sizes, priority, ttl, persistent, partition):
    """`encode_enqueue` (the quorum queue's path for large bodies: the payload's pieces copied
    once, into the command) gives `encode_command`'s bytes, at every msgpack size class of the
    payload's length, and they decode to the same Enqueue."""
    from quorum.fifo import encode_enqueue

    pieces = tuple(bytes([i]) * n for i, n in enumerate(piece_sizes))
    cmd = Enqueue(publisher, seq, size, b"".join(pieces), priority, ttl, persistent, partition)
    data = encode_enqueue(publisher, seq, size, pieces, priority, ttl, persistent, partition)
    assert data == encode_command(cmd)
    assert decode_command(data) == cmd
