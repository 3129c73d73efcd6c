"""Eviction signals: what the node has left, and what each pod uses.

Observations (upstream ``makeSignalObservations``), each an available amount
and the capacity it is measured against:

- ``memory.available``: memory capacity minus the root cgroup's working set
  (usage less inactive file pages, as cAdvisor counts it);
- ``allocatableMemory.available``: node allocatable memory minus the
  ``kubepods`` cgroup's working set (when allocatable is enforced on pods);
- ``nodefs.available`` / ``nodefs.inodesFree``: the filesystem of the
  kubelet's root directory;
- ``imagefs.available`` / ``imagefs.inodesFree``: the runtime's image
  filesystem (CRI ``ImageFsInfo``);
- ``pid.available``: ``kernel.pid_max`` minus the tasks on the node.

Pod usage (for ranking and the eviction message) comes from CRI
``ListContainerStats`` (memory working set, writable layer), the pod's log
directory and its cgroup's ``pids.current``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pykubelet.cri import RuntimeService
from pykubelet.stats import FsStats, fs_stats
from pykubelet.util import klog

MEMORY_AVAILABLE = "memory.available"
ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
NODEFS_AVAILABLE = "nodefs.available"
NODEFS_INODES_FREE = "nodefs.inodesFree"
IMAGEFS_AVAILABLE = "imagefs.available"
IMAGEFS_INODES_FREE = "imagefs.inodesFree"
PID_AVAILABLE = "pid.available"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


@dataclass(frozen=True)
class Observation:
    available: int
    capacity: int


Observations = dict[str, Observation]


@dataclass
class ContainerUsage:
    name: str
    memory_working_set: int = 0
    rootfs_used: int = 0
    logs_used: int = 0


@dataclass
class PodUsage:
    containers: dict[str, ContainerUsage] = field(default_factory=dict)
    pids: int = 0
    # The pod's log directory (all its containers' current and rotated logs).
    logs: int = 0

    @property
    def memory(self) -> int:
        return sum(c.memory_working_set for c in self.containers.values())

    @property
    def disk(self) -> int:
        return sum(c.rootfs_used + c.logs_used for c in self.containers.values()) + self.logs


@dataclass
class SignalSources:
    """Where each signal is read; the container manager and stats providers fill these in."""

    memory_capacity: int
    node_working_set: Callable[[], int]
    nodefs_path: str
    image_fs: Callable[[], Awaitable[FsStats]] | None = None
    allocatable_memory: int = 0
    pods_working_set: Callable[[], int] | None = None
    pid_max: int = 0
    tasks: Callable[[], int] = field(default=lambda: read_task_count())


def read_task_count(loadavg: str = "/proc/loadavg") -> int:
    """Tasks (threads) on the node: the total in ``/proc/loadavg``'s fourth field."""
    try:
        with open(loadavg, encoding="ascii") as handle:
            return int(handle.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return 0


async def observe(sources: SignalSources) -> Observations:
    """One observation of every signal the node can measure; missing sources are skipped."""
    observations: Observations = {}

    def local() -> None:
        try:
            working_set = sources.node_working_set()
            observations[MEMORY_AVAILABLE] = Observation(
                max(0, sources.memory_capacity - working_set), sources.memory_capacity)
        except (OSError, ValueError) as err:
            klog.error("Eviction manager: failed to read the node's memory usage", err)
        if sources.pods_working_set is not None and sources.allocatable_memory:
            try:
                used = sources.pods_working_set()
                observations[ALLOCATABLE_MEMORY_AVAILABLE] = Observation(
                    max(0, sources.allocatable_memory - used), sources.allocatable_memory)
            except (OSError, ValueError):
                pass
        try:
            nodefs = fs_stats(sources.nodefs_path)
            observations[NODEFS_AVAILABLE] = Observation(nodefs.available, nodefs.capacity)
            observations[NODEFS_INODES_FREE] = Observation(nodefs.inodes_free, nodefs.inodes)
        except OSError as err:
            klog.error("Eviction manager: failed to stat nodefs", err,
                       path=sources.nodefs_path)
        if sources.pid_max:
            observations[PID_AVAILABLE] = Observation(
                max(0, sources.pid_max - sources.tasks()), sources.pid_max)

    await asyncio.to_thread(local)
    if sources.image_fs is not None:
        try:
            imagefs = await sources.image_fs()
            observations[IMAGEFS_AVAILABLE] = Observation(imagefs.available, imagefs.capacity)
            observations[IMAGEFS_INODES_FREE] = Observation(imagefs.inodes_free, imagefs.inodes)
        except Exception as err:
            klog.error("Eviction manager: failed to get the image filesystem stats", err)
    return observations


async def pod_usage(runtime_service: RuntimeService,
                    pod_logs_dir: str | None = None) -> dict[str, PodUsage]:
    """Usage per pod UID from CRI container stats (and log directory sizes when asked)."""
    usage: dict[str, PodUsage] = {}
    for stats in await runtime_service.list_container_stats(None):
        labels = stats.attributes.labels
        uid = labels.get(POD_UID_LABEL, "")
        if not uid:
            continue
        name = labels.get(CONTAINER_NAME_LABEL, stats.attributes.metadata.name)
        container = usage.setdefault(uid, PodUsage()).containers.setdefault(
            name, ContainerUsage(name))
        container.memory_working_set = stats.memory.working_set_bytes.value
        container.rootfs_used = stats.writable_layer.used_bytes.value
    if pod_logs_dir:
        for uid, size in (await asyncio.to_thread(_log_dir_sizes, pod_logs_dir)).items():
            usage.setdefault(uid, PodUsage()).logs = size
    return usage


def _log_dir_sizes(pod_logs_dir: str) -> dict[str, int]:
    try:
        entries = list(os.scandir(pod_logs_dir))
    except FileNotFoundError:
        return {}
    # Directory names are <namespace>_<name>_<uid>.
    return {entry.name.rpartition("_")[2]: dir_size(entry.path)
            for entry in entries if entry.is_dir()}


def dir_size(path: str) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total
