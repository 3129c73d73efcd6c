"""From a validated ``KubeletServer`` to a running kubelet (upstream ``cmd/kubelet/app/server.go``).

Seeds 000, 001 and 003 walk this chain in the Go kubelet; each step here
carries its name so the seed text can be followed in Python:

1. ``unsecured_dependencies`` (``UnsecuredDependencies``): everything that
   needs neither the network nor the node: the CRI clients (not connected
   yet), the event recorder, the OS seams, the TLS options.
2. ``run`` (``run``): the lock file, ``/configz``, the API clients when a
   kubeconfig is given, the runtime connection (``PreInitRuntimeService``),
   then ``run_kubelet``.
3. ``run_kubelet`` (``RunKubelet``): node identity, then
   ``create_and_init_kubelet`` (``createAndInitKubelet``: ``makePodSourceConfig``
   and ``NewMainKubelet``, then the birth cry), then ``start_kubelet``.
4. ``start_kubelet`` (``startKubelet``): ``Kubelet.run`` with the pod config's
   updates, and the HTTP servers: healthz, the kubelet API on ``port``
   (``listen_and_serve``, HTTPS with the TLS options ``unsecured_dependencies``
   built and the authentication ``run`` built) and the read-only port
   (``listen_and_serve_read_only``).

Every step that can fail names itself in the error ("failed to run Kubelet:
connecting to the container runtime: ..."), and the process exits non-zero.
Stopping (SIGTERM, SIGINT) unwinds in reverse and leaves pods running.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from aiohttp import web

from pykubelet.client import KubeletClients
from pykubelet.cmd.clients import build_kubelet_clients, report_server
from pykubelet.cmd.options import not_acted_on
from pykubelet.cmd.serving import serving_ssl_context
from pykubelet.config.codec import configz_body
from pykubelet.config.server import KubeletServer
from pykubelet.config.units import seconds
from pykubelet.cri.image import RemoteImageService
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.events import LoggingRecorder
from pykubelet.events.broadcaster import ApiEventSink, EventBroadcaster
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.kubelet import Kubelet, make_pod_source_config, new_main_kubelet
from pykubelet.kubelet.node_status import new_node_informer
from pykubelet.metrics import KUBELET_REGISTRY
from pykubelet.nodestatus import birth_cry as node_birth_cry
from pykubelet.prober.metrics import PROBER_REGISTRY
from pykubelet.server.auth import KubeletAuth, build_auth
from pykubelet.server.healthz import HealthChecker, LogCheck, healthz_routes
from pykubelet.server.readonly import start_http_server
from pykubelet.server.server import (
    KubeletAPIServer,
    ServerOptions,
    listen_and_serve,
    listen_and_serve_read_only,
    metric_paths,
)
from pykubelet.server.tls import initialize_tls
from pykubelet.sources.podconfig import PodConfig
from pykubelet.stats import cadvisor_metrics, resource_metrics
from pykubelet.util import klog
from pykubelet.util.flock import LockContentionError, LockFile

T = TypeVar("T")


class StartupError(RuntimeError):
    """A start-up step failed; the message names the step and the cause."""


@contextlib.contextmanager
def startup_step(name: str) -> Iterator[None]:
    """Prefix any failure inside with the step's name, so the operator knows where it broke."""
    try:
        yield
    except StartupError:
        raise
    except Exception as err:
        raise StartupError(f"{name}: {err}") from err


# --- node identity --------------------------------------------------------------------------

def get_node_name(server: KubeletServer) -> str:
    """Upstream ``getNodeName``: the override or hostname, lower-cased.

    No cloud provider names the node: the built-in ones are gone, and an external
    one (``--cloud-provider=external``) initializes the Node the kubelet registered.
    """
    return (server.flags.hostname_override or socket.gethostname()).strip().lower()


def get_host_ip(server: KubeletServer) -> str:
    """The node's primary IP: the first ``--node-ip``, else the address of the default route."""
    ips = server.flags.node_ips()
    if ips:
        return ips[0]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            # No packet is sent: connect() on UDP only picks the outgoing interface.
            probe.connect(("10.255.255.255", 1))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


