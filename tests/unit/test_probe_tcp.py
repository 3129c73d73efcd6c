"""TCP probes against a real listener and a closed port on 127.0.0.1."""

from __future__ import annotations

import asyncio

from pykubelet.container import ProbeResult
from pykubelet.probe.tcp import tcp_probe
from tests.unit.loopback import closed_port


async def test_open_port_is_healthy() -> None:
    accepted = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await tcp_probe("127.0.0.1", port, timeout=1) == (ProbeResult.SUCCESS, "")
        await asyncio.wait_for(accepted.wait(), 1)
    finally:
        server.close()
        await server.wait_closed()


async def test_closed_port_fails_with_the_dial_error() -> None:
    port = closed_port()
    result, output = await tcp_probe("127.0.0.1", port, timeout=1)
    assert result is ProbeResult.FAILURE
    assert output == f"dial tcp 127.0.0.1:{port}: connect: connection refused"
