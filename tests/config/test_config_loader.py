"""Loading from a path or $RABBITMQ_CONFIG_FILE, overrides winning over the file, file errors."""

from pathlib import Path

import pytest

from amqp_broker.config import BrokerSettings, ConfigError, config_path, load, load_settings


def _write(tmp_path: Path, text: str, name: str = "rabbitmq.conf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_no_path_no_env_gives_defaults():
    s = load_settings(None, environ={})
    assert s.port == 5672 and s.config_file is None


def test_path_argument(tmp_path):
    path = _write(tmp_path, "listeners.tcp.default = 5999\nheartbeat = 7\n")
    s = load_settings(path, environ={})
    assert (s.port, s.heartbeat, s.config_file) == (5999, 7, path)
    assert load(path) == s


def test_env_var_is_used_without_a_path(tmp_path):
    path = _write(tmp_path, "heartbeat = 9\n")
    assert load_settings(environ={"RABBITMQ_CONFIG_FILE": str(path)}).heartbeat == 9


def test_env_var_may_omit_the_extension(tmp_path):
    path = _write(tmp_path, "heartbeat = 11\n")
    env = {"RABBITMQ_CONFIG_FILE": str(tmp_path / "rabbitmq")}
    assert config_path(None, env) == path
    assert load_settings(environ=env).heartbeat == 11


def test_path_argument_beats_env_var(tmp_path):
    flag = _write(tmp_path, "heartbeat = 1\n", "flag.conf")
    env = _write(tmp_path, "heartbeat = 2\n", "env.conf")
    assert load_settings(flag, environ={"RABBITMQ_CONFIG_FILE": str(env)}).heartbeat == 1


def test_overrides_win_over_the_file(tmp_path):
    path = _write(tmp_path, "listeners.tcp.default = 127.0.0.1:5999\ndata_dir = /srv/a\nheartbeat = 3\n")
    s = load_settings(path, overrides={"port": 0, "data_dir": str(tmp_path / "d"), "host": None}, environ={})
    assert (s.host, s.port, s.data_dir, s.heartbeat) == ("127.0.0.1", 0, tmp_path / "d", 3)
    assert isinstance(s, BrokerSettings)


def test_unknown_override_is_a_programming_error():
    with pytest.raises(TypeError, match="prot"):
        load_settings(overrides={"prot": 1}, environ={})


def test_missing_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nope.conf"
    with pytest.raises(ConfigError, match=r"nope\.conf: cannot read the configuration file"):
        load_settings(missing, environ={})


def test_errors_carry_the_real_path(tmp_path):
    path = _write(tmp_path, "# ok\nheartbeat = abc\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert str(info.value) == f"{path}:2: heartbeat: expected an integer from 0 to 65535 (seconds), got 'abc'"


def test_not_utf8_is_an_error_with_its_line(tmp_path):
    path = tmp_path / "rabbitmq.conf"
    path.write_bytes(b"heartbeat = 1\ndefault_pass = \xff\xfe\n")
    with pytest.raises(ConfigError, match=r":2: the file is not valid UTF-8"):
        load_settings(path, environ={})


def test_utf8_values(tmp_path):
    path = _write(tmp_path, "default_pass = pässwörd\n")
    assert load_settings(path, environ={}).default_pass == "pässwörd"


def test_the_cli_builds_broker_settings_with_flags_winning(tmp_path):
    from amqp_broker.cli import broker as cli

    path = _write(tmp_path, "listeners.tcp.default = 127.0.0.1:5999\nheartbeat = 7\n")
    settings, _level = cli.build_settings(["--config", str(path), "--port", "0"])
    assert isinstance(settings, BrokerSettings)
    assert (settings.host, settings.port, settings.heartbeat) == ("127.0.0.1", 0, 7)
