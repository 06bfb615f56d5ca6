"""Good rabbitmq.conf files: syntax (comments, quoting, escaped dots) and every key's effect."""

import dataclasses
import math
import re
from pathlib import Path

import pytest

from amqp_broker.config import BrokerSettings, ConfigError, Listener, parse_text
from amqp_broker.settings import Settings


def test_empty_file_gives_the_server_defaults():
    s = parse_text("")
    assert isinstance(s, Settings)
    base = Settings()
    for f in dataclasses.fields(Settings):
        if f.name != "data_dir":  # depends on the environment, same function
            assert getattr(s, f.name) == getattr(base, f.name), f.name
    assert s == BrokerSettings(data_dir=s.data_dir)


def test_comments_blank_lines_and_whitespace():
    s = parse_text(
        "# a full-line comment\n"
        "   # indented comment\n"
        "\n"
        "\t\n"
        "  heartbeat   =   30   # trailing comment\n"
        "channel_max=100#no spaces\r\n"
    )
    assert (s.heartbeat, s.channel_max) == (30, 100)


def test_quoted_value_keeps_hash_and_spaces():
    s = parse_text("default_pass = 'p#ss word'  # comment\ndefault_user = ' x '\n")
    assert s.default_pass == "p#ss word"
    assert s.default_user == " x "


def test_last_occurrence_wins():
    assert parse_text("heartbeat = 10\nheartbeat = 20\n").heartbeat == 20


def test_listeners_default_is_primary_others_extra():
    s = parse_text(
        "listeners.tcp.local = 127.0.0.1:5673\n"
        "listeners.tcp.default = 5672\n"
        "listeners.tcp.v6 = ::1:5674\n"
        "listeners.tcp.v6b = [::1]:5675\n"
    )
    assert (s.host, s.port) == ("0.0.0.0", 5672)
    assert s.extra_listeners == (
        Listener("local", "127.0.0.1", 5673), Listener("v6", "::1", 5674), Listener("v6b", "::1", 5675))
    assert [lst.port for lst in s.listeners] == [5672, 5673, 5674, 5675]


def test_first_listener_is_primary_without_default():
    s = parse_text("listeners.tcp.a = 127.0.0.1:6000\nlisteners.tcp.b = 6001\n")
    assert (s.host, s.port) == ("127.0.0.1", 6000)
    assert s.extra_listeners == (Listener("b", "0.0.0.0", 6001),)


@pytest.mark.parametrize("text, expected", [
    ("", ("guest",)),
    ("loopback_users = none\n", ()),
    ("loopback_users.guest = false\n", ()),
    ("loopback_users.guest = true\n", ("guest",)),
    ("loopback_users.alice = true\n", ("alice",)),  # replaces the default list, as RabbitMQ does
    ("loopback_users.alice = true\nloopback_users.bob = true\nloopback_users.guest = false\n", ("alice", "bob")),
    ("loopback_users.a\\.b = true\n", ("a.b",)),  # escaped dot in a user name
    ("loopback_users.alice = true\nloopback_users = none\n", ()),
])
def test_loopback_users(text, expected):
    assert parse_text(text).loopback_users == expected


def test_connection_and_timeouts():
    s = parse_text(
        "heartbeat = 0\nframe_max = 128KB\nchannel_max = 0\nmax_message_size = 134217728\n"
        "consumer_timeout = 900000\nhandshake_timeout = 5000\nconnection_max = 500\n")
    assert (s.heartbeat, s.frame_max, s.channel_max, s.max_message_size) == (0, 131072, 0, 134217728)
    assert (s.consumer_timeout, s.handshake_timeout, s.connection_max) == (900.0, 5.0, 500)


def test_infinity_values():
    s = parse_text("handshake_timeout = infinity\nconnection_max = infinity\n")
    assert s.handshake_timeout == math.inf
    assert s.connection_max is None


def test_frame_max_units_and_zero():
    assert parse_text("frame_max = 0\n").frame_max == 0
    assert parse_text("frame_max = 1MB\n").frame_max == 1024 * 1024
    assert parse_text("frame_max = 4096\n").frame_max == 4096


def test_identity_profile_and_product():
    s = parse_text("node_name = rabbit@node-1.example\ncompat_profile = rabbitmq-3.10\ncluster_name = c1\n")
    assert (s.node_name, s.compat_profile, s.version, s.cluster_name) == (
        "rabbit@node-1.example", "rabbitmq-3.10", "3.10.8", "c1")
    s = parse_text("compat_profile = rabbitmq-4.3\nproduct.name = RabbitMQ\nproduct.version = 4.3.1\n")
    assert (s.product, s.version, s.compat_profile) == ("RabbitMQ", "4.3.1", "rabbitmq-4.3")
    assert BrokerSettings().version == "4.2.0"


def test_data_dir_expands_user():
    assert parse_text("data_dir = /srv/broker\n").data_dir == Path("/srv/broker")
    assert parse_text("data_dir = ~/x\n").data_dir == Path("~/x").expanduser()


