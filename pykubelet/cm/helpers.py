"""From Kubernetes resources to cgroup numbers, and the machine facts they are measured against.

One home for the conversions upstream keeps in ``pkg/kubelet/cm/helpers_linux.go``:
millicores to CFS shares and quota (used for containers by the runtime
manager and for pod, QoS and node cgroups here), shares to cgroup v2 weight,
and ``resource_config_for_pod`` (upstream ``ResourceConfigForPod``), the
limits a pod's cgroup gets from its QoS class, requests and limits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import V1Pod

from pykubelet.api.qos import BEST_EFFORT, GUARANTEED, get_pod_qos
from pykubelet.api.quantity import memory_to_bytes
from pykubelet.api.resources import pod_limits, pod_requests

# Linux CFS and cgroup bounds (the kernel's, as upstream clamps to them).
MIN_CPU_SHARES = 2
MAX_CPU_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_PER_CPU = 1000
DEFAULT_CFS_PERIOD_US = 100_000
MIN_CFS_QUOTA_US = 1000
# cgroup v2 cpu.weight range.
MIN_CPU_WEIGHT = 1
MAX_CPU_WEIGHT = 10000


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a cpu request; no request still gets the minimum, never zero."""
    if milli_cpu == 0:
        return MIN_CPU_SHARES
    shares = milli_cpu * SHARES_PER_CPU // MILLI_CPU_PER_CPU
    return max(MIN_CPU_SHARES, min(shares, MAX_CPU_SHARES))


def milli_cpu_to_quota(milli_cpu: int, period_us: int) -> int:
    """cfs_quota_us for a cpu limit over ``period_us``; 0 means "no limit given"."""
    if milli_cpu == 0:
        return 0
    quota = milli_cpu * period_us // MILLI_CPU_PER_CPU
    return max(quota, MIN_CFS_QUOTA_US)


def cpu_shares_to_weight(shares: int) -> int:
    """cgroup v2 cpu.weight for v1 shares: [2, 262144] mapped linearly onto [1, 10000]."""
    shares = max(MIN_CPU_SHARES, min(shares, MAX_CPU_SHARES))
    return MIN_CPU_WEIGHT + ((shares - MIN_CPU_SHARES) * (MAX_CPU_WEIGHT - 1)) // (
        MAX_CPU_SHARES - MIN_CPU_SHARES)


@dataclass(frozen=True)
class ResourceConfig:
    """What one cgroup is limited to; ``None`` leaves the setting alone.

    ``cpu_quota`` -1 and ``memory``/``pids_limit`` -1 mean "unlimited".
    """

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory: int | None = None
    pids_limit: int | None = None


def resource_config_for_pod(pod: V1Pod, enforce_cpu_limits: bool = True,
                            cpu_period_us: int = DEFAULT_CFS_PERIOD_US,
                            pids_limit: int = -1) -> ResourceConfig:
    """The pod cgroup's limits (upstream ``ResourceConfigForPod`` plus ``podPidsLimit``).

    Guaranteed pods get shares, quota and a memory limit; Burstable pods get
    quota (memory limit) only when every container sets a cpu (memory) limit;
    BestEffort pods get the minimum shares and nothing else.
    """
    requests = pod_requests(pod)
    missing: set[str] = set()
    limits = pod_limits(pod, missing)
    cpu_request = math.ceil(requests.get("cpu", 0) * MILLI_CPU_PER_CPU)
    cpu_limit = math.ceil(limits.get("cpu", 0) * MILLI_CPU_PER_CPU)
    memory_limit = math.ceil(limits.get("memory", 0))
    shares = milli_cpu_to_shares(cpu_request)
    quota = milli_cpu_to_quota(cpu_limit, cpu_period_us) if enforce_cpu_limits else -1
    pids = pids_limit if pids_limit > 0 else None
    qos = get_pod_qos(pod)
    if qos == GUARANTEED:
        return ResourceConfig(cpu_shares=shares, cpu_quota=quota, cpu_period=cpu_period_us,
                              memory=memory_limit, pids_limit=pids)
    if qos == BEST_EFFORT:
        return ResourceConfig(cpu_shares=MIN_CPU_SHARES, pids_limit=pids)
    cpu_limited = "cpu" not in missing
    memory_limited = "memory" not in missing
    return ResourceConfig(
        cpu_shares=shares,
        cpu_quota=quota if cpu_limited else None,
        cpu_period=cpu_period_us if cpu_limited else None,
        memory=memory_limit if memory_limited else None,
        pids_limit=pids)


