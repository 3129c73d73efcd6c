"""The ``none`` and ``static`` policies (upstream ``policy_none.go``, ``policy_static.go``).

``static``: a container of a Guaranteed pod whose cpu request is a whole number of
CPUs gets that many CPUs of its own, taken out of the shared pool (the state's
default set); every other container runs on the shared pool. The reserved CPUs
are never handed out, so they stay in the shared pool. A restored state must still
account for exactly the machine's CPUs with the reserved ones shared, or the kubelet
stops (upstream's ``validateState`` messages).

Reuse (upstream's ``cpusToReuse``): a regular init container has finished before the
next container of its pod starts, so every later container, init or app, may take
the CPUs it held; two init containers of 2 CPUs and an app container of 2 fit in 3
CPUs. A sidecar (restartable init container) keeps running beside what starts after
it, so its CPUs are never reusable, and neither are what an app container took.
Upstream keeps that set in memory for the pod being admitted; here it is worked out
from the state (the pod's init containers' CPUs less its other containers'), which
gives the same set during an admission and also after a restart.

Topology hints (upstream ``GetTopologyHints``/``generateCPUTopologyHints``): for a
container with exclusive CPUs to get, one hint per set of NUMA nodes whose free
(or reusable) CPUs can meet the request, preferred when the set is as small as
any that the machine's CPUs could meet it with; a container already holding CPUs
gets the hints of what it holds (after a restart), or none at all if that is not
what it asks for now. Containers without exclusive CPUs give no hints ("don't
care"). ``allocate`` takes from the NUMA nodes of the container's stored affinity
first, then from anywhere, as upstream's ``allocateCPUs``.

``none``: nothing exclusive; the default set stays empty, so containers get no
cpuset at all.
"""

from __future__ import annotations

from typing import Protocol

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import init_then_app_containers, is_restartable_init_container, pod_uid
from pykubelet.api.qos import GUARANTEED, container_requests, get_pod_qos
from pykubelet.api.quantity import QuantityError, cpu_to_millis
from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.cpumanager.cpuset import CPUSet
from pykubelet.cm.cpumanager.state import CPUState
from pykubelet.cm.cpumanager.topology import CPUTopology, take_by_topology
from pykubelet.cm.topologymanager.bitmask import BitMask, iterate_bit_masks
from pykubelet.cm.topologymanager.policy import ProviderHints, TopologyHint

POLICY_NONE = "none"
POLICY_STATIC = "static"
RESOURCE_CPU = "cpu"


class PolicyError(Exception):
    """A state the policy cannot work with."""


class Policy(Protocol):
    name: str

    def start(self, state: CPUState) -> None: ...

    def get_topology_hints(self, state: CPUState, pod: V1Pod,
                           container: V1Container) -> ProviderHints: ...

    def get_pod_topology_hints(self, state: CPUState, pod: V1Pod) -> ProviderHints: ...

    def allocate(self, state: CPUState, pod: V1Pod, container: V1Container,
                 affinity: BitMask | None) -> None: ...

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> None: ...

    def allocatable_cpus(self) -> CPUSet:
        """The CPUs it may give containers exclusively (the pod-resources API reports them)."""
        ...


class NonePolicy:
    name = POLICY_NONE

    def allocatable_cpus(self) -> CPUSet:
        return frozenset()

    def start(self, state: CPUState) -> None:
        pass

    def get_topology_hints(self, state: CPUState, pod: V1Pod,
                           container: V1Container) -> ProviderHints:
        return None

    def get_pod_topology_hints(self, state: CPUState, pod: V1Pod) -> ProviderHints:
        return None

    def allocate(self, state: CPUState, pod: V1Pod, container: V1Container,
                 affinity: BitMask | None) -> None:
        pass

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> None:
        pass


def guaranteed_cpus(pod: V1Pod, container: V1Container) -> int:
    """Upstream ``guaranteedCPUs``: the whole CPUs a container may hold alone, else 0."""
    if get_pod_qos(pod) != GUARANTEED:
        return 0
    request = container_requests(container).get("cpu")
    if request is None:
        return 0
    try:
        millis = cpu_to_millis(request)
    except QuantityError:
        return 0
    return millis // 1000 if millis % 1000 == 0 else 0


def pod_guaranteed_cpus(pod: V1Pod) -> int:
    """Upstream ``podGuaranteedCPUs``: what the pod needs at its peak, sidecars included.

    Regular init containers run one at a time, each beside the sidecars started
    before it; sidecars and app containers then run together.
    """
    spec = pod.spec
    if spec is None:
        return 0
    by_init = by_sidecars = 0
    for init in spec.init_containers or []:
        cpus = guaranteed_cpus(pod, init)
        if is_restartable_init_container(init):
            by_sidecars += cpus
        else:
            by_init = max(by_init, by_sidecars + cpus)
    by_apps = sum(guaranteed_cpus(pod, app) for app in spec.containers or [])
    return max(by_init, by_apps + by_sidecars)


def _regular_init_names(pod: V1Pod) -> set[str]:
    """The init containers that run to completion (not restartable sidecars)."""
    inits = (pod.spec.init_containers or []) if pod.spec is not None else []
    return {init.name or "" for init in inits if not is_restartable_init_container(init)}


