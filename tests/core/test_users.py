"""Users: RabbitMQ's password hash format, verification, tags, the store and the loopback rule."""

import base64
import hashlib
import itertools

import pytest

from amqp_broker.core.users import (
    MD5, SHA256, SHA512, NoSuchUser, User, UserAlreadyExists, UserError, UserStore, check_password,
    hash_password, is_loopback_address, loopback_allowed,
)

# Exported by RabbitMQ 3.10.8 (GET /api/users on a stock install): the hash of "guest".
RABBITMQ_GUEST_HASH = "J/ly2BBEdM+yuF3V9yLDmaAnJ0loE/Nr7zDugSrrCp7QhEn5"


def _counter():
    """Deterministic random_bytes: 00 01 02 03, then 04 05 06 07, ..."""
    c = itertools.count()
    return lambda n: bytes(next(c) % 256 for _ in range(n))


def test_sha256_hash_computed_by_hand():
    salt = b"\x00\x01\x02\x03"
    expected = base64.b64encode(salt + hashlib.sha256(salt + b"s3cret").digest()).decode()
    assert hash_password("s3cret", random_bytes=_counter()) == expected
    assert len(base64.b64decode(expected)) == 4 + 32


def test_verifies_a_hash_made_by_rabbitmq():
    assert check_password("guest", RABBITMQ_GUEST_HASH, SHA256)
    assert not check_password("Guest", RABBITMQ_GUEST_HASH, SHA256)
    assert User("guest", RABBITMQ_GUEST_HASH, SHA256).verify("guest")


def test_live_rabbitmq_hash_if_one_is_running():
    httpx = pytest.importorskip("httpx")
    try:
        r = httpx.get("http://127.0.0.1:15673/api/users/guest", auth=("guest", "guest"), timeout=2.0)
    except httpx.HTTPError:
        pytest.skip("no RabbitMQ management API on 127.0.0.1:15673")
    if r.status_code != 200:
        pytest.skip(f"RabbitMQ management API answered {r.status_code}")
    d = r.json()
    assert User.from_definition(d).verify("guest")
    assert d["hashing_algorithm"] == SHA256


@pytest.mark.parametrize("algorithm, size", [(SHA256, 32), (SHA512, 64), (MD5, 16)])
def test_each_algorithm_round_trips(algorithm, size):
    h = hash_password("pässwörd", algorithm, _counter())
    assert len(base64.b64decode(h)) == 4 + size
    assert check_password("pässwörd", h, algorithm)
    assert not check_password("passwort", h, algorithm)


def test_salt_is_random_so_hashes_differ():
    rnd = _counter()
    assert hash_password("x", random_bytes=rnd) != hash_password("x", random_bytes=rnd)


@pytest.mark.parametrize("bad", ["", "not base64!", base64.b64encode(b"abc").decode(), "AAAA"])
def test_empty_or_malformed_hash_never_matches(bad):
    assert not check_password("", bad)
    assert not User("u", bad).verify("")


def test_unknown_algorithm_is_an_error():
    with pytest.raises(UserError, match="unknown hashing algorithm 'rabbit_password_hashing_sha1'"):
        hash_password("x", "rabbit_password_hashing_sha1")
    with pytest.raises(UserError):
        User.from_definition({"name": "u", "password_hash": "", "hashing_algorithm": "nope"})


def test_store_add_authenticate_change_clear():
    store = UserStore(random_bytes=_counter())
    store.add("alice", "pw1", ["management"])
    assert store.authenticate("alice", "pw1").name == "alice"
    assert store.authenticate("alice", "pw2") is None
    assert store.authenticate("bob", "pw1") is None
    store.change_password("alice", "pw2")
    assert store.authenticate("alice", "pw1") is None and store.authenticate("alice", "pw2") is not None
    store.clear_password("alice")
    assert store.authenticate("alice", "") is None and store.authenticate("alice", "pw2") is None


def test_store_errors():
    store = UserStore(random_bytes=_counter())
    store.add("alice", None)
    with pytest.raises(UserAlreadyExists, match="user 'alice' already exists"):
        store.add("alice", "x")
    with pytest.raises(NoSuchUser, match="no such user: 'bob'"):
        store.delete("bob")
    with pytest.raises(NoSuchUser):
        store.change_password("bob", "x")
    with pytest.raises(UserError):
        store.add("", "x")
    assert store.delete("alice").name == "alice" and "alice" not in store and len(store) == 0


def test_tags_are_deduplicated_and_custom_tags_kept():
    store = UserStore(random_bytes=_counter())
    u = store.add("ops", "pw", ["administrator", " monitoring", "administrator", "", "custom-tag"])
    assert u.tags == ("administrator", "monitoring", "custom-tag")
    assert u.is_administrator and u.has_tag("custom-tag")
    assert store.set_tags("ops", []).tags == () and not store["ops"].is_administrator


def test_store_lists_sorted_by_name():
    store = UserStore([User("b"), User("a"), User("c")])
    assert [u.name for u in store.list()] == ["a", "b", "c"]


def test_definition_round_trip_and_3x_tag_string():
    u = User.from_definition({"name": "guest", "password_hash": RABBITMQ_GUEST_HASH,
                              "hashing_algorithm": SHA256, "tags": "administrator,management", "limits": {}})
    assert u.tags == ("administrator", "management")
    assert User.from_definition(u.as_definition()) == u
    assert u.as_definition()["tags"] == ["administrator", "management"]


@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("::ffff:127.0.0.1", True), (("127.0.0.1", 5555), True), (("::1", 5555, 0, 0), True), (None, True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("192.168.1.1", False), ("::2", False),
    ("fe80::1%eth0", False), ("localhost", False), ("", False), ("0.0.0.0", False),
])
def test_is_loopback_address(address, loopback):
    assert is_loopback_address(address) is loopback


def test_loopback_rule_only_for_listed_users():
    assert loopback_allowed("guest", "127.0.0.1", ("guest",))
    assert not loopback_allowed("guest", "10.1.1.1", ("guest",))
    assert loopback_allowed("alice", "10.1.1.1", ("guest",))
    assert loopback_allowed("guest", "10.1.1.1", ())


def test_unknown_user_and_user_without_password_cost_a_hash_like_a_wrong_password(monkeypatch):
    """No early return: whichever way a login fails, one password hash is computed, so the
    time of the refusal does not tell whether the user exists."""
    from amqp_broker.core import users as users_module

    store = users_module.UserStore()
    store.add("alice", "right")
    store.add("nopass", None)
    calls = []
    real = users_module.check_password
    monkeypatch.setattr(users_module, "check_password",
                        lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    for name, password in (("alice", "wrong"), ("nobody", "wrong"), ("nopass", "")):
        calls.clear()
        assert store.authenticate(name, password) is None
        assert len(calls) == 1 and calls[0], name  # one check, against a real-looking hash
    calls.clear()
    assert store.authenticate("alice", "right") is not None and len(calls) == 1
