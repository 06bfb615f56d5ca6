"""rabbitmq.conf.example documents every supported key, and each documented line is valid."""

import re
from pathlib import Path

import pytest

from amqp_broker.config import KEYS, BrokerSettings, ConfigError, parse_text
from amqp_broker.config.build import REFUSED_KEYS

_EXAMPLE = Path(__file__).resolve().parents[2] / "rabbitmq.conf.example"
_SETTING = re.compile(r"# ([a-z_]+(?:\.[a-z0-9_]+)*) = (\S+)")


def _documented() -> list[tuple[str, str]]:
    found = []
    for line in _EXAMPLE.read_text().splitlines():
        m = _SETTING.fullmatch(line.strip())
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def _pattern(key: str) -> re.Pattern:
    return re.compile("^" + re.sub(r"\\\$[a-z]+", r"[^.]+", re.escape(key)) + "$")


@pytest.mark.parametrize("key", [k for k in KEYS if k != "listeners.tcp" and k not in REFUSED_KEYS])
def test_every_key_is_documented(key):  # listeners.tcp = none is refused on purpose
    assert any(_pattern(key).match(k) for k, _ in _documented()), key


@pytest.mark.parametrize("key", REFUSED_KEYS)
def test_refused_keys_are_named_in_the_example_and_refused_at_start(key):
    text = _EXAMPLE.read_text()
    assert key.rsplit(".", 1)[-1] in text
    with pytest.raises(ConfigError, match="not supported"):
        parse_text(f"{key} = {'true' if key.endswith('auto_remove') else '1'}\n")


# A TLS listener needs a certificate and key: documented lines are parsed with these after them.
_TLS_FILES = "".join(f"{prefix}.{key} = /etc/{key}.pem\n" for prefix in ("ssl_options", "management.ssl")
                     for key in ("certfile", "keyfile", "cacertfile"))


@pytest.mark.parametrize("key, value", _documented())
def test_every_documented_line_parses(key, value):
    parse_text(f"{key} = {value}\n" + (_TLS_FILES if "ssl" in key else ""))


def test_the_example_with_only_defaults_uncommented_equals_the_defaults():
    not_defaults = {"listeners.tcp.local", "listeners.tcp.local_v6", "loopback_users", "data_dir",
                    "vm_memory_high_watermark.absolute", "disk_free_limit.absolute",
                    "disk_free_limit.relative",  # the alternative to .absolute
                    "node_name", "distribution.listener.port_range.min",  # computed defaults
                    "quorum_queue.continuous_membership_reconciliation.target_group_size"}  # unset
    lines = [f"{k} = {v}" for k, v in _documented()
             if k not in not_defaults and not k.startswith("cluster_formation.classic_config.nodes")
             and "ssl" not in k]  # TLS is off by default: its example lines turn it on
    s = parse_text("\n".join(lines) + "\n")
    d = BrokerSettings()
    assert s == BrokerSettings(data_dir=s.data_dir, **{"disk_free_limit": d.disk_free_limit})