def test_default_user_vhost_permissions_tags():
    s = parse_text(
        "default_vhost = prod\ndefault_user = admin\ndefault_pass = s3cret\n"
        "default_permissions.configure = ^admin\\..*\ndefault_permissions.read = .*\n"
        "default_permissions.write = ^$\n"
        "default_user_tags.administrator = false\ndefault_user_tags.monitoring = true\n")
    assert (s.default_vhost, s.default_user, s.default_pass) == ("prod", "admin", "s3cret")
    assert s.default_permissions == ("^admin\\..*", "^$", ".*")
    assert s.default_user_tags == ("monitoring",)


def test_log_keys():
    s = parse_text("log.file = /var/log/broker.log\nlog.file.level = warning\nlog.console = false\n"
                   "log.console.level = debug\n")
    assert (s.log.file, s.log.file_level, s.log.console, s.log.console_level) == (
        "/var/log/broker.log", "warning", False, "debug")
    assert parse_text("log.file = false\n").log.file is None


def test_log_default_level_applies_where_no_own_level():
    s = parse_text("log.level = debug\nlog.console.level = error\n")
    assert (s.log.default_level, s.log.file_level, s.log.console_level) == ("debug", "debug", "error")
    assert parse_text("log.default.level = warning\n").log.console_level == "warning"
    assert s.log.python_level("notice") == 25


def test_http_endpoints():
    s = parse_text("management.tcp.port = 15673\nmanagement.tcp.ip = 127.0.0.1\n"
                   "prometheus.tcp.port = 15693\nprometheus.tcp.ip = ::\n")
    assert (s.management.host, s.management.port) == ("127.0.0.1", 15673)
    assert (s.prometheus.host, s.prometheus.port) == ("::", 15693)
    d = BrokerSettings()
    assert (d.management.port, d.prometheus.port) == (15672, 15692)


@pytest.mark.parametrize("value, expected", [
    ("client-local", "client-local"), ("balanced", "balanced"),
    ("random", "balanced"), ("least-leaders", "balanced"),
])
def test_queue_leader_locator(value, expected):
    assert parse_text(f"queue_leader_locator = {value}\n").queue_leader_locator == expected


def test_quorum_queue_keys():
    p = "quorum_queue.continuous_membership_reconciliation."
    s = parse_text(
        "quorum_queue.initial_cluster_size = 5\n"
        "quorum_queue.property_equivalence.relaxed_checks_on_redeclaration = true\n"
        f"{p}enabled = false\n")
    q = s.quorum_queue
    assert (q.initial_cluster_size, q.relaxed_checks_on_redeclaration, q.reconciliation.enabled) == (5, True, False)
    d = BrokerSettings().quorum_queue
    assert (d.initial_cluster_size, d.relaxed_checks_on_redeclaration) == (3, False)


def test_keys_that_would_change_nothing_are_refused_with_their_line():
    with pytest.raises(ConfigError) as info:
        parse_text("heartbeat = 30\nquorum_queue.commands_soft_limit = 64\n")
    assert "rabbitmq.conf:2: quorum_queue.commands_soft_limit: not supported" in str(info.value)


def test_membership_reconciliation_keys():
    p = "quorum_queue.continuous_membership_reconciliation."
    s = parse_text(f"{p}enabled = true\n{p}interval = 60000\n{p}trigger_interval = 500\n"
                   f"{p}target_group_size = 5\n{p}auto_remove = true\n"
                   f"{p}replace_unreachable_after = 30000\n")
    r = s.quorum_queue.reconciliation
    assert (r.enabled, r.interval, r.trigger_interval, r.target_group_size, r.auto_remove,
            r.replace_unreachable_after) == (True, 60.0, 0.5, 5, True, 30.0)
    assert BrokerSettings().quorum_queue.reconciliation.target_group_size is None


def test_raft_and_dead_letter_keys():
    s = parse_text("raft.wal_max_size_bytes = 64000000\nraft.segment_max_entries = 65535\n"
                   "raft.mem_table_max_bytes = 1000000\n"
                   "dead_letter_worker_consumer_prefetch = 10\n"
                   "dead_letter_worker_publisher_confirm_timeout = 5000\n")
    assert (s.raft.wal_max_size_bytes, s.raft.segment_max_entries) == (64000000, 65535)
    assert (s.dead_letter_worker_consumer_prefetch, s.dead_letter_worker_publisher_confirm_timeout) == (10, 5.0)
    assert BrokerSettings().raft.segment_max_entries == 4096
    assert BrokerSettings().raft.wal_max_size_bytes == 536870912  # 512 MiB
    assert s.raft.mem_table_max_bytes == 1000000
    assert BrokerSettings().raft.mem_table_max_bytes == 32 * 1024 * 1024


def test_cluster_nodes_naming_this_node_only():
    s = parse_text(
        "node_name = rabbit@host1\n"
        "cluster_formation.peer_discovery_backend = classic_config\n"
        "cluster_formation.classic_config.nodes.1 = rabbit@host1\n")
    assert s.cluster.nodes == ("rabbit@host1",)
    assert parse_text("cluster_formation.peer_discovery_backend = classic\n").cluster.peer_discovery_backend == \
        "classic_config"


