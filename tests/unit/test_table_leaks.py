"""The kubelet's per-pod tables are empty again after many pod lifecycles, as /metrics shows.

``bench/soak.py`` reads the ``pykubelet_tracked_pods`` gauge before and after a
churn of pods; these run the same lifecycles through one component each and
read the same gauge, so a table that keeps a pod after it is gone fails here.
"""

from __future__ import annotations

import asyncio

from kubernetes_asyncio.client import V1Pod

from pykubelet.metrics import KUBELET_REGISTRY
from pykubelet.objectcache.manager import Manager, ObjectStore, configmap_names
from pykubelet.status.manager import StatusManager
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


async def test_asyncio_task_gauge_follows_the_event_loop() -> None:
    before = KUBELET_REGISTRY.get_sample_value("pykubelet_asyncio_tasks")
    assert before is not None
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(5)]
    assert KUBELET_REGISTRY.get_sample_value("pykubelet_asyncio_tasks") == before + 5
    release.set()
    await asyncio.gather(*waiting)
    assert KUBELET_REGISTRY.get_sample_value("pykubelet_asyncio_tasks") == before