# --- the chain ----------------------------------------------------------------------------

def unsecured_dependencies(server: KubeletServer) -> Dependencies:
    """Upstream ``UnsecuredDependencies``: what can be built touching neither network nor node.

    The CRI clients are created but not connected (``run`` connects them);
    API clients stay None until ``run`` sees a kubeconfig.
    """
    config = server.config
    timeout = seconds(config.runtime_request_timeout)
    with startup_step("creating the runtime service"):
        runtime_service = RemoteRuntimeService(config.container_runtime_endpoint, timeout)
    with startup_step("creating the image service"):
        image_service = RemoteImageService(
            config.image_service_endpoint or config.container_runtime_endpoint, timeout)
    tls_options = None
    if config.enable_server:
        with startup_step("initializing the kubelet server's TLS"):
            tls_options = initialize_tls(
                server.flags.cert_dir, get_node_name(server),
                tls_cert_file=config.tls_cert_file,
                tls_private_key_file=config.tls_private_key_file,
                tls_min_version=config.tls_min_version,
                tls_cipher_suites=list(config.tls_cipher_suites or []),
                client_ca_file=config.authentication.x509.client_ca_file,
                server_tls_bootstrap=config.server_tls_bootstrap,
                alternate_ips=[*server.flags.node_ips(), "127.0.0.1"])
    return Dependencies(runtime_service=runtime_service, image_service=image_service,
                        recorder=LoggingRecorder(), tls_options=tls_options)


async def run(server: KubeletServer, deps: Dependencies, stopping: asyncio.Event) -> None:
    """Upstream ``run``: process-wide set-up, then ``run_kubelet`` until ``stopping`` is set."""
    async with _lock_file(server, stopping) as acquired:
        if not acquired:
            return  # stopped while waiting for the lock: nothing was started
        init_configz(server)
        unimplemented = not_acted_on(server)
        if unimplemented:
            klog.warning("Configuration fields and flags accepted but not acted on by pykubelet "
                         "yet", fields=",".join(unimplemented))
        clients: KubeletClients | None = None
        if server.flags.kubeconfig and deps.kube_client is None:
            with startup_step("building the API clients"):
                built = await _unless_stopped(
                    build_kubelet_clients(server, get_node_name(server)), stopping)
            if built is None:
                return  # stopped while bootstrapping: nothing was started
            clients = built.clients
            deps.kube_client, deps.event_client = clients.kube, clients.events
            deps.heartbeat_client = clients.heartbeat
            deps.on_heartbeat_failure = clients.close_all_connections
            deps.client_certificate_manager = built.certificate_manager
            await report_server(clients)
        elif not server.flags.kubeconfig:
            klog.info("Standalone mode, no API client")
        if deps.auth is None and server.config.enable_server:
            with startup_step("building the kubelet server's authentication"):
                deps.auth = build_auth_for(server, get_node_name(server), deps.kube_client)
        try:
            await pre_init_runtime_service(deps)
            await run_kubelet(server, deps, stopping)
        finally:
            if clients is not None:
                await clients.close()


async def _unless_stopped(work: Coroutine[Any, Any, T], stopping: asyncio.Event) -> T | None:
    """``work``'s result, or None if ``stopping`` is set first (``work`` is then cancelled).

    TLS bootstrapping may wait a long time for an approval; a SIGTERM must not.
    """
    job = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not job.done():
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
        return None
    return job.result()


def build_auth_for(server: KubeletServer, node_name: str, kube_client: Any) -> KubeletAuth:
    """Upstream ``BuildAuth``: authenticator and authorizer from the configuration.

    In standalone mode (no client) the webhook modes cannot work: the
    configuration must disable webhook authentication and use AlwaysAllow.
    """
    config = server.config
    authn, authz = config.authentication, config.authorization
    return build_auth(
        node_name, kube_client, anonymous=authn.anonymous.enabled,
        webhook_authentication=authn.webhook.enabled,
        token_cache_ttl=seconds(authn.webhook.cache_ttl),
        client_ca_file=authn.x509.client_ca_file, authorization_mode=authz.mode,
        authorized_ttl=seconds(authz.webhook.cache_authorized_ttl),
        unauthorized_ttl=seconds(authz.webhook.cache_unauthorized_ttl),
        fine_grained=server.feature_gates().enabled("KubeletFineGrainedAuthz"))


