"""The container manager: the node's cgroup tree for pods, node allocatable, QoS classes.

Upstream ``pkg/kubelet/cm`` (``containerManagerImpl``, ``qosContainerManager``,
``podContainerManager``, ``node_container_manager``) in one place:

- start-up checks: the cgroup version against ``failCgroupV1``, the
  ``cgroupRoot`` exists, the reservations fit the capacity, and the runtime
  places containers with the same cgroup driver as the kubelet;
- the kernel tunables, checked or set by ``protectKernelDefaults``
  (``kernel_tunables``), before any cgroup is made;
- the tree (``cgroupsPerQOS``): ``<cgroupRoot>/kubepods`` limited to node
  allocatable when ``enforceNodeAllocatable`` has ``pods``; under it the
  ``burstable`` and ``besteffort`` QoS cgroups; Guaranteed pods directly in
  ``kubepods``; every pod in its own ``pod<uid>``, whose name is the sandbox's
  cgroup parent given to CRI;
- QoS cgroups follow the pods: burstable's cpu.shares is the sum of its pods'
  cpu requests (upstream ``UpdateCgroups``), besteffort keeps the minimum;
- pod cgroups of pods that are gone are killed and removed in housekeeping.

Node allocatable (reported) = capacity - systemReserved - kubeReserved - hard
eviction thresholds; what ``kubepods`` is limited to leaves the eviction
thresholds out, as upstream does, so that the eviction manager acts before
the kernel's OOM killer.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_uid
from pykubelet.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, get_pod_qos
from pykubelet.api.quantity import QuantityError, parse_quantity
from pykubelet.api.resources import pod_requests
from pykubelet.cm.cgroups import (
    CGROUP_DRIVER_CGROUPFS,
    CGROUP_DRIVER_SYSTEMD,
    V1,
    CgroupError,
    CgroupManager,
    CgroupName,
    parse_cgroupfs_name,
    parse_systemd_name,
    systemd_running,
)
from pykubelet.cm.helpers import (
    DEFAULT_CFS_PERIOD_US,
    MILLI_CPU_PER_CPU,
    MIN_CPU_SHARES,
    ResourceConfig,
    cpu_capacity_millis,
    milli_cpu_to_shares,
    read_mem_total,
    read_pid_max,
    resource_config_for_pod,
)
from pykubelet.cm.kernel_tunables import SYSCTL_DIR, KernelTunablesError, setup_kernel_tunables
from pykubelet.config.units import EvictionThreshold
from pykubelet.util import klog

KUBEPODS = "kubepods"
BURSTABLE_CGROUP = "burstable"
BEST_EFFORT_CGROUP = "besteffort"
POD_CGROUP_PREFIX = "pod"
ENFORCE_PODS = "pods"
ENFORCE_SYSTEM_RESERVED = "system-reserved"
ENFORCE_KUBE_RESERVED = "kube-reserved"
# Upstream's periodicQOSCgroupUpdateInterval.
QOS_UPDATE_PERIOD = 60.0
CGROUP_V1_MAINTENANCE_WARNING = (
    "cgroup v1 support is in maintenance mode, please migrate to cgroup v2")
FAIL_CGROUP_V1_MESSAGE = (
    "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is "
    "unsupported and will be removed in a future release")
# Capacity names (v1.ResourceName) and the internal "pid" the top cgroups are limited by.
CPU, MEMORY, EPHEMERAL_STORAGE, PIDS = "cpu", "memory", "ephemeral-storage", "pid"


class ContainerManagerError(Exception):
    """A start-up problem with the node's cgroups or reservations; names the field."""


@dataclass
class NodeConfig:
    """The KubeletConfiguration fields the container manager works from."""

    cgroup_root: str = "/"
    cgroups_per_qos: bool = True
    cgroup_driver: str = CGROUP_DRIVER_CGROUPFS
    enforce_node_allocatable: list[str] = field(default_factory=lambda: [ENFORCE_PODS])
    system_reserved: dict[str, str] = field(default_factory=dict)
    kube_reserved: dict[str, str] = field(default_factory=dict)
    system_reserved_cgroup: str = ""
    kube_reserved_cgroup: str = ""
    hard_eviction_thresholds: list[EvictionThreshold] = field(default_factory=list)
    pod_pids_limit: int = -1
    cpu_cfs_quota: bool = True
    cpu_cfs_quota_period_us: int = DEFAULT_CFS_PERIOD_US
    fail_cgroup_v1: bool = True
    root_dir: str = "/var/lib/kubelet"
    protect_kernel_defaults: bool = False
    # The KubeletInUserNamespace feature gate: kernel flags that cannot be set there are let be.
    kubelet_in_user_namespace: bool = False


