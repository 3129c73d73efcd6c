"""Status to the API server: what a client reading ``kubectl get pod`` sees, and at what cost.

The API server is replaced by an in-memory store at the ``StatusSink`` seam
that applies strategic merge patches as the real one does for pod status
(conditions merged by type, other lists replaced); the real server is used by
the integration tests.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio.client import V1Pod, V1PodCondition, V1PodStatus

from pykubelet.api import pod_from_dict, to_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
)
from pykubelet.container import ContainerState
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.status.manager import GONE_MEMORY, StatusManager
from pykubelet.status.patch import POD_STATUS_MERGE_KEYS, pod_status_patch, prune, status_wire
from tests.unit.test_status_generate import UID, generate, instance, make_pod, runtime


def apply_patch(original: dict[str, Any], patch: dict[str, Any],
                merge_keys: dict[str, str]) -> dict[str, Any]:
    """The API server's side of a strategic merge patch, for the lists pod status has."""
    result = dict(original)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            continue
        if value is None:
            result.pop(key, None)
        elif key in merge_keys and isinstance(value, list):
            merge_key = merge_keys[key]
            by_key = {item[merge_key]: dict(item) for item in result.get(key) or []}
            for change in value:
                if change.get("$patch") == "delete":
                    by_key.pop(change[merge_key], None)
                elif change[merge_key] in by_key:
                    by_key[change[merge_key]] = apply_patch(by_key[change[merge_key]], change, {})
                else:
                    by_key[change[merge_key]] = change
            order = [e[merge_key] for e in patch.get(f"$setElementOrder/{key}") or []]
            result[key] = ([by_key[k] for k in order if k in by_key]
                           + [v for k, v in by_key.items() if k not in order])
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = apply_patch(result[key], value, {})
        else:
            result[key] = value
    pruned: dict[str, Any] = prune(result)
    return pruned