_configz: dict[str, Any] = {}


def init_configz(server: KubeletServer) -> None:
    """Upstream ``initConfigz``: record the running configuration for ``/configz``."""
    _configz.clear()
    _configz.update(configz_body(server.config))


def configz() -> dict[str, Any]:
    """The ``/configz`` document of the running kubelet (empty before ``run``)."""
    return dict(_configz)


async def pre_init_runtime_service(deps: Dependencies) -> None:
    """Upstream ``PreInitRuntimeService``: reach the runtime before anything is built on it."""
    with startup_step("connecting to the container runtime"):
        await deps.runtime_service.connect()
    with startup_step("connecting to the image service"):
        await deps.image_service.connect()


async def run_kubelet(server: KubeletServer, deps: Dependencies,
                      stopping: asyncio.Event) -> None:
    """Upstream ``RunKubelet``: build the kubelet, start it, and stop it in reverse."""
    node_name = get_node_name(server)
    host_ip = get_host_ip(server)
    klog.info("Starting pykubelet", nodeName=node_name, hostIP=host_ip,
              runtimeEndpoint=server.config.container_runtime_endpoint,
              standalone=deps.standalone)
    runners: list[web.AppRunner] = []
    kubelet: Kubelet | None = None
    broadcaster = make_event_recorder(deps, node_name)
    try:
        kubelet, pod_config = await create_and_init_kubelet(server, deps, node_name, host_ip)
        if broadcaster is not None:
            kubelet.supervisor.spawn("event-broadcaster", broadcaster.run)
        runners = await start_kubelet(kubelet, pod_config, server, deps)
        fatal = await kubelet.supervisor.wait(stopping)
        if fatal is not None:
            raise StartupError(f"{fatal.name} failed: {fatal.cause}") from fatal
    finally:
        for runner in runners:
            await runner.cleanup()
        if kubelet is not None:
            await kubelet.stop()
        await deps.runtime_service.close()
        await deps.image_service.close()


def make_event_recorder(deps: Dependencies, node_name: str) -> EventBroadcaster | None:
    """Upstream ``makeEventRecorder``: events are always logged, and posted in cluster mode."""
    if deps.event_client is None or not isinstance(deps.recorder, LoggingRecorder):
        return None
    broadcaster = EventBroadcaster(ApiEventSink(deps.event_client), node_name)
    deps.recorder.listeners.append(broadcaster.record)
    return broadcaster


async def create_and_init_kubelet(server: KubeletServer, deps: Dependencies, node_name: str,
                                  host_ip: str) -> tuple[Kubelet, PodConfig]:
    """Upstream ``createAndInitKubelet``: the pod config, ``NewMainKubelet``, the birth cry."""
    # Upstream builds the node informer in NewMainKubelet, before the pod
    # sources: the API source waits for it so admission sees the node's labels.
    node_informer = new_node_informer(deps, node_name)
    with startup_step("creating the pod sources"):
        pod_config = make_pod_source_config(
            server, node_name, deps,
            node_has_synced=node_informer.has_synced if node_informer is not None else None)
    with startup_step("initializing the kubelet"):
        kubelet = await new_main_kubelet(server, deps, pod_config, node_name, host_ip,
                                         node_informer=node_informer)
    birth_cry(kubelet)
    return kubelet, pod_config


def birth_cry(kubelet: Kubelet) -> None:
    """Upstream ``BirthCry``: the node's ``Starting`` event."""
    node_birth_cry(kubelet.deps.recorder, kubelet.options.node_name)


