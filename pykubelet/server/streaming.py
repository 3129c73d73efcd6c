"""exec, attach and port-forward: proxying an upgraded connection to the runtime.

The kubelet does not run the streams itself. It asks the runtime for a
one-time URL on the runtime's streaming server (CRI ``Exec`` / ``Attach`` /
``PortForward``), then hands the client's connection over to that URL, as
upstream's ``UpgradeAwareHandler`` does: the client's upgrade request (SPDY/3.1
from the API server, or a WebSocket channel protocol) is replayed to the
runtime, the runtime's ``101 Switching Protocols`` answer is relayed, and from
then on bytes are copied both ways until either side closes. Whatever the
runtime negotiates (``v4.channel.k8s.io``, ``portforward.k8s.io``...) is
therefore what the client gets.

Closing either side closes the other: a client that goes away releases the
runtime's stream (containerd ends the session when its connection drops).
Both directions are flow-controlled, so a slow reader stalls its writer
instead of filling memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import yarl
from aiohttp import web
from multidict import CIMultiDict

from pykubelet.server.plaintext import plain_text
from pykubelet.util import klog

# Request headers never replayed to the runtime: its streaming URL is the
# credential, and the caller's own token must not travel further.
_DROPPED_REQUEST_HEADERS: Final = frozenset({
    "host", "authorization", "proxy-authorization", "content-length", "transfer-encoding",
    "keep-alive", "proxy-connection", "te", "trailer"})
_MAX_HEAD_BYTES: Final = 64 * 1024
_MAX_ERROR_BODY: Final = 1024 * 1024
_CONNECT_TIMEOUT: Final = 30.0
_CHUNK: Final = 64 * 1024
# Bytes from the client held for the runtime before the client is paused.
_CLIENT_BUFFER_LIMIT: Final = 256 * 1024


class StreamOptionsError(ValueError):
    """The query of an exec/attach/port-forward request is unusable (answered with 400)."""


@dataclass(frozen=True)
class StreamOptions:
    """Which streams an exec or attach session carries (upstream ``remotecommand.Options``)."""

    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "") in ("1", "true", "True")


# The query parameter names the kubelet's exec/attach take (upstream api.Exec*Param):
# the API server turns kubectl's stdin/stdout/stderr into these.
STDIN_PARAM: Final = "input"
STDOUT_PARAM: Final = "output"
STDERR_PARAM: Final = "error"
TTY_PARAM: Final = "tty"


def stream_options(query: Mapping[str, str]) -> StreamOptions:
    """Parse ``input``/``output``/``error``/``tty`` as upstream ``NewOptions``."""
    tty = _flag(query, TTY_PARAM)
    stdin = _flag(query, STDIN_PARAM)
    stdout = _flag(query, STDOUT_PARAM)
    stderr = _flag(query, STDERR_PARAM)
    if tty and stderr:
        # A terminal has one output stream; upstream bypasses stderr the same way.
        klog.v(4).info("Access to exec with tty and stderr is not supported, bypassing stderr")
        stderr = False
    if not (stdin or stdout or stderr):
        raise StreamOptionsError("you must specify at least 1 of stdin, stdout, stderr")
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


def is_websocket_request(request: web.Request) -> bool:
    return (request.headers.get("Upgrade", "").lower() == "websocket"
            and "upgrade" in request.headers.get("Connection", "").lower())


def port_forward_ports(request: web.Request) -> list[int]:
    """The ``port`` query values of a WebSocket port-forward (SPDY names ports per stream)."""
    if not is_websocket_request(request):
        return []
    values = request.query.getall("port", [])
    if not values:
        raise StreamOptionsError('query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        if not value:
            raise StreamOptionsError('query parameter "port" cannot be empty')
        for part in value.split(","):
            try:
                port = int(part, 10)
            except ValueError:
                raise StreamOptionsError(f'unable to parse "{value}" as a port') from None
            if not 0 <= port <= 65535 or not part.isdigit():
                raise StreamOptionsError(f'unable to parse "{value}" as a port')
            if port < 1:
                raise StreamOptionsError(f'port "{value}" must be > 0')
            ports.append(port)
    return ports


def is_upgrade_request(request: web.Request) -> bool:
    connection = [token.strip().lower()
                  for token in request.headers.get("Connection", "").split(",")]
    return "upgrade" in connection and bool(request.headers.get("Upgrade"))


class _UpgradedResponse(web.StreamResponse):
    """A ``101`` whose body is the raw upgraded stream (no chunking, no length)."""

    _length_check = False


class _ClientBytes:
    """Receives what the client sends after the upgrade (an aiohttp payload parser).

    aiohttp hands every byte read from the upgraded connection to
    ``feed_data``; reading from the transport pauses while more than
    ``_CLIENT_BUFFER_LIMIT`` bytes wait for the runtime.
    """

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._buffered = 0
        self._paused = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if data:
            self._chunks.put_nowait(bytes(data))
            self._buffered += len(data)
            if self._buffered > _CLIENT_BUFFER_LIMIT and not self._paused:
                self._paused = True
                self._protocol.pause_reading()
        return False, b""

    def feed_eof(self) -> None:
        self._chunks.put_nowait(None)

    async def read(self) -> bytes | None:
        data = await self._chunks.get()
        if data is not None:
            self._buffered -= len(data)
            if self._paused and self._buffered <= _CLIENT_BUFFER_LIMIT // 2:
                self._paused = False
                self._protocol.resume_reading()
        return data


def _request_head(request: web.Request, location: yarl.URL) -> bytes:
    lines = [f"{request.method} {location.raw_path_qs} HTTP/1.1",
             f"Host: {location.raw_authority}"]
    for name, value in request.headers.items():
        if name.lower() in _DROPPED_REQUEST_HEADERS:
            continue
        if "\r" in value or "\n" in value:
            continue
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_head(head: bytes) -> tuple[int, str, CIMultiDict[str]]:
    text = head.decode("latin-1").rstrip("\r\n")
    status_line, *header_lines = text.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"malformed status line from the streaming server: {status_line!r}")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in header_lines:
        name, sep, value = line.partition(":")
        if sep:
            headers.add(name.strip(), value.strip())
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


async def _read_error_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    length = headers.get("Content-Length")
    try:
        if length is not None:
            return await reader.readexactly(min(int(length), _MAX_ERROR_BODY))
        return await reader.read(_MAX_ERROR_BODY)
    except (asyncio.IncompleteReadError, ValueError, OSError):
        return b""


async def open_stream(location: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP (or TLS) connection to the host of a streaming URL."""
    url = yarl.URL(location)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"unsupported streaming URL {location!r}")
    context: ssl.SSLContext | None = None
    if url.scheme == "https":
        # The runtime's streaming server is local and self-signed when it uses TLS.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    port = url.port or (443 if url.scheme == "https" else 80)
    return await asyncio.wait_for(asyncio.open_connection(url.host, port, ssl=context),
                                  _CONNECT_TIMEOUT)


