"""The TCP check (upstream ``pkg/probe/tcp``): healthy when a connection opens in time.

Nothing is sent: opening and closing the connection is the whole check. Like
upstream's probe dialer the socket is closed with a short linger so that
frequent probes do not pile up TIME_WAIT sockets on the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct

from pykubelet.container import ProbeResult
from pykubelet.probe import join_host_port
from pykubelet.util import klog

# SO_LINGER on, 1 second: upstream's probe dialer setting.
_LINGER = struct.pack("ii", 1, 1)


def dial_error_text(address: str, err: BaseException) -> str:
    """Go's ``dial tcp <addr>: ...`` wording for a failed connect, which users search for."""
    if isinstance(err, TimeoutError):
        return f"dial tcp {address}: i/o timeout"
    if isinstance(err, OSError) and err.errno:
        # asyncio words refusals as "Connect call failed"; the errno text is what Go prints.
        return f"dial tcp {address}: connect: {os.strerror(err.errno).lower()}"
    return f"dial tcp {address}: {err}"


async def tcp_probe(host: str, port: int, timeout: float) -> tuple[ProbeResult, str]:
    """Open a TCP connection to ``host:port`` within ``timeout`` seconds."""
    address = join_host_port(host, port)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as err:
        # Refused, unreachable and timed out all mean "not healthy", not "errored".
        return ProbeResult.FAILURE, dial_error_text(address, err)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER)
    writer.close()
    try:
        await writer.wait_closed()
    except OSError as err:
        klog.error("Unexpected error closing TCP probe socket", err, address=address)
    return ProbeResult.SUCCESS, ""


__all__ = ["dial_error_text", "tcp_probe"]
