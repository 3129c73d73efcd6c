"""The eviction manager (upstream ``pkg/kubelet/eviction``): keep the node out of starvation.

Every ``monitoring_period`` (10 s) ``synchronize``:

1. observes the signals (``signals.observe``) and finds the thresholds met:
   hard ones at once, soft ones once held for their grace period; a threshold
   met before stays met until the observation clears it by its
   ``evictionMinimumReclaim`` too;
2. derives the node conditions (MemoryPressure, DiskPressure, PIDPressure),
   which stay set for ``evictionPressureTransitionPeriod`` after the last
   observation that met them, so they do not flap;
3. when a threshold is met: memory thresholds first, it first reclaims at the
   node level (disk signals: dead containers, then unused images) and stops
   if that resolved the pressure; otherwise it ranks the active pods
   (memory: usage above requests first, then lower priority, then usage above
   requests; disk likewise with ephemeral storage; pids: priority then
   process count) and evicts the first one it may: never critical pods
   (static, mirror, system-critical priority). One pod per round. The
   evicted pod is Failed with reason ``Evicted`` and upstream's message.

``admit`` rejects pods while the node is under pressure: under memory
pressure alone only BestEffort pods (unless they tolerate the
memory-pressure taint); under any other pressure every pod; critical pods
always pass. ``PressureConditions`` is the small view the node status reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from kubernetes_asyncio.client import V1Pod, V1PodCondition, V1PodStatus

from pykubelet.api import pod_ref
from pykubelet.api.kubetypes import is_critical_pod
from pykubelet.api.qos import BEST_EFFORT, container_requests, get_pod_qos
from pykubelet.api.quantity import parse_quantity
from pykubelet.api.resources import pod_requests
from pykubelet.config.units import EvictionThreshold, Quantity
from pykubelet.events import WARNING, EventRecorder
from pykubelet.eviction.signals import (
    ALLOCATABLE_MEMORY_AVAILABLE,
    IMAGEFS_AVAILABLE,
    IMAGEFS_INODES_FREE,
    MEMORY_AVAILABLE,
    NODEFS_AVAILABLE,
    NODEFS_INODES_FREE,
    PID_AVAILABLE,
    Observations,
    PodUsage,
)
from pykubelet.util import klog

REASON = "Evicted"
NODE_LOW_MESSAGE = "The node was low on resource: {}. "
THRESHOLD_MET_MESSAGE = "Threshold quantity: {}, available: {}. "
CONTAINER_MESSAGE = "Container {} was using {}, request is {}, has larger consumption of {}. "
NODE_CONDITION_MESSAGE = "The node had condition: [{}]. "
EVICTION_THRESHOLD_MET = "EvictionThresholdMet"
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"
MONITORING_PERIOD = 10.0
# Upstream's immediateEvictionGracePeriodSeconds for hard thresholds.
IMMEDIATE_EVICTION_GRACE_PERIOD = 1

MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
MEMORY, EPHEMERAL_STORAGE, INODES, PIDS = "memory", "ephemeral-storage", "inodes", "pids"

SIGNAL_CONDITION = {
    MEMORY_AVAILABLE: MEMORY_PRESSURE, ALLOCATABLE_MEMORY_AVAILABLE: MEMORY_PRESSURE,
    NODEFS_AVAILABLE: DISK_PRESSURE, NODEFS_INODES_FREE: DISK_PRESSURE,
    IMAGEFS_AVAILABLE: DISK_PRESSURE, IMAGEFS_INODES_FREE: DISK_PRESSURE,
    PID_AVAILABLE: PID_PRESSURE,
}
SIGNAL_RESOURCE = {
    MEMORY_AVAILABLE: MEMORY, ALLOCATABLE_MEMORY_AVAILABLE: MEMORY,
    NODEFS_AVAILABLE: EPHEMERAL_STORAGE, IMAGEFS_AVAILABLE: EPHEMERAL_STORAGE,
    NODEFS_INODES_FREE: INODES, IMAGEFS_INODES_FREE: INODES, PID_AVAILABLE: PIDS,
}
# The node conditions and what the node status says for each (upstream setters).
CONDITION_TEXT = {
    MEMORY_PRESSURE: (("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
                      ("KubeletHasSufficientMemory", "kubelet has sufficient memory available")),
    DISK_PRESSURE: (("KubeletHasDiskPressure", "kubelet has disk pressure"),
                    ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")),
    PID_PRESSURE: (("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
                   ("KubeletHasSufficientPID", "kubelet has sufficient PID available")),
}
CONDITION_TAINT = {
    MEMORY_PRESSURE: "node.kubernetes.io/memory-pressure",
    DISK_PRESSURE: "node.kubernetes.io/disk-pressure",
    PID_PRESSURE: "node.kubernetes.io/pid-pressure",
}


class PressureConditions(Protocol):
    """What the node status reads from the eviction manager."""

    def is_under_memory_pressure(self) -> bool: ...
    def is_under_disk_pressure(self) -> bool: ...
    def is_under_pid_pressure(self) -> bool: ...


@dataclass(frozen=True)
class ConditionReport:
    """One node condition as the node status writes it."""

    type: str
    status: str
    reason: str
    message: str


class NodeReclaimer(Protocol):
    """Node-level reclaim for disk signals: dead containers, then unused images."""

    async def delete_all_unused_containers(self) -> None: ...
    async def delete_unused_images(self) -> None: ...


@dataclass
class EvictionConfig:
    thresholds: list[EvictionThreshold] = field(default_factory=list)
    pressure_transition_period: float = 300.0
    max_pod_grace_period: int = 0
    monitoring_period: float = MONITORING_PERIOD


KillPod = Callable[[V1Pod, int, Callable[[V1PodStatus], None]], Awaitable[None]]


def threshold_met(threshold: EvictionThreshold, observations: Observations,
                  enforce_min_reclaim: bool) -> bool:
    observed = observations.get(threshold.signal)
    if observed is None:
        return False
    quantity = threshold.value.amount(observed.capacity)
    if enforce_min_reclaim and threshold.min_reclaim is not None:
        quantity += threshold.min_reclaim.amount(observed.capacity)
    return quantity > observed.available


def with_allocatable_thresholds(thresholds: list[EvictionThreshold],
                                enforce_node_allocatable: Iterable[str]) -> list[EvictionThreshold]:
    """With allocatable enforced on pods, a hard memory threshold also guards ``kubepods``."""
    if "pods" not in set(enforce_node_allocatable):
        return list(thresholds)
    extra = [dataclasses.replace(t, signal=ALLOCATABLE_MEMORY_AVAILABLE) for t in thresholds
             if t.signal == MEMORY_AVAILABLE and t.hard]
    return [*thresholds, *extra]


def _memory_first(threshold: EvictionThreshold) -> int:
    # Upstream byEvictionPriority: memory signals first, signals without a resource last.
    if threshold.signal in (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE):
        return 0
    return 1 if threshold.signal in SIGNAL_RESOURCE else 2


def _binary(amount: int) -> str:
    return str(Quantity(Fraction(amount), binary=True))


def _decimal(amount: int) -> str:
    return str(Quantity(Fraction(amount)))


class EvictionManager:
    def __init__(self, config: EvictionConfig,
                 observe: Callable[[], Awaitable[Observations]],
                 pod_usage: Callable[[bool], Awaitable[dict[str, PodUsage]]],
                 active_pods: Callable[[], list[V1Pod]], kill_pod: KillPod, *,
                 reclaimer: NodeReclaimer | None = None, recorder: EventRecorder | None = None,
                 node_ref: object = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.observe = observe
        self.pod_usage = pod_usage
        self.active_pods = active_pods
        self.kill_pod = kill_pod
        self.reclaimer = reclaimer
        self.recorder = recorder
        self.node_ref = node_ref
        self.clock = clock
        self.thresholds_met: list[EvictionThreshold] = []
        self.first_observed: dict[EvictionThreshold, float] = {}
        self.condition_last_observed: dict[str, float] = {}
        self.node_conditions: list[str] = []
        self.last_observations: Observations = {}

    # --- the node status view ------------------------------------------------------------------

    def is_under_memory_pressure(self) -> bool:
        return MEMORY_PRESSURE in self.node_conditions

    def is_under_disk_pressure(self) -> bool:
        return DISK_PRESSURE in self.node_conditions

    def is_under_pid_pressure(self) -> bool:
        return PID_PRESSURE in self.node_conditions

    def condition_reports(self) -> list[ConditionReport]:
        reports = []
        for condition, (pressure, fine) in CONDITION_TEXT.items():
            under = condition in self.node_conditions
            reason, message = pressure if under else fine
            reports.append(ConditionReport(condition, "True" if under else "False",
                                           reason, message))
        return reports

    def pressure_taints(self) -> list[str]:
        """NoSchedule taint keys matching the current conditions (for node registration)."""
        return [CONDITION_TAINT[c] for c in self.node_conditions]

    # --- admission -------------------------------------------------------------------------------

    def admit(self, pod: V1Pod) -> tuple[str, str] | None:
        """None to admit, else (reason, message) as upstream's eviction admit handler."""
        conditions = list(self.node_conditions)
        if not conditions or is_critical_pod(pod):
            return None
        if conditions == [MEMORY_PRESSURE] and (
                get_pod_qos(pod) != BEST_EFFORT or _tolerates_memory_pressure(pod)):
            return None
        klog.info("Failed to admit pod to node", pod=pod_ref(pod),
                  nodeCondition=",".join(conditions))
        return REASON, NODE_CONDITION_MESSAGE.format(" ".join(conditions))

    # --- the control loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """``synchronize`` every monitoring period (a supervised task)."""
        while True:
            try:
                await self.synchronize()
            except Exception as err:
                klog.error("Eviction manager: failed to synchronize", err)
            await asyncio.sleep(self.config.monitoring_period)

    async def synchronize(self) -> V1Pod | None:
        """One round; returns the evicted pod, if any."""
        if not self.config.thresholds:
            return None
        observations = await self.observe()
        self.last_observations = observations
        now = self.clock()
        met = [t for t in self.config.thresholds if threshold_met(t, observations, False)]
        # Thresholds met before stay until the minimum reclaim is reached too.
        for previous in self.thresholds_met:
            if previous not in met and threshold_met(previous, observations, True):
                met.append(previous)
        self.first_observed = {t: self.first_observed.get(t, now) for t in met}
        for threshold in met:
            condition = SIGNAL_CONDITION.get(threshold.signal)
            if condition:
                self.condition_last_observed[condition] = now
        previous_conditions = set(self.node_conditions)
        self.node_conditions = sorted(
            c for c, seen in self.condition_last_observed.items()
            if now - seen < self.config.pressure_transition_period)
        if set(self.node_conditions) != previous_conditions:
            klog.info("Eviction manager: node conditions changed",
                      conditions=",".join(self.node_conditions) or "none")
        due = [t for t in met if now - self.first_observed[t] >= t.grace_period.total_seconds()]
        self.thresholds_met = due
        if not due:
            klog.v(3).info("Eviction manager: no resources are starved")
            return None
        due.sort(key=_memory_first)
        reclaimable = [t for t in due if t.signal in SIGNAL_RESOURCE]
        if not reclaimable:
            return None
        threshold = reclaimable[0]
        resource = SIGNAL_RESOURCE[threshold.signal]
        klog.info("Eviction manager: attempting to reclaim", resourceName=resource)
        if self.recorder is not None and self.node_ref is not None:
            self.recorder.event(self.node_ref, WARNING, EVICTION_THRESHOLD_MET,
                                f"Attempting to reclaim {resource}")
        if await self._reclaim_node_level(threshold):
            klog.info("Eviction manager: able to reduce resource pressure without evicting pods.",
                      resourceName=resource)
            return None
        pods = self.active_pods()
        if not pods:
            klog.error("Eviction manager: eviction thresholds have been met, but no pods are "
                       "active to evict")
            return None
        usage = await self.pod_usage(resource in (EPHEMERAL_STORAGE, INODES))
        ranked = rank_pods(pods, resource, usage)
        klog.info("Eviction manager: pods ranked for eviction",
                  pods=",".join(pod_ref(p) for p in ranked))
        grace = IMMEDIATE_EVICTION_GRACE_PERIOD
        for pod in ranked:
            if not threshold.hard:
                grace = self.config.max_pod_grace_period
                own = pod.spec.termination_grace_period_seconds if pod.spec else None
                if own is not None:
                    grace = min(grace, own)
            message = eviction_message(resource, pod, usage.get(pod.metadata.uid), threshold,
                                       observations)
            if await self._evict(pod, grace, message):
                return pod
        klog.info("Eviction manager: unable to evict any pods from the node")
        return None

    async def _reclaim_node_level(self, threshold: EvictionThreshold) -> bool:
        if self.reclaimer is None or SIGNAL_RESOURCE[threshold.signal] not in (
                EPHEMERAL_STORAGE, INODES):
            return False
        try:
            await self.reclaimer.delete_all_unused_containers()
            await self.reclaimer.delete_unused_images()
        except Exception as err:
            klog.error("Eviction manager: node-level reclaim failed", err)
        observations = await self.observe()
        self.last_observations = observations
        return not any(threshold_met(t, observations, False) for t in self.config.thresholds)

    async def _evict(self, pod: V1Pod, grace: int, message: str) -> bool:
        if is_critical_pod(pod):
            klog.error("Eviction manager: cannot evict a critical pod", pod=pod_ref(pod))
            return False
        if self.recorder is not None:
            self.recorder.event(pod, WARNING, REASON, message)

        def status_func(status: V1PodStatus) -> None:
            status.phase = "Failed"
            status.reason = REASON
            status.message = message
            conditions = [c for c in status.conditions or [] if c.type != DISRUPTION_TARGET]
            conditions.append(V1PodCondition(
                type=DISRUPTION_TARGET, status="True", reason=TERMINATION_BY_KUBELET,
                message=message))
            status.conditions = conditions

        klog.info("Eviction manager: evicting pod", pod=pod_ref(pod), gracePeriod=grace,
                  message=message)
        try:
            await self.kill_pod(pod, grace, status_func)
        except Exception as err:
            klog.error("Eviction manager: pod failed to evict", err, pod=pod_ref(pod))
            return False
        klog.info("Eviction manager: pod is evicted successfully", pod=pod_ref(pod))
        return True


