"""Prometheus endpoints of the kubelet servers (``/metrics/probes`` for now).

Upstream serves each family of metrics from its own registry on its own path,
so scrapers can pick what they pay for; the same split is kept here. The
read-only port serves them as upstream does, and the authenticated 10250
server will too.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def registry_route(path: str, registry: CollectorRegistry) -> web.RouteDef:
    """Serve ``registry`` in the Prometheus text format at ``path``."""

    async def scrape(_: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    return web.get(path, scrape)
