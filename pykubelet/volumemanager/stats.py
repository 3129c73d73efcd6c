"""Volume usage, measured every ``volumeStatsAggPeriod`` (upstream ``server/stats`` volume parts).

Walking a volume is slow (a database's PV holds millions of files), so no
request ever measures one: a loop of the volume manager measures every
mounted volume of the pods it knows once per period, in a worker thread,
and ``/stats/summary`` and ``/metrics`` read that cache. What is measured
follows the plugin, as upstream's metrics providers do:

- ``emptyDir``, ``configMap``, ``secret``, ``downwardAPI``, ``projected``
  (upstream ``MetricsDu``): used bytes and inodes by walking the directory
  (on its own file system only, every inode counted once), capacity,
  available and inode totals from ``statvfs``;
- ``local`` PersistentVolumes (``MetricsStatFS``): everything from
  ``statvfs`` of the mount, used being what the file system has in use;
- ``hostPath`` (``MetricsNil``): nothing, a node path is not the pod's.

The summary lists each measured volume under its pod, with ``pvcRef`` for a
claim; ``/metrics`` has the ``kubelet_volume_stats_*`` gauges for claims only,
labelled ``namespace`` and ``persistentvolumeclaim``, once per claim however
many pods mount it (upstream ``collectors/volume_stats.go``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import V1Pod
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from pykubelet.api import pod_uid
from pykubelet.stats.provider import format_time
from pykubelet.util import klog
from pykubelet.volumemanager.persistent import LOCAL_VOLUME
from pykubelet.volumemanager.plugins import (
    CONFIG_MAP,
    DOWNWARD_API,
    EMPTY_DIR,
    PROJECTED,
    SECRET,
)

DEFAULT_PERIOD = 60.0  # volumeStatsAggPeriod's default
DISK_USAGE_PLUGINS = frozenset({EMPTY_DIR, CONFIG_MAP, SECRET, DOWNWARD_API, PROJECTED})
STATFS_PLUGINS = frozenset({LOCAL_VOLUME})
BLOCK_SIZE = 512  # st_blocks counts these, whatever the file system's block size
LABELS = ["namespace", "persistentvolumeclaim"]
# (name, help, VolumeStats attribute): upstream's gauges, in upstream's order.
GAUGES = (
    ("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume",
     "capacity_bytes"),
    ("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume",
     "available_bytes"),
    ("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", "used_bytes"),
    ("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", "inodes"),
    ("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", "inodes_free"),
    ("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", "inodes_used"),
)


@dataclass(frozen=True)
class VolumeStats:
    name: str                       # the pod's name for the volume
    time: float
    capacity_bytes: int
    available_bytes: int
    used_bytes: int
    inodes: int
    inodes_free: int
    inodes_used: int
    claim: tuple[str, str] | None   # (namespace, claim name) of a PVC volume

    def summary(self) -> dict[str, Any]:
        """The ``VolumeStats`` entry of ``/stats/summary``."""
        entry: dict[str, Any] = {
            "time": format_time(self.time), "availableBytes": self.available_bytes,
            "capacityBytes": self.capacity_bytes, "usedBytes": self.used_bytes,
            "inodesFree": self.inodes_free, "inodes": self.inodes,
            "inodesUsed": self.inodes_used, "name": self.name}
        if self.claim is not None:
            entry["pvcRef"] = {"name": self.claim[1], "namespace": self.claim[0]}
        return entry


def disk_usage(path: str) -> tuple[int, int]:
    """(bytes, inodes) used under ``path`` on its own file system (upstream ``du`` +
    ``find``): hard links counted once, mounts below never entered."""
    root = os.lstat(path)
    seen = {root.st_ino}
    used = root.st_blocks * BLOCK_SIZE
    for directory, dirs, files in os.walk(path):
        kept = []
        for name in (*dirs, *files):
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue  # gone while walking
            if info.st_dev != root.st_dev:
                continue
            if name in dirs:
                kept.append(name)
            if info.st_ino in seen:
                continue
            seen.add(info.st_ino)
            used += info.st_blocks * BLOCK_SIZE
        dirs[:] = [d for d in dirs if d in kept]
    return used, len(seen)


def measure(name: str, plugin: str, path: str, claim: tuple[str, str] | None,
            now: float) -> VolumeStats | None:
    """One volume's figures, or None for a plugin without them (hostPath)."""
    if plugin not in DISK_USAGE_PLUGINS and plugin not in STATFS_PLUGINS:
        return None
    fs = os.statvfs(path)
    capacity, available = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
    if plugin in STATFS_PLUGINS:
        used, inodes_used = (fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree
    else:
        used, inodes_used = disk_usage(path)
    return VolumeStats(name=name, time=now, capacity_bytes=capacity, available_bytes=available,
                       used_bytes=used, inodes=fs.f_files, inodes_free=fs.f_ffree,
                       inodes_used=inodes_used, claim=claim)


def _claims(pod: V1Pod) -> dict[str, tuple[str, str]]:
    namespace = pod.metadata.namespace or ""
    return {v.name: (namespace, v.persistent_volume_claim.claim_name or "")
            for v in (pod.spec.volumes if pod.spec else None) or []
            if v.persistent_volume_claim is not None}


class VolumeStatsCache:
    """The last measurement of every pod's volumes; ``refresh`` replaces it."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._by_pod: dict[str, list[VolumeStats]] = {}

    def refresh(self, pods: Iterable[tuple[V1Pod, Mapping[str, Any]]]) -> None:
        """Measure each pod's mounted volumes (name -> ``MountedVolume``); blocking."""
        by_pod: dict[str, list[VolumeStats]] = {}
        for pod, mounted in pods:
            claims = _claims(pod)
            measured = []
            for name, volume in sorted(mounted.items()):
                try:
                    stats = measure(name, volume.plugin, volume.path, claims.get(name),
                                    self._clock())
                except OSError as err:
                    # Being torn down, or not there yet: the next period measures it.
                    klog.v(4).info("Volume not measured", pod=pod_uid(pod), volume=name,
                                   err=str(err))
                    continue
                if stats is not None:
                    measured.append(stats)
            by_pod[pod_uid(pod)] = measured
        self._by_pod = by_pod

    def volumes(self, uid: str) -> list[dict[str, Any]]:
        """The summary's ``volume`` list of a pod."""
        return [stats.summary() for stats in self._by_pod.get(uid, [])]

    async def families(self) -> list[Metric]:
        """The ``kubelet_volume_stats_*`` gauges for ``/metrics``."""
        families = [GaugeMetricFamily(name, text, labels=LABELS) for name, text, _ in GAUGES]
        seen: set[tuple[str, str]] = set()
        for measured in self._by_pod.values():
            for stats in measured:
                if stats.claim is None or stats.claim in seen:
                    continue
                seen.add(stats.claim)
                for family, (_, _, attribute) in zip(families, GAUGES, strict=True):
                    family.add_metric(list(stats.claim), float(getattr(stats, attribute)))
        return list(families)


__all__ = ["DEFAULT_PERIOD", "VolumeStats", "VolumeStatsCache", "disk_usage", "measure"]
