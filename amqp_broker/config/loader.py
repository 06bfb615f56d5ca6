"""Find and read rabbitmq.conf, then apply command-line overrides: the IO edge of config.

The server's CLI calls ``load_settings(path, overrides=...)`` once at start-up. The file is the
``path`` argument (the ``--config`` flag), else ``$RABBITMQ_CONFIG_FILE``, else none (defaults).
As with RabbitMQ, ``$RABBITMQ_CONFIG_FILE`` may omit the ``.conf`` extension. Overrides
(``--port``, ``--host``, ``--data-dir`` ...) are field names of ``BrokerSettings`` and win over
the file.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

from .lexer import ConfigError, ConfigProblem
from .model import BrokerSettings
from .schema import parse_text

__all__ = ["CONFIG_ENV", "config_path", "load", "load_settings"]

CONFIG_ENV = "RABBITMQ_CONFIG_FILE"
_FIELDS = frozenset(f.name for f in dataclasses.fields(BrokerSettings))


def config_path(path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The file to read: ``path``, else $RABBITMQ_CONFIG_FILE (``.conf`` added if needed), else None."""
    if path is not None:
        return Path(path).expanduser()
    env = (os.environ if environ is None else environ).get(CONFIG_ENV)
    if not env:
        return None
    found = Path(env).expanduser()
    if not found.suffix and not found.exists() and found.with_suffix(".conf").exists():
        return found.with_suffix(".conf")
    return found


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError([ConfigProblem(str(path), 0, "", f"cannot read the configuration file: {exc.strerror or exc}")]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError([ConfigProblem(str(path), line, "", "the file is not valid UTF-8")]) from None


def load_settings(path: str | os.PathLike[str] | None = None, *, overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> BrokerSettings:
    """Settings from the config file (if any) with ``overrides`` applied on top.

    Raises ``ConfigError`` (a ``ValueError``) whose text names the file, line, key and what is
    expected; the CLI should print it and exit non-zero. Unknown override names are a
    ``TypeError`` (a programming error, not a user one).
    """
    unknown = sorted(set(overrides or ()) - _FIELDS)
    if unknown:
        raise TypeError(f"unknown settings override(s): {', '.join(unknown)}")
    found = config_path(path, environ)
    if found is None:
        settings = BrokerSettings()
    else:
        settings = dataclasses.replace(parse_text(_read(found), str(found)), config_file=found)
    extra = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "data_dir" in extra:
        extra["data_dir"] = Path(extra["data_dir"]).expanduser()
    return dataclasses.replace(settings, **extra)


def load(path: str | os.PathLike[str] | None) -> BrokerSettings:
    """``load_settings(path)``: the name the CLI already calls (``config.load(path)``)."""
    return load_settings(path)