def _tolerates_memory_pressure(pod: V1Pod) -> bool:
    for toleration in (pod.spec.tolerations if pod.spec else None) or []:
        effect_ok = not toleration.effect or toleration.effect == "NoSchedule"
        if toleration.operator == "Exists" and not toleration.key and effect_ok:
            return True
        if toleration.key == CONDITION_TAINT[MEMORY_PRESSURE] and effect_ok and (
                toleration.operator == "Exists" or not toleration.value):
            return True
    return False


def _request(pod: V1Pod, resource: str) -> int:
    value = pod_requests(pod).get(resource)
    return math.ceil(value) if value is not None else 0


def _priority(pod: V1Pod) -> int:
    return int(pod.spec.priority or 0) if pod.spec is not None else 0


def rank_pods(pods: Iterable[V1Pod], resource: str,
              usage: dict[str, PodUsage]) -> list[V1Pod]:
    """Upstream's rank functions: the pod to evict first comes first."""
    def stats(pod: V1Pod) -> PodUsage | None:
        return usage.get(pod.metadata.uid)

    if resource == PIDS:
        def pid_key(pod: V1Pod) -> tuple[int, int]:
            found = stats(pod)
            return (_priority(pod), -(found.pids if found else 0))
        return sorted(pods, key=pid_key)

    def used(found: PodUsage) -> int:
        return found.memory if resource == MEMORY else found.disk

    request_name = MEMORY if resource == MEMORY else EPHEMERAL_STORAGE

    def key(pod: V1Pod) -> tuple[int, int, int]:
        found = stats(pod)
        if found is None:
            # No stats: after the pods that have them at the same priority.
            return (1, _priority(pod), 1)
        above = used(found) - _request(pod, request_name)
        return (0 if above > 0 else 1, _priority(pod), -above)
    return sorted(pods, key=key)