# --- machine facts ------------------------------------------------------------------------------

def read_mem_total(meminfo: str = "/proc/meminfo") -> int:
    """The node's memory capacity in bytes (MemTotal); 0 when unreadable."""
    try:
        with open(meminfo, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def read_pid_max(path: str = "/proc/sys/kernel/pid_max") -> int:
    """The node's process-id capacity (upstream's internal ``pid`` capacity)."""
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 0


def cpu_capacity_millis() -> int:
    return (os.cpu_count() or 1) * MILLI_CPU_PER_CPU




# --- huge pages ---------------------------------------------------------------------------------

HUGEPAGES_DIR = "sys/kernel/mm/hugepages"
HUGEPAGES_RESOURCE_PREFIX = "hugepages-"
_HUGEPAGE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def read_hugepage_sizes(root: str = "/") -> tuple[int, ...]:
    """The huge page sizes the kernel offers, in bytes, smallest first (a directory
    ``hugepages-<size>kB`` each)."""
    try:
        entries = os.listdir(os.path.join(root, HUGEPAGES_DIR))
    except OSError:
        return ()
    return tuple(sorted(int(entry[len("hugepages-"):-len("kB")]) * 1024 for entry in entries
                        if entry.startswith("hugepages-") and entry.endswith("kB")))


def hugepage_size_name(size: int) -> str:
    """A page size as the hugetlb cgroup names it (upstream
    ``HugePageUnitSizeFromByteSize``): ``2MB`` for 2 MiB pages, ``1GB`` for 1 GiB."""
    unit = 0
    while size >= 1024 and size % 1024 == 0 and unit < len(_HUGEPAGE_UNITS) - 1:
        size //= 1024
        unit += 1
    return f"{size}{_HUGEPAGE_UNITS[unit]}"


def container_hugepage_limits(limits: Mapping[str, Any], page_sizes: Sequence[int]
                              ) -> list[tuple[str, int]]:
    """The hugetlb limit of each page size the kernel offers, for a container with
    ``limits`` (upstream ``GetHugepageLimitsFromResources``): what its ``hugepages-<size>``
    limit says, and 0 for every size it does not ask for, so that a container cannot use
    huge pages it was not given."""
    wanted: dict[int, int] = {}
    for name, value in limits.items():
        if name.startswith(HUGEPAGES_RESOURCE_PREFIX):
            wanted[memory_to_bytes(name[len(HUGEPAGES_RESOURCE_PREFIX):])] = memory_to_bytes(value)
    return [(hugepage_size_name(size), wanted.get(size, 0)) for size in page_sizes]


__all__ = [
    "DEFAULT_CFS_PERIOD_US",
    "HUGEPAGES_DIR",
    "HUGEPAGES_RESOURCE_PREFIX",
    "MAX_CPU_SHARES",
    "MILLI_CPU_PER_CPU",
    "MIN_CFS_QUOTA_US",
    "MIN_CPU_SHARES",
    "ResourceConfig",
    "container_hugepage_limits",
    "cpu_capacity_millis",
    "cpu_shares_to_weight",
    "hugepage_size_name",
    "milli_cpu_to_quota",
    "milli_cpu_to_shares",
    "read_hugepage_sizes",
    "read_mem_total",
    "read_pid_max",
    "resource_config_for_pod",
]
