"""The topology manager as the kubelet holds it (upstream ``topology_manager.go``).

It is the kubelet's resource-allocation admit handler: before the predicates run,
it has its hint providers (in the order given) release what gone pods hold, then
say where each container's resources could come from, merges their answers by
``topologyManagerPolicy`` per ``topologyManagerScope`` (``scope``), refuses the pod
when the policy says so, and otherwise has every provider allocate. The chosen
hints stay in the ``AffinityStore`` the providers were built with, so each reads
its container's affinity while allocating.

Stored hints are only needed during admission; those of pods no longer among the
kubelet's active pods are dropped at the next admission, so the store never
outgrows the node.

The NUMA nodes are the machine's as the kubelet read it once at start; upstream
refuses to merge over more than 8 of them (the masks to try grow as 2^n), a limit
the ``none`` policy, which merges nothing, does not have.
"""

from __future__ import annotations

from collections.abc import Sequence

from pykubelet.api import pod_uid
from pykubelet.cm.topologymanager.policy import POLICY_NONE, Policy, TopologyHint, new_policy
from pykubelet.cm.topologymanager.scope import (
    SCOPE_CONTAINER,
    SCOPE_POD,
    AffinityStore,
    HintProvider,
    admit_container_scope,
    admit_pod_scope,
    admit_without_scope,
)
from pykubelet.lifecycle.admission import PodAdmitAttributes, PodAdmitResult
from pykubelet.util import klog

MAX_ALLOWABLE_NUMA_NODES = 8


class TopologyManagerError(Exception):
    """The topology manager cannot be built; the kubelet must not run."""


class TopologyManager:
    def __init__(self, policy: Policy, scope: str, *, hint_providers: Sequence[HintProvider],
                 store: AffinityStore) -> None:
        self.policy = policy
        # Upstream runs no scope under the none policy, whatever topologyManagerScope says.
        self.scope = scope if policy.name != POLICY_NONE else POLICY_NONE
        self.hint_providers = list(hint_providers)
        self.store = store

    async def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        pod = attrs.pod
        self._forget_gone_pods({pod_uid(p) for p in [*attrs.other_pods, pod]})
        if self.scope == SCOPE_POD:
            return await admit_pod_scope(self.policy, self.hint_providers, self.store, pod)
        if self.scope == SCOPE_CONTAINER:
            return await admit_container_scope(self.policy, self.hint_providers, self.store, pod)
        return await admit_without_scope(self.hint_providers, pod)

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint:
        return self.store.get_affinity(pod_uid, container_name)

    def _forget_gone_pods(self, active: set[str]) -> None:
        # The admit attributes carry every pod still active on the node.
        for uid in self.store.pods() - active:
            klog.v(4).info("Removing topology hints of a gone pod", podUID=uid)
            self.store.remove_pod(uid)


def new_topology_manager(*, policy_name: str, scope_name: str,
                         numa_nodes: Sequence[int],
                         hint_providers: Sequence[HintProvider],
                         store: AffinityStore) -> TopologyManager:
    """Upstream ``NewManager``: the policy over the machine's NUMA node ids, the scope."""
    klog.info("Creating topology manager with policy per scope",
              topologyPolicyName=policy_name, topologyScopeName=scope_name)
    if policy_name != POLICY_NONE and len(numa_nodes) > MAX_ALLOWABLE_NUMA_NODES:
        raise TopologyManagerError(f"unsupported on machines with more than "
                                   f"{MAX_ALLOWABLE_NUMA_NODES} NUMA Nodes")
    try:
        policy = new_policy(policy_name, numa_nodes)
    except ValueError as err:
        raise TopologyManagerError(str(err)) from err
    if policy_name != POLICY_NONE and scope_name not in (SCOPE_CONTAINER, SCOPE_POD):
        raise TopologyManagerError(f'unknown scope: "{scope_name}"')
    return TopologyManager(policy, scope_name, hint_providers=hint_providers, store=store)
