"""The topology manager's policies (upstream ``policy*.go``): many hints in, one out.

Each hint provider answers, per resource it manages, the NUMA node sets an
allocation could use (``TopologyHint``: an affinity and whether it is preferred,
i.e. as narrow as the request allows). A policy merges them: every combination of
one hint per resource is ANDed into one candidate, and the best candidate wins.

What a provider's answer means (upstream's distinctions, which decide admission):

- ``None`` or an empty mapping: no preference for any resource, as if it had
  answered "any node, preferred" (the CPU manager for a pod without exclusive CPUs).
- a resource mapped to ``None``: no preference for that resource (same meaning).
- a resource mapped to ``[]``: the resource cannot be had on any node set; it merges
  as "any node, not preferred", which ``restricted`` and ``single-numa-node`` refuse.

A merged candidate is preferred only if every hint in it was preferred and all
hints naming nodes named the same ones. Among candidates: preferred beats not
preferred; two preferred ones, the narrower; two not preferred ones, the one whose
node count comes closest to (without passing) the most nodes any single resource
needs at least. No candidate with a node left: "every node, not preferred".

``none`` merges nothing and admits. ``best-effort`` admits whatever merged.
``restricted`` admits only a preferred result. ``single-numa-node`` first drops
every hint that is not a preferred single node (keeping preferred "don't care"
hints), then admits only a preferred result, reported without an affinity when it
spans every node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Protocol

from pykubelet.cm.topologymanager.bitmask import BitMask, and_all
from pykubelet.util import klog

POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"


@dataclass(frozen=True)
class TopologyHint:
    # The NUMA nodes of the allocation; None: no preference ("any node").
    affinity: BitMask | None
    preferred: bool

    def __str__(self) -> str:
        return f"{{{self.affinity if self.affinity is not None else '<nil>'} {self.preferred}}}"


# One provider's answer: resource name -> its hints (see the module docstring for None).
ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None

# "Any node", preferred: a provider that does not care where the container lands.
NO_PREFERENCE = TopologyHint(None, True)
# "Any node", not preferred: a resource no node set can meet (``restricted`` and
# ``single-numa-node`` refuse it), and the affinity of a container none was stored for
# (upstream's zero ``TopologyHint``).
ANY_NODE_NOT_PREFERRED = TopologyHint(None, False)


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """One list of candidate hints per resource, with "no answer" made explicit."""
    per_resource: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            klog.v(4).info("Hint Provider has no preference for NUMA affinity with any resource")
            per_resource.append([NO_PREFERENCE])
            continue
        for resource, resource_hints in hints.items():
            if resource_hints is None:
                klog.v(4).info("Hint Provider has no preference for NUMA affinity with resource",
                               resource=resource)
                per_resource.append([NO_PREFERENCE])
            elif not resource_hints:
                klog.v(4).info("Hint Provider has no possible NUMA affinities for resource",
                               resource=resource)
                per_resource.append([ANY_NODE_NOT_PREFERRED])
            else:
                per_resource.append(list(resource_hints))
    return per_resource


def merge_permutation(default: BitMask, permutation: Sequence[TopologyHint]) -> TopologyHint:
    """AND one hint per resource; preferred only if all were and all named the same nodes."""
    named = [hint.affinity for hint in permutation if hint.affinity is not None]
    preferred = (all(hint.preferred for hint in permutation)
                 and all(affinity == named[0] for affinity in named))
    return TopologyHint(and_all(default, named), preferred)


def _narrowest_count(hints: Sequence[TopologyHint]) -> int | None:
    counts = [hint.affinity.count() for hint in hints if hint.affinity is not None]
    return min(counts) if counts else None


def best_non_preferred_affinity_count(per_resource: Sequence[Sequence[TopologyHint]]) -> int:
    """The most NUMA nodes any one resource needs at least (upstream's maxOfMinAffinityCounts)."""
    counts = [count for hints in per_resource
              if (count := _narrowest_count(hints)) is not None]
    return max(counts, default=0)


def _narrower(current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
    # Upstream's Narrowest; prefer-closest-numa-nodes (a distance order) is not acted on.
    assert current.affinity is not None and candidate.affinity is not None
    if candidate.affinity == current.affinity:
        return current
    return candidate if candidate.affinity.is_narrower_than(current.affinity) else current


def _better(current: TopologyHint | None, candidate: TopologyHint,
            best_count: int) -> TopologyHint | None:
    """Upstream's HintMerger.compare: the better of the best so far and a candidate."""
    assert candidate.affinity is not None
    count = candidate.affinity.count()
    if count == 0:
        return current
    if current is None:
        return candidate
    if candidate.preferred != current.preferred:
        return candidate if candidate.preferred else current
    if current.preferred:
        return _narrower(current, candidate)
    # Both not preferred: creep towards best_count nodes, never past it.
    assert current.affinity is not None
    held = current.affinity.count()
    if held > best_count:
        return _narrower(current, candidate)
    if held == best_count:
        return _narrower(current, candidate) if count == best_count else current
    if count > best_count:
        return current
    if count == best_count:
        return candidate
    if count != held:
        return candidate if count > held else current
    return _narrower(current, candidate)


def merge_filtered_hints(numa_nodes: Sequence[int],
                         per_resource: Sequence[Sequence[TopologyHint]]) -> TopologyHint:
    default = BitMask.of(*numa_nodes)
    best_count = best_non_preferred_affinity_count(per_resource)
    best: TopologyHint | None = None
    # Every combination of one hint per resource, the first resource varying slowest
    # (upstream's walk order).
    for permutation in product(*per_resource):
        best = _better(best, merge_permutation(default, permutation), best_count)
    return best if best is not None else TopologyHint(default, False)


def filter_single_numa_hints(per_resource: Sequence[Sequence[TopologyHint]]
                             ) -> list[list[TopologyHint]]:
    """Keep preferred hints that name one node, or none at all ("don't care")."""
    return [[hint for hint in hints if hint.preferred
             and (hint.affinity is None or hint.affinity.count() == 1)]
            for hints in per_resource]


class Policy(Protocol):
    name: str

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        """The chosen hint, and whether the pod may be admitted with it."""
        ...


class NonePolicy:
    name = POLICY_NONE

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        return ANY_NODE_NOT_PREFERRED, True


@dataclass(frozen=True)
class BestEffortPolicy:
    numa_nodes: tuple[int, ...]
    name = POLICY_BEST_EFFORT

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        return merge_filtered_hints(self.numa_nodes, filter_providers_hints(providers_hints)), True


@dataclass(frozen=True)
class RestrictedPolicy:
    numa_nodes: tuple[int, ...]
    name = POLICY_RESTRICTED

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        best = merge_filtered_hints(self.numa_nodes, filter_providers_hints(providers_hints))
        return best, best.preferred


@dataclass(frozen=True)
class SingleNumaNodePolicy:
    numa_nodes: tuple[int, ...]
    name = POLICY_SINGLE_NUMA_NODE

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        single = filter_single_numa_hints(filter_providers_hints(providers_hints))
        best = merge_filtered_hints(self.numa_nodes, single)
        if best.affinity == BitMask.of(*self.numa_nodes):
            best = TopologyHint(None, best.preferred)
        return best, best.preferred


def new_policy(name: str, numa_nodes: Sequence[int]) -> Policy:
    """The named policy over the machine's NUMA nodes; ``ValueError`` for an unknown name."""
    nodes = tuple(numa_nodes)
    if name == POLICY_NONE:
        return NonePolicy()
    if name == POLICY_BEST_EFFORT:
        return BestEffortPolicy(nodes)
    if name == POLICY_RESTRICTED:
        return RestrictedPolicy(nodes)
    if name == POLICY_SINGLE_NUMA_NODE:
        return SingleNumaNodePolicy(nodes)
    raise ValueError(f'unknown policy: "{name}"')
