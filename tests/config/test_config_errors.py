"""Bad rabbitmq.conf files: every error names the file, the line, the key and what is expected."""

import pytest

from amqp_broker.config import ConfigError, parse_text


def _error(text: str, file: str = "rabbitmq.conf") -> str:
    with pytest.raises(ConfigError) as info:
        parse_text(text, file)
    return str(info.value)


@pytest.mark.parametrize("line, message", [
    ("heartbeat = abc", "heartbeat: expected an integer from 0 to 65535 (seconds), got 'abc'"),
    ("heartbeat = -1", "heartbeat: expected an integer from 0 to 65535 (seconds), got '-1'"),
    ("heartbeat = 70000", "heartbeat: expected an integer from 0 to 65535 (seconds), got '70000'"),
    ("frame_max = 100", "frame_max: expected 0 (no limit) or a size in bytes from 4096 to 4294967295, got '100'"),
    ("frame_max = 1TB", "frame_max: expected a size in bytes (an integer, optionally with KB, MB or GB), got '1TB'"),
    ("channel_max = 65536", "channel_max: expected an integer from 0 to 65535, got '65536'"),
    ("max_message_size = 0", "max_message_size: expected an integer from 1 to 536870912 (bytes), got '0'"),
    ("max_message_size = 536870913",
     "max_message_size: expected an integer from 1 to 536870912 (bytes), got '536870913'"),
    ("consumer_timeout = 0", "consumer_timeout: expected a positive integer (milliseconds), got '0'"),
    ("consumer_timeout = 1.5", "consumer_timeout: expected a positive integer (milliseconds), got '1.5'"),
    ("handshake_timeout = forever",
     "handshake_timeout: expected a positive integer (milliseconds) or 'infinity', got 'forever'"),
    ("connection_max = lots", "connection_max: expected a non-negative integer or 'infinity', got 'lots'"),
    ("listeners.tcp.default = localhost:5672", "listeners.tcp.default: expected a port (0-65535) or IP:port, "
     "e.g. 5672, 127.0.0.1:5672 or [::1]:5672, got 'localhost:5672'"),
    ("listeners.tcp.default = 99999", "listeners.tcp.default: expected a port (0-65535) or IP:port"),
    ("listeners.tcp = none", "listeners.tcp: 'none' is not supported"),
    ("loopback_users = all", "loopback_users: expected none, got 'all'"),
    ("loopback_users.guest = yes", "loopback_users.guest: expected true or false, got 'yes'"),
    ("log.console = True", "log.console: expected true or false, got 'True'"),
    ("log.level = verbose", "log.level: expected one of debug, info, notice, warning, error, critical, alert, "
     "emergency, none, got 'verbose'"),
    ("management.tcp.ip = localhost", "management.tcp.ip: expected an IP address"),
    ("prometheus.tcp.port = http", "prometheus.tcp.port: expected an integer from 0 to 65535, got 'http'"),
    ("queue_leader_locator = nearest", "queue_leader_locator: expected one of client-local, balanced"),
    ("quorum_queue.initial_cluster_size = 0",
     "quorum_queue.initial_cluster_size: expected a positive integer, got '0'"),
    ("quorum_queue.property_equivalence.relaxed_checks_on_redeclaration = 1",
     "quorum_queue.property_equivalence.relaxed_checks_on_redeclaration: expected true or false, got '1'"),
    ("quorum_queue.continuous_membership_reconciliation.interval = -5",
     "quorum_queue.continuous_membership_reconciliation.interval: expected a non-negative integer (milliseconds), got '-5'"),
    ("raft.segment_max_entries = 65536", "raft.segment_max_entries: expected an integer from 1 to 65535"),
    ("raft.wal_max_size_bytes = 0", "raft.wal_max_size_bytes: expected a positive integer, got '0'"),
    ("dead_letter_worker_consumer_prefetch = 0", "dead_letter_worker_consumer_prefetch: expected a positive integer"),
    ("cluster_formation.peer_discovery_backend = dns",
     "cluster_formation.peer_discovery_backend: expected classic_config"),
    ("cluster_formation.classic_config.nodes.1 = host1", "cluster_formation.classic_config.nodes.1: expected a node name like rabbit@hostname"),
    ("node_name = rabbit", "node_name: expected a node name like rabbit@hostname, got 'rabbit'"),
    ("compat_profile = rabbitmq-3.8", "compat_profile: expected one of rabbitmq-3.10, rabbitmq-4.2, rabbitmq-4.3"),
    ("default_permissions.read = (", "default_permissions.read: expected a valid regular expression, got '('"),
    ("vm_memory_high_watermark.relative = 1.5", "vm_memory_high_watermark.relative: expected a number greater"),
    ("disk_free_limit.absolute = 50XB", "disk_free_limit.absolute: expected a positive number of bytes"),
    ("default_user = ''", "default_user: expected a non-empty string, got ''"),
])
def test_bad_value_message(line, message):
    text = "# comment first\n\n" + line + "\n"
    assert _error(text).startswith("rabbitmq.conf:3: " + message)


