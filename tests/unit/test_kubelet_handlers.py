"""The sync loop's pod handlers: admission, mirror pods and what reaches the pod workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import V1Node, V1PodStatus

from pykubelet.api import from_dict, pod_from_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
    SyncPodType,
)
from pykubelet.events import Event
from pykubelet.kubelet.kubelet import Kubelet
from pykubelet.lifecycle.admission import PredicateAdmitHandler
from tests.unit.kubelet_fakes import RecordingWorkers, build_kubelet


def node(pods: int = 10, labels: dict[str, str] | None = None) -> V1Node:
    return from_dict({"metadata": {"name": "n1", "labels": labels or {}},
                      "status": {"allocatable": {"cpu": "4", "memory": "8Gi",
                                                 "pods": str(pods)}}}, V1Node)


def kubelet(the_node: V1Node | None = None) -> tuple[Kubelet, RecordingWorkers, list[Event]]:
    """A standalone kubelet (the handlers are the same in both modes) admitting on
    ``the_node``'s allocatable."""
    built = build_kubelet(Path("/nonexistent"), cluster=None, admit_handlers=[
        PredicateAdmitHandler(lambda: the_node or node())])
    return built.kubelet, built.workers, built.events


def pod(name: str, source: str = "api", created: str = "2026-01-01T00:00:00Z",
        **spec: Any) -> Any:
    return pod_from_dict({
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "creationTimestamp": created,
                     "annotations": {CONFIG_SOURCE_ANNOTATION_KEY: source,
                                     CONFIG_HASH_ANNOTATION_KEY: f"uid-{name}"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}],
                 **spec}})


def mirror_of(static: Any, uid: str = "mirror-uid") -> Any:
    mirror = pod_from_dict({"metadata": {
        "name": static.metadata.name, "namespace": "default", "uid": uid,
        "annotations": {CONFIG_SOURCE_ANNOTATION_KEY: "api",
                        CONFIG_MIRROR_ANNOTATION_KEY: static.metadata.uid}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}})
    return mirror


async def test_admitted_pods_are_created_oldest_first() -> None:
    the_kubelet, workers, _ = kubelet()
    await the_kubelet.handle_pod_additions([pod("young", created="2026-01-02T00:00:00Z"),
                                      pod("old", created="2026-01-01T00:00:00Z")])
    assert workers.summary() == [("create", "old", None), ("create", "young", None)]


async def test_rejected_pods_never_reach_a_worker_and_are_failed_with_an_event() -> None:
    the_kubelet, workers, events = kubelet(node(pods=1))
    await the_kubelet.handle_pod_additions(
        [pod("first"), pod("second", created="2026-01-03T00:00:00Z")])
    assert workers.summary() == [("create", "first", None)]
    status = the_kubelet.status_manager.get_pod_status("uid-second")
    assert status is not None
    assert (status.phase, status.reason) == ("Failed", "OutOfpods")
    assert status.message == ("Pod was rejected: Node didn't have enough resource: pods, "
                              "requested: 1, used: 1, capacity: 1")
    assert [(e.reason, e.type) for e in events] == [("OutOfpods", "Warning")]


async def test_terminated_pods_free_their_place() -> None:
    the_kubelet, workers, _ = kubelet(node(pods=1))
    await the_kubelet.handle_pod_additions([pod("first")])
    workers.terminated.add("uid-first")
    await the_kubelet.handle_pod_additions([pod("second")])
    assert [name for _, name, _ in workers.summary()] == ["first", "second"]


async def test_mirror_pods_are_never_run_and_update_their_static_pod() -> None:
    the_kubelet, workers, _ = kubelet()
    static = pod("etcd", source="file")
    mirror = mirror_of(static)
    await the_kubelet.handle_pod_additions([mirror])  # static pod not known yet: nothing to do
    assert workers.updates == []
    await the_kubelet.handle_pod_additions([static])
    assert workers.summary() == [("create", "etcd", "mirror-uid")]
    the_kubelet.handle_pod_updates([mirror])
    the_kubelet.handle_pod_removes([mirror])
    assert workers.summary()[1:] == [("update", "etcd", "mirror-uid"), ("update", "etcd", None)]
    assert [p.metadata.uid for p in the_kubelet.pod_manager.get_pods()] == ["uid-etcd"]
    # Removing a mirror pod never kills its static pod.
    assert all(u.update_type != SyncPodType.KILL for u in workers.updates)


async def test_removed_pods_are_killed() -> None:
    the_kubelet, workers, _ = kubelet()
    gone = pod("gone")
    await the_kubelet.handle_pod_additions([gone])
    the_kubelet.handle_pod_removes([gone])
    assert workers.summary()[-1] == ("kill", "gone", None)
    assert the_kubelet.pod_manager.get_pods() == []


async def test_a_status_only_change_is_remembered_without_a_sync() -> None:
    the_kubelet, workers, _ = kubelet()
    await the_kubelet.handle_pod_additions([pod("p")])
    changed = pod("p")
    changed.status = V1PodStatus(phase="Running")
    the_kubelet.handle_pod_reconcile([changed])
    assert len(workers.updates) == 1
    reconciled = the_kubelet.pod_manager.get_pod_by_uid("uid-p")
    assert reconciled is not None and reconciled.status.phase == "Running"
    gated = pod("gated", readinessGates=[{"conditionType": "example.com/ready"}])
    await the_kubelet.handle_pod_additions([gated])
    the_kubelet.handle_pod_reconcile([gated])
    assert workers.summary()[-1] == ("sync", "gated", None)