def check_cgroup_version(fail_cgroup_v1: bool, version: int) -> None:
    """Upstream's start-up rule: refuse v1 unless ``failCgroupV1`` is false; else warn."""
    if version != V1:
        return
    if fail_cgroup_v1:
        raise ContainerManagerError(FAIL_CGROUP_V1_MESSAGE)
    klog.warning(CGROUP_V1_MAINTENANCE_WARNING)


def runtime_cgroup_driver_from_status_info(info: dict[str, str]) -> str | None:
    """containerd < 1.7 has no RuntimeConfig call; its verbose Status shows the runc option."""
    raw = info.get("config")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        containerd = config["containerd"]
        runtime = containerd["runtimes"][containerd["defaultRuntimeName"]]
        options = runtime.get("options") or {}
    except (ValueError, KeyError, TypeError):
        return None
    if "SystemdCgroup" not in options:
        return None
    return CGROUP_DRIVER_SYSTEMD if options["SystemdCgroup"] else CGROUP_DRIVER_CGROUPFS


def _quantity(resource: str, value: str, path: str) -> Fraction:
    try:
        amount = parse_quantity(value)
    except QuantityError as err:
        raise ContainerManagerError(f"{path}[{resource}]: {err}") from err
    if resource == CPU:
        return Fraction(math.ceil(amount * MILLI_CPU_PER_CPU))  # millicores, as capacity
    return Fraction(math.ceil(amount))


@dataclass
class Capacity:
    """Node capacity in integers: cpu in millicores, memory and storage in bytes, pids."""

    values: dict[str, Fraction]

    @classmethod
    def probe(cls, root_dir: str) -> Capacity:
        values = {CPU: Fraction(cpu_capacity_millis()), MEMORY: Fraction(read_mem_total())}
        try:
            stat = os.statvfs(root_dir if os.path.exists(root_dir) else "/")
            values[EPHEMERAL_STORAGE] = Fraction(stat.f_blocks * stat.f_frsize)
        except OSError:
            pass
        pids = read_pid_max()
        if pids:
            values[PIDS] = Fraction(pids)
        return cls(values)


