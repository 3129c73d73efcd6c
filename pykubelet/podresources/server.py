"""The pod-resources API (``podresources/v1``) on ``<root-dir>/pod-resources/kubelet.sock``.

Upstream ``pkg/kubelet/apis/podresources``. Node agents that cannot ask the
API server which device a pod got (a GPU exporter labelling its figures with
the pod using each GPU, a topology-aware scheduler's node agent) read this
local gRPC service instead:

- ``List``: every active pod, each of its app containers and restartable init
  containers (sidecars) with the devices and exclusive CPUs it holds;
- ``Get``: the same for one pod, by namespace and name (feature gate
  ``KubeletPodResourcesGet``, on by default); an unknown pod is an error;
- ``GetAllocatableResources``: every device the device manager knows and the
  CPUs the CPU manager may hand out exclusively (none under the ``none`` policy).

pykubelet has no memory manager policy other than ``None`` and no dynamic
resource claims, so ``memory`` and ``dynamic_resources`` stay empty, as
upstream's are in that configuration.

Every call takes a token from a bucket of 10 refilled at 100 a second, as
upstream's limiter; a caller over the limit gets ``RESOURCE_EXHAUSTED``
"rejected by rate limit". Only root may use the socket (its directory is
0750, root's), which is the API's access control, as upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
import grpc.aio
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet import metrics
from pykubelet.api import is_restartable_init_container, pod_uid
from pykubelet.api.proto import podresources_v1_pb2 as pb
from pykubelet.api.proto import podresources_v1_pb2_grpc as pb_grpc
from pykubelet.util import klog
from pykubelet.util.flowcontrol import TokenBucket

SOCKET_NAME = "kubelet.sock"
POD_RESOURCES_DIR = "pod-resources"
# Upstream's limiter: at least unlikely that any legitimate agent needs more.
DEFAULT_QPS = 100
DEFAULT_BURST_TOKENS = 10
RATE_LIMITED = "rejected by rate limit"
API_VERSION = "v1"


def pod_resources_socket(root_dir: str) -> str:
    return os.path.join(root_dir, POD_RESOURCES_DIR, SOCKET_NAME)


# One device assignment: (resource name, device IDs, their NUMA node). The device
# manager gives one per device and NUMA node (none: the device has no topology), the
# shape upstream answers in.
DeviceAssignment = tuple[str, Sequence[str], Sequence[int]]


class PodsProvider(Protocol):
    def active_pods(self) -> list[V1Pod]: ...
    def pod_by_name(self, namespace: str, name: str) -> V1Pod | None: ...


class DevicesProvider(Protocol):
    def get_devices(self, pod_uid: str, container_name: str) -> Sequence[DeviceAssignment]: ...
    def get_allocatable_devices(self) -> Sequence[DeviceAssignment]: ...


class CPUsProvider(Protocol):
    def exclusive_cpus(self, pod_uid: str, container_name: str) -> Sequence[int]: ...
    def allocatable_cpus(self) -> Sequence[int]: ...


@dataclass(frozen=True)
class Providers:
    pods: PodsProvider
    devices: DevicesProvider
    cpus: CPUsProvider


def _topology(numa_nodes: Sequence[int]) -> pb.TopologyInfo | None:
    if not numa_nodes:
        return None
    return pb.TopologyInfo(nodes=[pb.NUMANode(ID=node) for node in numa_nodes])


def _container_devices(assignments: Sequence[DeviceAssignment]) -> list[pb.ContainerDevices]:
    return [pb.ContainerDevices(resource_name=resource, device_ids=list(ids),
                                topology=_topology(numa))
            for resource, ids, numa in assignments]


def _reported_containers(pod: V1Pod) -> list[V1Container]:
    """Restartable init containers (they run beside the app containers), then the app ones."""
    spec = pod.spec
    sidecars = [c for c in spec.init_containers or [] if is_restartable_init_container(c)]
    return [*sidecars, *(spec.containers or [])]


class PodResourcesServer(pb_grpc.PodResourcesListerServicer):
    """The ``PodResourcesLister`` service over the kubelet's managers."""

    def __init__(self, providers: Providers, *, get_enabled: bool = True,
                 limiter: TokenBucket | None = None) -> None:
        self._providers = providers
        self._get_enabled = get_enabled
        self._limiter = limiter or TokenBucket(DEFAULT_QPS, DEFAULT_BURST_TOKENS)

    async def _rate_limit(self, context: grpc.aio.ServicerContext) -> None:
        if not self._limiter.try_accept():
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)

    def _pod_resources(self, pod: V1Pod) -> pb.PodResources:
        uid = pod_uid(pod)
        devices, cpus = self._providers.devices, self._providers.cpus
        return pb.PodResources(
            name=pod.metadata.name or "", namespace=pod.metadata.namespace or "",
            containers=[pb.ContainerResources(
                name=container.name,
                devices=_container_devices(devices.get_devices(uid, container.name)),
                cpu_ids=list(cpus.exclusive_cpus(uid, container.name)))
                for container in _reported_containers(pod)])

    async def List(self, request: pb.ListPodResourcesRequest,
                   context: grpc.aio.ServicerContext) -> pb.ListPodResourcesResponse:
        await self._rate_limit(context)
        metrics.POD_RESOURCES_REQUESTS_TOTAL.labels(API_VERSION).inc()
        metrics.POD_RESOURCES_REQUESTS_LIST.labels(API_VERSION).inc()
        return pb.ListPodResourcesResponse(pod_resources=[
            self._pod_resources(pod) for pod in self._providers.pods.active_pods()])

    async def Get(self, request: pb.GetPodResourcesRequest,
                  context: grpc.aio.ServicerContext) -> pb.GetPodResourcesResponse:
        await self._rate_limit(context)
        metrics.POD_RESOURCES_REQUESTS_TOTAL.labels(API_VERSION).inc()
        metrics.POD_RESOURCES_REQUESTS_GET.labels(API_VERSION).inc()
        if not self._get_enabled:
            metrics.POD_RESOURCES_ERRORS_GET.labels(API_VERSION).inc()
            await context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        pod = self._providers.pods.pod_by_name(request.pod_namespace, request.pod_name)
        if pod is None:
            metrics.POD_RESOURCES_ERRORS_GET.labels(API_VERSION).inc()
            await context.abort(grpc.StatusCode.UNKNOWN,
                                f"pod {request.pod_name} in namespace {request.pod_namespace} "
                                "not found")
        assert pod is not None  # abort raises
        return pb.GetPodResourcesResponse(pod_resources=self._pod_resources(pod))

    async def GetAllocatableResources(
            self, request: pb.AllocatableResourcesRequest,
            context: grpc.aio.ServicerContext) -> pb.AllocatableResourcesResponse:
        await self._rate_limit(context)
        metrics.POD_RESOURCES_REQUESTS_TOTAL.labels(API_VERSION).inc()
        metrics.POD_RESOURCES_REQUESTS_GET_ALLOCATABLE.labels(API_VERSION).inc()
        return pb.AllocatableResourcesResponse(
            devices=_container_devices(self._providers.devices.get_allocatable_devices()),
            cpu_ids=list(self._providers.cpus.allocatable_cpus()))


