"""A ``Kubelet`` built by the composition root, ``new_main_kubelet``, over fakes at
``Dependencies``, in either mode.

Everything between the fakes and the ``Kubelet`` is the production wiring. The fakes
are where a kubelet reaches out: the CRI runtime answers only what building a kubelet
asks (its version and status) and is never connected, the API server (cluster mode)
is an address nothing listens on, and the machine is a fake two-NUMA-node one written
under ``Dependencies.host_root``. Nothing is started; a test that runs a loop starts
it itself.

``with_seams`` re-assembles a built kubelet's parts with other pod workers or cluster
parts: ``build_kubelet`` gives the sync loop's pod handlers pod workers that record
what they are asked instead of syncing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import ApiClient, Configuration, V1Pod

from pykubelet.cmd.options import parse_command_line
from pykubelet.container.cache import PodCache
from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from pykubelet.cri.runtime import KUBE_RUNTIME_API_VERSION
from pykubelet.events import Event, LoggingRecorder
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.kubelet import Kubelet, make_pod_source_config, new_main_kubelet
from pykubelet.kubelet.node_status import ClusterParts, new_node_informer
from pykubelet.objectcache import DirectStore, Manager
from pykubelet.podworkers import PodWorkers, UpdatePodOptions
from tests.unit.fake_machine import write_fake_machine
from tests.unit.test_podworkers import FakeSyncer

NODE = "n1"
HOST_IP = "10.0.0.1"
# Two NUMA nodes of four CPUs each (one socket each, no SMT).
NUMA_NODES = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}


class AnsweringRuntime(RemoteRuntimeService):
    """The CRI runtime as far as building a kubelet asks it: its version (a runtime of
    another CRI version is refused) and its status (the pause image image GC keeps)."""

    async def version(self) -> api_pb2.VersionResponse:
        return api_pb2.VersionResponse(version=KUBE_RUNTIME_API_VERSION,
                                       runtime_name="fake", runtime_version="1.0",
                                       runtime_api_version="v1")

    async def status(self, verbose: bool = False) -> api_pb2.StatusResponse:
        return api_pb2.StatusResponse()


@asynccontextmanager
async def fake_dependencies(root: Path, *, cluster: bool,
                            recorder: LoggingRecorder | None = None,
                            host: Path | None = None) -> AsyncIterator[Dependencies]:
    """The kubelet's dependencies over the fakes; in cluster mode with API clients to an
    address nothing listens on (closed on exit). The machine is ``host``, else the
    two-NUMA-node one written under ``root/host``."""
    if host is None:
        host = write_fake_machine(root / "host", numa_nodes=NUMA_NODES)
    endpoint = f"unix://{root}/no-runtime.sock"
    api = ApiClient(Configuration(host="http://127.0.0.1:9")) if cluster else None
    try:
        yield Dependencies(runtime_service=AnsweringRuntime(endpoint),
                           image_service=RemoteImageService(endpoint),
                           recorder=recorder or LoggingRecorder(),
                           kube_client=api, heartbeat_client=api, host_root=str(host))
    finally:
        if api is not None:
            await api.close()


@asynccontextmanager
async def new_kubelet(root: Path, *, cluster: bool = False, flags: Sequence[str] = (),
                      recorder: LoggingRecorder | None = None,
                      host: Path | None = None) -> AsyncIterator[Kubelet]:
    """``new_main_kubelet`` as ``createAndInitKubelet`` calls it, over the fakes, with
    these command-line ``flags``; the kubelet's root directory is ``root/kubelet``."""
    server = parse_command_line([f"--root-dir={root / 'kubelet'}", *flags])
    async with fake_dependencies(root, cluster=cluster, recorder=recorder,
                                 host=host) as deps:
        informer = new_node_informer(deps, NODE)
        pod_config = make_pod_source_config(
            server, NODE, deps,
            node_has_synced=informer.has_synced if informer is not None else None)
        yield await new_main_kubelet(server, deps, pod_config, NODE, HOST_IP,
                                     node_informer=informer)


