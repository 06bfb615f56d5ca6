"""`properties.append_headers`: adding header entries to a raw property section without
decoding it gives what a full decode, merge and encode gives."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st
from pamqp import commands

from amqp_broker.core.fieldtypes import Long
from amqp_broker.protocol.properties import append_headers, decode_properties, encode_properties

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(content_type=st.none() | _text, encoding=st.none() | _text,
       headers=st.none() | st.dictionaries(st.sampled_from(["a", "b", "key"]),
                                           st.integers(-5, 5) | _text, max_size=3),
       priority=st.none() | st.integers(0, 9), message_id=st.none() | _text,
       part=st.integers(0, 1023), key=_text)
def test_append_equals_decode_merge_encode(content_type, encoding, headers, priority,
                                           message_id, part, key):
    props = commands.Basic.Properties(content_type=content_type, content_encoding=encoding,
                                      headers=headers, priority=priority,
                                      message_id=message_id, delivery_mode=2)
    raw = encode_properties(props)
    before = decode_properties(raw)
    out = decode_properties(append_headers(raw, {"x-partition": Long(part),
                                                 "x-partition-key": key}))
    assert out.headers == {**(before.headers or {}), "x-partition": part,
                           "x-partition-key": key}
    fields = ("content_type", "content_encoding", "priority", "message_id", "delivery_mode")
    assert [getattr(out, f) for f in fields] == [getattr(before, f) for f in fields]
