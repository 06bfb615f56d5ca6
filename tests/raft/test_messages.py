"""Wire encoding of every message type, entries, hard state and configs: compact msgpack
arrays that round-trip exactly (hypothesis-generated values)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft import (Append, AppendResp, ConfigState, Entry, EntryKind, HardState, Heartbeat,
                         HeartbeatResp, InstallSnapshot, PreVote, PreVoteResp, Snapshot,
                         SnapshotMeta, TimeoutNow, Vote, VoteResp, decode_config, decode_entries,
                         decode_hard_state, decode_message, encode_config, encode_entries,
                         encode_hard_state, encode_message)

ids = st.text(min_size=1, max_size=12)
ints = st.integers(min_value=0, max_value=2**62)
entries = st.builds(Entry, ints, ints, st.sampled_from(list(EntryKind)), st.binary(max_size=64),
                    ints)
configs = st.builds(ConfigState, st.lists(ids, max_size=4).map(lambda x: tuple(sorted(x))),
                    st.lists(ids, max_size=3).map(lambda x: tuple(sorted(x))))
snapshots = st.builds(Snapshot, st.builds(SnapshotMeta, ints, ints, configs), st.binary(max_size=64))

messages = st.one_of(
    st.builds(Append, ids, ids, ints, ints, ints, st.lists(entries, max_size=4).map(tuple), ints),
    st.builds(AppendResp, ids, ids, ints, ints, st.booleans(), ints, ints),
    st.builds(Heartbeat, ids, ids, ints, ints),
    st.builds(HeartbeatResp, ids, ids, ints),
    st.builds(PreVote, ids, ids, ints, ints, ints),
    st.builds(PreVoteResp, ids, ids, ints, st.booleans()),
    st.builds(Vote, ids, ids, ints, ints, ints, st.booleans()),
    st.builds(VoteResp, ids, ids, ints, st.booleans()),
    st.builds(InstallSnapshot, ids, ids, ints, snapshots),
    st.builds(TimeoutNow, ids, ids, ints),
)


@settings(max_examples=200, deadline=None)
@given(messages)
def test_every_message_round_trips(m):
    data = encode_message(m)
    assert decode_message(data) == m
    assert type(decode_message(data)) is type(m)


@settings(max_examples=50, deadline=None)
@given(st.lists(entries, max_size=10))
def test_entry_batches_round_trip(es):
    assert decode_entries(encode_entries(es)) == es


@settings(max_examples=50, deadline=None)
@given(st.builds(HardState, ints, st.none() | ids, ints), configs)
def test_hard_state_and_config_round_trip(hs, config):
    assert decode_hard_state(encode_hard_state(hs)) == hs
    assert decode_config(encode_config(config)) == config


def test_encoding_is_compact_without_field_names():
    m = Append("n2", "n1", 7, 41, 7, (Entry(42, 7, EntryKind.NORMAL, b"x" * 10, 1700000000000),), 40)
    data = encode_message(m)
    assert b"prev_index" not in data and len(data) < 40


def test_garbage_is_rejected_not_misread():
    with pytest.raises(msgspec.DecodeError):
        decode_message(b"\x93\x63\x01\x02")  # unknown tag 99
    with pytest.raises(msgspec.DecodeError):
        decode_message(encode_message(TimeoutNow("a", "b", 1))[:-1])


@settings(max_examples=200, deadline=None)
@given(ints, ints, st.sampled_from(list(EntryKind)),
       st.sampled_from([0, 1, 4095, 4096, 65535, 65536, 70_000]), ints)
def test_entry_pieces_join_to_the_entry_encoding(index, term, kind, size, timestamp):
    """`entry_pieces` leaves large data out of the encoding (the log writes the pieces): joined
    they are `encode_entry`'s bytes, at every msgpack size class of the data's length."""
    from quorum.raft import decode_entry, encode_entry, entry_pieces

    entry = Entry(index, term, kind, bytes([size % 251]) * size, timestamp)
    got = entry_pieces(entry)
    if size >= 4096:
        assert type(got) is tuple and got[1] is entry.data  # referenced, not copied
        got = b"".join(got)
    assert got == encode_entry(entry)
    assert decode_entry(got) == entry
