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
   updates, and the HTTP servers (healthz, the read-only port).

Every step that can fail names itself in the error ("failed to run Kubelet:
connecting to the container runtime: ..."), and the process exits non-zero.
Stopping (SIGTERM, SIGINT) unwinds in reverse and leaves pods running.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

from aiohttp import web

from pykubelet.cmd.options import not_acted_on
from pykubelet.config.codec import configz_body
from pykubelet.config.server import KubeletServer
from pykubelet.cri.image import RemoteImageService
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.events import NORMAL, LoggingRecorder
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.kubelet import Kubelet, make_pod_source_config, new_main_kubelet, seconds
from pykubelet.prober.metrics import PROBER_REGISTRY
from pykubelet.server.healthz import HealthChecker, healthz_routes
from pykubelet.server.metrics import registry_route
from pykubelet.server.readonly import readonly_routes, start_http_server
from pykubelet.sources.podconfig import PodConfig
from pykubelet.util import klog
from pykubelet.util.flock import LockContentionError, LockFile


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
    """Upstream ``getNodeName`` without a cloud provider: the override or hostname, lower-cased."""
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
    return Dependencies(runtime_service=runtime_service, image_service=image_service,
                        recorder=LoggingRecorder())


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
        if server.flags.kubeconfig:
            # The API clients (main, events, heartbeat) are built here in cluster mode.
            klog.warning("Cluster mode is not available yet; running standalone",
                         kubeconfig=server.flags.kubeconfig)
        await pre_init_runtime_service(deps)
        await run_kubelet(server, deps, stopping)


_configz: dict[str, Any] = {}


def init_configz(server: KubeletServer) -> None:
    """Upstream ``initConfigz``: record the running configuration for ``/configz``."""
    _configz["kubeletconfig"] = configz_body(server.config)


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
    try:
        kubelet, pod_config = await create_and_init_kubelet(server, deps, node_name, host_ip)
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


async def create_and_init_kubelet(server: KubeletServer, deps: Dependencies, node_name: str,
                                  host_ip: str) -> tuple[Kubelet, PodConfig]:
    """Upstream ``createAndInitKubelet``: the pod config, ``NewMainKubelet``, the birth cry."""
    with startup_step("creating the pod sources"):
        pod_config = make_pod_source_config(server, node_name)
    with startup_step("initializing the kubelet"):
        kubelet = await new_main_kubelet(server, deps, pod_config, node_name, host_ip)
    birth_cry(kubelet)
    return kubelet, pod_config


def birth_cry(kubelet: Kubelet) -> None:
    """Upstream ``BirthCry``: the node's ``Starting`` event."""
    kubelet.deps.recorder.event(_NodeRef(kubelet.options.node_name), NORMAL, "Starting",
                                "Starting kubelet.")


class _NodeRef:
    """The node as an event's involved object (upstream ``nodeRef``)."""

    def __init__(self, name: str) -> None:
        self.metadata = _NodeMeta(name)


class _NodeMeta:
    def __init__(self, name: str) -> None:
        self.name = name
        self.namespace = ""


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
        if config.read_only_port > 0:
            with startup_step("starting the read-only server"):
                runners.append(await listen_and_serve_read_only(kubelet, config.address,
                                                                config.read_only_port, checks))
    except BaseException:
        for runner in runners:
            await runner.cleanup()
        raise
    return runners


async def listen_and_serve_read_only(kubelet: Kubelet, address: str, port: int,
                                     checks: list[HealthChecker]) -> web.AppRunner:
    """Upstream ``ListenAndServeReadOnly``: the unauthenticated subset on ``readOnlyPort``."""
    return await start_http_server(address, port, [
        *readonly_routes(kubelet, checks),
        registry_route("/metrics/probes", PROBER_REGISTRY)])


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
    "configz",
    "create_and_init_kubelet",
    "get_host_ip",
    "get_node_name",
    "init_configz",
    "pre_init_runtime_service",
    "run",
    "run_kubelet",
    "start_kubelet",
    "unsecured_dependencies",
]
