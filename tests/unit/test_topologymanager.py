"""The topology manager: how hints merge, which pods it refuses, what it allocates.

The merge cases and their expected results are upstream's (policy_test.go and the
per-policy tests), over fake machines of 2 and 4 NUMA nodes; this machine has one.
What a user notices is the admission verdict (``TopologyAffinityError`` with
upstream's message, ``UnexpectedAdmissionError`` when a provider fails) and where
resources land, which follows the stored affinity.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import pod_from_dict
from pykubelet.cm.topologymanager import (
    AffinityStore,
    BitMask,
    TopologyHint,
    TopologyManager,
    TopologyManagerError,
    new_topology_manager,
)
from pykubelet.cm.topologymanager.bitmask import iterate_bit_masks
from pykubelet.cm.topologymanager.policy import ProviderHints, new_policy
from pykubelet.lifecycle.admission import PodAdmitAttributes

TWO_NODES = (0, 1)
FOUR_NODES = (0, 1, 2, 3)


def mask(*nodes: int) -> BitMask:
    return BitMask.of(*nodes)


def hint(*nodes: int, preferred: bool = True) -> TopologyHint:
    return TopologyHint(mask(*nodes), preferred)


def merge(policy: str, numa_nodes: Sequence[int],
          *answers: ProviderHints) -> tuple[TopologyHint, bool]:
    return new_policy(policy, numa_nodes).merge(list(answers))


# --- bit masks -----------------------------------------------------------------------------------

def test_narrower_means_fewer_nodes_then_lower_numbered_ones() -> None:
    assert mask(1).is_narrower_than(mask(0, 1))
    assert mask(0).is_narrower_than(mask(1))
    assert mask(0, 1).is_narrower_than(mask(0, 2))
    assert not mask(0, 2).is_narrower_than(mask(1))
    assert str(mask(0)) == "01" and str(mask(0, 2)) == "101"


def test_every_numa_set_is_tried_smallest_first() -> None:
    assert [m.bits() for m in iterate_bit_masks([0, 1, 2])] == [
        [0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]]


# --- merging: upstream's common cases (2 NUMA nodes), same result for every merging policy ------

COMMON_CASES: list[tuple[str, list[ProviderHints], TopologyHint]] = [
    ("same single node from both", [{"r1": [hint(0)]}, {"r2": [hint(0)]}], hint(0)),
    ("same single node from both, node 1", [{"r1": [hint(1)]}, {"r2": [hint(1)]}], hint(1)),
    ("one provider without hints", [None, {"r": [hint(0)]}], hint(0)),
    ("one provider without hints, node 1", [{}, {"r": [hint(1)]}], hint(1)),
    ("two choices meet one", [{"r1": [hint(0), hint(1)]}, {"r2": [hint(0)]}], hint(0)),
    ("two choices meet the other", [{"r1": [hint(0), hint(1)]}, {"r2": [hint(1)]}], hint(1)),
    ("narrower preferred from both",
     [{"r1": [hint(0), hint(1)]}, {"r2": [hint(0), hint(0, 1, preferred=False)]}], hint(0)),
    ("preferred beats narrower non-preferred",
     [{"r1": [hint(1), hint(0, 1, preferred=False)]},
      {"r2": [hint(0), hint(1), hint(0, 1, preferred=False)]}], hint(1)),
    ("several resources of one provider",
     [{"r1": [hint(1), hint(0, 1, preferred=False)],
       "r2": [hint(0), hint(1), hint(0, 1, preferred=False)]}], hint(1)),
]


@pytest.mark.parametrize("policy", ["best-effort", "restricted", "single-numa-node"])
@pytest.mark.parametrize(("name", "answers", "expected"), COMMON_CASES,
                         ids=[case[0] for case in COMMON_CASES])
def test_aligned_hints_merge_to_the_narrowest_preferred_node(
        policy: str, name: str, answers: list[ProviderHints], expected: TopologyHint) -> None:
    best, admit = merge(policy, TWO_NODES, *answers)
    assert (best, admit) == (expected, True)


# --- what "no hints" means: upstream's three answers ---------------------------------------------

@pytest.mark.parametrize(("answer", "preferred"), [
    (None, True),                                     # provider: nothing to say
    ({}, True),                                       # provider: an empty mapping
    ({"r": None}, True),                              # resource: no preference
    ({"r": [TopologyHint(None, True)]}, True),        # resource: "any node" hint
    ({"r": []}, False),                               # resource: cannot be had anywhere
    ({"r": [TopologyHint(None, False)]}, False),
])
@pytest.mark.parametrize("numa_nodes", [TWO_NODES, FOUR_NODES])
def test_providers_without_node_hints(answer: ProviderHints, preferred: bool,
                                      numa_nodes: Sequence[int]) -> None:
    every_node = TopologyHint(mask(*numa_nodes), preferred)
    assert merge("best-effort", numa_nodes, answer) == (every_node, True)
    assert merge("restricted", numa_nodes, answer) == (every_node, preferred)
    # single-numa-node reports "every node" as no affinity at all.
    assert merge("single-numa-node", numa_nodes, answer) == (
        TopologyHint(None, preferred), preferred)


def test_no_providers_at_all_admits_with_no_preference() -> None:
    assert merge("best-effort", FOUR_NODES) == (hint(0, 1, 2, 3), True)
    assert merge("single-numa-node", FOUR_NODES) == (TopologyHint(None, True), True)


# --- merging: where the policies differ ----------------------------------------------------------

DISAGREEING: list[tuple[str, list[ProviderHints], TopologyHint]] = [
    ("no common node", [{"r1": [hint(0)]}, {"r2": [hint(1)]}],
     TopologyHint(mask(0, 1), False)),
    ("same node, one not preferred", [{"r1": [hint(0)]}, {"r2": [hint(0, preferred=False)]}],
     hint(0, preferred=False)),
    ("same node, one not preferred, node 1",
     [{"r1": [hint(1)]}, {"r2": [hint(1, preferred=False)]}], hint(1, preferred=False)),
    # Both preferred, but they named different node sets: the merge is not preferred.
    ("one wider mask", [{"r1": [hint(0)]}, {"r2": [hint(0, 1)]}], hint(0, preferred=False)),
    ("one wider mask, node 1", [{"r1": [hint(1)]}, {"r2": [hint(0, 1)]}],
     hint(1, preferred=False)),
    ("one single non-preferred wide hint",
     [{"r1": [hint(0), hint(1)]}, {"r2": [hint(0, 1, preferred=False)]}],
     hint(0, preferred=False)),
]


@pytest.mark.parametrize(("name", "answers", "merged"), DISAGREEING,
                         ids=[case[0] for case in DISAGREEING])
def test_best_effort_admits_and_restricted_refuses_what_is_not_preferred(
        name: str, answers: list[ProviderHints], merged: TopologyHint) -> None:
    assert merge("best-effort", TWO_NODES, *answers) == (merged, True)
    assert merge("restricted", TWO_NODES, *answers) == (merged, False)
    # single-numa-node never finds a preferred single node here: refused, no affinity.
    assert merge("single-numa-node", TWO_NODES, *answers) == (TopologyHint(None, False), False)


@pytest.mark.parametrize(("second", "expected"), [
    # Upstream's bestNonPreferredAffinityCount cases (4 NUMA nodes): the first resource
    # needs at least 2 nodes, so a non-preferred merge climbs to 2 nodes, never past.
    ([hint(0, 1, preferred=False)], mask(0, 1)),
    ([hint(0, 3, preferred=False)], mask(0, 3)),
    ([hint(1, 2, preferred=False)], mask(1, 2)),
    ([hint(2, 3, preferred=False)], mask(2, 3)),
    ([hint(1, 2, preferred=False), hint(2, 3, preferred=False)], mask(1, 2)),
    ([hint(1, 2, 3, preferred=False), hint(1, 2, preferred=False),
      hint(1, 3, preferred=False), hint(2, 3, preferred=False)], mask(1, 2)),
])
def test_non_preferred_merges_aim_at_the_most_nodes_one_resource_needs(
        second: list[TopologyHint], expected: BitMask) -> None:
    first: ProviderHints = {"r1": [hint(0, 1, 2, 3, preferred=False),
                                   hint(0, 1, preferred=False)]}
    best, admit = merge("best-effort", FOUR_NODES, first, {"r2": second})
    assert (best, admit) == (TopologyHint(expected, False), True)


def test_single_numa_node_keeps_only_single_node_preferred_hints() -> None:
    # Upstream's "Single NUMA hint generation": r1 fits only both nodes.
    answer: ProviderHints = {"r1": [hint(0, 1)],
                             "r2": [hint(0), hint(1), hint(0, 1, preferred=False)]}
    assert merge("single-numa-node", TWO_NODES, answer) == (TopologyHint(None, False), False)
    # best-effort settles on what the widest-needing resource needs: both nodes.
    assert merge("best-effort", TWO_NODES, answer) == (hint(0, 1, preferred=False), True)
    # "One no-preference provider": the other provider decides.
    chooser: ProviderHints = {"r1": [hint(0), hint(1), hint(0, 1, preferred=False)]}
    assert merge("single-numa-node", TWO_NODES, chooser, None) == (hint(0), True)


def test_single_numa_node_on_four_nodes_picks_the_lowest_common_node() -> None:
    cpus: ProviderHints = {"cpu": [hint(1), hint(2), hint(3), hint(1, 2, preferred=False)]}
    devices: ProviderHints = {"example.com/gpu": [hint(2), hint(3)]}
    assert merge("single-numa-node", FOUR_NODES, cpus, devices) == (hint(2), True)
    assert merge("restricted", FOUR_NODES, cpus, {"example.com/gpu": [hint(0)]}) == (
        TopologyHint(mask(0, 1, 2, 3), False), False)


def test_the_none_policy_merges_nothing_and_admits() -> None:
    assert merge("none", TWO_NODES, {"r": []}) == (TopologyHint(None, False), True)


# --- the admit handler ----------------------------------------------------------------------------

class FakeProvider:
    """A hint provider that answers from a table and records what it was asked to allocate
    (``calls``) and, when given ``asked``, each preparation and question for hints."""

    def __init__(self, name: str, calls: list[str], store: AffinityStore, *,
                 hints: dict[str, ProviderHints] | None = None,
                 pod_hints: ProviderHints = None, fail_on: str = "",
                 asked: list[str] | None = None, fail_preparing: bool = False) -> None:
        self.name, self.calls, self.store = name, calls, store
        self.hints = hints or {}
        self.pod_hints = pod_hints
        self.fail_on = fail_on
        self.asked = asked if asked is not None else []
        self.fail_preparing = fail_preparing

    async def prepare_for_admission(self, pod: V1Pod) -> None:
        self.asked.append(f"{self.name}:prepare {pod.metadata.name}")
        if self.fail_preparing:
            raise RuntimeError("the runtime did not answer")

    def get_topology_hints(self, pod: V1Pod, container: V1Container) -> ProviderHints:
        self.asked.append(f"{self.name}:hints {container.name}")
        return self.hints.get(container.name)

    def get_pod_topology_hints(self, pod: V1Pod) -> ProviderHints:
        self.asked.append(f"{self.name}:pod hints")
        return self.pod_hints

    async def allocate(self, pod: V1Pod, container: V1Container) -> None:
        if container.name == self.fail_on:
            raise RuntimeError(f"no {self.name} left for {container.name}")
        affinity = self.store.get_affinity(pod.metadata.uid, container.name).affinity
        self.calls.append(f"{self.name}:{container.name}@{affinity.bits() if affinity else '-'}")


def a_pod(name: str, *containers: str, init: Sequence[str] = ()) -> Any:
    return pod_from_dict({"metadata": {"name": name, "namespace": "default", "uid": name},
                          "spec": {"containers": [{"name": c, "image": "i"} for c in containers],
                                   "initContainers": [{"name": c, "image": "i"} for c in init]}})


def manager(policy: str, providers: Sequence[FakeProvider], store: AffinityStore, *,
            scope: str = "container", numa_nodes: Sequence[int] = TWO_NODES) -> TopologyManager:
    return new_topology_manager(policy_name=policy, scope_name=scope,
                                numa_nodes=numa_nodes, hint_providers=providers, store=store)


async def test_containers_are_merged_and_allocated_in_order_init_first() -> None:
    calls: list[str] = []
    store = AffinityStore()
    cpus = FakeProvider("cpu", calls, store, hints={"setup": {"cpu": [hint(1)]},
                                                    "app": {"cpu": [hint(0), hint(1)]}})
    devices = FakeProvider("gpu", calls, store, hints={"app": {"gpu": [hint(1)]}})
    handler = manager("single-numa-node", [cpus, devices], store)
    result = await handler.admit(PodAdmitAttributes(a_pod("p", "app", init=["setup"])))
    assert result.admit
    # Every provider allocates a container before the next container is merged.
    assert calls == ["cpu:setup@[1]", "gpu:setup@[1]", "cpu:app@[1]", "gpu:app@[1]"]
    assert handler.get_affinity("p", "app") == hint(1)


async def test_a_pod_no_node_can_align_is_rejected_with_upstreams_reason() -> None:
    calls: list[str] = []
    store = AffinityStore()
    cpus = FakeProvider("cpu", calls, store, hints={"app": {"cpu": [hint(0)]}})
    devices = FakeProvider("gpu", calls, store, hints={"app": {"gpu": [hint(1)]}})
    result = await manager("restricted", [cpus, devices], store).admit(
        PodAdmitAttributes(a_pod("p", "app")))
    assert (result.admit, result.reason, result.message) == (
        False, "TopologyAffinityError", "Resources cannot be allocated with Topology locality")
    assert calls == []  # nothing allocated for a refused container
    # best-effort takes the same pod, unaligned.
    assert (await manager("best-effort", [cpus, devices], store).admit(
        PodAdmitAttributes(a_pod("p", "app")))).admit


async def test_a_provider_that_cannot_allocate_rejects_the_pod_as_unexpected() -> None:
    calls: list[str] = []
    store = AffinityStore()
    broken = FakeProvider("cpu", calls, store, fail_on="second")
    for policy in ("none", "best-effort"):
        result = await manager(policy, [broken], store).admit(
            PodAdmitAttributes(a_pod("p", "first", "second")))
        assert (result.admit, result.reason, result.message) == (
            False, "UnexpectedAdmissionError",
            "Allocate failed due to no cpu left for second, which is unexpected")


async def test_the_none_policy_only_allocates_and_stores_no_affinity() -> None:
    calls: list[str] = []
    store = AffinityStore()
    cpus = FakeProvider("cpu", calls, store, hints={"app": {"cpu": []}})
    handler = manager("none", [cpus], store, scope="pod",
                      numa_nodes=range(10))  # not merged over under none: no limit
    assert (await handler.admit(PodAdmitAttributes(a_pod("p", "app")))).admit
    assert calls == ["cpu:app@-"]
    assert handler.get_affinity("p", "app") == TopologyHint(None, False)


async def test_pod_scope_merges_once_and_gives_every_container_the_same_affinity() -> None:
    calls: list[str] = []
    store = AffinityStore()
    cpus = FakeProvider("cpu", calls, store, pod_hints={"cpu": [hint(2), hint(2, 3)]},
                        hints={"a": {"cpu": [hint(0)]}})  # per-container hints are not asked
    handler = manager("restricted", [cpus], store, scope="pod", numa_nodes=FOUR_NODES)
    assert (await handler.admit(PodAdmitAttributes(a_pod("p", "a", "b", init=["i"])))).admit
    assert calls == ["cpu:i@[2]", "cpu:a@[2]", "cpu:b@[2]"]
    refusing = FakeProvider("cpu", calls, store, pod_hints={"cpu": []})
    result = await manager("restricted", [refusing], store, scope="pod").admit(
        PodAdmitAttributes(a_pod("q", "a")))
    assert result.reason == "TopologyAffinityError"


@pytest.mark.parametrize(("policy", "scope", "hints_asked"), [
    ("best-effort", "container", ["gpu:hints init", "cpu:hints init",
                                  "gpu:hints app", "cpu:hints app"]),
    ("restricted", "pod", ["gpu:pod hints", "cpu:pod hints"]),
    ("none", "container", []),
])
async def test_every_provider_prepares_in_order_before_any_is_asked_for_hints(
        policy: str, scope: str, hints_asked: list[str]) -> None:
    """So no provider's hints count what a gone pod still holds in another provider."""
    asked: list[str] = []
    store = AffinityStore()
    providers = [FakeProvider(name, [], store, asked=asked) for name in ("gpu", "cpu")]
    handler = manager(policy, providers, store, scope=scope)
    assert (await handler.admit(PodAdmitAttributes(a_pod("p", "app", init=["init"])))).admit
    assert asked == ["gpu:prepare p", "cpu:prepare p", *hints_asked]


