"""Container garbage collection: the one place dead containers, sandboxes and pod logs go.

Upstream ``kuberuntime_gc.go`` plus the kubelet's ``podContainerDeletor``:

- ``garbage_collect`` (every minute, and from the eviction manager when the
  disk fills): finished containers older than ``min_age`` are grouped per
  (pod, container name), newest first. Pods whose content may be removed
  (deleted or evicted, and terminated) lose all of them once every pod source
  has reported; every group keeps at most ``max_per_pod_container``; and when
  ``max_containers`` is set the total is cut down, first evenly across groups,
  then oldest first. Sandboxes without containers that are not ready go the
  same way (a live pod keeps its newest); log directories of removed pods go
  last.
- the deletor (``clean_up_pod``, on every ContainerDied PLEG event, a
  sandbox's included): when the pod's content may be removed, every dead
  container of the pod, then every sandbox of it that is not ready and holds
  no container; otherwise the older dead instances of the container that
  died (the newest stays) and the not-ready sandboxes but the newest. The
  containers are upstream v1.35's ``cleanUpContainersInPod``; the sandboxes
  are what 1.20's pod sandbox deleter did (v1.35 leaves them to the next
  pass, up to a minute later). The sync loop only queues the event (bounded,
  as upstream's buffer): a full queue drops it, and the pass catches up.
- ``queue_removable_pods`` (after every housekeeping): a pod whose death
  events came while its content could not be removed yet is cleaned up
  once it can. Upstream has no such trigger: what its events miss waits for
  the pass. It is needed here for 1.20's outcome (nothing of a deleted pod
  left within seconds): the deaths are mostly seen while the pod is still
  terminating, and a pod removed from its source (a static pod's manifest)
  only becomes removable when housekeeping forgets its finished worker.

What is left of a pod after either goes from the PLEG's records and the pod
cache at the next relist, which finds nothing of the pod in the runtime.

The defaults are upstream's: ``MinAge`` 0, ``MaxPerPodContainer`` 1,
``MaxContainers`` -1 (no total limit).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cri_api.v1 import api_pb2

from pykubelet.container import ContainerState, PodStatus
from pykubelet.container.helpers import nanos_to_seconds
from pykubelet.kuberuntime.labels import POD_UID_LABEL, get_container_info_from_labels
from pykubelet.util import klog

if TYPE_CHECKING:
    from pykubelet.kuberuntime.manager import KubeGenericRuntimeManager

# Upstream kubelet's ContainerGCPeriod.
CONTAINER_GC_PERIOD = 60.0
# Upstream's minDeadContainerInPod and containerDeletorBufferLimit for the per-event deletor.
MIN_DEAD_CONTAINERS_IN_POD = 1
DELETOR_BUFFER = 50
# A pod that lives keeps its newest sandbox, ready or not (as in the pass).
MIN_SANDBOXES_IN_LIVE_POD = 1
# The deletor's request for a whole pod rather than for one container that died.
WHOLE_POD = ""


@dataclass(frozen=True)
class GCPolicy:
    min_age: float = 0.0
    max_per_pod_container: int = 1
    max_containers: int = -1


class PodStateProvider(Protocol):
    """What the pod workers know about a pod's life (upstream ``podStateProvider``)."""

    def should_pod_content_be_removed(self, uid: str) -> bool: ...

    def should_pod_runtime_be_removed(self, uid: str) -> bool: ...


@dataclass
class _Dead:
    id: str
    name: str
    created: float


