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

Two costs of the generated client are avoided, since the kubelet pays them on
every request (issue 37):

- answers are decoded by ``api.modelcodec``'s planned decoder into the same
  models the generated one makes, several times faster;
- the connection pool does not consult the environment on each request
  (aiohttp's ``trust_env`` reads ``~/.netrc`` and the proxy variables in a
  worker thread every time): a proxy named by ``HTTPS_PROXY`` / ``HTTP_PROXY``
  (and not excluded by ``NO_PROXY``) for the API server is looked up once, when
  the client is made, and used for every request, as client-go's
  ``ProxyFromEnvironment`` does; ``~/.netrc`` is not read (client-go never did).

Every request is counted and timed in ``rest_client_requests_total`` and
``rest_client_request_duration_seconds`` (upstream's names), and counted in
``pykubelet_api_client_requests_total`` by client and resource, which is what
the benchmarks read.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import ApiClient, ApiException
from kubernetes_asyncio.client.configuration import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject
from yarl import URL

from pykubelet.api.modelcodec import decode
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


def use_environment_proxy(configuration: Configuration) -> None:
    """Set the proxy the environment names for the API server, once (none set: direct)."""
    if configuration.proxy or not configuration.host:
        return
    try:
        proxy, auth = get_env_proxy_for_url(URL(configuration.host))
    except LookupError:  # no proxy variable, or NO_PROXY names the server
        return
    configuration.proxy = str(proxy)
    if auth is not None:
        configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}


def new_pool(configuration: Configuration) -> RESTClientObject:
    """A connection pool that never reads the environment or ``~/.netrc`` per request."""
    pool = RESTClientObject(configuration)
    _stop_trusting_env(pool)
    return pool


def _stop_trusting_env(pool: RESTClientObject) -> None:
    session = pool.pool_manager
    # aiohttp offers trust_env only as a constructor argument, which the generated
    # client fixes at True; the session reads it from this attribute per request.
    if getattr(session, "_trust_env", None) is True:
        session._trust_env = False
    else:
        klog.warning("aiohttp session has no _trust_env; requests read the environment each time")


class KubeletApiClient(ApiClient):
    """An ``ApiClient`` with a token-bucket rate limit and a default request timeout."""

    def __init__(self, rest: RestConfig, *, name: str, qps: float, burst: int,
                 timeout: float | None = None) -> None:
        self.rest = rest.copy()
        use_environment_proxy(self.rest.configuration)
        try:
            super().__init__(configuration=self.rest.configuration)
        except (ssl.SSLError, OSError, ValueError) as err:
            raise KubeconfigError(rest.path, f"TLS set-up failed: {err}") from err
        _stop_trusting_env(self.rest_client)
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

    def deserialize(self, response: Any, response_type: Any) -> Any:
        """The answer as ``response_type``, by the planned decoder (same models, less CPU)."""
        if response_type in ("file", "bytes") or not isinstance(response_type, str):
            return super().deserialize(response, response_type)
        try:
            data = json.loads(response.data)
        except ValueError:
            data = response.data
        return decode(data, response_type)

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
        self.rest_client = new_pool(self.configuration)
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
    "new_pool",
    "raise_for_status",
    "resource_of",
    "use_environment_proxy",
    "user_agent",
]