async def test_a_provider_that_cannot_prepare_does_not_refuse_the_pod() -> None:
    asked: list[str] = []
    calls: list[str] = []
    store = AffinityStore()
    broken = FakeProvider("gpu", calls, store, asked=asked, fail_preparing=True)
    cpus = FakeProvider("cpu", calls, store, asked=asked, hints={"app": {"cpu": [hint(1)]}})
    handler = manager("single-numa-node", [broken, cpus], store)
    assert (await handler.admit(PodAdmitAttributes(a_pod("p", "app")))).admit
    assert asked[:2] == ["gpu:prepare p", "cpu:prepare p"]
    assert calls == ["gpu:app@[1]", "cpu:app@[1]"]


async def test_the_affinities_of_gone_pods_are_dropped_at_the_next_admission() -> None:
    store = AffinityStore()
    provider = FakeProvider("cpu", [], store, hints={"c": {"cpu": [hint(0)]}})
    handler = manager("best-effort", [provider], store)
    first, second = a_pod("first", "c"), a_pod("second", "c")
    assert (await handler.admit(PodAdmitAttributes(first))).admit
    assert (await handler.admit(PodAdmitAttributes(second, [first]))).admit
    assert handler.get_affinity("first", "c") == hint(0)
    # first is gone: it is no longer among the pods the kubelet admits beside.
    assert (await handler.admit(PodAdmitAttributes(a_pod("third", "c"), [second]))).admit
    assert store.pods() == {"second", "third"}
    assert handler.get_affinity("first", "c") == TopologyHint(None, False)


