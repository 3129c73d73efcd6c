"""A ``Kubelet`` of real modules with small fakes at its seams, in either mode.

``new_main_kubelet`` needs a container runtime and, in cluster mode, an API server;
these tests need neither. Every module the ``Kubelet`` holds is the real one, built
over fakes where it would reach out: the CRI clients are never connected (nothing
here reaches the runtime), the pod workers record what they are asked instead of
syncing, and the ``ClusterParts`` talk to in-memory Nodes, leases, pods, objects and
tokens. ``cluster_parts()`` or ``None`` is the mode, as in production.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import AuthenticationV1TokenRequest, V1Node, V1Pod

from pykubelet.client.informer import ObjectInformer
from pykubelet.cm.cpumanager import CPUManager, new_cpu_manager
from pykubelet.cm.devicemanager import DeviceManager
from pykubelet.cm.topologymanager import AffinityStore
from pykubelet.cmd.options import parse_command_line
from pykubelet.container.cache import PodCache
from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from pykubelet.envvars import ServiceStore
from pykubelet.events import Event, LoggingRecorder
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.getters import RootDirs
from pykubelet.kubelet.kubelet import (
    Kubelet,
    KubeletOptions,
    PodResourcesPods,
    SyncLoopMonitor,
)
from pykubelet.kubelet.network_linux import IPTablesUtilChains
from pykubelet.kubelet.node_status import ClusterParts
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.kubelet.resources import build_resource_managers, new_container_manager
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.kubelet.volume_host import PersistentVolumeReader, VolumeHost
from pykubelet.kuberuntime import KubeGenericRuntimeManager, RuntimeManagerOptions
from pykubelet.lifecycle.admission import PodAdmitHandler
from pykubelet.nodelease import NodeLeaseController
from pykubelet.nodestatus import NodeStatusManager, NodeStatusOptions
from pykubelet.objectcache import DirectStore, Manager
from pykubelet.pleg import GenericPLEG
from pykubelet.podresources import PodResourcesServer, Providers
from pykubelet.podworkers import PodWorkers, UpdatePodOptions
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.prober import Prober
from pykubelet.prober.results import ResultsManager
from pykubelet.stats import StatsProvider
from pykubelet.status import StatusManager
from pykubelet.token import TokenManager
from pykubelet.util.reflector import ApiListWatch, Reflector
from pykubelet.util.supervisor import Supervisor
from pykubelet.volumemanager import VolumeManager
from tests.unit.fake_nodes import FakeCache, FakeNodeAPI
from tests.unit.test_nodelease import FakeLeases
from tests.unit.test_podworkers import FakeSyncer
from tests.unit.test_status_sync import FakeApi

NODE = "n1"


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


async def _no_list(**_: Any) -> Any:
    raise AssertionError("these tests run no list/watch")


async def _no_object(namespace: str, name: str) -> dict[str, Any] | None:
    return None


async def _no_volume(name: str) -> dict[str, Any] | None:
    return None


async def _no_token(namespace: str, name: str, request: AuthenticationV1TokenRequest
                    ) -> tuple[str, datetime.datetime]:
    raise AssertionError("these tests request no token")


def cluster_parts(recorder: LoggingRecorder,
                  mirror_client: RecordingMirrorClient | None = None) -> ClusterParts:
    """What a kubelet with an API server has, over in-memory fakes of that server."""
    nodes = FakeNodeAPI()
    services = ServiceStore()
    return ClusterParts(
        node_informer=ObjectInformer(_no_list, V1Node, NODE, f"node {NODE}"),
        node_status=NodeStatusManager(NodeStatusOptions(node_name=NODE, hostname=NODE),
                                      nodes, nodes, FakeCache(), recorder),
        lease=NodeLeaseController(FakeLeases(), NODE, 40),
        mirror_client=mirror_client or RecordingMirrorClient(),
        status_sink=FakeApi(),
        services=services,
        service_reflector=Reflector("services", ApiListWatch(_no_list), services),
        config_maps=Manager(RecordingStore("configmap"), lambda pod: set()),
        secrets=Manager(RecordingStore("secret"), lambda pod: set()),
        tokens=TokenManager(_no_token),
        persistent_volumes=PersistentVolumeReader(_no_object, _no_volume))


class Built:
    """A kubelet and the fakes a test looks at."""

    def __init__(self, kubelet: Kubelet, workers: RecordingWorkers,
                 events: list[Event]) -> None:
        self.kubelet = kubelet
        self.workers = workers
        self.events = events


def build_kubelet(root_dir: Path, *, cluster: ClusterParts | None,
                  recorder: LoggingRecorder | None = None,
                  admit_handlers: list[PodAdmitHandler] | None = None,
                  iptables_util_chains: IPTablesUtilChains | None = None) -> Built:
    """A ``Kubelet`` of real modules over the fakes, standalone when ``cluster`` is None;
    without iptables utility chains unless given."""
    recorder = recorder or LoggingRecorder()
    events: list[Event] = []
    recorder.listeners.append(events.append)
    endpoint = f"unix://{root_dir}/no-runtime.sock"
    deps = Dependencies(runtime_service=RemoteRuntimeService(endpoint),
                        image_service=RemoteImageService(endpoint), recorder=recorder)
    server = parse_command_line([f"--root-dir={root_dir}"])
    liveness, readiness, startup = ResultsManager(), ResultsManager(), ResultsManager()
    runtime = KubeGenericRuntimeManager(
        deps.runtime_service, deps.image_service,
        RuntimeManagerOptions(root_dir=str(root_dir), node_name=NODE),
        liveness=liveness, startup=startup, recorder=recorder)
    cache = PodCache()
    pods = PodManager()
    workers = RecordingWorkers()
    status_manager = StatusManager(cluster.status_sink if cluster is not None else None,
                                   pods=pods)
    resources = build_resource_managers(
        server, new_container_manager(server, active_pods=list), deps.runtime_service,
        deps.image_service, runtime, workers, active_pods=list, kill_pod=_no_kill,
        recorder=recorder, node_name=NODE, sandbox_image="")
    volume_host = VolumeHost(lambda: (4000, 8 << 30))
    cpu_manager = none_cpu_manager(root_dir, deps.runtime_service)
    # Its own plugin directory: a unit test never serves the host's kubelet.sock.
    device_manager = DeviceManager(active_pods=list, sources_ready=lambda: True,
                                   plugin_dir=str(root_dir / "device-plugins"))
    kubelet = Kubelet(
        KubeletOptions(node_name=NODE, root_dir=str(root_dir)), deps=deps,
        supervisor=Supervisor(), runtime=runtime, cache=cache, pleg=GenericPLEG(runtime, cache),
        pod_manager=pods, status_manager=status_manager, runtime_state=RuntimeState(),
        probe_manager=ProbeManager(Prober(deps.runtime_service, recorder), liveness=liveness,
                                   readiness=readiness, startup=startup,
                                   status_provider=status_manager.peek_pod_status),
        pod_workers=workers, sources_ready=lambda: True, sync_loop_monitor=SyncLoopMonitor(),
        stats_provider=StatsProvider(deps.runtime_service, deps.image_service, NODE,
                                     str(root_dir), str(root_dir / "pod-logs")),
        admit_handlers=admit_handlers or [], pod_sync_loop_handlers=[],
        resources=resources, cpu_manager=cpu_manager, device_manager=device_manager,
        pod_resources=PodResourcesServer(Providers(
            pods=PodResourcesPods(list, pods), devices=device_manager, cpus=cpu_manager)),
        volume_manager=VolumeManager(RootDirs(str(root_dir)), recorder, volume_host,
                                     pod_runtime_removed=lambda uid: True,
                                     sources_ready=lambda: True),
        iptables_util_chains=iptables_util_chains, cluster=cluster)
    return Built(kubelet, workers, events)


def none_cpu_manager(root_dir: Path, runtime_service: RemoteRuntimeService) -> CPUManager:
    """The default CPU manager (policy ``none``): no exclusive CPUs."""
    return new_cpu_manager(policy_name="none", root_dir=str(root_dir), reserved_system_cpus="",
                           kube_reserved={}, system_reserved={}, reconcile_period=10.0,
                           runtime_service=runtime_service, active_pods=list,
                           pod_status=lambda uid: None, sources_ready=lambda: True,
                           affinity=AffinityStore())


async def _no_kill(pod: V1Pod, grace: int, status_func: Any) -> None:
    raise AssertionError("these tests evict nothing")


__all__ = ["NODE", "Built", "RecordingMirrorClient", "RecordingStore", "RecordingWorkers",
           "build_kubelet", "cluster_parts"]
