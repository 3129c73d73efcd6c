"""The kubelet's read-only HTTP port (upstream ``server.go``, ``--read-only-port``).

Tools such as ``curl localhost:10255/pods`` and monitoring agents read the
pods a node runs, with their live statuses, as a v1 ``PodList``; the port
also carries the health endpoints. Nothing here changes state, which is why
it may be served without authentication. ``start_http_server`` is the one
place that binds sockets, shared with any later server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from aiohttp import web
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import to_dict
from pykubelet.server.healthz import HealthChecker, healthz_routes
from pykubelet.util import klog


class PodProvider(Protocol):
    """The pods bound to this node, each carrying its latest status."""

    def get_pods(self) -> list[V1Pod]: ...


class ServerBindError(OSError):
    """The HTTP server could not listen on its address."""


def encode_pod_list(pods: Sequence[V1Pod]) -> dict[str, Any]:
    """The camelCase ``PodList`` document clients of ``/pods`` decode."""
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {},
            "items": [to_dict(pod) for pod in pods]}


def readonly_routes(pods: PodProvider, checks: Sequence[HealthChecker]) -> list[web.RouteDef]:
    async def list_pods(_: web.Request) -> web.Response:
        body = json.dumps(encode_pod_list(pods.get_pods()))
        return web.Response(text=body, content_type="application/json")

    return [web.get("/pods", list_pods), web.get("/pods/", list_pods), *healthz_routes(checks)]


async def start_http_server(host: str, port: int,
                            routes: Iterable[web.RouteDef]) -> web.AppRunner:
    """Serve ``routes`` on ``host:port``; the caller stops it with ``await runner.cleanup()``."""
    app = web.Application()
    app.add_routes(list(routes))
    # Access logs would flood the kubelet log with probe and scrape traffic.
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as err:
        await runner.cleanup()
        raise ServerBindError(err.errno, f"failed to listen on {address}: "
                                         f"{err.strerror or err}") from err
    klog.info("Starting to listen", address=address)
    return runner
