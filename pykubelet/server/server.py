"""The kubelet API (upstream ``pkg/kubelet/server/server.go``): port 10250 and the read-only port.

Two servers share these handlers, as upstream's do:

* the **authenticated** server on ``port`` (10250, HTTPS): every request is
  authenticated and authorized first (``pykubelet.server.auth``); then the
  health, pod, stats and metrics endpoints, and, with
  ``enableDebuggingHandlers``, the debugging ones: ``/containerLogs``,
  ``/exec``, ``/attach``, ``/portForward``, ``/run``, ``/runningpods/``,
  ``/configz``, ``/spec/``, ``/logs/``, ``/debug/pprof/``, ``/debug/flags/v``;
* the **read-only** server on ``readOnlyPort`` (plain HTTP, no
  authentication): only the health, pod, stats and metrics endpoints; the
  debugging paths answer 405 there.

Answers keep upstream's status codes and messages (``Unauthorized``,
``Forbidden (user=..., verb=..., resource=..., subresource(s)=[...])``,
``pod "x" does not exist``...), which clients and the API server relay to
users verbatim. Each request is counted in ``kubelet_http_requests_total``.

The kubelet is reached through ``HostInterface``; stats through
``StatsSource``. Neither is imported from the kubelet, so this package stays
below it.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from aiohttp import web
from kubernetes_asyncio.client import V1Pod
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pykubelet import metrics
from pykubelet.api import all_containers
from pykubelet.container import ContainerID
from pykubelet.cri.logstream import LogOptions, Writer
from pykubelet.server import auth as authn
from pykubelet.server.containerlogs import (
    LogQueryError,
    PodLogOptions,
    decode_pod_log_options,
    log_query_rejected,
    wanted_streams,
)
from pykubelet.server.healthz import HealthChecker, healthz_routes
from pykubelet.server.plaintext import NOSNIFF, plain_text
from pykubelet.server.profiling import PPROF_PATH, profiling_routes
from pykubelet.server.readonly import encode_pod_list, start_http_server
from pykubelet.server.streaming import (
    StreamOptions,
    StreamOptionsError,
    port_forward_ports,
    proxy_upgrade,
    stream_options,
)
from pykubelet.server.systemlogs import DEFAULT_NODE_LOG_DIR, system_log_handler
from pykubelet.server.tls import peer_certificates
from pykubelet.server.translator import translate, wants_v5
from pykubelet.util import klog

SERVER_TYPE_READONLY: Final = "readonly"
SERVER_TYPE_READWRITE: Final = "readwrite"

_METHOD_BUCKETS: Final = frozenset({"OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE",
                                    "CONNECT"})
# Upstream compares the path bucket with these, so port-forwards (bucket
# "portForward") are not counted as long-running there either.
_LONG_RUNNING_BUCKETS: Final = frozenset({"exec", "attach", "portforward", "debug"})
_DEBUG_PATHS: Final = ("/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/",
                       "/runningpods/", PPROF_PATH, "/logs/")


class ContainerLogsError(Exception):
    """Why a container's logs cannot be read now (answered with 400 and this message)."""