def test_unknown_key_suggests_a_close_one():
    assert _error("hearbeat = 30\n") == "rabbitmq.conf:1: hearbeat: unknown key (did you mean 'heartbeat'?)"


def test_unknown_key_without_a_close_one():
    msg = _error("vm_memory_calculation_strategy = rss\n")
    assert msg.startswith("rabbitmq.conf:1: vm_memory_calculation_strategy: unknown key (see rabbitmq.conf.example")


def test_named_key_with_wrong_depth_is_unknown():
    assert "listeners.tcp.a.b: unknown key" in _error("listeners.tcp.a.b = 5672\n")


@pytest.mark.parametrize("line, message", [
    ("just words", "rabbitmq.conf:1: expected 'key = value', got 'just words'"),
    ("= 5", "rabbitmq.conf:1: expected 'key = value', got '= 5'"),
    ("heartbeat =", "rabbitmq.conf:1: heartbeat: expected a value after '='"),
    ("heartbeat = # nothing", "rabbitmq.conf:1: heartbeat: expected a value after '='"),
    ("default_pass = 'unterminated", "rabbitmq.conf:1: default_pass: expected a value after '='"),
    ("default_pass = 'a' b", "rabbitmq.conf:1: default_pass: expected a value after '='"),
    ("include /etc/conf.d/*.conf", "rabbitmq.conf:1: 'include' is not supported"),
])
def test_syntax_errors(line, message):
    assert _error(line + "\n").startswith(message)


def test_every_problem_is_reported_in_line_order_with_the_file_name():
    err = _error("heartbeat = x\nbogus line\nframe_max = 1\nchannel_max = 10\n", "/etc/rabbitmq/rabbitmq.conf")
    lines = err.splitlines()
    assert [ln.split(":")[1] for ln in lines] == ["1", "2", "3"]
    assert all(ln.startswith("/etc/rabbitmq/rabbitmq.conf:") for ln in lines)


def test_problems_are_structured():
    with pytest.raises(ConfigError) as info:
        parse_text("a = 1\nheartbeat = x\n", "f.conf")
    (p1, p2) = info.value.problems
    assert (p1.file, p1.line, p1.key) == ("f.conf", 1, "a")
    assert (p2.line, p2.key) == (2, "heartbeat")
    assert isinstance(info.value, ValueError)


def test_cross_key_errors():
    assert "same address as listeners.tcp.a" in _error(
        "listeners.tcp.a = 127.0.0.1:5672\nlisteners.tcp.b = 127.0.0.1:5672\n")
    assert "rabbitmq.conf:2: cluster_formation.classic_config.nodes.2: node rabbit@h1 is listed twice" in _error(
        "cluster_formation.classic_config.nodes.1 = rabbit@h1\ncluster_formation.classic_config.nodes.2 = rabbit@h1\n")
    assert "not both" in _error("vm_memory_high_watermark.relative = 0.5\nvm_memory_high_watermark.absolute = 1GB\n")
    assert "not both" in _error("disk_free_limit.relative = 1.0\ndisk_free_limit.absolute = 1GB\n")
    assert "a positive integer or 'infinity'" in _error("connection_limits.channel_opens_per_second = 0\n")
    assert "a non-negative number" in _error("disk_free_limit.relative = -1\n")