# --- construction and configuration --------------------------------------------------------------

def test_more_than_eight_numa_nodes_are_refused_unless_the_policy_is_none() -> None:
    with pytest.raises(TopologyManagerError,
                       match="unsupported on machines with more than 8 NUMA Nodes"):
        manager("best-effort", [], AffinityStore(), numa_nodes=range(9))
    assert manager("none", [], AffinityStore(), numa_nodes=range(9)).policy.name == "none"


def test_unknown_policy_and_scope_are_refused() -> None:
    with pytest.raises(TopologyManagerError, match='unknown policy: "strict"'):
        manager("strict", [], AffinityStore())
    with pytest.raises(TopologyManagerError, match='unknown scope: "node"'):
        manager("restricted", [], AffinityStore(), scope="node")


def config_errors(tmp_path: Path, body: str) -> list[str]:
    from pykubelet.cmd.options import parse_command_line
    from pykubelet.config import ConfigurationError
    path = tmp_path / "kubelet.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                    + body)
    try:
        parse_command_line([f"--config={path}"])
    except ConfigurationError as err:
        return list(err.errors)
    return []


def test_bad_topology_and_memory_manager_values_fail_validation(tmp_path: Path) -> None:
    errors = config_errors(tmp_path, "topologyManagerPolicy: strict\n"
                                     "topologyManagerScope: node\nmemoryManagerPolicy: static\n")
    assert errors == [
        'invalid configuration: memoryManagerPolicy (--memory-manager-policy) "static" must be '
        'one of: "None", "Static"',
        'invalid configuration: topologyManagerPolicy (--topology-manager-policy) "strict" '
        'must be one of: ["none" "best-effort" "restricted" "single-numa-node"]',
        'invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be '
        'one of: "container", or "pod"']
    assert config_errors(tmp_path, "topologyManagerPolicy: single-numa-node\n"
                                   "topologyManagerScope: pod\nmemoryManagerPolicy: Static\n") == []


def test_memory_manager_static_is_reported_not_acted_on_and_none_is_not() -> None:
    from pykubelet.config import KubeletConfiguration, fields_not_acted_on
    config = KubeletConfiguration()
    config.topology_manager_policy = "restricted"
    config.topology_manager_scope = "pod"
    config.topology_manager_policy_options = {"prefer-closest-numa-nodes": "true"}
    config.memory_manager_policy = "Static"
    assert fields_not_acted_on(config) == ["memoryManagerPolicy", "topologyManagerPolicyOptions"]
    config.memory_manager_policy = "None"
    keys = {"memoryManagerPolicy", "topologyManagerPolicy", "topologyManagerScope"}
    assert fields_not_acted_on(keys, config) == []
