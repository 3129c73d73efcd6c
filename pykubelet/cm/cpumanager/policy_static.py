"""The ``none`` and ``static`` policies (upstream ``policy_none.go``, ``policy_static.go``).

``static``: a container of a Guaranteed pod whose cpu request is a whole number of
CPUs gets that many CPUs of its own, taken out of the shared pool (the state's
default set); every other container runs on the shared pool. The reserved CPUs
are never handed out, so they stay in the shared pool. An app container may
reuse the CPUs its pod's (non-sidecar) init containers held, since those have
finished before it starts. A restored state must still account for exactly the
machine's CPUs with the reserved ones shared, or the kubelet stops (upstream's
``validateState`` messages).

``none``: nothing exclusive; the default set stays empty, so containers get no
cpuset at all.
"""

from __future__ import annotations

from typing import Protocol

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api.qos import GUARANTEED, container_requests, get_pod_qos
from pykubelet.api.quantity import QuantityError, cpu_to_millis
from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.cpumanager.cpuset import CPUSet
from pykubelet.cm.cpumanager.state import CPUState
from pykubelet.cm.cpumanager.topology import CPUTopology, take_by_topology

POLICY_NONE = "none"
POLICY_STATIC = "static"


class PolicyError(Exception):
    """A state the policy cannot work with."""


class Policy(Protocol):
    name: str

    def start(self, state: CPUState) -> None: ...

    def allocate(self, state: CPUState, pod: V1Pod, container: V1Container) -> None: ...

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> None: ...


class NonePolicy:
    name = POLICY_NONE

    def start(self, state: CPUState) -> None:
        pass

    def allocate(self, state: CPUState, pod: V1Pod, container: V1Container) -> None:
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


def _uid(pod: V1Pod) -> str:
    return (pod.metadata.uid if pod.metadata is not None else None) or ""


def _is_regular_init(pod: V1Pod, name: str) -> bool:
    """An init container that runs to completion (not a restartable sidecar)."""
    for init in (pod.spec.init_containers if pod.spec is not None else None) or []:
        if init.name == name:
            return init.restart_policy != "Always"
    return False


class StaticPolicy:
    name = POLICY_STATIC

    def __init__(self, topology: CPUTopology, reserved: CPUSet) -> None:
        self.topology = topology
        self.reserved = reserved

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

    def allocate(self, state: CPUState, pod: V1Pod, container: V1Container) -> None:
        count = guaranteed_cpus(pod, container)
        name = container.name or ""
        uid = _uid(pod)
        if count == 0 or state.cpu_set(uid, name) is not None:
            return
        reusable = self._reusable(state, pod, name)
        assignable = (state.default_cpu_set - self.reserved) | reusable
        cpus = take_by_topology(self.topology, assignable, count)
        state.set_cpu_set(uid, name, cpus)
        state.set_default_cpu_set(state.default_cpu_set - cpus)

    def _reusable(self, state: CPUState, pod: V1Pod, name: str) -> CPUSet:
        """CPUs of the pod's finished-by-then init containers that no app container holds."""
        if _is_regular_init(pod, name):
            return frozenset()
        held = state.assignments.get(_uid(pod), {})
        from_init = frozenset().union(*(cpus for other, cpus in held.items()
                                        if _is_regular_init(pod, other)))
        in_use = frozenset().union(*(cpus for other, cpus in held.items()
                                     if not _is_regular_init(pod, other)))
        return from_init - in_use

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> None:
        cpus = state.cpu_set(pod_uid, container)
        if cpus is None:
            return
        state.delete(pod_uid, container)
        # CPUs a sibling still holds (reused from an init container) stay out of the pool.
        siblings = frozenset().union(*state.assignments.get(pod_uid, {}).values())
        state.set_default_cpu_set(state.default_cpu_set | (cpus - siblings))