def test_cluster_peers_with_and_without_distribution_port():
    s = parse_text("node_name = rabbit1@localhost\n"
                   "distribution.listener.port_range.min = 25701\n"
                   "cluster_formation.classic_config.nodes.1 = rabbit1@localhost:25701\n"
                   "cluster_formation.classic_config.nodes.2 = rabbit2@host2\n")
    assert s.cluster.nodes == ("rabbit1@localhost:25701", "rabbit2@host2")
    assert s.dist_port == 25701
    with pytest.raises(ConfigError) as info:
        parse_text("cluster_formation.classic_config.nodes.1 = rabbit@host2:notaport\n")
    assert "cluster_formation.classic_config.nodes.1" in str(info.value)


def test_resource_alarm_keys():
    assert parse_text("vm_memory_high_watermark.relative = 0.6\n").memory_high_watermark == 0.6
    assert parse_text("vm_memory_high_watermark.absolute = 2GiB\n").memory_high_watermark == 2 * 1024**3
    assert parse_text("vm_memory_high_watermark.absolute = 2GB\n").memory_high_watermark == 2 * 10**9
    assert parse_text("disk_free_limit.absolute = 1000000\n").disk_free_limit == 1000000
    assert parse_text("disk_free_limit.absolute = 50MiB\n").disk_free_limit == 50 * 1024**2
    assert parse_text("disk_free_limit.relative = 1.5\n").disk_free_limit_relative == 1.5


def test_connection_rate_limit_keys():
    s = parse_text("connection_limits.channel_opens_per_second = 50\n"
                   "connection_limits.queue_declares_per_second = infinity\n")
    assert (s.channel_open_rate, s.queue_declare_rate) == (50.0, None)


def test_settings_are_frozen_and_replace_keeps_type():
    s = parse_text("heartbeat = 5\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.heartbeat = 6  # type: ignore[misc]
    t = dataclasses.replace(s, port=1234)
    assert isinstance(t, BrokerSettings) and t.listeners[0].port == 1234 and t.heartbeat == 5


def test_tls_listeners_and_options():
    s = parse_text("listeners.ssl.default = 5671\nlisteners.ssl.local = 127.0.0.1:5681\n"
                   "ssl_options.cacertfile = /c/ca.pem\nssl_options.certfile = /c/cert.pem\n"
                   "ssl_options.keyfile = /c/key.pem\nssl_options.verify = verify_peer\n"
                   "ssl_options.fail_if_no_peer_cert = true\nssl_options.versions.1 = tlsv1.2\n")
    assert s.ssl_listeners == (Listener("default", "0.0.0.0", 5671),
                               Listener("local", "127.0.0.1", 5681))
    o = s.ssl_options
    assert (o.cacertfile, o.certfile, o.keyfile) == ("/c/ca.pem", "/c/cert.pem", "/c/key.pem")
    assert (o.verify, o.fail_if_no_peer_cert, o.versions) == ("verify_peer", True, ("tlsv1.2",))
    assert s.management_ssl is None and s.management.port == 15672


def test_management_over_https_alone_replaces_plain_http():
    tls = "management.ssl.certfile = /c/cert.pem\nmanagement.ssl.keyfile = /c/key.pem\n"
    s = parse_text("management.ssl.port = 15671\n" + tls)
    assert (s.management_ssl.port, s.management_ssl.tls.certfile) == (15671, "/c/cert.pem")
    assert s.management.port == -1
    both = parse_text("management.ssl.port = 15671\nmanagement.tcp.port = 15672\n" + tls)
    assert (both.management_ssl.port, both.management.port) == (15671, 15672)


@pytest.mark.parametrize("text, problem", [
    ("listeners.ssl.default = 5671\n", "ssl_options.certfile: a TLS listener needs a certificate"),
    ("listeners.ssl.default = 5671\nssl_options.certfile = /c\nssl_options.keyfile = /k\n"
     "ssl_options.verify = verify_peer\n", "ssl_options.cacertfile: verify_peer needs"),
    ("ssl_options.versions.1 = tlsv1.1\n", "expected tlsv1.2 or tlsv1.3 (TLS 1.1 and older"),
    ("ssl_options.verify = verify_maybe\n", "expected one of verify_peer, verify_none"),
    ("management.ssl.port = 15671\n", "management.ssl.certfile: a TLS listener needs"),
])
def test_tls_configuration_errors(text, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_text(text)


def test_classic_queue_memory_budget():
    assert parse_text("").classic_queue_memory_budget == 8 * 1024 * 1024
    assert parse_text("classic_queue.memory_budget_bytes = 0\n").classic_queue_memory_budget == 0
    assert parse_text("classic_queue.memory_budget_bytes = 64MiB\n"
                      ).classic_queue_memory_budget == 64 * 1024 * 1024
    with pytest.raises(ConfigError, match="classic_queue.memory_budget_bytes"):
        parse_text("classic_queue.memory_budget_bytes = -1\n")