class FakeApi:
    """Pods by namespace/name, with request counts."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets = self.patches = self.deletes = 0
        self.fail = False
        self.last_patch: dict[str, Any] = {}
        # Status fields this (older) server does not know and silently drops.
        self.unknown_fields: set[str] = set()

    def store(self, pod: V1Pod) -> None:
        self.pods[(pod.metadata.namespace, pod.metadata.name)] = prune(to_dict(pod))

    def pod(self, name: str = "web") -> V1Pod:
        return pod_from_dict(copy.deepcopy(self.pods[("default", name)]))

    async def get_pod(self, namespace: str, name: str) -> V1Pod | None:
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        self.gets += 1
        stored = self.pods.get((namespace, name))
        return pod_from_dict(copy.deepcopy(stored)) if stored is not None else None

    async def patch_pod_status(self, namespace: str, name: str,
                               patch: dict[str, Any]) -> V1Pod:
        self.patches += 1
        self.last_patch = patch
        stored = self.pods[(namespace, name)]
        assert patch["metadata"]["uid"] == stored["metadata"]["uid"], "UID precondition"
        stored["status"] = apply_patch(stored.get("status") or {}, patch.get("status") or {},
                                       POD_STATUS_MERGE_KEYS)
        for field in self.unknown_fields:
            stored["status"].pop(field, None)
        return pod_from_dict(copy.deepcopy(stored))

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.deletes += 1
        stored = self.pods.get((namespace, name))
        if stored is not None and stored["metadata"]["uid"] == uid:
            del self.pods[(namespace, name)]


def api_pod(**spec: Any) -> V1Pod:
    pod = make_pod(**spec)
    pod.metadata.annotations = {CONFIG_SOURCE_ANNOTATION_KEY: "api"}
    pod.status = V1PodStatus(phase="Pending", conditions=[
        V1PodCondition(type="PodScheduled", status="True")])
    return pod_from_dict(to_dict(pod))


def setup(**spec: Any) -> tuple[V1Pod, FakeApi, PodManager, StatusManager]:
    pod = api_pod(**spec)
    api = FakeApi()
    api.store(pod)
    pods = PodManager()
    pods.add_pod(pod)
    manager = StatusManager(api, pods=pods)
    return pod, api, pods, manager


def running(pod: V1Pod) -> V1PodStatus:
    return generate(pod, runtime(instance("app", ContainerState.RUNNING)))


async def test_each_change_is_written_once_and_nothing_is_written_when_nothing_changed() -> None:
    pod, api, pods, manager = setup()
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    assert (api.gets, api.patches) == (1, 1)
    assert api.pod().status.phase == "Running"

    # The same status again: not even a version bump, so nothing is sent.
    manager.set_pod_status(pod, running(pod))
    assert await manager.sync_batch(all_pods=False) == 0
    # The periodic resync compares with the watch's copy, which now matches.
    pods.update_pod(api.pod())
    assert await manager.sync_batch(all_pods=True) == 0
    assert (api.gets, api.patches) == (1, 1)


async def test_failures_are_retried_by_the_next_sync() -> None:
    pod, api, _, manager = setup()
    manager.set_pod_status(pod, running(pod))
    api.fail = True
    await manager.sync_batch(all_pods=False)
    assert api.patches == 0
    api.fail = False
    await manager.sync_batch(all_pods=True)
    assert api.patches == 1
    assert api.pod().status.phase == "Running"


async def test_conditions_the_kubelet_does_not_own_are_kept() -> None:
    pod, api, _, manager = setup()
    stored = api.pods[("default", "web")]
    stored["status"]["conditions"].append(
        {"type": "example.com/gate", "status": "True", "reason": "Opened"})
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    conditions = {c.type: c.status for c in api.pod().status.conditions}
    assert conditions["example.com/gate"] == "True"
    assert conditions["Ready"] == "True"
    # The patch only carried the kubelet's conditions, item by item.
    assert "$setElementOrder/conditions" in api.last_patch["status"]


async def test_drift_in_the_api_is_corrected_by_the_periodic_sync() -> None:
    pod, api, pods, manager = setup()
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    api.pods[("default", "web")]["status"]["phase"] = "Pending"  # someone else wrote
    pods.update_pod(api.pod())
    assert await manager.sync_batch(all_pods=True) == 1
    assert api.pod().status.phase == "Running"
    assert api.patches == 2


async def test_terminal_phase_waits_until_no_container_can_run() -> None:
    pod = api_pod(restart_policy="Never")
    api = FakeApi()
    api.store(pod)
    pods = PodManager()
    pods.add_pod(pod)
    containers_may_run = True
    manager = StatusManager(api, pods=pods,
                            could_have_running_containers=lambda uid: containers_may_run)
    done = generate(pod, runtime(instance("app", ContainerState.EXITED)))
    assert done.phase == "Succeeded"
    manager.set_pod_status(pod, done)
    await manager.sync_batch(all_pods=False)
    assert api.pod().status.phase == "Pending"

    containers_may_run = False
    manager.terminate_pod(pod)
    await manager.sync_batch(all_pods=False)
    assert api.pod().status.phase == "Succeeded"
    ready = next(c for c in api.pod().status.conditions if c.type == "Ready")
    assert ready.status == "False"


async def test_a_gracefully_deleted_pod_is_deleted_once_finished() -> None:
    pod, api, pods, manager = setup()
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)

    stored = api.pods[("default", "web")]
    stored["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:30Z"
    stored["metadata"]["deletionGracePeriodSeconds"] = 30
    deleting = api.pod()
    pods.update_pod(deleting)
    # While the containers stop, the status is written but the pod stays.
    manager.set_pod_status(deleting, generate(deleting, runtime(
        instance("app", ContainerState.EXITED, exit_code=137))))
    await manager.sync_batch(all_pods=False)
    assert api.deletes == 0

    manager.terminate_pod(deleting)
    await manager.sync_batch(all_pods=False)
    assert api.deletes == 1
    assert ("default", "web") not in api.pods
    assert manager.get_pod_status(UID) is None


async def test_a_recreated_pod_is_not_patched_with_its_predecessors_status() -> None:
    pod, api, _, manager = setup()
    manager.set_pod_status(pod, running(pod))
    newer = api_pod()
    newer.metadata.uid = "another-uid"
    api.store(newer)
    await manager.sync_batch(all_pods=False)
    assert api.patches == 0
    assert api.pod().status.phase == "Pending"
    assert manager.get_pod_status(UID) is None


async def test_a_pod_gone_from_the_api_is_not_read_again_for_each_later_change() -> None:
    """A pod deleted at once (grace period 0) leaves the API before its containers stop; the
    statuses its termination still records have nowhere to go, and one GET finds that out.
    Before, every later wake of the status loop (any pod's change) and every periodic sync
    read it again until the pod's status was forgotten: up to 20 GETs per pod in a churn."""
    pod, api, pods, manager = setup()
    other = api_pod()
    other.metadata.name, other.metadata.uid = "other", "other-uid"
    api.store(other)
    pods.add_pod(other)
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    assert (api.gets, api.patches) == (1, 1)

    del api.pods[("default", "web")]  # deleted with grace period 0
    manager.set_pod_status(pod, generate(pod, runtime(
        instance("app", ContainerState.EXITED, exit_code=137))))
    await manager.sync_batch(all_pods=False)
    assert api.gets == 2  # the one GET that finds it gone

    manager.terminate_pod(pod)
    manager.set_pod_status(other, running(other))
    await manager.sync_batch(all_pods=False)
    pods.update_pod(api.pod("other"))  # the watch delivers the other pod's new status
    await manager.sync_batch(all_pods=True)
    assert (api.gets, api.patches) == (3, 2)  # the other pod's GET and PATCH only
    assert api.pod("other").status.phase == "Running"

    # Housekeeping forgets the pod's status, then its worker, still stopping it, records
    # one more: that is not read from the API either.
    manager.remove_orphaned_statuses(["other-uid"])
    manager.set_pod_status(pod, generate(pod, runtime(
        instance("app", ContainerState.EXITED, exit_code=137))))
    await manager.sync_batch(all_pods=False)
    assert api.gets == 3

    # A new pod that takes the name is a new object: its status is written.
    newer = api_pod()
    newer.metadata.uid = "newer-uid"
    api.store(newer)
    pods.add_pod(newer)
    manager.set_pod_status(newer, running(newer))
    await manager.sync_batch(all_pods=False)
    assert api.pod().status.phase == "Running"


async def test_a_pod_whose_deletion_the_watch_reported_is_not_read_at_all() -> None:
    """The usual order under churn: the watch's deletion reaches the pod manager before the
    status loop sends the statuses the pod's termination recorded; no GET can be of use."""
    pod, api, pods, manager = setup()
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    assert (api.gets, api.patches) == (1, 1)

    del api.pods[("default", "web")]
    pods.remove_pod(pod)  # the watch's DELETED event
    manager.set_pod_status(pod, generate(pod, runtime(
        instance("app", ContainerState.EXITED, exit_code=137))))
    manager.terminate_pod(pod)
    await manager.sync_batch(all_pods=False)
    await manager.sync_batch(all_pods=True)
    assert (api.gets, api.patches) == (1, 1)
    # The status is still there for the kubelet's own readers until housekeeping forgets it.
    status = manager.get_pod_status(UID)
    assert status is not None and status.phase == "Failed"


async def test_pods_found_gone_are_remembered_for_a_while_only() -> None:
    pod, api, pods, _ = setup()
    clock = [datetime(2026, 11, 29, 12, 0, tzinfo=UTC)]
    manager = StatusManager(api, pods=pods, now=lambda: clock[0])
    del api.pods[("default", "web")]
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    await manager.sync_batch(all_pods=True)
    assert api.gets == 1
    clock[0] += GONE_MEMORY + timedelta(seconds=1)
    # Its status was never forgotten here, so once the memory of it is dropped the
    # periodic sync asks the API again (and forgets it again).
    await manager.sync_batch(all_pods=True)
    assert api.gets == 2


def static_and_mirror() -> tuple[V1Pod, V1Pod]:
    static = make_pod()
    static.metadata.annotations = {CONFIG_SOURCE_ANNOTATION_KEY: "file",
                                   CONFIG_HASH_ANNOTATION_KEY: UID}
    mirror = pod_from_dict(to_dict(static))
    mirror.metadata.uid = "mirror-uid"
    mirror.metadata.annotations = {CONFIG_SOURCE_ANNOTATION_KEY: "api",
                                   CONFIG_HASH_ANNOTATION_KEY: UID,
                                   CONFIG_MIRROR_ANNOTATION_KEY: UID}
    mirror.status = V1PodStatus(phase="Pending")
    return static, mirror


async def test_a_static_pods_status_is_written_to_its_mirror_pod() -> None:
    static, mirror = static_and_mirror()
    api = FakeApi()
    pods = PodManager()
    pods.add_pod(static)
    manager = StatusManager(api, pods=pods)
    manager.set_pod_status(static, running(static))
    # No mirror pod yet: nothing to write to.
    assert await manager.sync_batch(all_pods=False) == 0
    api.store(mirror)
    pods.add_pod(mirror)
    await manager.sync_batch(all_pods=False)
    assert api.pod().status.phase == "Running"
    assert api.pod().metadata.uid == "mirror-uid"
    assert manager.api_version_of("mirror-uid") == 1
    # A mirror pod is never deleted by the status manager.
    assert api.deletes == 0


def test_an_unchanged_status_makes_an_empty_patch() -> None:
    pod = make_pod()
    status = running(pod)
    wire = pod_from_dict({"metadata": {"uid": UID}, "status": status_wire(status)})
    patch, unchanged = pod_status_patch(UID, wire.status, status)
    assert unchanged and patch == {"metadata": {"uid": UID}}


def test_the_patch_turns_the_servers_status_into_the_kubelets() -> None:
    pod = make_pod()
    before = generate(pod, runtime(instance("app", ContainerState.CREATED)),
                      now=datetime(2026, 1, 1, tzinfo=UTC))
    after = running(pod)
    patch, unchanged = pod_status_patch(UID, before, after)
    assert not unchanged
    assert apply_patch(status_wire(before), patch["status"], POD_STATUS_MERGE_KEYS) == \
        status_wire(after)


async def test_fields_an_older_server_drops_are_not_written_again_and_again() -> None:
    pod, api, pods, manager = setup()
    api.unknown_fields = {"hostIPs"}  # a 1.20 API server has no status.hostIPs
    manager.set_pod_status(pod, running(pod))
    await manager.sync_batch(all_pods=False)
    assert "hostIPs" in api.last_patch["status"]
    pods.update_pod(api.pod())
    for _ in range(3):
        assert await manager.sync_batch(all_pods=True) == 0
    assert (api.gets, api.patches) == (1, 1)
