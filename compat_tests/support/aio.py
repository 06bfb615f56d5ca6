"""Run an aio-pika coroutine from a plain (non-async) pytest test.

The project runs pytest with trio_mode off and without pytest-asyncio, so aio-pika tests call
`run_aio(url, body)`: it connects, awaits `body(connection)` under a timeout and always closes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import aio_pika


def run_aio(url: str, body: Callable[[aio_pika.abc.AbstractConnection], Awaitable[Any]],
            timeout: float = 20.0) -> Any:
    async def _main():
        conn = await aio_pika.connect(url)
        try:
            return await asyncio.wait_for(body(conn), timeout)
        finally:
            await conn.close()

    return asyncio.run(_main())
