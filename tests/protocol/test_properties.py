"""Raw property sections: peeks and layout checks on hand-built edge cases."""

import struct

import pytest
from pamqp import commands as c

from amqp_broker.protocol import (
    EMPTY_PROPERTIES, check_properties, decode_properties, peek, peek_delivery_mode,
    peek_expiration, peek_headers, peek_priority, peek_user_id,
)


def test_empty_properties():
    check_properties(EMPTY_PROPERTIES)
    assert peek_delivery_mode(EMPTY_PROPERTIES) is None
    assert peek_headers(EMPTY_PROPERTIES) is None
    assert decode_properties(EMPTY_PROPERTIES) == c.Basic.Properties()


def test_peeks_skip_earlier_fields_by_length():
    props = c.Basic.Properties(content_type="application/json", headers={"x": [1, "a"]},
                               delivery_mode=2, priority=7, expiration="60000", user_id="bob")
    raw = props.marshal()
    assert peek_delivery_mode(raw) == 2
    assert peek_priority(raw) == 7
    assert peek_expiration(raw) == "60000"
    assert peek_user_id(raw) == "bob"
    assert peek_headers(raw) == {"x": [1, "a"]}
    assert peek(raw, "message_id") is None


def test_empty_continuation_flag_word_is_accepted():
    raw = struct.pack(">HH", 0x1000 | 1, 0) + b"\x02"  # delivery_mode, then an empty 2nd word
    check_properties(raw)
    assert peek_delivery_mode(raw) == 2


@pytest.mark.parametrize("raw", [
    b"", b"\x10", b"\x10\x00",  # flags truncated / delivery_mode missing
    struct.pack(">H", 0x8000) + b"\x05ab",  # content_type overruns
    struct.pack(">H", 0x2000) + b"\x00\x00\x00\x09",  # headers table overruns
    struct.pack(">H", 0x1000) + b"\x02\x00",  # trailing byte
    struct.pack(">HH", 0x0001, 0x0100),  # unknown property in the second flag word
])
def test_malformed_sections_are_refused(raw):
    with pytest.raises(ValueError):
        check_properties(raw)
