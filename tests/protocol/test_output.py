"""`Output`: frames written into its buffer and bodies attached by reference come out in order,
as one byte string would; `take_since(mark)` takes back exactly what was queued after the mark."""

from hypothesis import given
from hypothesis import strategies as st

from amqp_broker.protocol.output import Output

from .strategies import SETTINGS

# ("w", data): written into the buffer; ("a", data): attached as a piece of its own
_ops = st.lists(st.tuples(st.sampled_from("wa"), st.binary(max_size=40)), max_size=12)


def _apply(out: Output, ops, sent: bytearray) -> None:
    for kind, data in ops:
        if kind == "w":
            out.buf += data
        else:
            out.attach(memoryview(data) if len(data) % 2 else data)
        sent += data


@SETTINGS
@given(_ops, _ops)
def test_pieces_come_out_in_order_and_the_mark_splits_them(before, after):
    out = Output()
    head, tail = bytearray(), bytearray()
    _apply(out, before, head)
    mark = out.mark()
    _apply(out, after, tail)
    assert len(out) == len(head) + len(tail)
    assert out.take_since(mark) == tail
    assert len(out) == len(head)
    out.buf += b"!"  # still writable after the take-back
    assert b"".join(out.take()) == head + b"!"
    assert len(out) == 0 and out.take() == []