class ContainerManager:
    """Owns ``<cgroupRoot>/kubepods`` and everything below it."""

    def __init__(self, config: NodeConfig, cgroups: CgroupManager | None = None,
                 capacity: Capacity | None = None,
                 active_pods: Callable[[], Iterable[V1Pod]] = lambda: (), *,
                 sysctl_dir: str = SYSCTL_DIR,  # tests only: a directory standing for /proc/sys
                 ) -> None:
        self.config = config
        self.sysctl_dir = sysctl_dir
        self.cgroups = cgroups or CgroupManager(config.cgroup_driver)
        self.capacity = capacity or Capacity.probe(config.root_dir)
        self.active_pods = active_pods
        # QoS cgroup writes happen in worker threads (periodic update, new pods).
        self._qos_lock = threading.Lock()
        self.root: CgroupName = self._parse_root()
        if config.cgroups_per_qos:
            self.root = (*self.root, KUBEPODS)
        self.started = False

    def _parse_root(self) -> CgroupName:
        # The cgroupRoot is written in the driver's own form.
        if self.config.cgroup_driver == CGROUP_DRIVER_SYSTEMD and self.config.cgroup_root.endswith(
                ".slice"):
            return parse_systemd_name(self.config.cgroup_root)
        return parse_cgroupfs_name(self.config.cgroup_root or "/")

    # --- reservations and allocatable -------------------------------------------------------

    def reservations(self) -> dict[str, Fraction]:
        """systemReserved + kubeReserved per resource (cpu in millicores)."""
        total: dict[str, Fraction] = {}
        for path, reserved in (("systemReserved", self.config.system_reserved),
                               ("kubeReserved", self.config.kube_reserved)):
            for resource, value in reserved.items():
                total[resource] = total.get(resource, Fraction(0)) + _quantity(
                    resource, value, path)
        return total

    def eviction_reservation(self) -> dict[str, Fraction]:
        """What the hard eviction thresholds hold back (memory, ephemeral storage)."""
        reserved: dict[str, Fraction] = {}
        for threshold in self.config.hard_eviction_thresholds:
            if not threshold.hard:
                continue
            resource = {"memory.available": MEMORY,
                        "nodefs.available": EPHEMERAL_STORAGE}.get(threshold.signal)
            if resource is None or resource not in self.capacity.values:
                continue
            reserved[resource] = reserved.get(resource, Fraction(0)) + threshold.value.amount(
                int(self.capacity.values[resource]))
        return reserved

    def node_allocatable_reservation(self) -> dict[str, Fraction]:
        total = dict(self.reservations())
        for resource, value in self.eviction_reservation().items():
            total[resource] = total.get(resource, Fraction(0)) + value
        return total

    def allocatable_reservation(self) -> dict[str, Fraction]:
        """Upstream ``GetNodeAllocatableReservation`` in the API's units (cpu in cores): what
        the node status and the standalone node leave out of capacity for allocatable."""
        return {name: value / MILLI_CPU_PER_CPU if name == CPU else value
                for name, value in self.node_allocatable_reservation().items()}

    def allocatable(self) -> dict[str, Fraction]:
        """What pods may use, as the node reports it (never negative)."""
        reservation = self.node_allocatable_reservation()
        return {name: max(Fraction(0), value - reservation.get(name, Fraction(0)))
                for name, value in self.capacity.values.items() if name != PIDS}

    def allocatable_absolute(self) -> dict[str, Fraction]:
        """What ``kubepods`` is limited to: capacity less the reservations, without eviction."""
        reserved = self.reservations()
        return {name: max(Fraction(0), value - reserved.get(name, Fraction(0)))
                for name, value in self.capacity.values.items()}

    def validate_node_allocatable(self) -> None:
        reservation = self.node_allocatable_reservation()
        problems = []
        for resource, value in sorted(reservation.items()):
            capacity = self.capacity.values.get(resource)
            if capacity is not None and capacity - value < 0:
                problems.append(
                    f"Resource {resource!r} has a reservation of {_show(resource, value)} but "
                    f"capacity of {_show(resource, capacity)}. Expected capacity >= reservation.")
        if problems:
            raise ContainerManagerError(
                "invalid Node Allocatable configuration (systemReserved + kubeReserved + "
                "evictionHard exceed the node's capacity). " + " ".join(problems))

    # --- start-up --------------------------------------------------------------------------------

    def check_runtime_driver(self, runtime_driver: str | None) -> None:
        if runtime_driver is None:
            klog.info("The runtime did not report its cgroup driver; trusting cgroupDriver",
                      cgroupDriver=self.config.cgroup_driver)
            return
        if runtime_driver != self.config.cgroup_driver:
            raise ContainerManagerError(
                f"cgroupDriver: kubelet is configured with cgroupDriver "
                f"{self.config.cgroup_driver!r} but the container runtime uses "
                f"{runtime_driver!r}; set cgroupDriver: {runtime_driver} (or change the "
                f"runtime's configuration) so both place containers in the same tree")

    def start(self) -> None:
        """Validate and create the node-level cgroups (blocking; call from a thread)."""
        self.validate_node_allocatable()
        if self.config.cgroup_driver == CGROUP_DRIVER_SYSTEMD:
            if systemd_running():
                klog.warning("cgroupDriver systemd: systemd runs on this host but pykubelet "
                             "writes the slices through cgroupfs with systemd's naming; systemd "
                             "is not told about them")
            else:
                klog.info("cgroupDriver systemd: no systemd on this host, using systemd's "
                          "slice naming over cgroupfs")
        if self.config.cgroups_per_qos:
            parent = self.root[:-1]
            if not self.cgroups.exists(parent):
                missing = ", ".join(self.cgroups.missing_paths(parent))
                raise ContainerManagerError(
                    f"invalid configuration: cgroupRoot {self.config.cgroup_root!r} does not "
                    f"exist ({missing})")
        # Upstream's setupNode: the kernel tunables before any cgroup is made. Checked after
        # the cgroupRoot (which upstream checks even earlier, when the manager is built).
        try:
            setup_kernel_tunables(
                protect_kernel_defaults=self.config.protect_kernel_defaults,
                kubelet_in_user_namespace=self.config.kubelet_in_user_namespace,
                sysctl_dir=self.sysctl_dir)
        except KernelTunablesError as err:
            raise ContainerManagerError(str(err)) from err
        if not self.config.cgroups_per_qos:
            self.started = True
            return
        try:
            # kubepods first gets the whole machine, then node allocatable when enforced.
            self.cgroups.create(self.root, self._top_level_config(self.capacity.values))
            self.enforce_node_allocatable()
            self.cgroups.create(self.qos_cgroup(BURSTABLE))
            self.cgroups.create(self.qos_cgroup(BEST_EFFORT),
                                ResourceConfig(cpu_shares=MIN_CPU_SHARES))
        except CgroupError as err:
            raise ContainerManagerError(f"failed to create the pod cgroup hierarchy: {err}") \
                from err
        klog.info("Container manager created the QoS cgroup hierarchy",
                  root=self.cgroups.name(self.root), driver=self.config.cgroup_driver,
                  cgroupVersion=self.cgroups.version)
        self.started = True

    def _top_level_config(self, amounts: dict[str, Fraction]) -> ResourceConfig:
        """Upstream ``getCgroupConfig``: shares for cpu, limits for memory and pids."""
        cpu = amounts.get(CPU)
        memory = amounts.get(MEMORY)
        pids = amounts.get(PIDS)
        return ResourceConfig(
            cpu_shares=milli_cpu_to_shares(int(cpu)) if cpu is not None else None,
            memory=int(memory) if memory is not None else None,
            pids_limit=int(pids) if pids is not None else None)

    def enforce_node_allocatable(self) -> None:
        enforce = set(self.config.enforce_node_allocatable)
        if ENFORCE_PODS in enforce:
            allocatable = self.allocatable_absolute()
            klog.info("Enforcing node allocatable on the pods cgroup",
                      cgroup=self.cgroups.name(self.root),
                      cpuMillis=int(allocatable.get(CPU, 0)),
                      memory=int(allocatable.get(MEMORY, 0)))
            self.cgroups.update(self.root, self._top_level_config(allocatable))
        for key, name, reserved, path in (
                (ENFORCE_SYSTEM_RESERVED, self.config.system_reserved_cgroup,
                 self.config.system_reserved, "systemReservedCgroup"),
                (ENFORCE_KUBE_RESERVED, self.config.kube_reserved_cgroup,
                 self.config.kube_reserved, "kubeReservedCgroup")):
            if key not in enforce:
                continue
            cgroup = parse_cgroupfs_name(name)
            if not self.cgroups.exists(cgroup):
                raise ContainerManagerError(
                    f"{path}: failed to enforce {key} limits on {name!r}: the cgroup does "
                    "not exist")
            amounts = {r: _quantity(r, v, path) for r, v in reserved.items()}
            self.cgroups.update(cgroup, self._top_level_config(amounts))

    # --- names -----------------------------------------------------------------------------------

    def qos_cgroup(self, qos: str) -> CgroupName:
        if qos == GUARANTEED:
            return self.root
        return (*self.root, BURSTABLE_CGROUP if qos == BURSTABLE else BEST_EFFORT_CGROUP)

    def pod_cgroup(self, pod: V1Pod) -> CgroupName:
        return (*self.qos_cgroup(get_pod_qos(pod)), POD_CGROUP_PREFIX + pod_uid(pod))

    def pod_cgroup_parent(self, pod: V1Pod) -> str:
        """What CRI gets as the sandbox's ``cgroup_parent``."""
        if not self.config.cgroups_per_qos:
            return "" if not self.root else self.cgroups.name(self.root)
        return self.cgroups.name(self.pod_cgroup(pod))

    # --- pods ------------------------------------------------------------------------------------

    def pod_resource_config(self, pod: V1Pod) -> ResourceConfig:
        return resource_config_for_pod(pod, self.config.cpu_cfs_quota,
                                       self.config.cpu_cfs_quota_period_us,
                                       self.config.pod_pids_limit)

    def ensure_pod_cgroup(self, pod: V1Pod) -> None:
        """Create the pod's cgroup with its limits (upstream ``EnsureExists``); blocking."""
        if not self.config.cgroups_per_qos:
            return
        cgroup = self.pod_cgroup(pod)
        if self.cgroups.exists(cgroup):
            return
        self.cgroups.create(cgroup, self.pod_resource_config(pod))
        klog.v(4).info("Created pod cgroup", pod=pod_uid(pod), cgroup=self.cgroups.name(cgroup))

    async def ensure_pod(self, pod: V1Pod) -> None:
        """For the pod sync: QoS cgroups first (a new pod changes burstable), then the pod's."""
        if not self.config.cgroups_per_qos:
            return
        # Every sync of a running pod stops here: three stat calls are cheaper on the loop
        # than a hop to a worker thread and back.
        if self.cgroups.exists(self.pod_cgroup(pod)):
            return
        qos_configs = self.qos_configs(list(self.active_pods())) if self.started else {}
        # A new pod waits on this before its sandbox: one hop for all the writes.
        await asyncio.to_thread(self._create_pod_cgroup, pod, qos_configs)

    def _create_pod_cgroup(self, pod: V1Pod, qos_configs: dict[str, ResourceConfig]) -> None:
        self._write_qos_cgroups(qos_configs)
        self.ensure_pod_cgroup(pod)

    def pod_cgroups_on_node(self) -> dict[str, CgroupName]:
        """uid -> cgroup of every pod cgroup that exists under the QoS tree."""
        found: dict[str, CgroupName] = {}
        for qos in (GUARANTEED, BURSTABLE, BEST_EFFORT):
            parent = self.qos_cgroup(qos)
            for child in self.cgroups.children(parent):
                component = child
                if self.config.cgroup_driver == CGROUP_DRIVER_SYSTEMD:
                    parts = parse_systemd_name(child)
                    component = parts[-1] if parts else ""
                if component.startswith(POD_CGROUP_PREFIX):
                    uid = component[len(POD_CGROUP_PREFIX):]
                    found[uid] = (*parent, component)
        return found

    def remove_orphaned_pod_cgroups(self, keep: set[str]) -> list[str]:
        """Kill and remove pod cgroups whose pod is not in ``keep``; blocking."""
        removed = []
        for uid, cgroup in self.pod_cgroups_on_node().items():
            if uid in keep:
                continue
            try:
                self.cgroups.destroy(cgroup)
                removed.append(uid)
                klog.v(3).info("Removed cgroup of a deleted pod", podUID=uid,
                               cgroup=self.cgroups.name(cgroup))
            except CgroupError as err:
                klog.error("Failed to remove the cgroup of a deleted pod", err, podUID=uid)
        return removed

    # --- QoS --------------------------------------------------------------------------------------

    def qos_configs(self, pods: Iterable[V1Pod]) -> dict[str, ResourceConfig]:
        """Upstream ``setCPUCgroupConfig``: burstable shares from its pods' cpu requests."""
        burstable_millis = 0
        for pod in pods:
            if get_pod_qos(pod) == BURSTABLE:
                cpu = pod_requests(pod).get(CPU)
                if cpu:
                    burstable_millis += math.ceil(cpu * MILLI_CPU_PER_CPU)
        return {
            BURSTABLE: ResourceConfig(cpu_shares=milli_cpu_to_shares(burstable_millis)),
            BEST_EFFORT: ResourceConfig(cpu_shares=MIN_CPU_SHARES),
        }

    async def update_qos_cgroups(self) -> None:
        if not self.config.cgroups_per_qos or not self.started:
            return
        configs = self.qos_configs(list(self.active_pods()))
        await asyncio.to_thread(self._write_qos_cgroups, configs)

    def _write_qos_cgroups(self, configs: dict[str, ResourceConfig]) -> None:
        with self._qos_lock:
            for qos, config in configs.items():
                self.cgroups.update(self.qos_cgroup(qos), config)

    async def run_qos_updates(self, period: float = QOS_UPDATE_PERIOD) -> None:
        """The periodic QoS update (a supervised task)."""
        while True:
            await asyncio.sleep(period)
            try:
                await self.update_qos_cgroups()
            except CgroupError as err:
                klog.error("Failed to update QoS cgroups", err)


def _show(resource: str, value: Fraction) -> str:
    if resource == CPU:
        return f"{int(value)}m"
    return str(int(value))


__all__ = [
    "CGROUP_V1_MAINTENANCE_WARNING",
    "FAIL_CGROUP_V1_MESSAGE",
    "Capacity",
    "ContainerManager",
    "ContainerManagerError",
    "NodeConfig",
    "check_cgroup_version",
    "runtime_cgroup_driver_from_status_info",
]
