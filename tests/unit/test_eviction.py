"""Eviction manager decisions: thresholds, conditions, reclaim, ranking, messages, admission."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kubernetes_asyncio.client import (
    V1Container,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
    V1Toleration,
)

from pykubelet.api.kubetypes import API_SOURCE, CONFIG_SOURCE_ANNOTATION_KEY, FILE_SOURCE
from pykubelet.config.units import parse_eviction_thresholds
from pykubelet.eviction import EvictionConfig, EvictionManager, Observation, PodUsage
from pykubelet.eviction.manager import rank_pods, with_allocatable_thresholds
from pykubelet.eviction.signals import ContainerUsage

MiB = 2**20
GiB = 2**30


def pod(name: str, requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None, source: str = API_SOURCE,
        priority: int | None = None) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, namespace="default", uid=f"{name}-{uuid.uuid4().hex[:6]}",
                              annotations={CONFIG_SOURCE_ANNOTATION_KEY: source}),
        spec=V1PodSpec(priority=priority, containers=[V1Container(
            name="c", image="busybox",
            resources=V1ResourceRequirements(requests=requests, limits=limits))]))


@dataclass
class Node:
    """The seams: observations, pod usage, the kill function, node-level reclaim."""

    available: dict[str, int] = field(default_factory=lambda: {"memory.available": 4 * GiB})
    usage: dict[str, PodUsage] = field(default_factory=dict)
    pods: list[V1Pod] = field(default_factory=list)
    killed: list[tuple[str, int, V1PodStatus]] = field(default_factory=list)
    reclaims: int = 0
    reclaim_frees: dict[str, int] = field(default_factory=dict)
    now: float = 0.0

    async def observe(self) -> dict[str, Observation]:
        capacity = {"memory.available": 8 * GiB, "nodefs.available": 100 * GiB}
        return {s: Observation(v, capacity.get(s, 100 * GiB)) for s, v in self.available.items()}

    async def pod_usage(self, _disk: bool) -> dict[str, PodUsage]:
        return self.usage

    async def kill(self, victim: V1Pod, grace: int, status_func: object) -> None:
        status = V1PodStatus(phase="Running")
        status_func(status)  # type: ignore[operator]
        self.killed.append((victim.metadata.name, grace, status))
        self.pods.remove(victim)

    async def delete_all_unused_containers(self) -> None:
        self.reclaims += 1

    async def delete_unused_images(self) -> None:
        for signal, freed in self.reclaim_frees.items():
            self.available[signal] += freed

    def use(self, victim: V1Pod, memory: int = 0, disk: int = 0) -> None:
        self.usage[victim.metadata.uid] = PodUsage(containers={"c": ContainerUsage(
            "c", memory_working_set=memory, rootfs_used=disk)})


def manager(node: Node, hard: dict[str, str] | None = None, soft: dict[str, str] | None = None,
            grace: dict[str, str] | None = None, reclaim: dict[str, str] | None = None,
            transition: float = 300.0) -> EvictionManager:
    thresholds = parse_eviction_thresholds(hard or {}, soft or {}, grace or {}, reclaim or {})
    return EvictionManager(
        EvictionConfig(thresholds=thresholds, pressure_transition_period=transition,
                       max_pod_grace_period=30),
        node.observe, node.pod_usage, lambda: list(node.pods), node.kill,
        reclaimer=node, clock=lambda: node.now)


async def test_memory_pressure_evicts_the_best_effort_pod_first_with_upstreams_message() -> None:
    node = Node(available={"memory.available": 50 * MiB})
    burstable = pod("burstable", requests={"memory": "100Mi"})
    best_effort = pod("besteffort")
    node.pods = [burstable, best_effort]
    node.use(burstable, memory=80 * MiB)
    node.use(best_effort, memory=10 * MiB)
    evictions = manager(node, hard={"memory.available": "100Mi"})
    evicted = await evictions.synchronize()
    assert evicted is best_effort
    assert evictions.is_under_memory_pressure() and not evictions.is_under_disk_pressure()
    name, grace, status = node.killed[0]
    assert (name, grace) == ("besteffort", 1)
    assert status.phase == "Failed" and status.reason == "Evicted"
    assert status.message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        "Container c was using 10Mi, request is 0, has larger consumption of memory. ")
    assert [c.type for c in status.conditions] == ["DisruptionTarget"]
    # One pod per round: the burstable pod goes only in the next round.
    assert await evictions.synchronize() is burstable


async def test_static_and_critical_pods_are_never_evicted() -> None:
    node = Node(available={"memory.available": 50 * MiB})
    static = pod("static", source=FILE_SOURCE)
    critical = pod("critical", priority=2_000_000_000)
    node.pods = [static, critical]
    node.use(static, memory=GiB)
    node.use(critical, memory=GiB)
    evictions = manager(node, hard={"memory.available": "100Mi"})
    assert await evictions.synchronize() is None
    assert node.killed == []
    assert evictions.is_under_memory_pressure()


async def test_soft_threshold_waits_for_its_grace_period_and_caps_the_pods_grace() -> None:
    node = Node(available={"memory.available": 50 * MiB})
    victim = pod("victim")
    victim.spec.termination_grace_period_seconds = 120
    node.pods = [victim]
    evictions = manager(node, soft={"memory.available": "100Mi"},
                        grace={"memory.available": "30s"})
    assert await evictions.synchronize() is None
    assert evictions.is_under_memory_pressure()  # the condition does not wait
    node.now = 31
    assert await evictions.synchronize() is victim
    assert node.killed[0][1] == 30  # evictionMaxPodGracePeriod caps the pod's own 120 s


async def test_conditions_stay_for_the_transition_period_and_min_reclaim_holds() -> None:
    node = Node(available={"memory.available": 50 * MiB})
    evictions = manager(node, hard={"memory.available": "100Mi"},
                        reclaim={"memory.available": "200Mi"}, transition=60)
    await evictions.synchronize()
    node.available["memory.available"] = 150 * MiB  # above the threshold, below +min reclaim
    node.now = 10
    await evictions.synchronize()
    assert [t.signal for t in evictions.thresholds_met] == ["memory.available"]
    node.available["memory.available"] = 400 * MiB
    node.now = 20
    await evictions.synchronize()
    assert evictions.thresholds_met == []
    assert evictions.is_under_memory_pressure()  # observed 10 s ago, within 60 s
    node.now = 71
    await evictions.synchronize()
    assert not evictions.is_under_memory_pressure()
    reports = {r.type: r for r in evictions.condition_reports()}
    assert reports["MemoryPressure"].reason == "KubeletHasSufficientMemory"
    assert reports["DiskPressure"].message == "kubelet has no disk pressure"


async def test_disk_pressure_reclaims_containers_and_images_before_evicting() -> None:
    node = Node(available={"nodefs.available": 5 * GiB},
                reclaim_frees={"nodefs.available": 20 * GiB})
    node.pods = [pod("writer")]
    evictions = manager(node, hard={"nodefs.available": "10%"})
    assert await evictions.synchronize() is None
    assert node.reclaims == 1 and node.killed == []
    assert evictions.is_under_disk_pressure()
    assert evictions.pressure_taints() == ["node.kubernetes.io/disk-pressure"]


async def test_disk_pressure_evicts_when_reclaim_is_not_enough() -> None:
    node = Node(available={"nodefs.available": 5 * GiB})
    small, large = pod("small"), pod("large")
    node.pods = [small, large]
    node.use(small, disk=MiB)
    node.use(large, disk=GiB)
    evictions = manager(node, hard={"nodefs.available": "10%"})
    assert await evictions.synchronize() is large
    # 10% is upstream's float32 tenth of 100Gi: 160 bytes over 10Gi, shown in bytes.
    assert node.killed[0][2].message.startswith(
        "The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, "
        "available: 5Gi. ")


def test_ranking_usage_above_requests_then_priority_then_amount() -> None:
    within = pod("within", requests={"memory": "1Gi"})
    above_small = pod("above-small", requests={"memory": "10Mi"})
    above_large = pod("above-large")
    important = pod("important", priority=1000)
    usage = {
        within.metadata.uid: PodUsage({"c": ContainerUsage("c", memory_working_set=500 * MiB)}),
        above_small.metadata.uid: PodUsage({"c": ContainerUsage("c",
                                                                memory_working_set=20 * MiB)}),
        above_large.metadata.uid: PodUsage({"c": ContainerUsage("c",
                                                                memory_working_set=300 * MiB)}),
        important.metadata.uid: PodUsage({"c": ContainerUsage("c", memory_working_set=GiB)}),
    }
    ranked = rank_pods([within, important, above_small, above_large], "memory", usage)
    assert [p.metadata.name for p in ranked] == ["above-large", "above-small", "important",
                                                 "within"]


async def test_admission_under_pressure() -> None:
    node = Node(available={"memory.available": 50 * MiB})
    evictions = manager(node, hard={"memory.available": "100Mi", "nodefs.available": "1Gi"})
    await evictions.synchronize()
    assert evictions.admit(pod("be")) == ("Evicted",
                                          "The node had condition: [MemoryPressure]. ")
    assert evictions.admit(pod("burstable", requests={"memory": "10Mi"})) is None
    assert evictions.admit(pod("static", source=FILE_SOURCE)) is None
    tolerant = pod("tolerant")
    tolerant.spec.tolerations = [V1Toleration(key="node.kubernetes.io/memory-pressure",
                                              operator="Exists", effect="NoSchedule")]
    assert evictions.admit(tolerant) is None
    node.available["nodefs.available"] = 100 * MiB
    await evictions.synchronize()
    rejection = evictions.admit(pod("burstable2", requests={"memory": "10Mi"}))
    assert rejection is not None
    message = rejection[1]
    assert message == "The node had condition: [DiskPressure MemoryPressure]. "


def test_allocatable_threshold_follows_the_hard_memory_threshold() -> None:
    thresholds = parse_eviction_thresholds({"memory.available": "100Mi"}, {}, {}, {})
    extended = with_allocatable_thresholds(thresholds, ["pods"])
    assert [t.signal for t in extended] == ["memory.available", "allocatableMemory.available"]
    assert with_allocatable_thresholds(thresholds, []) == thresholds
