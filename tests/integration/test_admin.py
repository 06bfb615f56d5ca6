"""The in-process admin API (broker.admin): users, vhost access, policies, persistence."""

from __future__ import annotations

import pytest

from amqp_broker.core.errors import NotAllowed
from amqp_broker.mgmt import Admin as ManagementAdmin
from amqp_broker.queues import Message
from amqp_broker.server import Broker
from amqp_broker.server.persistence import Store
from amqp_broker.settings import Settings


def _broker(tmp_path) -> Broker:
    store = Store(tmp_path)
    store.open()
    return Broker(Settings(data_dir=tmp_path), store)


def test_default_user_can_log_in_from_loopback_only(tmp_path):
    b = _broker(tmp_path)
    assert b.authenticate("guest", "guest", ("127.0.0.1", 5000))
    assert not b.authenticate("guest", "guest", ("10.1.2.3", 5000))
    assert not b.authenticate("guest", "wrong", ("127.0.0.1", 5000))


def test_users_permissions_and_vhosts_survive_restart(tmp_path):
    b = _broker(tmp_path)
    b.admin.add_vhost("v2")
    b.admin.add_user("alice", "s3cret", ["management"])
    b.admin.set_permissions("v2", "alice", ".*", ".*", ".*")
    b.store.close()
    b = _broker(tmp_path)
    assert b.authenticate("alice", "s3cret", ("10.0.0.1", 1))
    assert b.open_vhost("alice", "v2").name == "v2"
    with pytest.raises(NotAllowed):
        b.open_vhost("alice", "/")
    with pytest.raises(NotAllowed):
        b.open_vhost("guest", "nope")


def test_put_user_with_only_a_hash_survives_restart(tmp_path):
    from amqp_broker.core.users import User

    b = _broker(tmp_path)
    # a RabbitMQ 3.10 hash of "guest" (definitions export)
    b.admin.put_user(User.from_definition({
        "name": "hashed", "password_hash": "J/ly2BBEdM+yuF3V9yLDmaAnJ0loE/Nr7zDugSrrCp7QhEn5",
        "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["management"]}))
    assert b.authenticate("hashed", "guest", ("10.0.0.1", 1))
    b.store.close()
    b = _broker(tmp_path)
    assert b.authenticate("hashed", "guest", ("10.0.0.1", 1))
    assert not b.authenticate("hashed", "wrong", ("10.0.0.1", 1))


def test_policy_applies_max_length_to_matching_queues(tmp_path):
    b = _broker(tmp_path)
    vhost = b.vhosts["/"]
    rt = vhost.declare_queue(None, "pol.q", passive=False, durable=False, exclusive=False,
                             auto_delete=False, arguments={})
    b.admin.set_policy("/", "cap", "^pol\\.", {"max-length": 2}, apply_to="queues")
    for i in range(5):
        rt.publish(Message.from_publish("", "pol.q", b"\x00\x00", str(i).encode()), 0, None)
    row = ManagementAdmin(b).get_queue("/", "pol.q")
    assert (row["messages_ready"], row["policy"]) == (2, "cap")
    b.admin.clear_policy("/", "cap")
    assert b.admin.list_policies() == []
