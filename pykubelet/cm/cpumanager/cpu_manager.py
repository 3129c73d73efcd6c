"""What the kubelet holds of the CPU manager (upstream ``cpu_manager.go``).

- ``start`` (from ``initialize_modules``, before any pod) restores the checkpoint
  and has the policy check it; a mismatch stops the kubelet.
- It is one of the topology manager's hint providers (upstream's
  ``GetTopologyHints``, ``GetPodTopologyHints``, ``Allocate``): at admission the
  topology manager first has it release what gone pods hold (``prepare_for_admission``),
  then asks where a container's exclusive CPUs could come from, merges
  that with the other providers' answers, stores the chosen NUMA affinity in the
  ``AffinityStore`` this manager reads, then has it allocate (a failure rejects the
  pod with ``UnexpectedAdmissionError``).
- ``cpuset_for`` is what a container is created with (upstream's
  ``PreCreateContainer``): its exclusive CPUs, else the shared pool; nothing under
  the ``none`` policy.
- ``run`` is upstream's reconcile loop (every ``cpuManagerReconcilePeriod``): the
  state of pods no longer active is released, and each running container whose
  cpuset differs from what it was last given is updated through
  ``UpdateContainerResources``, so shared-pool containers follow the pool as
  exclusive CPUs are taken and given back.

Stale state is only released once every pod source is ready, as upstream: before
that, the active pods are not all known and a restart would drop live assignments.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import init_then_app_containers, pod_uid
from pykubelet.api.quantity import QuantityError, cpu_to_millis
from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.cpumanager.cpuset import CPUSet, CPUSetError
from pykubelet.cm.cpumanager.policy_static import (
    POLICY_NONE,
    POLICY_STATIC,
    NonePolicy,
    Policy,
    PolicyError,
    StaticPolicy,
)
from pykubelet.cm.cpumanager.state import CHECKPOINT_NAME, CPUState, StateError
from pykubelet.cm.cpumanager.topology import CPUTopology, TopologyError, take_by_topology
from pykubelet.cm.topologymanager import AffinityStore
from pykubelet.cm.topologymanager.policy import ProviderHints
from pykubelet.container import ContainerState, PodStatus
from pykubelet.cri import RuntimeService
from pykubelet.util import klog

MILLI_CPU_PER_CPU = 1000


class CPUManagerError(Exception):
    """The CPU manager cannot be built or started; the kubelet must not run."""


class CPUManager:
    def __init__(self, policy: Policy, state_path: str, *,
                 runtime_service: RuntimeService,
                 active_pods: Callable[[], list[V1Pod]],
                 pod_status: Callable[[str], PodStatus | None],
                 sources_ready: Callable[[], bool],
                 reconcile_period: float, affinity: AffinityStore) -> None:
        self.policy = policy
        self._affinity = affinity
        self.state = CPUState(state_path, policy.name)
        self._runtime = runtime_service
        self._active_pods = active_pods
        self._pod_status = pod_status
        self._sources_ready = sources_ready
        self.reconcile_period = reconcile_period
        # Container ID -> the cpuset it was last given through UpdateContainerResources.
        self._last_update: dict[str, CPUSet] = {}
        self._started = False

    def start(self) -> None:
        """Restore the checkpoint and validate it against the machine; raise on mismatch."""
        klog.info("Starting CPU manager", policy=self.policy.name)
        try:
            self.state.restore()
            self.policy.start(self.state)
        except PolicyError as err:
            klog.error("Static policy invalid state, please drain node and remove policy "
                       "state file", err)
            raise CPUManagerError(f"start cpu manager error: {err}") from err
        except (StateError, OSError) as err:
            raise CPUManagerError(f"start cpu manager error: {err}") from err
        self._started = True

    # -- admission (the topology manager's hint provider) and container creation -------

    async def prepare_for_admission(self, pod: V1Pod) -> None:
        """Release what gone pods hold (the pod being admitted counts as active), so the
        hints that follow see every CPU that is free."""
        self.remove_stale_state(admitting=pod)

    def get_topology_hints(self, pod: V1Pod, container: V1Container) -> ProviderHints:
        return self.policy.get_topology_hints(self.state, pod, container)

    def get_pod_topology_hints(self, pod: V1Pod) -> ProviderHints:
        return self.policy.get_pod_topology_hints(self.state, pod)

    async def allocate(self, pod: V1Pod, container: V1Container) -> None:
        """Exclusive CPUs for the container, on its stored NUMA affinity when it has one.

        Raises ``TopologyError`` (not enough CPUs) or ``OSError`` (the checkpoint). Runs
        to completion without waiting: no other admission interleaves with it. Releases
        what gone pods hold first, as upstream's ``Allocate`` does (under the topology
        policy ``none`` no hints were asked).
        """
        self.remove_stale_state(admitting=pod)
        hint = self._affinity.get_affinity(pod_uid(pod), container.name or "")
        self.policy.allocate(self.state, pod, container, hint.affinity)

    def cpuset_for(self, pod: V1Pod, container_name: str) -> str:
        """The cpuset a new container is created with ("" for none)."""
        return cpuset.format(self.state.cpu_set_or_default(pod_uid(pod), container_name))

    # -- what the pod-resources API reports ---------------------------------------------

    def exclusive_cpus(self, pod_uid: str, container_name: str) -> list[int]:
        """The CPUs the container holds alone; none when it runs on the shared pool."""
        return sorted(self.state.cpu_set(pod_uid, container_name) or ())

    def allocatable_cpus(self) -> list[int]:
        return sorted(self.policy.allocatable_cpus())

    # -- the reconcile loop -----------------------------------------------------------

    def remove_stale_state(self, admitting: V1Pod | None = None) -> None:
        """Release what pods no longer active hold (once every source is ready); the pod
        being admitted counts as active (after a restart its assignment is restored).
        Upstream does this at each admission, allocation and reconcile; with nothing assigned
        (always so under the none policy) there is nothing to walk the pods for."""
        if not self.state.assignments or not self._sources_ready():
            return
        active: set[tuple[str, str]] = set()
        for pod in [*self._active_pods(), *([admitting] if admitting is not None else [])]:
            active.update((pod_uid(pod), container.name or "")
                          for container in init_then_app_containers(pod))
        for uid, containers in list(self.state.assignments.items()):
            for name in list(containers):
                if (uid, name) not in active:
                    klog.info("RemoveStaleState: removing container", podUID=uid,
                              containerName=name)
                    self.policy.remove_container(self.state, uid, name)

    async def reconcile(self) -> None:
        """One pass of upstream's ``reconcileState``."""
        self.remove_stale_state()
        running: set[str] = set()
        for pod in self._active_pods():
            uid = pod_uid(pod)
            status = self._pod_status(uid)
            if status is None:
                continue
            for container in init_then_app_containers(pod):
                found = status.find_container_status(container.name or "")
                if found is None or found.state != ContainerState.RUNNING:
                    continue
                cpus = self.state.cpu_set_or_default(uid, container.name or "")
                if not cpus:
                    continue
                running.add(found.id.id)
                if self._last_update.get(found.id.id) == cpus:
                    continue
                try:
                    await self._runtime.update_container_resources(
                        found.id.id, api_pb2.LinuxContainerResources(
                            cpuset_cpus=cpuset.format(cpus)))
                except Exception as err:  # one container's failure; the pass goes on
                    klog.error("ReconcileState: failed to update container", err,
                               pod=pod.metadata.name if pod.metadata else "",
                               containerName=container.name, containerID=found.id.id,
                               cpuSet=cpuset.format(cpus))
                    continue
                self._last_update[found.id.id] = cpus
        for gone in set(self._last_update) - running:
            del self._last_update[gone]

    @property
    def reconciles(self) -> bool:
        """Whether ``run`` has work: upstream starts no loop under ``none``."""
        return self.policy.name != POLICY_NONE

    async def run(self) -> None:
        """The reconcile loop (a supervised task)."""
        while True:
            await asyncio.sleep(self.reconcile_period)
            if self._started:
                await self.reconcile()