class StaticPolicy:
    name = POLICY_STATIC

    def __init__(self, topology: CPUTopology, reserved: CPUSet) -> None:
        self.topology = topology
        self.reserved = reserved

    def allocatable_cpus(self) -> CPUSet:
        return self.topology.all_cpus() - self.reserved

    def start(self, state: CPUState) -> None:
        all_cpus = self.topology.all_cpus()
        default = state.default_cpu_set
        if not default:
            if state.assignments:
                raise PolicyError("default cpuset cannot be empty")
            state.set_default_cpu_set(all_cpus)
            return
        if not self.reserved <= default:
            raise PolicyError(f'not all reserved cpus: "{cpuset.format(self.reserved)}" are '
                              f'present in defaultCpuSet: "{cpuset.format(default)}"')
        known = set(default)
        for pod, containers in state.assignments.items():
            for name, cpus in containers.items():
                if cpus & default:
                    raise PolicyError(
                        f'pod: {pod}, container: {name} cpuset: "{cpuset.format(cpus)}" '
                        f'overlaps with default cpuset "{cpuset.format(default)}"')
                known |= cpus
        if known != all_cpus:
            raise PolicyError(f'current set of available CPUs "{cpuset.format(all_cpus)}" '
                              f'doesn\'t match with CPUs in state "{cpuset.format(known)}"')

    # -- topology hints ------------------------------------------------------------------

    def get_topology_hints(self, state: CPUState, pod: V1Pod,
                           container: V1Container) -> ProviderHints:
        requested = guaranteed_cpus(pod, container)
        if requested == 0:
            return None
        held = state.cpu_set(pod_uid(pod), container.name or "")
        if held is not None:
            if len(held) != requested:
                # Held CPUs that are not what is asked now: a preference nothing can meet.
                return {RESOURCE_CPU: []}
            return {RESOURCE_CPU: self._hints(held, frozenset(), requested)}
        return {RESOURCE_CPU: self._hints(self._available(state), self._reusable(state, pod),
                                          requested)}

    def get_pod_topology_hints(self, state: CPUState, pod: V1Pod) -> ProviderHints:
        requested = pod_guaranteed_cpus(pod)
        if requested == 0:
            return None
        held_by_pod: CPUSet = frozenset()
        for container in init_then_app_containers(pod):
            held = state.cpu_set(pod_uid(pod), container.name or "")
            if held is None:
                continue
            if len(held) != guaranteed_cpus(pod, container):
                return {RESOURCE_CPU: []}
            held_by_pod |= held
        if len(held_by_pod) == requested:
            return {RESOURCE_CPU: self._hints(held_by_pod, frozenset(), requested)}
        reusable = self._reusable(state, pod) | held_by_pod
        return {RESOURCE_CPU: self._hints(self._available(state), reusable, requested)}

    def _available(self, state: CPUState) -> CPUSet:
        return state.default_cpu_set - self.reserved

    def _hints(self, available: CPUSet, reusable: CPUSet, requested: int) -> list[TopologyHint]:
        """A hint per NUMA node set that can meet ``requested`` with ``reusable`` inside it."""
        nodes = self.topology.numa_nodes()
        narrowest = len(nodes)
        fitting: list[BitMask] = []
        for mask in iterate_bit_masks(nodes):
            inside = self.topology.numa_node_cpus(mask.bits())
            # Preferred is measured against the machine, not what is free now.
            if len(inside) >= requested:
                narrowest = min(narrowest, mask.count())
            if not reusable <= inside:
                continue
            if len(reusable) + len(available & inside) >= requested:
                fitting.append(mask)
        return [TopologyHint(mask, mask.count() == narrowest) for mask in fitting]

    # -- allocation ----------------------------------------------------------------------

    def allocate(self, state: CPUState, pod: V1Pod, container: V1Container,
                 affinity: BitMask | None) -> None:
        count = guaranteed_cpus(pod, container)
        name = container.name or ""
        uid = pod_uid(pod)
        if count == 0 or state.cpu_set(uid, name) is not None:
            return
        assignable = self._available(state) | self._reusable(state, pod)
        cpus: CPUSet = frozenset()
        if affinity is not None:
            aligned = assignable & self.topology.numa_node_cpus(affinity.bits())
            cpus = take_by_topology(self.topology, aligned, min(count, len(aligned)))
        cpus |= take_by_topology(self.topology, assignable - cpus, count - len(cpus))
        state.set_cpu_set(uid, name, cpus)
        state.set_default_cpu_set(state.default_cpu_set - cpus)

    def _reusable(self, state: CPUState, pod: V1Pod) -> CPUSet:
        """What the pod's next container may take besides the free CPUs: what its regular
        init containers held (finished by the time it starts), less what its sidecars and
        app containers hold (they keep running)."""
        held = state.assignments.get(pod_uid(pod), {})
        regular_init = _regular_init_names(pod)
        finished: CPUSet = frozenset().union(
            *(cpus for name, cpus in held.items() if name in regular_init))
        running: CPUSet = frozenset().union(
            *(cpus for name, cpus in held.items() if name not in regular_init))
        return finished - running

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> None:
        cpus = state.cpu_set(pod_uid, container)
        if cpus is None:
            return
        state.delete(pod_uid, container)
        # CPUs a sibling still holds (reused from an init container) stay out of the pool.
        siblings = frozenset().union(*state.assignments.get(pod_uid, {}).values())
        state.set_default_cpu_set(state.default_cpu_set | (cpus - siblings))
