"""Local servers for handler tests: an aiohttp app on a free 127.0.0.1 port, a closed port."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1 and yield its port; stopped on exit."""
    runner = web.AppRunner(app)
    await runner.setup()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    await web.SockSite(runner, listener).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        await runner.cleanup()


def closed_port() -> int:
    """A port nothing listens on (bound, read and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
