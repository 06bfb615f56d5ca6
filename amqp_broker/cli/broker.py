"""The `amqp-broker` command: parse flags, build Settings, run the node until SIGTERM or Ctrl-C.

Entry point named in pyproject (`amqp_broker.cli.broker:main`); `python -m amqp_broker` calls it too.
A rabbitmq.conf-style file (`--config`) is read by `amqp_broker.config` when that module exists;
flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
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
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _load_config(path: Path | None) -> Settings:
    if path is None:
        return Settings()
    try:
        from amqp_broker import config  # written by another engineer; optional until it lands
    except ImportError:
        _log.warning("config support not available yet; ignoring %s", path)
        return Settings()
    return config.load(path)


def build_settings(argv: list[str] | None = None) -> tuple[Settings, str]:
    args = _parse_args(argv)
    settings = _load_config(args.config)
    overrides: dict = {}
    if args.port is not None:
        overrides["port"] = args.port
    if args.host is not None:
        overrides["host"] = args.host
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    return dataclasses.replace(settings, **overrides), args.log_level


async def _run(settings: Settings) -> None:
    from amqp_broker.server import run_node

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope)
            await run_node(settings)
            nursery.cancel_scope.cancel()


async def _stop_on_signal(signals, scope: trio.CancelScope) -> None:
    async for signum in signals:
        _log.info("received %s, stopping", signal.Signals(signum).name)
        scope.cancel()
        return


def main(argv: list[str] | None = None) -> int:
    settings, level = build_settings(argv)
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trio.run(_run, settings)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
