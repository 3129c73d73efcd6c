"""WebSocket ``v5.channel.k8s.io`` exec/attach, translated to the runtime's SPDY streams.

Newer clients and API servers speak the WebSocket channel protocol v5 (v4
plus a "close stdin" signal on channel 255). containerd's streaming server
only knows WebSocket up to v4 and SPDY, and v4 cannot carry the half-close
that ``kubectl exec`` relies on to end ``cat``-like commands. So, as
upstream's ``StreamTranslatorHandler`` does, the kubelet ends the WebSocket
itself and opens the session to the runtime in SPDY, with the remote command
protocol v4 streams: ``error``, ``stdin``, ``stdout``, ``stderr``, ``resize``.

Channels map one to one: 0 stdin, 1 stdout, 2 stderr, 3 the final status
(a JSON ``metav1.Status``), 4 terminal resizes; ``[255, 0]`` closes stdin.
Either side closing ends the other, which releases the runtime's session.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import yarl
from aiohttp import WSMsgType, web

from pykubelet.server.spdy import SpdySession, SpdyStream
from pykubelet.server.streaming import StreamOptions, open_stream
from pykubelet.util import klog

V5_PROTOCOL: Final = "v5.channel.k8s.io"
SPDY_REMOTECOMMAND_V4: Final = "v4.channel.k8s.io"

STDIN: Final = 0
STDOUT: Final = 1
STDERR: Final = 2
ERROR: Final = 3
RESIZE: Final = 4
CLOSE: Final = 255

_SUCCESS: Final = b'{"metadata":{},"status":"Success"}'
_LOST: Final = (b'{"metadata":{},"status":"Failure","message":"the connection to the container '
                b'runtime was lost","reason":"InternalError","code":500}')
_HANDSHAKE_TIMEOUT: Final = 30.0


def wants_v5(request: web.Request) -> bool:
    """A WebSocket upgrade that offers ``v5.channel.k8s.io`` (upstream's stream-close check)."""
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return False
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    return V5_PROTOCOL in offered


class TranslationError(Exception):
    """The runtime would not take the SPDY session."""


async def _spdy_upgrade(location: str) -> SpdySession:
    url = yarl.URL(location)
    reader, writer = await open_stream(location)
    request = (f"POST {url.raw_path_qs} HTTP/1.1\r\nHost: {url.raw_authority}\r\n"
               f"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
               f"X-Stream-Protocol-Version: {SPDY_REMOTECOMMAND_V4}\r\n"
               f"Content-Length: 0\r\n\r\n")
    try:
        writer.write(request.encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HANDSHAKE_TIMEOUT)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in f"{status_line} ":
            raise TranslationError(f"the runtime refused the stream: {status_line}")
        headers = {name.strip().lower(): value.strip() for name, _, value in
                   (line.partition(":") for line in lines if line)}
        negotiated = headers.get("x-stream-protocol-version", "")
        if negotiated != SPDY_REMOTECOMMAND_V4:
            raise TranslationError(f"the runtime negotiated {negotiated!r}, not "
                                   f"{SPDY_REMOTECOMMAND_V4}")
    except BaseException:
        writer.close()
        raise
    session = SpdySession(reader, writer)
    session.start()
    return session


async def translate(request: web.Request, location: str,
                    options: StreamOptions) -> web.StreamResponse:
    """Serve a v5 WebSocket exec/attach from the runtime's SPDY streams at ``location``."""
    try:
        session = await _spdy_upgrade(location)
    except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError,
            asyncio.LimitOverrunError, TranslationError) as err:
        klog.error("Error while proxying request", err)
        return web.Response(status=500, text=f"error dialing backend: {err}",
                            content_type="text/plain")
    try:
        # The runtime waits for exactly the streams the session was created with.
        error = await session.open_stream({"streamType": "error"})
        stdin = await session.open_stream({"streamType": "stdin"}) if options.stdin else None
        stdout = await session.open_stream({"streamType": "stdout"}) if options.stdout else None
        stderr = await session.open_stream({"streamType": "stderr"}) if options.stderr else None
        resize = await session.open_stream({"streamType": "resize"}) if options.tty else None

        ws = web.WebSocketResponse(protocols=[V5_PROTOCOL], max_msg_size=16 * 1024 * 1024)
        await ws.prepare(request)
        await _pump(ws, session, error, stdin, stdout, stderr, resize)
        return ws
    finally:
        await session.close()


async def _pump(ws: web.WebSocketResponse, session: SpdySession, error: SpdyStream,
                stdin: SpdyStream | None, stdout: SpdyStream | None,
                stderr: SpdyStream | None, resize: SpdyStream | None) -> None:
    async def to_client(stream: SpdyStream, channel: int) -> None:
        while (data := await stream.read()) is not None:
            await ws.send_bytes(bytes([channel]) + data)

    async def status() -> bytes:
        collected = b""
        while (data := await error.read()) is not None:
            collected += data
        return collected

    async def from_client() -> None:
        async for message in ws:
            if message.type != WSMsgType.BINARY or not message.data:
                continue
            channel, payload = message.data[0], message.data[1:]
            if channel == STDIN and stdin is not None:
                await stdin.write(payload)
            elif channel == RESIZE and resize is not None:
                await resize.write(payload if payload.endswith(b"\n") else payload + b"\n")
            elif channel == CLOSE and payload[:1] == bytes([STDIN]) and stdin is not None:
                await stdin.close()

    outputs: list[asyncio.Future[None]] = [
        asyncio.ensure_future(to_client(s, c))
        for s, c in ((stdout, STDOUT), (stderr, STDERR)) if s is not None]
    status_task: asyncio.Future[bytes] = asyncio.ensure_future(status())
    client_task: asyncio.Future[None] = asyncio.ensure_future(from_client())
    finished: asyncio.Future[list[object]] = asyncio.ensure_future(
        asyncio.gather(status_task, *outputs))
    waited: set[asyncio.Future[object]] = {finished, client_task}  # type: ignore[arg-type]
    try:
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if finished.done() and not finished.cancelled() and finished.exception() is None:
            result = status_task.result()
            if not result:
                # No status: a clean end is success, a broken session is not.
                result = _SUCCESS if error.reset_code is None else _LOST
            with contextlib.suppress(ConnectionError):
                await ws.send_bytes(bytes([ERROR]) + result)
    finally:
        for task in (client_task, finished, status_task, *outputs):
            task.cancel()  # type: ignore[attr-defined]
        await asyncio.gather(client_task, finished, return_exceptions=True)
        with contextlib.suppress(ConnectionError):
            await ws.close()


__all__ = ["V5_PROTOCOL", "translate", "wants_v5"]
