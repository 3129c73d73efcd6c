"""The sync loop's pod handlers: admission, mirror pods and what reaches the pod workers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import V1PodStatus

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
    SyncPodType,
)
from pykubelet.events import Event
from pykubelet.kubelet.kubelet import Kubelet
from tests.unit.kubelet_fakes import RecordingWorkers, build_kubelet


@asynccontextmanager
async def kubelet(root: Path, *, max_pods: int | None = None
                  ) -> AsyncIterator[tuple[Kubelet, RecordingWorkers, list[Event]]]:
    """A standalone kubelet (the handlers are the same in both modes) built by the root,
    admitting on its machine's allocatable with at most ``max_pods`` pods."""
    flags = [f"--max-pods={max_pods}"] if max_pods is not None else []
    async with build_kubelet(root, flags=flags) as built:
        yield built.kubelet, built.workers, built.events


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


async def test_admitted_pods_are_created_oldest_first(tmp_path: Path) -> None:
    async with kubelet(tmp_path) as (the_kubelet, workers, _):
        await the_kubelet.handle_pod_additions([pod("young", created="2026-01-02T00:00:00Z"),
                                          pod("old", created="2026-01-01T00:00:00Z")])
        assert workers.summary() == [("create", "old", None), ("create", "young", None)]


async def test_rejected_pods_never_reach_a_worker_and_are_failed_with_an_event(
        tmp_path: Path) -> None:
    async with kubelet(tmp_path, max_pods=1) as (the_kubelet, workers, events):
        await the_kubelet.handle_pod_additions(
            [pod("first"), pod("second", created="2026-01-03T00:00:00Z")])
        assert workers.summary() == [("create", "first", None)]
        status = the_kubelet.status_manager.get_pod_status("uid-second")
        assert status is not None
        assert (status.phase, status.reason) == ("Failed", "OutOfpods")
        assert status.message == ("Pod was rejected: Node didn't have enough resource: pods, "
                                  "requested: 1, used: 1, capacity: 1")
        assert [(e.reason, e.type) for e in events] == [("OutOfpods", "Warning")]


async def test_terminated_pods_free_their_place(tmp_path: Path) -> None:
    async with kubelet(tmp_path, max_pods=1) as (the_kubelet, workers, _):
        await the_kubelet.handle_pod_additions([pod("first")])
        workers.terminated.add("uid-first")
        await the_kubelet.handle_pod_additions([pod("second")])
        assert [name for _, name, _ in workers.summary()] == ["first", "second"]


async def test_mirror_pods_are_never_run_and_update_their_static_pod(tmp_path: Path) -> None:
    async with kubelet(tmp_path) as (the_kubelet, workers, _):
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


async def test_removed_pods_are_killed(tmp_path: Path) -> None:
    async with kubelet(tmp_path) as (the_kubelet, workers, _):
        gone = pod("gone")
        await the_kubelet.handle_pod_additions([gone])
        the_kubelet.handle_pod_removes([gone])
        assert workers.summary()[-1] == ("kill", "gone", None)
        assert the_kubelet.pod_manager.get_pods() == []


async def test_a_status_only_change_is_remembered_without_a_sync(tmp_path: Path) -> None:
    async with kubelet(tmp_path) as (the_kubelet, workers, _):
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
