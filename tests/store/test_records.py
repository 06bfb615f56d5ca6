"""Framing: intact records come back; any truncation or corruption ends the scan at the last
intact record (the torn tail)."""

from hypothesis import given, settings, strategies as st

from amqp_broker.store.records import HEADER_SIZE, frame, scan


def test_roundtrip_and_empty():
    data = frame(b"a") + frame(b"") + frame(b"xyz")
    payloads, end = scan(data)
    assert [bytes(p) for p in payloads] == [b"a", b"", b"xyz"]
    assert end == len(data)
    assert scan(b"") == ([], 0)
    # zeros (a log file's space allocated ahead) end the records, though they would checksum
    # as an empty record of the old framing
    assert [bytes(p) for p in scan(data + bytes(HEADER_SIZE * 3))[0]] == [b"a", b"", b"xyz"]
    assert scan(data + bytes(HEADER_SIZE * 3))[1] == len(data)


def test_every_truncation_point_keeps_the_intact_prefix():
    records = [frame(b"r%d" % i * (i + 1)) for i in range(5)]
    data = b"".join(records)
    bounds = [sum(len(r) for r in records[:k]) for k in range(6)]
    for cut in range(len(data) + 1):
        payloads, end = scan(data[:cut])
        expected = max(b for b in bounds if b <= cut)
        assert end == expected
        assert len(payloads) == bounds.index(expected)


def test_corrupt_byte_stops_scan_at_that_record():
    data = frame(b"first") + frame(b"second") + frame(b"third")
    bad = bytearray(data)
    bad[len(frame(b"first")) + HEADER_SIZE + 2] ^= 0xFF
    payloads, end = scan(bytes(bad))
    assert [bytes(p) for p in payloads] == [b"first"]
    assert end == len(frame(b"first"))


def test_absurd_length_is_a_torn_tail():
    data = frame(b"ok") + b"\xff\xff\xff\xff\x00\x00\x00\x00"
    assert scan(data)[1] == len(frame(b"ok"))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=50), max_size=10))
def test_scan_inverts_frame(payloads):
    data = b"".join(frame(p) for p in payloads)
    out, end = scan(data)
    assert [bytes(p) for p in out] == payloads and end == len(data)