class StreamingError(Exception):
    """A failure to set up exec/attach/port-forward; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


class HostInterface(Protocol):
    """What the server needs from the kubelet (upstream ``HostInterface``)."""

    def get_pods(self) -> list[V1Pod]:
        """Pods bound to the node, with their latest status."""
        ...

    def get_pod_by_name(self, namespace: str, name: str) -> V1Pod | None: ...

    async def get_running_pods(self) -> list[V1Pod]:
        """Pods as the runtime lists them (``/runningpods/``)."""
        ...

    def container_log_target(self, pod: V1Pod, container_name: str,
                             previous: bool) -> ContainerID:
        """The container instance whose log to read; ``ContainerLogsError`` if none."""
        ...

    async def get_container_logs(self, container_id: ContainerID, options: LogOptions,
                                 stdout: Writer | None, stderr: Writer | None) -> None: ...

    async def get_exec(self, pod: V1Pod, uid: str, container_name: str, cmd: Sequence[str],
                       options: StreamOptions) -> str:
        """The runtime streaming URL; ``StreamingError`` when it cannot be had."""
        ...

    async def get_attach(self, pod: V1Pod, uid: str, container_name: str,
                         options: StreamOptions) -> str: ...

    async def get_port_forward(self, pod: V1Pod, uid: str, ports: Sequence[int]) -> str: ...

    async def run_in_container(self, pod: V1Pod, uid: str, container_name: str,
                               cmd: Sequence[str]) -> bytes: ...


class StatsSource(Protocol):
    """``/stats/summary`` and ``/spec/`` (upstream ``stats.Provider`` and cAdvisor)."""

    async def summary(self, only_cpu_and_memory: bool = False) -> dict[str, Any]: ...

    def machine_info(self) -> dict[str, Any]: ...


Registry = CollectorRegistry | Collector
# A registry, or a coroutine function computing families per scrape (stats-backed metrics).
MetricSource = Registry | Callable[[], Awaitable[list[Metric]]]


@dataclass
class ServerOptions:
    """The configuration fields that shape the server (upstream reads them from kubeCfg)."""

    enable_debugging_handlers: bool = True
    enable_system_log_handler: bool = True
    enable_profiling_handler: bool = True
    enable_debug_flags_handler: bool = True
    split_log_streams: bool = False
    node_log_dir: str = DEFAULT_NODE_LOG_DIR
    configz: Callable[[], Mapping[str, Any]] | None = None
    metrics: Mapping[str, Sequence[MetricSource]] = field(default_factory=dict)


def _json(body: Any) -> web.Response:
    return web.Response(text=json.dumps(body), content_type="application/json")


def url_root_path(path: str) -> str:
    """The metrics bucket of a path: ``metrics/<x>`` for metrics, else the first segment."""
    parts = path.lstrip("/").split("/", 2)
    if parts[0] == "metrics" and len(parts) > 1:
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


@dataclass
class _Buckets:
    known: set[str] = field(default_factory=set)

    def of(self, path: str) -> str:
        root = url_root_path(path)
        return root if root in self.known else "other"


def _peer_certificates(request: web.Request) -> tuple[bytes, ...]:
    transport = request.transport
    if transport is None:
        return ()
    return peer_certificates(transport.get_extra_info("ssl_object"))


def _auth_middleware(auth: authn.KubeletAuth) -> Any:
    @web.middleware
    async def authenticate_and_authorize(
            request: web.Request,
            handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        auth_request = authn.AuthRequest(method=request.method, path=request.path,
                                         headers=request.headers,
                                         peer_certificates=_peer_certificates(request))
        try:
            user = await auth.authenticate(auth_request)
        except authn.AuthenticationError as err:
            klog.error("Unable to authenticate the request due to an error", err)
            return plain_text(401, "Unauthorized")
        if user is None:
            return plain_text(401, "Unauthorized")
        attributes = auth.request_attributes(user, request.method, request.path)
        subresources = [a.subresource for a in attributes]
        for attr in attributes:
            try:
                decision = await auth.authorize(attr)
            except authn.AuthorizationError as err:
                klog.error("Authorization error", err, user=attr.user.name, verb=attr.verb,
                           resource=attr.resource, subresource=attr.subresource)
                return plain_text(500, f"Authorization error (user={attr.user.name}, "
                                       f"verb={attr.verb}, resource={attr.resource}, "
                                       f"subresource={attr.subresource})")
            if decision.allowed:
                return await handler(request)
        first = attributes[0]
        klog.v(2).info("Forbidden", user=first.user.name, verb=first.verb,
                       resource=first.resource, subresources=" ".join(subresources))
        return plain_text(403, f"Forbidden (user={first.user.name}, verb={first.verb}, "
                               f"resource={first.resource}, "
                               f"subresource(s)=[{' '.join(subresources)}])\n")

    return authenticate_and_authorize


def _metrics_middleware(buckets: _Buckets, server_type: str) -> Any:
    @web.middleware
    async def count(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                    ) -> web.StreamResponse:
        method = request.method if request.method in _METHOD_BUCKETS else "other"
        path = buckets.of(request.path)
        long_running = "true" if path in _LONG_RUNNING_BUCKETS else "false"
        labels = (method, path, server_type, long_running)
        metrics.HTTP_REQUESTS.labels(*labels).inc()
        inflight = metrics.HTTP_INFLIGHT_REQUESTS.labels(*labels)
        inflight.inc()
        started = time.monotonic()
        try:
            return await handler(request)
        finally:
            inflight.dec()
            metrics.HTTP_REQUESTS_DURATION.labels(*labels).observe(time.monotonic() - started)

    return count


@web.middleware
async def _upstream_error_bodies(
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Unknown paths and wrong methods answered as upstream's router does."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as err:
        response = plain_text(405, "Method Not Allowed")
        response.headers["Allow"] = ", ".join(sorted(err.allowed_methods))
        return response
    except web.HTTPNotFound:
        return plain_text(404, "404 page not found\n")


class KubeletAPIServer:
    """Builds the aiohttp application of either server."""

    def __init__(self, host: HostInterface, checks: Sequence[HealthChecker],
                 options: ServerOptions, stats: StatsSource | None = None,
                 auth: authn.KubeletAuth | None = None) -> None:
        self.host = host
        self.checks = list(checks)
        self.options = options
        self.stats = stats
        self.auth = auth
        self._buckets = _Buckets()

    # -- assembling ------------------------------------------------------------

    def application(self) -> web.Application:
        """The authenticated server when built with ``auth``, else the read-only one."""
        server_type = SERVER_TYPE_READONLY if self.auth is None else SERVER_TYPE_READWRITE
        middlewares = [_metrics_middleware(self._buckets, server_type), _upstream_error_bodies]
        if self.auth is not None:
            middlewares.append(_auth_middleware(self.auth))
        app = web.Application(middlewares=middlewares, client_max_size=1024 * 1024)
        routes = self._auth_not_required_routes()
        if self.auth is not None and self.options.enable_debugging_handlers:
            klog.info("Adding debug handlers to kubelet server")
            routes += self._system_log_routes()
            routes += self._profiling_routes()
            routes += self._debug_flags_routes()
            routes += self._auth_required_routes()
        else:
            routes += self._debugging_disabled_routes()
        app.add_routes(routes)
        return app

    def _bucket(self, *names: str) -> None:
        self._buckets.known.update(names)

    def _auth_not_required_routes(self) -> list[web.RouteDef]:
        self._bucket("healthz", "pods", "stats", "metrics", "metrics/cadvisor",
                     "metrics/probes", "metrics/resource")
        routes = list(healthz_routes(self.checks))
        routes += [web.get("/pods", self._get_pods), web.get("/pods/", self._get_pods),
                   web.get("/stats/summary", self._stats_summary),
                   web.post("/stats/summary", self._stats_summary)]
        for path, registries in self.options.metrics.items():
            routes.append(web.get(path, _scrape(registries)))
        return routes

    def _auth_required_routes(self) -> list[web.RouteDef]:
        self._bucket("run", "exec", "attach", "portForward", "containerLogs", "configz",
                     "runningpods", "spec")
        routes = [
            web.post("/run/{ns}/{pod}/{container}", self._run),
            web.post("/run/{ns}/{pod}/{uid}/{container}", self._run),
            web.get("/containerLogs/{ns}/{pod}/{container}", self._container_logs),
            web.get("/runningpods/", self._running_pods),
            web.get("/spec/", self._spec),
        ]
        for method in ("GET", "POST"):
            routes += [
                web.route(method, "/exec/{ns}/{pod}/{container}", self._exec),
                web.route(method, "/exec/{ns}/{pod}/{uid}/{container}", self._exec),
                web.route(method, "/attach/{ns}/{pod}/{container}", self._attach),
                web.route(method, "/attach/{ns}/{pod}/{uid}/{container}", self._attach),
                web.route(method, "/portForward/{ns}/{pod}", self._port_forward),
                web.route(method, "/portForward/{ns}/{pod}/{uid}", self._port_forward),
            ]
        if self.options.configz is not None:
            routes.append(web.get("/configz", self._configz))
        return routes

    def _debugging_disabled_routes(self) -> list[web.RouteDef]:
        self._bucket("run", "exec", "attach", "portForward", "containerLogs", "runningpods",
                     "pprof", "logs")
        return [_disabled(prefix, "Debug endpoints are disabled.") for prefix in _DEBUG_PATHS]

    def _system_log_routes(self) -> list[web.RouteDef]:
        self._bucket("logs")
        if not self.options.enable_system_log_handler:
            return [_disabled("/logs/", "logs endpoint is disabled.")]
        return [system_log_handler(self.options.node_log_dir)]

    def _profiling_routes(self) -> list[web.RouteDef]:
        self._bucket("debug")
        if not self.options.enable_profiling_handler:
            return [_disabled(PPROF_PATH, "profiling endpoint is disabled.")]
        return profiling_routes()

    def _debug_flags_routes(self) -> list[web.RouteDef]:
        if not self.options.enable_debug_flags_handler:
            return [web.route("*", "/debug/flags/v",
                              _static_error(405, "flags endpoint is disabled.\n"))]
        return [web.put("/debug/flags/v", _set_verbosity)]

    # -- handlers ---------------------------------------------------------------

    async def _get_pods(self, _: web.Request) -> web.Response:
        return _json(encode_pod_list(self.host.get_pods()))

    async def _running_pods(self, _: web.Request) -> web.Response:
        try:
            pods = await self.host.get_running_pods()
        except Exception as err:
            return plain_text(500, str(err))
        return _json(encode_pod_list(pods))

    async def _configz(self, _: web.Request) -> web.Response:
        assert self.options.configz is not None
        return _json(self.options.configz())

    async def _spec(self, _: web.Request) -> web.Response:
        if self.stats is None:
            return plain_text(500, "machine info is not available")
        return _json(self.stats.machine_info())

    async def _stats_summary(self, request: web.Request) -> web.Response:
        if self.stats is None:
            return plain_text(500, "stats are not available")
        only = request.query.get("only_cpu_and_memory", "").lower() == "true"
        try:
            summary = await self.stats.summary(only_cpu_and_memory=only)
        except Exception as err:
            klog.error("Failed to get the summary stats", err)
            return plain_text(500, f"Internal Error: {err}")
        return _json(summary)

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        pod_name = request.match_info["pod"]
        container_name = request.match_info["container"]
        try:
            options = decode_pod_log_options(
                {key: request.query.getall(key) for key in request.query},
                self.options.split_log_streams)
            want_stdout, want_stderr = wanted_streams(options, self.options.split_log_streams)
        except LogQueryError as err:
            log_query_rejected(err)
            return plain_text(err.status, err.body)
        pod = self.host.get_pod_by_name(namespace, pod_name)
        if pod is None:
            return plain_text(404, f'pod "{pod_name}" does not exist')
        if not _has_container(pod, container_name):
            return plain_text(404, f'container "{container_name}" not found in pod "{pod_name}"')
        try:
            container_id = self.host.container_log_target(pod, container_name, options.previous)
        except ContainerLogsError as err:
            return plain_text(400, str(err))

        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8",
                                               **NOSNIFF})
        response.enable_chunked_encoding()
        await response.prepare(request)

        async def write(data: bytes) -> None:
            await response.write(data)

        try:
            await self.host.get_container_logs(
                container_id, _cri_log_options(options), write if want_stdout else None,
                write if want_stderr else None)
        except ConnectionError as err:
            klog.v(2).info("Container logs client went away", err=err,
                           pod=f"{namespace}/{pod_name}", container=container_name)
            return response
        except Exception as err:
            # The status line is sent already: like upstream, the error ends the body.
            klog.error("Failed to stream container logs", err, pod=f"{namespace}/{pod_name}",
                       container=container_name)
            with contextlib.suppress(ConnectionError):
                await response.write(str(err).encode())
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        command = request.query.getall("command", [])
        return await self._stream(request, lambda pod, uid, container, options:
                                  self.host.get_exec(pod, uid, container, command, options))

    async def _attach(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, self.host.get_attach)

    async def _stream(self, request: web.Request, streaming_url: Callable[
            [V1Pod, str, str, StreamOptions], Awaitable[str]]) -> web.StreamResponse:
        """exec and attach: the runtime's streaming URL for the container, then the client's
        connection proxied to it (or translated, for the v5 WebSocket protocol)."""
        try:
            options = stream_options(request.query)
        except StreamOptionsError as err:
            return plain_text(400, str(err))
        pod = self.host.get_pod_by_name(request.match_info["ns"], request.match_info["pod"])
        if pod is None:
            return plain_text(404, "pod does not exist")
        try:
            url = await streaming_url(pod, request.match_info.get("uid", ""),
                                      request.match_info["container"], options)
        except StreamingError as err:
            return plain_text(err.status, str(err))
        if wants_v5(request):
            return await translate(request, url, options)
        return await proxy_upgrade(request, url)

    async def _port_forward(self, request: web.Request) -> web.StreamResponse:
        try:
            ports = port_forward_ports(request)
        except StreamOptionsError as err:
            return plain_text(400, str(err))
        pod = self.host.get_pod_by_name(request.match_info["ns"], request.match_info["pod"])
        if pod is None:
            return plain_text(404, "pod does not exist")
        uid = request.match_info.get("uid", "")
        if uid and pod.metadata.uid != uid:
            return plain_text(404, "pod not found")
        try:
            url = await self.host.get_port_forward(pod, uid, ports)
        except StreamingError as err:
            return plain_text(err.status, str(err))
        return await proxy_upgrade(request, url)

    async def _run(self, request: web.Request) -> web.Response:
        pod = self.host.get_pod_by_name(request.match_info["ns"], request.match_info["pod"])
        if pod is None:
            return plain_text(404, "pod does not exist")
        # For legacy reasons /run takes one space-separated "cmd", not "command"s.
        command = request.query.get("cmd", "").split(" ")
        try:
            output = await self.host.run_in_container(
                pod, request.match_info.get("uid", ""), request.match_info["container"], command)
        except Exception as err:
            return plain_text(500, str(err))
        return web.Response(body=output, content_type="application/json")


def _has_container(pod: V1Pod, name: str) -> bool:
    return any(c.name == name for c in all_containers(pod))


def _cri_log_options(options: PodLogOptions) -> LogOptions:
    return LogOptions.from_pod_log_options(
        tail_lines=options.tail_lines, limit_bytes=options.limit_bytes,
        since_seconds=options.since_seconds, since_time=options.since_time,
        follow=options.follow, timestamps=options.timestamps)


def _scrape(sources: Sequence[MetricSource]) -> Callable[[web.Request],
                                                          Awaitable[web.Response]]:
    async def scrape(_: web.Request) -> web.Response:
        collected: list[Registry | list[Metric]] = []
        for source in sources:
            if hasattr(source, "collect"):
                collected.append(source)
            else:
                collected.append(await source())
        body = metrics.exposition(collected)
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    return scrape


def _static_error(status: int, message: str) -> Callable[[web.Request],
                                                          Awaitable[web.Response]]:
    async def answer(_: web.Request) -> web.Response:
        return plain_text(status, message)

    return answer


def _disabled(prefix: str, message: str) -> web.RouteDef:
    """Every method on ``prefix`` and below answers 405 with ``message`` (``http.Error``)."""
    return web.route("*", prefix + "{rest:.*}", _static_error(405, message + "\n"))


async def _set_verbosity(request: web.Request) -> web.Response:
    text = (await request.text()).strip()
    try:
        level = int(text)
        if level < 0:
            raise ValueError(text)
    except ValueError:
        return plain_text(400, f"error: invalid verbosity {text!r}\n")
    klog.set_verbosity(level)
    return web.Response(text=f"successfully set klog.logging.verbosity to {level}",
                        content_type="text/plain")


async def listen_and_serve(server: KubeletAPIServer, address: str, port: int,
                           ssl_context: ssl.SSLContext | None) -> web.AppRunner:
    """Upstream ``ListenAndServeKubeletServer``: the authenticated server, HTTPS."""
    klog.info("Starting to listen", address=address, port=port)
    return await start_http_server(address, port, server.application(), ssl_context)


async def listen_and_serve_read_only(server: KubeletAPIServer, address: str,
                                     port: int) -> web.AppRunner:
    """Upstream ``ListenAndServeKubeletReadOnlyServer``: no authentication, plain HTTP."""
    klog.info("Starting to listen read-only", address=address, port=port)
    return await start_http_server(address, port, server.application())


def metric_paths(kubelet: Iterable[MetricSource], cadvisor: Iterable[MetricSource],
                 resource: Iterable[MetricSource],
                 probes: Iterable[MetricSource]) -> dict[str, list[MetricSource]]:
    """The four metric endpoints and what each serves."""
    return {"/metrics": list(kubelet), "/metrics/cadvisor": list(cadvisor),
            "/metrics/resource": list(resource), "/metrics/probes": list(probes)}


__all__ = [
    "ContainerLogsError",
    "HostInterface",
    "KubeletAPIServer",
    "ServerOptions",
    "StatsSource",
    "StreamingError",
    "listen_and_serve",
    "listen_and_serve_read_only",
    "metric_paths",
    "url_root_path",
]
