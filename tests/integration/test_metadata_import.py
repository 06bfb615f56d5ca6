"""A data directory written before the metadata was a Raft group (records in the local metadata
log, quorum queues' group ids in quorum/queues.json) keeps everything: the node imports the old
records into its metadata group once, and serves them."""

from __future__ import annotations

import json

import pika

from amqp_broker.core.users import UserStore
from amqp_broker.mgmt.client import ApiClient
from amqp_broker.store import MetadataStore
from compat_tests.support.launcher import Broker


def _old_data_dir(data) -> None:
    data.mkdir(parents=True)
    meta = MetadataStore(str(data))
    meta.open()
    users = UserStore()
    meta.put("vhost", "/", {})
    meta.put("vhost", "old", {})
    meta.put("user", "guest", users.add("guest", "guest", ["administrator"]).as_definition())
    meta.put("user", "carol", users.add("carol", "pw", []).as_definition())
    meta.put("permission", ["/", "guest"], [".*", ".*", ".*"])
    meta.put("permission", ["old", "carol"], [".*", ".*", ".*"])
    meta.put("exchange", ["old", "ox"], {"type": "topic", "durable": True, "auto_delete": False,
                                         "internal": False, "arguments": {}})
    meta.put("queue", ["old", "oc"], {"durable": True, "auto_delete": False, "arguments": {}})
    meta.put("queue", ["old", "oq"], {"durable": True, "auto_delete": False,
                                      "arguments": {"x-queue-type": "quorum"}})
    meta.put("binding", ["old", "ox", "queue", "oc", "k.#", "[]"], {})
    meta.put("binding", ["old", "ox", "queue", "oq", "k.#", "[]"], {})
    meta.close()
    (data / "quorum").mkdir()
    (data / "quorum" / "queues.json").write_text(json.dumps({"old\x00oq": "qq:0123abcd"}))


def test_an_older_data_dir_is_imported_once(tmp_path):
    data = tmp_path / "node" / "data"
    _old_data_dir(data)
    with Broker(tmp_path / "node") as node:
        api = ApiClient(node.mgmt_url)
        assert api.get("queues", "old", "oq")["type"] == "quorum"
        port = pika.URLParameters(node.url).port
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", port, "old", pika.PlainCredentials("carol", "pw")))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("ox", "k.1", b"both", mandatory=True)  # through the old bindings
        assert ch.queue_declare("oc", passive=True).method.message_count == 1
        assert ch.queue_declare("oq", passive=True).method.message_count == 1
        ch.queue_delete("oc")
        conn.close()
        assert (data / "metadata.imported").read_text().strip() == "11"
        # imported once: a deleted queue stays deleted after a restart
        node.restart()
        api = ApiClient(node.mgmt_url)
        assert [q["name"] for q in api.get("queues", "old")] == ["oq"]
