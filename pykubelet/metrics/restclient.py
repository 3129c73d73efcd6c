"""``rest_client_*``: the kubelet's calls to the API server, counted as client-go counts them.

The kubelet's API clients are kubernetes_asyncio ``ApiClient`` objects; every
request they make goes through one ``request`` method of their REST client,
which ``instrument_api_client`` wraps to count it by status code, method and
host (``rest_client_requests_total``) and time it by verb and host
(``rest_client_request_duration_seconds``). Failed connections count under
the code ``<error>``, as client-go labels them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from pykubelet.metrics import REST_CLIENT_REQUEST_DURATION, REST_CLIENT_REQUESTS

_MARK = "_pykubelet_instrumented"


def instrument_api_client(api_client: Any) -> None:
    """Count every request of ``api_client`` (idempotent; None is ignored)."""
    rest = getattr(api_client, "rest_client", None)
    if rest is None or getattr(rest, _MARK, False):
        return
    original: Callable[..., Awaitable[Any]] = rest.request

    async def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        host = urlsplit(url).netloc
        started = time.monotonic()
        code = "<error>"
        try:
            response = await original(method, url, *args, **kwargs)
            code = str(getattr(response, "status", "<error>"))
            return response
        except Exception as err:
            status = getattr(err, "status", None)
            if status:
                code = str(status)
            raise
        finally:
            REST_CLIENT_REQUESTS.labels(code, method.upper(), host).inc()
            REST_CLIENT_REQUEST_DURATION.labels(method.upper(), host).observe(
                time.monotonic() - started)

    rest.request = request
    setattr(rest, _MARK, True)


__all__ = ["instrument_api_client"]
