"""amqp-brokerctl and amqp-broker-queues against a running `amqp-broker` process (compat_tests'
launcher, management API on): each verb is run through the CLI's main() pointed at the node's
URL, and what it changed is checked over the management API or AMQP; plus the node-down message
from a real subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from urllib.parse import quote

import httpx
import pika
import pytest

from amqp_broker.cli import ctl, queues_cli
from compat_tests.support.launcher import Broker, free_port


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with Broker(tmp_path_factory.mktemp("cli-node")).start() as n:
        yield n


@pytest.fixture(scope="module")
def api(node):
    """The node's management API, to set up and check what the CLI verbs do."""
    with httpx.Client(base_url=node.mgmt_url + "/api", auth=("guest", "guest"), timeout=30) as c:
        yield c


def _declare_queue(api, vhost: str, name: str, **body) -> None:
    r = api.put(f"/queues/{quote(vhost, safe='')}/{name}", json=body)
    assert r.status_code in (201, 204), r.text


def _publish(api, queue: str, payload: str) -> None:
    r = api.post("/exchanges/%2F/amq.default/publish", json={
        "properties": {}, "routing_key": queue, "payload": payload, "payload_encoding": "string"})
    assert r.json() == {"routed": True}


@pytest.fixture
def run(node, capsys):
    def _run(*argv: str, tool=ctl) -> tuple[int, str, str]:
        out = io.StringIO()
        code = tool.main(["--url", node.mgmt_url, *argv], out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return _run


def test_node_down_message():
    url = f"http://127.0.0.1:{free_port()}"
    p = subprocess.run([sys.executable, "-m", "amqp_broker.cli.ctl", "--url", url, "list_queues"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 69
    assert "Error: unable to perform an operation on node" in p.stderr
    assert "connection refused" in p.stderr


def test_queues_tool_node_down():
    code = queues_cli.main(["--url", f"http://127.0.0.1:{free_port()}", "quorum_status", "q"])
    assert code == 69


def test_status(run):
    code, out, _ = run("status")
    assert code == 0 and out.startswith("Status of node ")
    code, out, _ = run("status", "--formatter", "json")
    assert json.loads(out)["product_name"] == "amqp-broker"


def test_list_queues_columns_and_formats(run, api):
    _declare_queue(api, "/", "cli-q1", durable=True)
    _publish(api, "cli-q1", "hello")
    code, out, _ = run("list_queues")
    lines = out.splitlines()
    assert lines[0] == "Listing queues for vhost / ..."
    assert lines[1] == "name\tmessages"
    assert "cli-q1\t1" in lines
    code, out, _ = run("list_queues", "-q", "name", "messages_ready", "durable", "type")
    assert out.splitlines()[0] == "name\tmessages_ready\tdurable\ttype"
    assert "cli-q1\t1\ttrue\tclassic" in out.splitlines()
    code, out, _ = run("list_queues", "--formatter", "json", "name", "consumers")
    assert {"name": "cli-q1", "consumers": 0} in json.loads(out)
    code, out, err = run("list_queues", "nosuchcolumn")
    assert code == 64 and "Invalid column" in err


def test_other_lists(run, api):
    assert api.put("/exchanges/%2F/cli-x", json={"type": "topic"}).status_code in (201, 204)
    _declare_queue(api, "/", "cli-q2")
    assert api.post("/bindings/%2F/e/cli-x/q/cli-q2", json={"routing_key": "a.*"}).status_code == 201
    code, out, _ = run("list_exchanges", "-q")
    assert "cli-x\ttopic" in out.splitlines()
    code, out, _ = run("list_bindings", "-q")
    assert "cli-x\texchange\tcli-q2\tqueue\ta.*\t{}" in out.splitlines()
    for verb in ("list_connections", "list_consumers", "list_channels", "list_users",
                 "list_vhosts", "list_permissions", "list_policies"):
        code, out, _ = run(verb, "-q")
        assert code == 0, verb
    assert "guest\t[administrator]" in run("list_users", "-q")[1].splitlines()


def test_policies(run):
    code, out, _ = run("set_policy", "--priority", "3", "--apply-to", "queues", "cli-p",
                       "^cli-", '{"max-length": 5}')
    assert code == 0 and 'Setting policy "cli-p"' in out
    code, out, _ = run("list_policies", "-q")
    assert '/\tcli-p\t^cli-\tqueues\t{"max-length":5}\t3' in out.splitlines()
    code, out, err = run("set_policy", "bad", ".*", "{not json")
    assert code == 65 and "JSON" in err
    code, out, err = run("set_policy", "bad", ".*", '{"max-length": "x"}')
    assert code == 65 and err.startswith("Error:")
    assert run("clear_policy", "cli-p")[0] == 0
    code, out, err = run("clear_policy", "cli-p")
    assert code != 0 and err.startswith("Error:")


def test_users_vhosts_permissions(run, node):
    assert run("add_user", "cli-user", "s3cret")[0] == 0
    code, _, err = run("add_user", "cli-user", "other")
    assert code != 0 and "already exists" in err
    assert run("add_vhost", "cli-vh")[0] == 0
    assert run("set_permissions", "-p", "cli-vh", "cli-user", ".*", "^w", "^r")[0] == 0
    code, out, _ = run("list_permissions", "-p", "cli-vh", "-q")
    assert "cli-user\t.*\t^w\t^r" in out.splitlines()
    assert run("change_password", "cli-user", "n3w")[0] == 0
    # the new password logs in over AMQP (to the vhost it has permissions on); the old one not
    conn = pika.BlockingConnection(pika.URLParameters(
        node.url.replace("guest:guest", "cli-user:n3w").rsplit("/", 1)[0] + "/cli-vh"))
    conn.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(
            node.url.replace("guest:guest", "cli-user:s3cret").rsplit("/", 1)[0] + "/cli-vh"))
    assert run("set_user_tags", "cli-user", "monitoring")[0] == 0
    assert "cli-user\t[monitoring]" in run("list_users", "-q")[1].splitlines()
    assert run("clear_permissions", "-p", "cli-vh", "cli-user")[0] == 0
    assert run("delete_vhost", "cli-vh")[0] == 0
    assert "cli-vh" not in run("list_vhosts", "-q")[1].splitlines()
    assert run("delete_user", "cli-user")[0] == 0
    code, _, err = run("delete_user", "cli-user")
    assert code != 0 and "Error:" in err


def test_purge_and_delete_queue(run, api, node):
    _declare_queue(api, "/", "cli-q3")
    _publish(api, "cli-q3", "x")
    assert run("purge_queue", "cli-q3")[0] == 0
    with pika.BlockingConnection(pika.URLParameters(node.url)) as conn:
        assert conn.channel().queue_declare("cli-q3", passive=True).method.message_count == 0
    _publish(api, "cli-q3", "x")
    code, _, err = run("delete_queue", "--if-empty", "cli-q3")
    assert code != 0 and "not empty" in err
    code, out, _ = run("delete_queue", "cli-q3")
    assert code == 0 and "Queue was successfully deleted with 1 messages" in out


def test_definitions_export_import(run, api, tmp_path):
    _declare_queue(api, "/", "cli-defs-q", durable=True)
    path = tmp_path / "defs.json"
    assert run("export_definitions", str(path))[0] == 0
    defs = json.loads(path.read_text())
    assert any(q["name"] == "cli-defs-q" for q in defs["queues"])
    assert run("delete_queue", "cli-defs-q")[0] == 0
    assert api.get("/queues/%2F/cli-defs-q").status_code == 404
    assert run("import_definitions", str(path))[0] == 0
    assert api.get("/queues/%2F/cli-defs-q").json()["durable"] is True
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert run("import_definitions", str(bad))[0] == 65
    assert run("import_definitions", str(tmp_path / "missing.json"))[0] == 70


def test_vhost_flag_before_or_after_the_verb(run, api):
    assert api.put("/vhosts/cli-vh2").status_code in (201, 204)
    _declare_queue(api, "cli-vh2", "only-here")
    assert "only-here" in run("-p", "cli-vh2", "list_queues", "-q")[1]
    assert "only-here" in run("list_queues", "-p", "cli-vh2", "-q")[1]
    assert "only-here" not in run("list_queues", "-q")[1]


@pytest.fixture
def qq(api):
    """A quorum queue on the node (a one-member group led by this node); the node's name."""
    _declare_queue(api, "/", "cli-qq", durable=True, arguments={"x-queue-type": "quorum"})
    return api.get("/overview").json()["node"]


def test_queues_tool_quorum_status(run, qq):
    code, _, err = run("quorum_status", "nosuch", tool=queues_cli)
    assert code != 0 and "Error:" in err
    code, out, _ = run("quorum_status", "cli-qq", tool=queues_cli)
    assert code == 0
    header, row = out.splitlines()[1:]
    assert header.split("\t") == ["Node Name", "Raft State", "Membership", "Online",
                                   "Last Log Index", "Commit Index", "Last Applied",
                                   "Snapshot Index", "Term", "Match Index", "In Sync"]
    cells = row.split("\t")
    assert cells[:4] == [qq, "leader", "voter", "true"]
    last, commit, applied, _snap, term, match, in_sync = cells[4:]
    assert int(last) >= 1 and commit == applied == last == match and int(term) >= 1
    assert in_sync == "true"


def test_queues_tool_add_member(run, qq, api):
    code, out, err = run("add_member", "cli-qq", "rabbit@elsewhere", tool=queues_cli)
    assert code == 69 and err == "Error:\nnode_not_running\n"  # rabbitmq-queues 3.10's
    # This node is already the member: a no-op that succeeds, as in RabbitMQ.
    code, out, err = run("add_member", "cli-qq", qq, tool=queues_cli)
    assert code == 0 and err == ""
    assert out == f"Adding a replica for queue cli-qq on node {qq}...\n"
    _declare_queue(api, "/", "cli-classic")
    code, _, err = run("add_member", "cli-classic", qq, tool=queues_cli)
    assert code == 64 and "Cannot add members to a classic queue" in err


def test_queues_tool_delete_member(run, qq):
    code, _, err = run("delete_member", "cli-qq", qq, tool=queues_cli)
    assert code == 69 and err == "Error:\nlast_node\n"  # rabbitmq-queues 3.10's
    code, _, err = run("delete_member", "cli-qq", "rabbit@elsewhere", tool=queues_cli)
    assert code == 69 and "node_not_running" in err
    code, _, err = run("delete_member", "-p", "/", "nosuch", qq, tool=queues_cli)
    assert code != 0 and "Error:" in err


def test_queues_tool_grow(run, qq):
    code, _, err = run("grow", "n@h", "all", tool=queues_cli)
    assert code == 70 and "n@h" in err
    code, out, _ = run("grow", qq, "all", "--vhost-pattern", ".*", "--queue-pattern", "cli-.*",
                       tool=queues_cli)
    assert code == 0
    assert out.splitlines() == [f"Growing all quorum queues on {qq}...",
                                "vhost\tname\tsize\tresult"]
    code, out, _ = run("grow", qq, "even", "--errors-only", "--formatter", "json",
                       tool=queues_cli)
    assert code == 0 and json.loads(out) == []
    code, _, err = run("grow", qq, "some", tool=queues_cli)
    assert code == 64


def test_queues_tool_shrink(run, qq):
    code, out, _ = run("shrink", qq, tool=queues_cli)
    lines = out.splitlines()
    assert code == 0 and lines[:2] == [f"Shrinking quorum queues on {qq}...",
                                       "vhost\tname\tsize\tresult"]
    assert "/\tcli-qq\t1\terror: the last node cannot be removed" in lines
    assert all(line.endswith("error: the last node cannot be removed") for line in lines[2:])
    code, out, _ = run("shrink", qq, "--errors-only", "--formatter", "json", tool=queues_cli)
    assert {"vhost": "/", "name": "cli-qq", "size": 1,
            "result": "error: the last node cannot be removed"} in json.loads(out)
    code, out, _ = run("shrink", "rabbit@elsewhere", "-q", tool=queues_cli)
    assert code == 0 and out.splitlines() == ["vhost\tname\tsize\tresult"]


def test_queues_tool_rebalance(run, qq):
    code, out, _ = run("rebalance", "quorum", tool=queues_cli)
    lines = out.splitlines()
    assert code == 0 and lines[:2] == [
        "Re-balancing leaders of quorum queues...",
        "Node name\tNumber of quorum queues\tNumber of replicated classic queues"]
    (row,) = lines[2:]
    name, count, mirrored = row.split("\t")
    assert name == qq and int(count) >= 1 and mirrored == "0"
    code, out, _ = run("rebalance", "all", "--queue-pattern", "^cli-qq$", "--formatter", "json",
                       tool=queues_cli)
    assert json.loads(out) == [{"Node name": qq, "Number of quorum queues": 1,
                                "Number of replicated classic queues": 0}]
    assert run("rebalance", "bogus", tool=queues_cli)[0] == 64


def test_queues_tool_quorum_critical(run, qq):
    code, out, _ = run("check_if_node_is_quorum_critical", tool=queues_cli)
    assert code == 0 and out.splitlines() == [
        f"Checking if node {qq} is critical for quorum of any quorum queues ...",
        f"Node {qq} seems to be the only one in a single node cluster, the check does not apply"]
    code, out, _ = run("check_if_node_is_quorum_critical", "--formatter", "json",
                       tool=queues_cli)
    assert json.loads(out)["result"] == "ok"


def test_wrong_credentials(node, capsys):
    code = ctl.main(["--url", node.mgmt_url, "--password", "bad", "list_queues"])
    assert code != 0
    assert "authentication failed" in capsys.readouterr().err
