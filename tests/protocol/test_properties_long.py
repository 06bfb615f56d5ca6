"""encode_properties writes `Long` header values as AMQP 'l' (signed 64-bit), at any depth."""

from pamqp import commands

from amqp_broker.core.fieldtypes import Long
from amqp_broker.protocol.properties import decode_properties, encode_properties


def test_long_in_nested_x_death_is_encoded_as_l():
    props = commands.Basic.Properties(
        content_type="text/plain", delivery_mode=2, message_id="m1",
        headers={"x-death": [{"count": Long(3), "reason": "expired"}], "plain": 3})
    raw = encode_properties(props)
    assert b"\x05countl\x00\x00\x00\x00\x00\x00\x00\x03" in raw
    assert b"\x05plainb\x03" in raw  # ordinary ints keep pamqp's smallest type
    back = decode_properties(raw)
    assert back.headers == {"x-death": [{"count": 3, "reason": "expired"}], "plain": 3}
    assert (back.content_type, back.delivery_mode, back.message_id) == ("text/plain", 2, "m1")


def test_without_long_the_encoding_is_pamqps():
    props = commands.Basic.Properties(content_encoding="gzip", headers={"n": 1}, priority=4)
    assert encode_properties(props) == props.marshal()
