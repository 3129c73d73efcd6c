"""``/pods`` as a v1 ``PodList``, and the one place that binds the kubelet's sockets.

Tools such as ``curl localhost:10255/pods`` and monitoring agents read the
pods a node runs, with their live statuses, as a v1 ``PodList``;
``encode_pod_list`` is that document for both the read-only and the
authenticated server (``pykubelet.server.server``). ``start_http_server``
binds every server: healthz, read-only, and the HTTPS kubelet API.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from aiohttp import web
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import to_dict
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


async def start_http_server(host: str, port: int,
                            routes: Iterable[web.RouteDef] | web.Application,
                            ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Serve ``routes`` (or an application) on ``host:port``; stop with ``runner.cleanup()``.

    A client that disconnects cancels its handler, which is what releases a
    followed log or a proxied exec stream at once.
    """
    if isinstance(routes, web.Application):
        app = routes
    else:
        app = web.Application()
        app.add_routes(list(routes))
    # Access logs would flood the kubelet log with probe and scrape traffic.
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    except OSError as err:
        await runner.cleanup()
        raise ServerBindError(err.errno, f"failed to listen on {address}: "
                                         f"{err.strerror or err}") from err
    klog.info("Starting to listen", address=address)
    return runner