async def proxy_upgrade(request: web.Request, location: str,
                        on_close: Callable[[], Awaitable[None]] | None = None,
                        ) -> web.StreamResponse:
    """Replay ``request`` to ``location`` and, once upgraded, splice the two connections."""
    if not is_upgrade_request(request):
        return plain_text(400, "Upgrade request required")
    url = yarl.URL(location)
    try:
        reader, writer = await open_stream(location)
    except (OSError, ValueError, TimeoutError) as err:
        klog.error("Error while proxying request", err, location=str(url.with_path("/")))
        return plain_text(500, f"error dialing backend: {err}")
    try:
        writer.write(_request_head(request, url))
        await writer.drain()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _CONNECT_TIMEOUT)
            status, reason, headers = _parse_head(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                TimeoutError, OSError) as err:
            klog.error("Error while proxying request", err)
            return plain_text(500, f"error reading the streaming server's response: {err}")
        if status != 101:
            body = await _read_error_body(reader, headers)
            response = web.Response(status=status, reason=reason or None, body=body)
            if "Content-Type" in headers:
                response.headers["Content-Type"] = headers["Content-Type"]
            return response

        upgraded = _UpgradedResponse(status=101, reason=reason or "Switching Protocols")
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "date", "server"):
                upgraded.headers.add(name, value)
        upgraded.force_close()
        await upgraded.prepare(request)
        client = _ClientBytes(request.protocol)
        request.protocol.set_parser(client)  # type: ignore[arg-type]
        await _splice(reader, writer, client, upgraded)
        return upgraded
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        if on_close is not None:
            await on_close()


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  client: _ClientBytes, response: web.StreamResponse) -> None:
    async def runtime_to_client() -> None:
        while data := await reader.read(_CHUNK):
            await response.write(data)

    async def client_to_runtime() -> None:
        # None: the client's connection is gone (aiohttp reports no half-close),
        # so the runtime's side is closed too, which ends its session.
        while (data := await client.read()) is not None:
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.ensure_future(runtime_to_client()),
             asyncio.ensure_future(client_to_runtime())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None and not isinstance(
                    task.exception(), ConnectionError | OSError):
                klog.error("Stream proxy failed", task.exception())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = [
    "STDERR_PARAM",
    "STDIN_PARAM",
    "STDOUT_PARAM",
    "StreamOptions",
    "StreamOptionsError",
    "is_upgrade_request",
    "is_websocket_request",
    "open_stream",
    "port_forward_ports",
    "proxy_upgrade",
    "stream_options",
]
