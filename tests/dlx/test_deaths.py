"""x-death / x-first-death-* / x-last-death-* headers and dead-letter routing keys."""

import datetime

import pytest
from pamqp import decode, encode

from amqp_broker.core.fieldtypes import Long
from dlx import REASONS, dead_letter

T0 = 1_700_000_000
UTC = datetime.timezone.utc


def die(headers=None, **kw):
    args = dict(reason="rejected", queue="q1", exchange="ex", routing_key="rk", time=T0, dlx="dlx")
    args.update(kw)
    return dead_letter(headers, **args)


def test_first_death_entry_fields_and_order():
    r = die({"app": "v"}, reason="maxlen")
    (entry,) = r.headers["x-death"]
    assert entry == {
        "count": 1,
        "reason": "maxlen",
        "queue": "q1",
        "time": datetime.datetime.fromtimestamp(T0, tz=UTC),
        "exchange": "ex",
        "routing-keys": ["rk"],
    }
    assert type(entry["count"]) is Long
    assert r.headers["app"] == "v"
    assert r.exchange == "dlx"
    assert r.routing_keys == ["rk"]


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_recorded(reason):
    r = die(reason=reason)
    assert r.headers["x-death"][0]["reason"] == reason
    assert r.headers["x-first-death-reason"] == reason
    assert r.headers["x-last-death-reason"] == reason


def test_unknown_reason_refused():
    with pytest.raises(ValueError):
        die(reason="bored")


def test_time_is_whole_seconds_timestamp():
    r = die(time=T0 + 0.9)
    assert r.headers["x-death"][0]["time"] == datetime.datetime.fromtimestamp(T0, tz=UTC)


def test_original_expiration_recorded():
    r = die(reason="expired", expiration="60000")
    entry = r.headers["x-death"][0]
    assert entry["original-expiration"] == "60000"
    assert list(entry)[0] == "original-expiration"


def test_no_original_expiration_without_ttl():
    assert "original-expiration" not in die(reason="expired").headers["x-death"][0]


def test_first_death_headers_set_once_last_death_overwritten():
    r1 = die(reason="expired", queue="a", exchange="e1")
    r2 = die(r1.headers, reason="rejected", queue="b", exchange="dlx1")
    h = r2.headers
    assert (h["x-first-death-reason"], h["x-first-death-queue"], h["x-first-death-exchange"]) == ("expired", "a", "e1")
    assert (h["x-last-death-reason"], h["x-last-death-queue"], h["x-last-death-exchange"]) == ("rejected", "b", "dlx1")


def test_3_10_profile_has_no_last_death_headers():
    h = die(last_death_headers=False).headers
    assert not [k for k in h if k.startswith("x-last-death")]
    assert h["x-first-death-queue"] == "q1"


def test_newest_first_and_same_queue_reason_increments_and_moves_to_front():
    h = die(queue="a", reason="expired", time=T0).headers
    h = die(h, queue="b", reason="rejected", time=T0 + 10, exchange="dlxa").headers
    h = die(h, queue="a", reason="rejected", time=T0 + 20, exchange="dlxb").headers
    assert [(d["queue"], d["reason"], d["count"]) for d in h["x-death"]] == [
        ("a", "rejected", 1), ("b", "rejected", 1), ("a", "expired", 1)]
    h = die(h, queue="a", reason="expired", time=T0 + 30, exchange="dlxa", routing_key="other").headers
    assert [(d["queue"], d["reason"], d["count"]) for d in h["x-death"]] == [
        ("a", "expired", 2), ("a", "rejected", 1), ("b", "rejected", 1)]
    bumped = h["x-death"][0]
    # the entry keeps its first time, exchange and keys (RabbitMQ 4.x keeps first_time)
    assert bumped["time"] == datetime.datetime.fromtimestamp(T0, tz=UTC)
    assert bumped["exchange"] == "ex"
    assert bumped["routing-keys"] == ["rk"]
    assert type(bumped["count"]) is Long


def test_input_headers_not_modified():
    h0 = {"CC": ["c"], "BCC": ["b"], "x-death": [{"queue": "q1", "reason": "rejected", "count": 1}]}
    snapshot = {"CC": ["c"], "BCC": ["b"], "x-death": [{"queue": "q1", "reason": "rejected", "count": 1}]}
    die(h0, dlx_routing_key="k")
    assert h0 == snapshot


def test_cc_kept_in_routing_keys_bcc_never():
    r = die({"CC": ["c1", "c2"], "BCC": ["b1"]})
    assert r.headers["x-death"][0]["routing-keys"] == ["rk", "c1", "c2"]
    assert "BCC" not in r.headers
    assert r.headers["CC"] == ["c1", "c2"]
    # without a DL routing key: all original keys, BCC included, are used for routing
    assert r.routing_keys == ["rk", "c1", "c2", "b1"]


def test_bcc_keys_passed_separately_when_header_was_stripped():
    r = die({"CC": ["c1"]}, bcc=["b1"])
    assert r.routing_keys == ["rk", "c1", "b1"]
    assert r.headers["x-death"][0]["routing-keys"] == ["rk", "c1"]


def test_dead_letter_routing_key_replaces_keys_and_removes_cc():
    r = die({"CC": ["c1"], "BCC": ["b1"]}, dlx_routing_key="dead")
    assert r.routing_keys == ["dead"]
    assert "CC" not in r.headers and "BCC" not in r.headers
    assert r.headers["x-death"][0]["routing-keys"] == ["rk", "c1"]


def test_non_string_cc_entries_ignored_and_garbage_x_death_replaced():
    r = die({"CC": ["c1", 5], "x-death": "junk"})
    assert r.headers["x-death"][0]["routing-keys"] == ["rk", "c1"]
    assert len(r.headers["x-death"]) == 1


def test_bad_existing_count_restarts_at_one():
    h = {"x-death": [{"queue": "q1", "reason": "rejected", "count": "many"}]}
    assert die(h).headers["x-death"][0]["count"] == 1


def test_headers_encode_and_decode_with_pamqp():
    h = die({"CC": ["c"]}, reason="expired", expiration="10").headers
    h = die(h, queue="q2", reason="maxlen").headers
    _, back = decode.field_table(encode.field_table(h))
    assert [d["queue"] for d in back["x-death"]] == ["q2", "q1"]
    assert back["x-death"][1]["time"] == datetime.datetime.fromtimestamp(T0, tz=UTC)
    assert back["x-death"][1]["original-expiration"] == "10"
    assert back["x-first-death-queue"] == "q1"
    # a decoded header (plain ints, aware datetimes) can be dead-lettered again
    again = die(back, queue="q2", reason="maxlen").headers
    assert again["x-death"][0]["count"] == 2


def test_original_expiration_recorded_for_any_reason():
    # RabbitMQ records the per-message TTL whatever the reason, and clears it for republish.
    entry = die(reason="rejected", expiration="5").headers["x-death"][0]
    assert entry["original-expiration"] == "5"