def eviction_message(resource: str, pod: V1Pod, usage: PodUsage | None,
                     threshold: EvictionThreshold, observations: Observations) -> str:
    """Upstream ``evictionMessage``: the starved resource, the threshold, offending containers."""
    message = NODE_LOW_MESSAGE.format(resource)
    observed = observations.get(threshold.signal)
    if observed is not None:
        show = _binary if resource in (MEMORY, EPHEMERAL_STORAGE) else _decimal
        message += THRESHOLD_MET_MESSAGE.format(
            show(threshold.value.amount(observed.capacity)), show(observed.available))
    if usage is None or resource not in (MEMORY, EPHEMERAL_STORAGE):
        return message
    for container in (pod.spec.containers if pod.spec else None) or []:
        stats = usage.containers.get(container.name)
        if stats is None:
            continue
        if resource == MEMORY:
            used = stats.memory_working_set
        else:
            used = stats.rootfs_used + stats.logs_used
        raw_request = container_requests(container).get(resource)
        request = math.ceil(parse_quantity(raw_request)) if raw_request is not None else 0
        if used > request:
            request_text = str(Quantity.parse(str(raw_request))) if raw_request else "0"
            message += CONTAINER_MESSAGE.format(container.name, _binary(used), request_text,
                                                resource)
    return message


__all__ = [
    "DISK_PRESSURE",
    "MEMORY_PRESSURE",
    "PID_PRESSURE",
    "REASON",
    "ConditionReport",
    "EvictionConfig",
    "EvictionManager",
    "NodeReclaimer",
    "PressureConditions",
    "eviction_message",
    "rank_pods",
    "threshold_met",
    "with_allocatable_thresholds",
]
