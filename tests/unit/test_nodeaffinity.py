"""Node selector terms as upstream matches them: what a PV's node affinity or a pod's required
node affinity lets onto a node."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.nodeaffinity import node_selector_matches, selector_terms

LABELS = {"kubernetes.io/hostname": "node-a", "zone": "z1", "disks": "4", "ssd": ""}


def matches(terms: list[dict[str, Any]], *, labels: dict[str, str] = LABELS,
            node_name: str | None = "node-a") -> bool:
    return node_selector_matches(selector_terms({"nodeSelectorTerms": terms}), labels=labels,
                                 node_name=node_name)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize(("requirement", "expected"), [
    (expr("zone", "In", "z0", "z1"), True),
    (expr("zone", "In", "z2"), False),
    (expr("rack", "In", "r1"), False),           # absent: In never holds
    (expr("zone", "NotIn", "z2"), True),
    (expr("zone", "NotIn", "z1"), False),
    (expr("rack", "NotIn", "r1"), True),         # absent: NotIn holds
    (expr("ssd", "Exists"), True),               # an empty value still exists
    (expr("rack", "Exists"), False),
    (expr("rack", "DoesNotExist"), True),
    (expr("zone", "DoesNotExist"), False),
    (expr("disks", "Gt", "3"), True),
    (expr("disks", "Gt", "4"), False),
    (expr("disks", "Lt", "5"), True),
    (expr("disks", "Lt", "4"), False),
    (expr("disks", "Gt", "-1"), True),
    (expr("zone", "Gt", "1"), False),            # a label that is not a number
    (expr("rack", "Lt", "9"), False),            # absent
    # What upstream cannot parse matches nothing.
    (expr("disks", "Gt", "3", "5"), False),
    (expr("disks", "Gt", "three"), False),
    (expr("zone", "In"), False),
    (expr("zone", "Exists", "z1"), False),
    (expr("zone", "Near", "z1"), False),
])
def test_each_operator_against_the_nodes_labels(requirement: dict[str, Any],
                                                expected: bool) -> None:
    assert matches([{"matchExpressions": [requirement]}]) is expected


def test_expressions_of_a_term_are_anded_and_terms_ored() -> None:
    in_z1, on_b = expr("zone", "In", "z1"), expr("kubernetes.io/hostname", "In", "node-b")
    assert not matches([{"matchExpressions": [in_z1, on_b]}])
    assert matches([{"matchExpressions": [on_b]}, {"matchExpressions": [in_z1]}])
    assert not matches([{"matchExpressions": [on_b]}, {"matchExpressions": [on_b, in_z1]}])


def test_no_term_or_only_empty_terms_select_no_node() -> None:
    assert not matches([])
    assert not matches([{}, {"matchExpressions": []}])
    assert matches([{}, {"matchExpressions": [expr("zone", "Exists")]}])


def test_match_fields_compare_the_nodes_name_when_it_is_known() -> None:
    on_a = {"matchFields": [expr("metadata.name", "In", "node-a")]}
    not_a = {"matchFields": [expr("metadata.name", "NotIn", "node-a")]}
    assert matches([on_a]) and not matches([not_a])
    assert not matches([on_a], node_name="node-b") and matches([not_a], node_name="node-b")
    # Fields and expressions of one term: both must hold.
    assert not matches([{**on_a, "matchExpressions": [expr("zone", "In", "z2")]}])
    # One value only, as upstream parses a field requirement.
    assert not matches([{"matchFields": [expr("metadata.name", "In", "node-a", "node-b")]}])


def test_without_the_nodes_name_match_fields_are_not_looked_at() -> None:
    """Upstream's PV check hands the matcher a Node with labels only."""
    other = {"matchFields": [expr("metadata.name", "In", "node-b")]}
    assert matches([other], node_name=None)
    assert not matches([{**other, "matchExpressions": [expr("zone", "In", "z2")]}],
                       node_name=None)
