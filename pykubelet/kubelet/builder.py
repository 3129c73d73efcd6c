"""The composition root: from a validated ``KubeletServer`` to a running kubelet.

This is upstream's ``RunKubelet`` -> ``NewMainKubelet`` -> ``startKubelet``
in one readable place. Every subsystem is built here and handed its
collaborators explicitly, so this file is the map of pykubelet: what exists,
who talks to whom, and in which order things start and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from pykubelet.api.kubetypes import FILE_SOURCE, HTTP_SOURCE
from pykubelet.config.server import KubeletServer
from pykubelet.container.cache import PodCache
from pykubelet.cri.errors import CRIError
from pykubelet.cri.image import RemoteImageService
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.events import LoggingRecorder
from pykubelet.kubelet.kubelet import Kubelet, KubeletOptions, SyncLoopMonitor
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.kubelet.resources import (
    build_resource_managers,
    new_container_manager,
    runtime_sandbox_image,
    start_container_manager,
)
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.kubelet.sync_loop import LoopInputs, sync_loop
from pykubelet.kuberuntime import KubeGenericRuntimeManager, RuntimeManagerOptions
from pykubelet.lifecycle.handlers import HandlerRunner
from pykubelet.pleg import GenericPLEG
from pykubelet.podworkers import PodWorkers
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.metrics import PROBER_REGISTRY
from pykubelet.prober.prober import Prober
from pykubelet.prober.results import ResultsManager
from pykubelet.server.healthz import HealthChecker, healthz_routes
from pykubelet.server.metrics import registry_route
from pykubelet.server.readonly import readonly_routes, start_http_server
from pykubelet.sources.file import StaticPodFileSource
from pykubelet.sources.http import StaticPodURLSource
from pykubelet.sources.podconfig import PodConfig
from pykubelet.status import ReasonCache, StatusManager
from pykubelet.util import klog

RUNTIME_UP_PERIOD = 5.0
POD_WORKER_BACKOFF = 10.0


def node_name_for(server: KubeletServer) -> str:
    """Upstream ``getNodeName`` without a cloud provider: override or hostname, lower-cased."""
    return (server.flags.hostname_override or socket.gethostname()).strip().lower()


def host_ip_for(server: KubeletServer) -> str:
    if server.flags.node_ip:
        return str(server.flags.node_ip).split(",")[0].strip()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            # No packet is sent: connect() on UDP only picks the outgoing interface.
            probe.connect(("10.255.255.255", 1))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)


async def run_kubelet(server: KubeletServer, stopping: asyncio.Event) -> None:
    """Build every subsystem, run until ``stopping`` is set, then stop them in reverse."""
    config = server.config
    flags = server.flags
    node_name = node_name_for(server)
    host_ip = host_ip_for(server)
    request_timeout = _seconds(config.runtime_request_timeout)
    klog.info("Starting pykubelet", nodeName=node_name, hostIP=host_ip,
              runtimeEndpoint=config.container_runtime_endpoint, standalone=not flags.kubeconfig)
    if not flags.kubeconfig:
        klog.info("No API server defined - no node status update will be sent")

    # Data directories (upstream setupDataDirs) are created only now, after validation.
    for directory in (flags.root_dir, os.path.join(flags.root_dir, "pods"), config.pod_logs_dir):
        os.makedirs(directory, mode=0o750, exist_ok=True)

    runtime_service = RemoteRuntimeService(config.container_runtime_endpoint, request_timeout)
    image_service = RemoteImageService(
        config.image_service_endpoint or config.container_runtime_endpoint, request_timeout)
    version = await runtime_service.connect()
    await image_service.connect()
    klog.info("Container runtime initialized", containerRuntime=version.runtime_name,
              version=version.runtime_version, apiVersion=version.runtime_api_version)

    # The container manager checks the node (cgroup version, driver, reservations)
    # and builds the pod cgroup tree before any pod can start.
    container_manager = new_container_manager(server)
    await start_container_manager(container_manager, runtime_service)

    # Probe verdicts: liveness and startup steer the runtime manager (kill and
    # restart), readiness and startup shape the pod status.
    recorder = LoggingRecorder()
    liveness, readiness, startup = ResultsManager(), ResultsManager(), ResultsManager()

    async def pod_ip_for_hooks(pod: Any) -> str:
        # Hooks run inside a sync, after ``runtime`` below exists; the runtime's
        # own view has the IP even before the first status reaches the manager.
        status = await runtime.get_pod_status(
            pod.metadata.uid, pod.metadata.name, pod.metadata.namespace)
        return status.ips[0] if status.ips else ""

    handler_runner = HandlerRunner(runtime_service, pod_ip_for_hooks, recorder)
    runtime = KubeGenericRuntimeManager(runtime_service, image_service, RuntimeManagerOptions(
        root_dir=flags.root_dir,
        pod_logs_dir=config.pod_logs_dir,
        cluster_dns=list(config.cluster_dns or []),
        cluster_domain=config.cluster_domain or "",
        resolv_conf=config.resolv_conf,
        node_name=node_name,
        serialize_image_pulls=config.serialize_image_pulls,
        registry_pull_qps=float(config.registry_pull_qps),
        registry_burst=int(config.registry_burst),
        cpu_cfs_quota=config.cpu_cfs_quota,
        pod_cgroup_parent=(container_manager.pod_cgroup_parent if config.cgroups_per_qos
                           else None),
    ), liveness=liveness, startup=startup, handler_runner=handler_runner, recorder=recorder)
    await runtime.initialize()

    cache = PodCache()
    pleg = GenericPLEG(runtime, cache)
    runtime_state = RuntimeState()
    runtime_state.add_health_check("PLEG", pleg.healthy)
    pod_manager = PodManager()
    status_manager = StatusManager()
    reason_cache = ReasonCache()
    probe_manager = ProbeManager(Prober(runtime_service, recorder), liveness=liveness,
                                 readiness=readiness, startup=startup,
                                 status_provider=status_manager.peek_pod_status)
    kubelet = Kubelet(
        KubeletOptions(node_name=node_name, root_dir=flags.root_dir, host_ip=host_ip,
                       max_pods=config.max_pods, sync_frequency=_seconds(config.sync_frequency),
                       runtime_type=version.runtime_name),
        runtime, cache, pod_manager, status_manager, reason_cache, runtime_state, probe_manager)
    pod_workers = PodWorkers(kubelet, cache, resync_interval=_seconds(config.sync_frequency),
                             backoff_period=POD_WORKER_BACKOFF)
    kubelet.pod_workers = pod_workers

    async def evict(pod: Any, grace: int, status_func: Any) -> None:
        await pod_workers.terminate_pod_abnormally_and_wait(
            pod, grace_period_override=grace, pod_status_func=status_func, evict=True)

    resources = build_resource_managers(
        server, container_manager, runtime_service, image_service, runtime, pod_workers,
        active_pods=kubelet.active_pods, kill_pod=evict, recorder=recorder,
        node_name=node_name,
        sandbox_image=(flags.pod_infra_container_image
                       or await runtime_sandbox_image(runtime_service)))
    kubelet.container_manager = container_manager if config.cgroups_per_qos else None
    kubelet.eviction_manager = resources.eviction
    kubelet.container_gc = resources.container_gc
    kubelet.recorder = recorder

    # Pod sources, merged by the pod config into one update stream.
    pod_config = PodConfig(node_name)
    sources: list[Any] = []
    if config.static_pod_path:
        sources.append(StaticPodFileSource(
            config.static_pod_path, node_name, pod_config.channel(FILE_SOURCE),
            check_frequency=_seconds(config.file_check_frequency)))
    if config.static_pod_url:
        sources.append(StaticPodURLSource(
            config.static_pod_url, dict(config.static_pod_url_header or {}), node_name,
            pod_config.channel(HTTP_SOURCE), check_frequency=_seconds(config.http_check_frequency)))

    monitor = SyncLoopMonitor(threshold=max(2 * _seconds(config.sync_frequency), 300.0))
    checks: list[HealthChecker] = [monitor]
    runners = []
    if config.healthz_port > 0:
        runners.append(await start_http_server(config.healthz_bind_address, config.healthz_port,
                                               healthz_routes(checks)))
    if config.read_only_port > 0:
        runners.append(await start_http_server(config.address, config.read_only_port, [
            *readonly_routes(kubelet, checks),
            registry_route("/metrics/probes", PROBER_REGISTRY)]))

    tasks: list[asyncio.Task[Any]] = []

    def spawn(name: str, work: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        tasks.append(asyncio.create_task(work(), name=name))

    spawn("runtime-up", lambda: update_runtime_up_forever(runtime, runtime_state))
    spawn("pod-config", pod_config.run)
    for source in sources:
        spawn(type(source).__name__, source.run)
    for name, factory in resources.tasks(pod_config.sources_ready, kubelet.cached_pod_status):
        spawn(name, supervised(name, factory))
    pleg.start()

    inputs = LoopInputs(
        config_updates=pod_config.updates(),
        pleg_events=pleg.watch(),
        liveness_updates=liveness.updates(),
        readiness_updates=readiness.updates(),
        startup_updates=startup.updates(),
        runtime_errors=runtime_state.runtime_errors,
        pod_by_uid=pod_manager.get_pod_by_uid,
        pods_to_sync=kubelet.pods_to_sync,
        sources_ready=pod_config.sources_ready,
        on_probe_update=kubelet.on_probe_update,
        heartbeat=monitor.beat,
        on_container_died=kubelet.on_container_died,
    )
    loop_task = asyncio.create_task(sync_loop(inputs, kubelet), name="sync-loop")
    stop_task = asyncio.create_task(stopping.wait())
    try:
        done, _ = await asyncio.wait({loop_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if loop_task in done:
            loop_task.result()  # surface a crash of the loop
    finally:
        klog.info("Shutting down kubelet")
        for task in (loop_task, stop_task, *tasks):
            task.cancel()
        for source in sources:
            with contextlib.suppress(Exception):
                await source.stop()
        await pleg.stop()
        await probe_manager.stop()
        await pod_workers.stop()
        for runner in runners:
            await runner.cleanup()
        await asyncio.gather(loop_task, stop_task, *tasks, return_exceptions=True)
        await runtime_service.close()
        await image_service.close()


def supervised(name: str, factory: Callable[[], Coroutine[Any, Any, Any]]
               ) -> Callable[[], Coroutine[Any, Any, Any]]:
    """Restart a crashed periodic task with back-off, logging the crash (until the
    start-up chain's Supervisor takes over this role)."""
    async def run() -> None:
        delay = 1.0
        while True:
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:
                klog.error("Task crashed, restarting", err, task=name, backoff=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
    return run


async def update_runtime_up(runtime: KubeGenericRuntimeManager, state: RuntimeState) -> None:
    """Upstream ``updateRuntimeUp``: record whether the runtime and its network are ready."""
    try:
        status = await runtime.status()
    except CRIError as err:
        klog.error("Container runtime sanity check failed", err)
        return
    ready = status.get("RuntimeReady")
    if ready is None or not ready.status:
        reason = f"{ready.reason}: {ready.message}" if ready else "RuntimeReady condition missing"
        state.set_runtime_error(f"container runtime not ready: {reason}")
        klog.error("Container runtime not ready", reason=reason)
        return
    state.set_runtime_error(None)
    network = status.get("NetworkReady")
    if network is None or not network.status:
        why = (f"{network.reason}: {network.message}" if network
               else "NetworkReady condition missing")
        state.set_network_error(f"container runtime network not ready: {why}")
    else:
        state.set_network_error(None)
    state.set_runtime_sync()


async def update_runtime_up_forever(runtime: KubeGenericRuntimeManager,
                                    state: RuntimeState) -> None:
    while True:
        await update_runtime_up(runtime, state)
        await asyncio.sleep(RUNTIME_UP_PERIOD)