async def serve_pod_resources(server: PodResourcesServer, socket_path: str, *,
                              serving: Callable[[], None] = lambda: None) -> None:
    """Serve on ``socket_path`` until cancelled (upstream ``ListenAndServePodResources``).

    A socket file left by an earlier kubelet is replaced (one is left at exit, as upstream
    leaves it). ``serving`` is called once the socket accepts connections (a test seam).
    """
    directory = os.path.dirname(socket_path)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    grpc_server = grpc.aio.server()
    pb_grpc.add_PodResourcesListerServicer_to_server(server, grpc_server)
    grpc_server.add_insecure_port(f"unix://{socket_path}")
    await grpc_server.start()
    klog.info("Starting to serve the podresources API", endpoint=f"unix://{socket_path}")
    serving()
    try:
        await grpc_server.wait_for_termination()
    finally:
        # Shielded: a cancelled kubelet still closes the socket's open calls.
        await asyncio.shield(grpc_server.stop(grace=None))


__all__ = [
    "DEFAULT_BURST_TOKENS",
    "DEFAULT_QPS",
    "CPUsProvider",
    "DeviceAssignment",
    "DevicesProvider",
    "PodResourcesServer",
    "PodsProvider",
    "Providers",
    "pod_resources_socket",
    "serve_pod_resources",
]