async def start_kubelet(kubelet: Kubelet, pod_config: PodConfig, server: KubeletServer,
                        deps: Dependencies) -> list[web.AppRunner]:
    """Upstream ``startKubelet``: run the kubelet on the pod updates, then serve HTTP.

    Returns the HTTP servers for the caller to stop. A server that cannot
    listen is a start-up error, as upstream exits when ``ListenAndServe`` fails.
    """
    spawn = kubelet.supervisor.spawn
    spawn("pod-config", pod_config.run)
    for source in pod_config.pod_sources():
        spawn(f"pod-source-{type(source).__name__}", source.run)
    # The kubelet itself must not fail: if its sync loop dies, the process exits.
    spawn("kubelet", lambda: kubelet.run(pod_config.updates()), restart=False)

    config = server.config
    checks: list[HealthChecker] = [kubelet.sync_loop_monitor]
    runners: list[web.AppRunner] = []
    try:
        if config.healthz_port > 0:
            with startup_step("starting the healthz server"):
                runners.append(await start_http_server(
                    config.healthz_bind_address, config.healthz_port, healthz_routes(checks)))
        if config.enable_server:
            with startup_step("starting the kubelet server"):
                runners.append(await listen_and_serve(
                    kubelet_api_server(kubelet, server, deps.auth), config.address,
                    config.port, serving_ssl_context(kubelet, server, deps)))
        if config.read_only_port > 0:
            with startup_step("starting the read-only server"):
                runners.append(await listen_and_serve_read_only(
                    kubelet_api_server(kubelet, server, None), config.address,
                    config.read_only_port))
    except BaseException:
        for runner in runners:
            await runner.cleanup()
        raise
    return runners


def kubelet_api_server(kubelet: Kubelet, server: KubeletServer,
                       auth: KubeletAuth | None) -> KubeletAPIServer:
    """The kubelet API over this kubelet: authenticated with ``auth``, else read-only."""
    config = server.config
    gates = server.feature_gates()
    stats = kubelet.stats_provider
    options = ServerOptions(
        enable_debugging_handlers=config.enable_debugging_handlers,
        enable_system_log_handler=bool(config.enable_system_log_handler),
        enable_profiling_handler=bool(config.enable_profiling_handler),
        enable_debug_flags_handler=bool(config.enable_debug_flags_handler),
        split_log_streams=gates.enabled("PodLogsQuerySplitStreams"),
        configz=configz,
        metrics=metric_paths(
            kubelet=[KUBELET_REGISTRY, kubelet.volume_manager.stats.families],
            cadvisor=[cadvisor_metrics(stats, kubelet.container_images, stats.machine_info)],
            resource=[resource_metrics(stats)],
            probes=[PROBER_REGISTRY]))
    checks: list[HealthChecker] = [LogCheck(), kubelet.sync_loop_monitor]
    return KubeletAPIServer(kubelet.server_host, checks, options, stats=stats, auth=auth)


@contextlib.asynccontextmanager
async def _lock_file(server: KubeletServer, stopping: asyncio.Event) -> AsyncIterator[bool]:
    """Hold ``--lock-file`` for the run; with ``--exit-on-lock-contention``, wait for it.

    Yields False when stopping was requested before the lock was obtained.
    """
    flags = server.flags
    if not flags.lock_file:
        yield True
        return
    lock = LockFile(flags.lock_file)
    watcher: asyncio.Task[None] | None = None
    try:
        if flags.exit_on_lock_contention:
            lock_wait = asyncio.ensure_future(lock.acquire_waiting())
            stop_wait = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({lock_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if not lock_wait.done():
                lock_wait.cancel()
                yield False
                return
            lock_wait.result()
            # Another kubelet asking for the lock is told to take over: stop.
            watcher = asyncio.create_task(_stop_on_contention(lock, stopping))
        else:
            with startup_step("acquiring the lock file"):
                try:
                    lock.try_acquire()
                except LockContentionError:
                    raise
        yield True
    finally:
        if watcher is not None:
            watcher.cancel()
        lock.release()


async def _stop_on_contention(lock: LockFile, stopping: asyncio.Event) -> None:
    await lock.wait_for_contention()
    stopping.set()


__all__ = [
    "StartupError",
    "build_auth_for",
    "configz",
    "create_and_init_kubelet",
    "get_host_ip",
    "get_node_name",
    "init_configz",
    "kubelet_api_server",
    "pre_init_runtime_service",
    "run",
    "run_kubelet",
    "start_kubelet",
    "unsecured_dependencies",
]
