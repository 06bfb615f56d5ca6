"""The `amqp-broker` command: parse flags, build Settings, run the node until SIGTERM or Ctrl-C.

Entry point named in pyproject (`amqp_broker.cli.broker:main`); `python -m amqp_broker` calls it too.
A rabbitmq.conf-style file (`--config`, or $RABBITMQ_CONFIG_FILE) is read by `amqp_broker.config`;
flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import signal
import sys
from pathlib import Path

import trio

from amqp_broker.settings import Settings, default_data_dir

_log = logging.getLogger("amqp_broker")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="amqp-broker", description="AMQP 0-9-1 broker (RabbitMQ compatible)")
    p.add_argument("--port", type=int, default=None, help="AMQP port (default 5672; 0 picks a free one)")
    p.add_argument("--host", default=None, help="address to bind (default 0.0.0.0)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help=f"where durable state lives (default $AMQP_BROKER_DATA_DIR or {default_data_dir()})")
    p.add_argument("--config", type=Path, default=None, help="rabbitmq.conf-style file")
    p.add_argument("--management-port", type=int, default=None,
                   help="management HTTP API port (default 15672; 0 = any free port; -1 = off)")
    p.add_argument("--node-name", default=None,
                   help="this node's name, name@host (default $RABBITMQ_NODENAME, else node_name "
                        "in the config, else rabbit@<short host name>)")
    p.add_argument("--log-level", default=None,
                   help="debug, info, warning, error (default: log.* in the config, else info)")
    return p.parse_args(argv)


def build_settings(argv: list[str] | None = None) -> tuple[Settings, str]:
    """Settings from --config (or $RABBITMQ_CONFIG_FILE) with the command-line flags on top."""
    from amqp_broker.config import load_settings

    args = _parse_args(argv)
    overrides = {"port": args.port, "host": args.host, "data_dir": args.data_dir}
    settings = load_settings(args.config, overrides=overrides)
    node = args.node_name or os.environ.get("RABBITMQ_NODENAME") or settings.node_name
    if node:
        settings = dataclasses.replace(settings, node_name=node)
    if args.management_port is not None:
        mgmt = dataclasses.replace(settings.management, port=args.management_port)
        settings = dataclasses.replace(settings, management=mgmt)
    return settings, args.log_level


async def _run(settings: Settings) -> None:
    from amqp_broker.server.lifecycle import run_node_process

    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, stop, nursery.cancel_scope)
            await run_node_process(settings, stop=stop)
            nursery.cancel_scope.cancel()


async def _stop_on_signal(signals, stop: trio.Event, scope: trio.CancelScope) -> None:
    """First signal: graceful stop (close clients, flush the journal). Second: stop now."""
    async for signum in signals:
        if not stop.is_set():
            _log.info("received %s, stopping", signal.Signals(signum).name)
            stop.set()
        else:
            scope.cancel()
            return


# The collector's first generation threshold for the broker process. Quorum queues keep many
# small long-lived objects per message (fifo header, body, Raft entry) and allocate several
# per publish, so with CPython's default (700) the collector runs every few dozen messages and
# walks ever more survivors: ~8% of the main thread in a publish+consume benchmark, ~3x less
# with this threshold. A process-wide setting, so it belongs here, not in a library module.
_GC_GEN0 = 20000


def _tune_gc() -> None:
    """Raise the first GC threshold to `_GC_GEN0` unless it is higher already or disabled (0)."""
    gen0, gen1, gen2 = gc.get_threshold()
    if 0 < gen0 < _GC_GEN0:
        gc.set_threshold(_GC_GEN0, gen1, gen2)


def _setup_logging(settings: Settings, flag: str | None) -> None:
    """Console logging (stderr; the start-up line says where the broker listens), plus the
    log.file of the config if it names one."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    log_cfg = getattr(settings, "log", None)
    to_level = getattr(log_cfg, "python_level", None)
    if flag is not None:
        level = getattr(logging, flag.upper(), logging.INFO)
    elif log_cfg is not None and to_level is not None:
        level = to_level(log_cfg.console_level)
    else:
        level = logging.INFO
    root = logging.getLogger()
    root.setLevel(min(level, logging.INFO) if flag is None else level)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    console.setLevel(level)
    root.addHandler(console)
    if log_cfg is not None and log_cfg.file and to_level is not None:
        file_handler = logging.FileHandler(log_cfg.file)
        file_handler.setFormatter(fmt)
        file_handler.setLevel(to_level(log_cfg.file_level))
        root.addHandler(file_handler)


def _tls_problem(settings: Settings) -> str | None:
    """Why a TLS listener's certificate, key or CA file cannot be used, before the node opens
    anything (the node builds the same contexts again when it starts serving)."""
    from amqp_broker.tls import TlsError, server_context

    wanted = []
    if getattr(settings, "ssl_listeners", ()):
        wanted.append(("ssl_options", settings.ssl_options))
    https = getattr(settings, "management_ssl", None)
    if https is not None:
        wanted.append(("management.ssl", https.tls))
    for prefix, options in wanted:
        try:
            server_context(options)
        except TlsError as err:
            return f"{prefix}: {err}"
    return None


def main(argv: list[str] | None = None) -> int:
    from amqp_broker.config import ConfigError

    try:
        settings, level = build_settings(argv)
    except ConfigError as err:
        print(f"amqp-broker: {err}", file=sys.stderr)
        return 2
    problem = _tls_problem(settings)
    if problem:
        print(f"amqp-broker: {problem}", file=sys.stderr)
        return 2
    _setup_logging(settings, level)
    _tune_gc()
    from amqp_broker.server.node import storage_failure

    try:
        trio.run(_run, settings)
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:
        if storage_failure(group) is None:
            raise
        return 1  # the node logged the storage failure it stopped for
    return 0


if __name__ == "__main__":
    sys.exit(main())