class RecordingWorkers(PodWorkers):
    """The pod workers, except that an update is recorded instead of starting a worker."""

    def __init__(self) -> None:
        super().__init__(FakeSyncer(), PodCache())
        self.updates: list[UpdatePodOptions] = []
        self.terminated: set[str] = set()

    def update_pod(self, options: UpdatePodOptions) -> None:
        self.updates.append(options)

    def is_pod_known_terminated(self, uid: str) -> bool:
        return uid in self.terminated

    def summary(self) -> list[tuple[str, str, str | None]]:
        return [(u.update_type.value, u.pod.metadata.name,
                 u.mirror_pod.metadata.uid if u.mirror_pod is not None else None)
                for u in self.updates if u.pod is not None]


class RecordingMirrorClient:
    """The API server's mirror pods, as far as the kubelet creates and deletes them."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.deleted: list[str] = []

    async def create_mirror_pod(self, pod: V1Pod) -> None:
        self.created.append(pod.metadata.name)

    async def delete_mirror_pod(self, full_name: str, uid: str | None) -> bool:
        self.deleted.append(full_name)
        return True


class RecordingStore(DirectStore):
    """A ConfigMap or Secret store that remembers being stopped (its watches ended)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind, _no_object)
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True


async def _no_object(namespace: str, name: str) -> dict[str, Any] | None:
    return None


class Built:
    """A kubelet and the fakes a test looks at."""

    def __init__(self, kubelet: Kubelet, workers: RecordingWorkers,
                 events: list[Event]) -> None:
        self.kubelet = kubelet
        self.workers = workers
        self.events = events


def with_seams(kubelet: Kubelet, *, pod_workers: PodWorkers | None = None,
               cluster: ClusterParts | None = None) -> Kubelet:
    """A ``Kubelet`` of ``kubelet``'s parts, with these pod workers or cluster parts
    instead of the ones the root built."""
    pods = kubelet.pod_parts
    if pod_workers is not None:
        pods = dataclasses.replace(pods, pod_workers=pod_workers)
    return Kubelet(
        kubelet.options, deps=kubelet.deps, machine=kubelet.machine,
        runtime=kubelet.runtime_parts, pods=pods, resources=kubelet.resources,
        cluster=cluster or kubelet.cluster, runtime_state=kubelet.runtime_state,
        sources_ready=kubelet.sources_ready, admit_handlers=kubelet.admit_handlers,
        pod_resources=kubelet.pod_resources, iptables_util_chains=kubelet.iptables_util_chains)


def recording_stores(cluster: ClusterParts) -> ClusterParts:
    """``cluster`` with ConfigMap and Secret stores that record being stopped."""
    return dataclasses.replace(
        cluster, config_maps=Manager(RecordingStore("configmap"), lambda pod: set()),
        secrets=Manager(RecordingStore("secret"), lambda pod: set()))


@asynccontextmanager
async def build_kubelet(root: Path, *, flags: Sequence[str] = (),
                        mirror_client: RecordingMirrorClient | None = None
                        ) -> AsyncIterator[Built]:
    """The root's kubelet with recording pod workers: standalone, or in cluster mode
    with ``mirror_client`` as its mirror pods."""
    recorder = LoggingRecorder()
    events: list[Event] = []
    recorder.listeners.append(events.append)
    async with new_kubelet(root, cluster=mirror_client is not None, flags=flags,
                           recorder=recorder) as built:
        workers = RecordingWorkers()
        cluster = None
        if built.cluster is not None and mirror_client is not None:
            cluster = dataclasses.replace(built.cluster, mirror_client=mirror_client)
        yield Built(with_seams(built, pod_workers=workers, cluster=cluster), workers, events)


__all__ = ["HOST_IP", "NODE", "NUMA_NODES", "AnsweringRuntime", "Built",
           "RecordingMirrorClient", "RecordingStore", "RecordingWorkers", "build_kubelet",
           "fake_dependencies", "new_kubelet", "recording_stores", "with_seams"]