def reserved_cpus(*, reserved_system_cpus: str, kube_reserved: dict[str, str],
                  system_reserved: dict[str, str], topology: CPUTopology) -> CPUSet:
    """The CPUs kept for the system: ``reservedSystemCPUs``, else the kube and system
    reserved cpu rounded up to whole CPUs and taken by topology (upstream's rule)."""
    if reserved_system_cpus:
        try:
            return cpuset.parse(reserved_system_cpus)
        except CPUSetError as err:
            raise CPUManagerError(f"unable to parse reservedSystemCPUs "
                                  f'"{reserved_system_cpus}": {err}') from err
    millis = 0
    for reservation in (kube_reserved, system_reserved):
        if "cpu" in reservation:
            try:
                millis += cpu_to_millis(reservation["cpu"])
            except QuantityError as err:
                raise CPUManagerError(f"invalid reserved cpu: {err}") from err
    count = math.ceil(millis / MILLI_CPU_PER_CPU)
    if count == 0:
        raise CPUManagerError("[cpumanager] the static policy requires systemreserved.cpu + "
                              "kubereserved.cpu to be greater than zero")
    try:
        return take_by_topology(topology, topology.all_cpus(), count)
    except TopologyError as err:
        # Upstream's message, with the empty set it got printed as nothing.
        raise CPUManagerError(f"[cpumanager] unable to reserve the required amount of CPUs "
                              f"(size of  did not equal {count})") from err


def new_cpu_manager(*, policy_name: str, root_dir: str, reserved_system_cpus: str,
                    kube_reserved: dict[str, str], system_reserved: dict[str, str],
                    reconcile_period: float, runtime_service: RuntimeService,
                    active_pods: Callable[[], list[V1Pod]],
                    pod_status: Callable[[str], PodStatus | None],
                    sources_ready: Callable[[], bool], affinity: AffinityStore,
                    topology: CPUTopology) -> CPUManager:
    """Upstream ``NewManager``: the policy on the machine's topology; reads no state yet.

    ``topology`` is the machine as the kubelet read it once at start (``discover``);
    only the static policy uses it. ``affinity`` is the topology manager's store of the
    NUMA affinity chosen for each container, which allocation follows.
    """
    policy: Policy
    if policy_name == POLICY_STATIC:
        reserved = reserved_cpus(reserved_system_cpus=reserved_system_cpus,
                                 kube_reserved=kube_reserved, system_reserved=system_reserved,
                                 topology=topology)
        klog.info("Reserved CPUs not available for exclusive assignment",
                  reservedSize=len(reserved), reserved=cpuset.format(reserved))
        policy = StaticPolicy(topology, reserved)
    elif policy_name == POLICY_NONE:
        policy = NonePolicy()
    else:
        raise CPUManagerError(f'unknown policy: "{policy_name}"')
    return CPUManager(policy, os.path.join(root_dir, CHECKPOINT_NAME),
                      runtime_service=runtime_service, active_pods=active_pods,
                      pod_status=pod_status, sources_ready=sources_ready,
                      reconcile_period=reconcile_period, affinity=affinity)
