"""The kubelet's per-pod tables are empty again after many pod lifecycles, as /metrics shows.

``bench/soak.py`` reads the ``pykubelet_tracked_pods`` gauge before and after a
churn of pods; these run the same lifecycles through one component each and
read the same gauge, so a table that keeps a pod after it is gone fails here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import V1ConfigMapEnvSource, V1EnvFromSource, V1Pod

from pykubelet.api.kubetypes import SyncPodType
from pykubelet.kubelet.pod_sync import KubeletPodSyncer, PodSyncOptions
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.kubelet.volume_host import VolumeHost
from pykubelet.metrics import KUBELET_REGISTRY
from pykubelet.objectcache import DirectStore
from pykubelet.objectcache.manager import Manager, ObjectStore, configmap_names
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.results import ResultsManager
from pykubelet.status import ReasonCache
from pykubelet.status.manager import StatusManager
from tests.unit.test_active_deadline import FakeRuntime, running, runtime_status
from tests.unit.test_active_deadline import make_pod as deadline_pod
from tests.unit.test_objectcache import FakeApi
from tests.unit.test_objectcache import pod as pod_naming
from tests.unit.test_status_generate import make_pod
from tests.unit.test_status_manager import running_status

LIFECYCLES = 200


def tracked(table: str) -> float | None:
    return KUBELET_REGISTRY.get_sample_value("pykubelet_tracked_pods", {"table": table})


def numbered_pod(index: int) -> V1Pod:
    pod = make_pod()
    pod.metadata.uid = f"uid-{index}"
    pod.metadata.name = f"pod-{index}"
    return pod


def test_status_manager_forgets_every_pod_once_housekeeping_drops_it() -> None:
    manager = StatusManager()
    pods = [numbered_pod(index) for index in range(LIFECYCLES)]
    for pod in pods:
        manager.set_pod_status(pod, running_status(pod))
    assert tracked("status_manager") == LIFECYCLES
    for pod in pods:
        manager.terminate_pod(pod)
    manager.remove_orphaned_statuses(known_uids=[])
    assert tracked("status_manager") == 0


async def test_configmap_manager_keeps_no_pod_after_it_is_unregistered() -> None:
    api = FakeApi()
    for index in range(10):
        api.put(f"cm-{index}", {})
    manager = Manager(ObjectStore("configmap", api.fetch), configmap_names)
    for index in range(LIFECYCLES):
        pod = pod_naming(f"uid-{index}", volume_cm=f"cm-{index % 10}")
        manager.register_pod(pod)
        await manager.get_object("ns", f"cm-{index % 10}")
    assert tracked("configmap_manager") == LIFECYCLES
    for index in range(LIFECYCLES):
        manager.unregister_pod(f"uid-{index}")
    assert tracked("configmap_manager") == 0


async def test_env_objects_are_dropped_when_each_pod_has_terminated(tmp_path: Path) -> None:
    async def fetch(namespace: str, name: str) -> dict[str, Any] | None:
        return {"data": {"MODE": name}}

    host = VolumeHost(lambda: (1, 1), config_maps=Manager(DirectStore("configmap", fetch),
                                                          configmap_names))
    statuses, runtime = StatusManager(), FakeRuntime()
    probes = ProbeManager(None, liveness=ResultsManager(), readiness=ResultsManager(),
                          startup=ResultsManager(), status_provider=statuses.peek_pod_status)
    syncer = KubeletPodSyncer(PodSyncOptions(root_dir=str(tmp_path)), runtime, statuses,
                              ReasonCache(), RuntimeState(), probes, env_objects=host,
                              is_pod_termination_requested=lambda uid: False,
                              abnormal_termination=lambda uid: None)
    pods = []
    for index in range(LIFECYCLES // 10):
        pod = deadline_pod(None, uid=f"uid-{index}")
        pod.spec.containers[0].env_from = [
            V1EnvFromSource(config_map_ref=V1ConfigMapEnvSource(name=f"cm-{index}"))]
        await syncer.sync_pod(SyncPodType.CREATE, pod, None, runtime_status(running()))
        pods.append(pod)
    assert tracked("env_readers") == len(pods)
    assert host.env_objects() == len(pods)
    for pod in pods:
        await syncer.sync_terminated_pod(pod, runtime.after_kill)
    assert tracked("env_readers") == 0
    assert host.env_objects() == 0


async def test_asyncio_task_gauge_follows_the_event_loop() -> None:
    before = KUBELET_REGISTRY.get_sample_value("pykubelet_asyncio_tasks")
    assert before is not None
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(5)]
    assert KUBELET_REGISTRY.get_sample_value("pykubelet_asyncio_tasks") == before + 5
    release.set()
    await asyncio.gather(*waiting)
    assert KUBELET_REGISTRY.get_sample_value("pykubelet_asyncio_tasks") == before
