"""One API client as the kubelet uses it: rate limited, timed out, counted, re-keyable.

Upstream builds its clientsets from a ``rest.Config`` whose ``QPS`` / ``Burst``
put a token bucket in front of every request and whose ``Timeout`` bounds each
one. ``KubeletApiClient`` is ``kubernetes_asyncio``'s ``ApiClient`` with the
same two knobs, so the generated ``CoreV1Api(client)`` and friends work
unchanged on top of it. Two more things a long-running kubelet needs:

- ``use_client_certificate``: after the client certificate is rotated, new
  connections must present the new certificate and old ones must go (upstream
  closes every connection of the dialer), so the connection pool is swapped.
- ``close_all_connections``: what upstream does when heartbeats keep failing,
  in case a connection is stuck half-open.

A swapped-out pool is closed after a grace period, and the answers still being
streamed from it (watches) are broken first: closing an aiohttp pool does not
wake a reader blocked on a streamed body, so a watch would otherwise go silent
until its read timeout (minutes), and the kubelet would stop hearing of pods.

Every request is counted and timed in ``rest_client_requests_total`` and
``rest_client_request_duration_seconds`` (upstream's names), and counted in
``pykubelet_api_client_requests_total`` by client and resource, which is what
the benchmarks read.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from kubernetes_asyncio.client import ApiClient, ApiException
from kubernetes_asyncio.client.rest import RESTClientObject

from pykubelet.api.wellknown import go_arch, go_os, kubelet_version
from pykubelet.client.kubeconfig import KubeconfigError, RestConfig
from pykubelet.metrics import (
    API_CLIENT_REQUESTS,
    REST_CLIENT_REQUEST_DURATION,
    REST_CLIENT_REQUESTS,
)
from pykubelet.util import klog
from pykubelet.util.flowcontrol import TokenBucket

# Upstream logs client-side throttling once a wait gets this long.
THROTTLE_LOG_SECONDS = 1.0
# Old connection pools are closed this long after a swap, so in-flight requests finish.
OLD_POOL_GRACE_SECONDS = 30.0



def user_agent() -> str:
    """``pykubelet/v1.35.0+pykubelet-0.1.0 (linux/amd64)``: who is calling, for audit logs."""
    return f"pykubelet/{kubelet_version()} ({go_os()}/{go_arch()})"


def resource_of(path: str) -> str:
    """The resource a request path addresses: ``nodes/status``, ``leases``, ``pods``..."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        return parts[0] if parts else ""
    if len(parts) >= 3 and parts[0] == "namespaces":
        parts = parts[2:]
    if not parts:
        return "namespaces"
    resource = parts[0]
    if len(parts) >= 3:
        resource = f"{resource}/{parts[2]}"
    return resource


class KubeletApiClient(ApiClient):
    """An ``ApiClient`` with a token-bucket rate limit and a default request timeout."""

    def __init__(self, rest: RestConfig, *, name: str, qps: float, burst: int,
                 timeout: float | None = None) -> None:
        self.rest = rest.copy()
        try:
            super().__init__(configuration=self.rest.configuration)
        except (ssl.SSLError, OSError, ValueError) as err:
            raise KubeconfigError(rest.path, f"TLS set-up failed: {err}") from err
        self.name = name
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.user_agent = user_agent()
        self._host = urlsplit(self.rest.host).netloc
        self._retired: list[RESTClientObject] = []
        self._closers: set[asyncio.Task[None]] = set()
        # The streamed answers (watches) each pool serves, broken when it is retired.
        self._streams: weakref.WeakKeyDictionary[RESTClientObject, weakref.WeakSet[Any]] = (
            weakref.WeakKeyDictionary())

    @property
    def host(self) -> str:
        """The API server URL this client talks to."""
        return str(self.rest.host)

    async def request(self, method: str, url: str, query_params: Any = None,
                      headers: Any = None, post_params: Any = None, body: Any = None,
                      _preload_content: bool = True, _request_timeout: Any = None) -> Any:
        waited = await self.limiter.wait()
        if waited >= THROTTLE_LOG_SECONDS:
            klog.info("Waited before sending request due to client-side throttling",
                      client=self.name, waited=f"{waited:.3f}s", method=method, url=url)
        if _request_timeout is None and self.timeout:
            _request_timeout = self.timeout
        resource = resource_of(urlsplit(url).path)
        code = "<error>"
        started = time.monotonic()
        pool = self.rest_client  # the one super().request sends through
        try:
            response = await super().request(
                method, url, query_params=query_params, headers=headers,
                post_params=post_params, body=body, _preload_content=_preload_content,
                _request_timeout=_request_timeout)
            code = str(getattr(response, "status", 200))
            if not _preload_content:
                self._streams.setdefault(pool, weakref.WeakSet()).add(response)
            return response
        except ApiException as err:
            code = str(err.status)
            raise
        finally:
            REST_CLIENT_REQUESTS.labels(code=code, method=method, host=self._host).inc()
            REST_CLIENT_REQUEST_DURATION.labels(verb=method, host=self._host).observe(
                time.monotonic() - started)
            API_CLIENT_REQUESTS.labels(client=self.name, resource=resource, method=method,
                                       code=code).inc()

    def use_client_certificate(self, cert_file: str, key_file: str) -> None:
        """Present ``cert_file`` from now on; existing connections are dropped."""
        self.configuration.cert_file = cert_file
        self.configuration.key_file = key_file
        self.rest.cert_file, self.rest.key_file = cert_file, key_file
        self._swap_pool()

    def close_all_connections(self) -> None:
        """Drop every pooled connection; the next request dials afresh."""
        self._swap_pool()

    def _swap_pool(self) -> None:
        old = self.rest_client
        self.rest_client = RESTClientObject(self.configuration)
        task = asyncio.get_running_loop().create_task(self._close_later(old))
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    async def _close_later(self, old: RESTClientObject) -> None:
        self._retired.append(old)
        await asyncio.sleep(OLD_POOL_GRACE_SECONDS)
        await self._close_retired(old)

    async def _close_retired(self, old: RESTClientObject) -> None:
        if old in self._retired:
            self._retired.remove(old)
            for stream in list(self._streams.pop(old, ())):
                # Its reader gets the error at once (and a watch resumes on a new pool).
                stream.content.set_exception(
                    ConnectionResetError("the API client's old connections were closed"))
                stream.close()
            await old.close()

    async def close(self) -> None:
        for task in list(self._closers):
            task.cancel()
        for old in list(self._retired):
            await self._close_retired(old)
        await super().close()


def raise_for_status(response: Any, body: bytes = b"") -> None:
    """Raise ``ApiException`` for a raw (``_preload_content=False``) response that failed."""
    status = int(getattr(response, "status", 200))
    if 200 <= status <= 299:
        return
    error = ApiException(status=status, reason=str(getattr(response, "reason", "") or ""))
    error.body = body
    raise error


def describe_error(err: BaseException) -> str:
    """A one-line reason for a failed request (the bare ``str`` of some is empty)."""
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}".strip()
    if isinstance(err, asyncio.TimeoutError | TimeoutError):
        return "request timed out"
    return str(err) or type(err).__name__


__all__ = [
    "KubeletApiClient",
    "describe_error",
    "raise_for_status",
    "resource_of",
    "user_agent",
]
