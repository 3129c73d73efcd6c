"""What one admission runs (upstream ``scope*.go``), and the hints it leaves behind.

Every admission starts with each provider, in order, preparing for it
(``prepare_for_admission``: releasing what gone pods hold) before any is asked for
hints, so every provider's hints see everything that is free and no provider's
answer depends on whether another was asked first.

``container`` scope: each container in turn (init containers first, then app
containers) has its providers' hints merged; a refusal rejects the pod with
``TopologyAffinityError``, otherwise the chosen hint is stored for the container
and every provider allocates for it before the next container is looked at, so a
later container's hints already see the earlier ones' allocations.

``pod`` scope: the providers' hints for the whole pod are merged once, and that one
hint is stored for every container before each is allocated, so the whole pod
lands on the same NUMA nodes.

Under the ``none`` policy there is no scope (upstream's none scope): the providers
prepare, then nothing is merged or stored, each container is only allocated.

A provider whose ``allocate`` raises rejects the pod with
``UnexpectedAdmissionError`` and upstream's message; what earlier containers got
stays allocated, as upstream leaves it, until the pod is found gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import init_then_app_containers, pod_ref, pod_uid
from pykubelet.cm.topologymanager.policy import (
    ANY_NODE_NOT_PREFERRED,
    Policy,
    ProviderHints,
    TopologyHint,
)
from pykubelet.lifecycle.admission import ADMIT, PodAdmitResult
from pykubelet.util import klog

SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"

TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


class HintProvider(Protocol):
    """A resource manager the topology manager consults (the CPU manager, devices...)."""

    async def prepare_for_admission(self, pod: V1Pod) -> None:
        """Release what pods no longer running hold, before any provider hints for ``pod``.

        A coroutine: a provider may have to ask the runtime which containers still run.
        """
        ...

    def get_topology_hints(self, pod: V1Pod, container: V1Container) -> ProviderHints:
        """Per resource, the NUMA node sets the container's request could be met from."""
        ...

    def get_pod_topology_hints(self, pod: V1Pod) -> ProviderHints:
        """The same for the whole pod (``topologyManagerScope: pod``)."""
        ...

    async def allocate(self, pod: V1Pod, container: V1Container) -> None:
        """Take the container's resources, aligned with its stored affinity; raise on failure.

        A coroutine: a provider may have to ask a plugin (a device plugin's Allocate).
        """
        ...


class AffinityStore:
    """The hint chosen for each container (pod UID -> container name), for providers to read."""

    def __init__(self) -> None:
        self._hints: dict[str, dict[str, TopologyHint]] = {}

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint:
        """The stored hint; "any node, not preferred" for one nothing was stored for."""
        return self._hints.get(pod_uid, {}).get(container_name, ANY_NODE_NOT_PREFERRED)

    def set_affinity(self, pod_uid: str, container_name: str, hint: TopologyHint) -> None:
        self._hints.setdefault(pod_uid, {})[container_name] = hint

    def pods(self) -> set[str]:
        return set(self._hints)

    def remove_pod(self, pod_uid: str) -> None:
        self._hints.pop(pod_uid, None)


def _rejected() -> PodAdmitResult:
    return PodAdmitResult(False, TOPOLOGY_AFFINITY_ERROR, TOPOLOGY_AFFINITY_MESSAGE)


async def _prepare(providers: Sequence[HintProvider], pod: V1Pod) -> None:
    for provider in providers:
        try:
            await provider.prepare_for_admission(pod)
        except Exception as err:  # upstream's clean-ups never fail an admission
            # What the provider still holds for gone pods only narrows its hints.
            klog.error("Preparing for admission failed", err, pod=pod_ref(pod),
                       provider=type(provider).__name__)


async def _allocate(providers: Sequence[HintProvider], pod: V1Pod,
                    container: V1Container) -> PodAdmitResult | None:
    for provider in providers:
        try:
            await provider.allocate(pod, container)
        except Exception as err:  # any provider's failure refuses the pod, as upstream
            klog.error("Allocate error", err, pod=pod_ref(pod), containerName=container.name)
            return PodAdmitResult(False, UNEXPECTED_ADMISSION_ERROR,
                                  f"Allocate failed due to {err}, which is unexpected")
    return None


def _log_hints(pod: V1Pod, container: str | None, hints: Iterable[ProviderHints]) -> None:
    for answer in hints:
        rendered = ({name: [str(hint) for hint in found] if found is not None else None
                     for name, found in answer.items()} if answer is not None else None)
        klog.v(4).info("TopologyHints", hints=rendered, pod=pod_ref(pod), containerName=container)


async def admit_without_scope(providers: Sequence[HintProvider], pod: V1Pod) -> PodAdmitResult:
    """Policy ``none``: allocate each container, merge and store nothing."""
    await _prepare(providers, pod)
    for container in init_then_app_containers(pod):
        failed = await _allocate(providers, pod, container)
        if failed is not None:
            return failed
    return ADMIT


async def admit_container_scope(policy: Policy, providers: Sequence[HintProvider],
                                store: AffinityStore, pod: V1Pod) -> PodAdmitResult:
    await _prepare(providers, pod)
    for container in init_then_app_containers(pod):
        hints = [provider.get_topology_hints(pod, container) for provider in providers]
        _log_hints(pod, container.name, hints)
        best, admit = policy.merge(hints)
        klog.info("Best TopologyHint", bestHint=str(best), pod=pod_ref(pod),
                  containerName=container.name)
        if not admit:
            return _rejected()
        store.set_affinity(pod_uid(pod), container.name or "", best)
        failed = await _allocate(providers, pod, container)
        if failed is not None:
            return failed
    return ADMIT


async def admit_pod_scope(policy: Policy, providers: Sequence[HintProvider],
                          store: AffinityStore, pod: V1Pod) -> PodAdmitResult:
    await _prepare(providers, pod)
    hints = [provider.get_pod_topology_hints(pod) for provider in providers]
    _log_hints(pod, None, hints)
    best, admit = policy.merge(hints)
    klog.info("Best TopologyHint", bestHint=str(best), pod=pod_ref(pod))
    if not admit:
        return _rejected()
    for container in init_then_app_containers(pod):
        store.set_affinity(pod_uid(pod), container.name or "", best)
        failed = await _allocate(providers, pod, container)
        if failed is not None:
            return failed
    return ADMIT
