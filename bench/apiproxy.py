"""A counting front for the API server: every request pykubelet makes, by verb and resource.

pykubelet is pointed at this proxy (plain HTTP on 127.0.0.1) instead of the
API server; the proxy forwards each request over TLS with the node's own
client certificate, so the API server still authenticates and authorizes
the node, and streams the answer back (watches included). Counting here,
outside pykubelet, measures what the API server really receives whatever
client library pykubelet uses.
"""

from __future__ import annotations

import collections
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

# Hop-by-hop and length headers that aiohttp sets itself on each side.
_SKIPPED_HEADERS = {"host", "content-length", "transfer-encoding", "connection",
                    "content-encoding", "keep-alive"}


def classify(method: str, path: str, query: dict[str, str]) -> str:
    """``PATCH pods/status``, ``WATCH pods``, ``POST events``... from a request line."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return f"{method} {path}"
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] if rest else "?"
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verb = method
    if method == "GET":
        verb = "WATCH" if query.get("watch") in ("true", "1") else (
            "GET" if len(rest) > 1 else "LIST")
    return f"{verb} {resource}"


class CountingProxy:
    def __init__(self, upstream: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._ssl.load_cert_chain(str(cert_file), str(key_file))
        self.counts: collections.Counter[str] = collections.Counter()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    def snapshot(self) -> collections.Counter[str]:
        return collections.Counter(self.counts)

    async def start(self) -> int:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, listener).start()
        self.port = int(listener.getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        self.counts[classify(request.method, request.path, dict(request.query))] += 1
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in _SKIPPED_HEADERS and k.lower() != "authorization"}
        body = await request.read()
        try:
            upstream = await self._session.request(
                request.method, f"{self.upstream}{request.path_qs}", headers=headers,
                data=body or None, allow_redirects=False)
        except aiohttp.ClientError as err:
            return web.Response(status=503, text=f"proxy: {err}")
        response = web.StreamResponse(status=upstream.status, headers={
            k: v for k, v in upstream.headers.items() if k.lower() not in _SKIPPED_HEADERS})
        try:
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionResetError, aiohttp.ClientError):
            pass
        finally:
            upstream.release()
        return response


def write_kubeconfig(path: Path, port: int, user: str) -> Path:
    """A kubeconfig that sends pykubelet to the proxy (the proxy holds the credentials)."""
    config: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": user, "user": {}}],
        "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": user}}],
        "current-context": "proxy",
    }
    path.write_text(yaml.safe_dump(config))
    return path


__all__ = ["CountingProxy", "classify", "write_kubeconfig"]