class ContainerGC:
    def __init__(self, manager: KubeGenericRuntimeManager, pods: PodStateProvider,
                 policy: GCPolicy | None = None, clock: Callable[[], float] = time.time) -> None:
        self.manager = manager
        self.pods = pods
        self.policy = policy or GCPolicy()
        self.clock = clock
        self._lock = asyncio.Lock()
        # (pod UID, the container that died, or WHOLE_POD): the deletor's work.
        self._died: asyncio.Queue[tuple[str, str]] = asyncio.Queue(DELETOR_BUFFER)
        # Pods cleaned up while their content could not be removed yet: the
        # newest dead containers and the sandboxes stayed (queue_removable_pods).
        self._awaiting_removal: set[str] = set()

    async def garbage_collect(self, all_sources_ready: bool,
                              evict_non_deleted_pods: bool = False) -> int:
        """One pass; returns the number of containers removed."""
        async with self._lock:
            removed = await self._containers(all_sources_ready, evict_non_deleted_pods)
            await self._sandboxes(all_sources_ready, evict_non_deleted_pods)
            await self._pod_log_dirs(all_sources_ready)
            self.manager.container_backoff.gc()
            return removed

    def _removable(self, uid: str, evict_non_deleted_pods: bool) -> bool:
        return self.pods.should_pod_content_be_removed(uid) or (
            evict_non_deleted_pods and self.pods.should_pod_runtime_be_removed(uid))

    async def _containers(self, all_sources_ready: bool, evict_non_deleted_pods: bool) -> int:
        newest_allowed = self.clock() - self.policy.min_age
        units: dict[tuple[str, str], list[_Dead]] = defaultdict(list)
        for listed in await self.manager.runtime_service.list_containers(None):
            if listed.state == api_pb2.CONTAINER_RUNNING:
                continue
            created = nanos_to_seconds(listed.created_at)
            if created > newest_allowed:
                continue
            labeled = get_container_info_from_labels(listed.labels)
            if not labeled.pod_uid:
                continue  # not the kubelet's
            units[(labeled.pod_uid, labeled.container_name)].append(
                _Dead(listed.id, labeled.container_name, created))
        for unit in units.values():
            unit.sort(key=lambda d: d.created, reverse=True)

        doomed: list[_Dead] = []
        if all_sources_ready:
            for key in [k for k in units if self._removable(k[0], evict_non_deleted_pods)]:
                doomed.extend(units.pop(key))
        if self.policy.max_per_pod_container >= 0:
            doomed.extend(_cut_units(units, self.policy.max_per_pod_container))
        total = sum(len(u) for u in units.values())
        limit = self.policy.max_containers
        if limit >= 0 and total > limit:
            doomed.extend(_cut_units(units, max(1, limit // max(1, len(units)))))
            rest = sorted((d for u in units.values() for d in u), key=lambda d: d.created)
            if len(rest) > limit:
                doomed.extend(rest[:len(rest) - limit])
        for dead in doomed:
            try:
                await self.manager.containers.remove(dead.id)
            except Exception as err:
                klog.error("Failed to remove container", err, containerID=dead.id)
        if doomed:
            klog.v(3).info("Garbage collected dead containers", count=len(doomed))
        return len(doomed)

    async def _sandboxes(self, all_sources_ready: bool, evict_non_deleted_pods: bool) -> None:
        with_containers = {c.pod_sandbox_id
                           for c in await self.manager.runtime_service.list_containers(None)}
        by_pod: dict[str, list[api_pb2.PodSandbox]] = defaultdict(list)
        for sandbox in await self.manager.sandboxes.list_kubelet_sandboxes(True):
            by_pod[sandbox.metadata.uid].append(sandbox)
        for uid, sandboxes in by_pod.items():
            sandboxes.sort(key=lambda s: s.created_at, reverse=True)
            removable = [s for s in sandboxes if s.state != api_pb2.SANDBOX_READY
                         and s.id not in with_containers]
            if all_sources_ready and self._removable(uid, evict_non_deleted_pods):
                candidates = removable
            else:
                # A pod that lives keeps its newest sandbox, ready or not.
                candidates = [s for s in removable if s.id != sandboxes[0].id]
            for sandbox in candidates:
                try:
                    await self.manager.remove_sandbox(sandbox.id)
                except Exception as err:
                    klog.error("Failed to remove sandbox", err, sandboxID=sandbox.id)

    async def _pod_log_dirs(self, all_sources_ready: bool) -> None:
        if not all_sources_ready:
            return
        with_sandboxes = {s.metadata.uid
                          for s in await self.manager.sandboxes.list_kubelet_sandboxes(True)}
        uids = await asyncio.to_thread(self.manager.pod_log_dir_uids)
        orphaned = {uid for uid in uids if uid not in with_sandboxes
                    and self.pods.should_pod_content_be_removed(uid)}
        if orphaned:
            await asyncio.to_thread(self.manager.remove_pod_log_dirs, orphaned)
        # What the sandbox helper remembers per pod goes with the pod's last sandbox.
        self.manager.sandboxes.retain_pods(with_sandboxes)
        await asyncio.to_thread(self._remove_dangling_log_links)

    def _remove_dangling_log_links(self) -> None:
        directory = self.manager.options.container_logs_dir
        if not directory:
            return
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.is_symlink() and not os.path.exists(entry.path):
                try:
                    os.remove(entry.path)
                except OSError as err:
                    klog.error("Failed to remove dangling container log link", err,
                               path=entry.path)

    async def clean_up_pod(self, uid: str, exited_container_id: str, status: PodStatus
                           ) -> None:
        """One deletor request: the pod's dead containers, then its idle sandboxes.

        ``exited_container_id`` is the container (or sandbox) whose death was
        seen, or ``WHOLE_POD``; it matters only while the pod's content must stay.
        """
        removable = self.pods.should_pod_content_be_removed(uid)
        await self.delete_containers_in_pod(exited_container_id, status, removable)
        await self.delete_sandboxes_in_pod(
            uid, status, keep=0 if removable else MIN_SANDBOXES_IN_LIVE_POD)
        if removable:
            self._awaiting_removal.discard(uid)
        else:
            self._awaiting_removal.add(uid)

    async def delete_containers_in_pod(self, exited_container_id: str, status: PodStatus,
                                       remove_all: bool) -> list[str]:
        """Upstream ``podContainerDeletor``: every dead container of a pod whose content may
        be removed, else the older dead instances of the container that died."""
        name: str | None = None
        keep = 0
        if not remove_all:
            died = next((c for c in status.container_statuses
                         if c.id.id == exited_container_id), None)
            if died is None:
                return []  # a sandbox, or a container already gone
            name, keep = died.name, MIN_DEAD_CONTAINERS_IN_POD
        # Newest first: the latest attempt, then the latest created.
        candidates = sorted(
            (c for c in status.container_statuses
             if c.state == ContainerState.EXITED and (name is None or c.name == name)),
            key=lambda c: (c.restart_count, c.created_at), reverse=True)
        doomed = [c.id.id for c in candidates[keep:]]
        for container_id in doomed:
            try:
                await self.manager.containers.remove(container_id)
            except Exception as err:
                klog.error("Failed to remove container", err, containerID=container_id)
        return doomed

    async def delete_sandboxes_in_pod(self, uid: str, status: PodStatus, *,
                                      keep: int) -> list[str]:
        """1.20's pod sandbox deleter: sandboxes beyond the ``keep`` newest that are not
        ready and hold no container."""
        newest_first = sorted(status.sandbox_statuses, key=lambda s: s.created_at,
                              reverse=True)
        idle = [s.id for s in newest_first[keep:] if s.state != api_pb2.SANDBOX_READY]
        if not idle:
            return []
        # The cached status neither says which sandbox a container is in nor
        # knows of the removals just made: the runtime's listing does both.
        listed = await self.manager.runtime_service.list_containers(
            api_pb2.ContainerFilter(label_selector={POD_UID_LABEL: uid}))
        in_use = {c.pod_sandbox_id for c in listed}
        doomed = [sandbox_id for sandbox_id in idle if sandbox_id not in in_use]
        for sandbox_id in doomed:
            try:
                await self.manager.remove_sandbox(sandbox_id)
            except Exception as err:
                klog.error("Failed to remove sandbox", err, sandboxID=sandbox_id)
        return doomed

    def container_died(self, uid: str, container_id: str) -> None:
        """The sync loop's ContainerDied seam: queue the clean-up, never block the loop."""
        try:
            self._died.put_nowait((uid, container_id))
        except asyncio.QueueFull:
            klog.v(4).info("Container deletor queue is full, skipping", podUID=uid,
                           containerID=container_id)

    def queue_removable_pods(self) -> None:
        """Queue a whole-pod clean-up for each pod that was waiting and now may go."""
        for uid in sorted(self._awaiting_removal):
            if not self.pods.should_pod_content_be_removed(uid):
                continue
            try:
                self._died.put_nowait((uid, WHOLE_POD))
            except asyncio.QueueFull:
                return  # the next housekeeping asks again
            self._awaiting_removal.discard(uid)

    async def run_deletor(self, status_of: Callable[[str], PodStatus | None]) -> None:
        """Work through the queued clean-ups (a supervised task)."""
        while True:
            uid, container_id = await self._died.get()
            status = status_of(uid)
            if status is None:
                # The pod cache forgets a pod only once the runtime has nothing of it
                # left: there is nothing to clean up, now or later.
                self._awaiting_removal.discard(uid)
                continue
            try:
                await self.clean_up_pod(uid, container_id, status)
            except Exception as err:
                klog.error("Failed to delete dead containers of pod", err, podUID=uid)

    async def run(self, all_sources_ready: Callable[[], bool],
                  period: float = CONTAINER_GC_PERIOD) -> None:
        """The periodic pass (a supervised task): at once, then every ``period``."""
        while True:
            try:
                await self.garbage_collect(all_sources_ready())
            except Exception as err:
                klog.error("Container garbage collection failed", err)
            await asyncio.sleep(period)


def _cut_units(units: dict[tuple[str, str], list[_Dead]], keep: int) -> list[_Dead]:
    """Trim every group to its ``keep`` newest; return what was cut."""
    cut: list[_Dead] = []
    for key, unit in units.items():
        if len(unit) > keep:
            cut.extend(unit[keep:])
            units[key] = unit[:keep]
    return cut


__all__ = ["CONTAINER_GC_PERIOD", "ContainerGC", "GCPolicy", "PodStateProvider"]
