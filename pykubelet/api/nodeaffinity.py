"""Node selector terms matched against a node (upstream ``component-helpers``'s ``nodeaffinity``).

Two kubelet checks read the same ``NodeSelector`` type, so both use this one
matcher: admission (a pod's required node affinity against the Node,
``pykubelet.lifecycle.admission``) and the mount of a PersistentVolume (its
``nodeAffinity.required`` against the Node's labels,
``pykubelet.volumemanager.persistent``). Upstream's rules:

- the terms are ORed, and a term with neither ``matchExpressions`` nor
  ``matchFields`` selects nothing;
- within a term every requirement must hold: ``matchExpressions`` against
  the labels (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, and ``Gt`` /
  ``Lt`` on a label value read as a base-10 integer), ``matchFields`` against
  ``metadata.name`` (``In`` / ``NotIn`` with one value);
- when the node's name is not known the ``matchFields`` are not looked at:
  upstream's volume check hands the matcher a Node that carries only labels,
  so a term's fields never refuse a PV there;
- a requirement upstream cannot parse (an unknown operator, a value count
  its operator does not take, a ``Gt`` value that is not an integer) does
  not match, so its term does not either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kubernetes_asyncio.client import V1NodeSelectorRequirement, V1NodeSelectorTerm

NODE_NAME_FIELD = "metadata.name"
# What Go's strconv.ParseInt(s, 10, 64) accepts.
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_RANGE = range(-(1 << 63), 1 << 63)


def _int64(text: str) -> int | None:
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64_RANGE else None


def _expression_matches(requirement: V1NodeSelectorRequirement,
                        labels: Mapping[str, str]) -> bool:
    operator, wanted = requirement.operator, list(requirement.values or [])
    present = requirement.key in labels
    value = labels.get(requirement.key, "")
    if operator in ("In", "NotIn"):
        if not wanted:
            return False
        if operator == "In":
            return present and value in wanted
        return not present or value not in wanted
    if operator in ("Exists", "DoesNotExist"):
        if wanted:
            return False
        return present if operator == "Exists" else not present
    if operator in ("Gt", "Lt"):
        limit = _int64(wanted[0]) if len(wanted) == 1 else None
        have = _int64(value) if present else None
        if limit is None or have is None:
            return False
        return have > limit if operator == "Gt" else have < limit
    return False


def _field_matches(requirement: V1NodeSelectorRequirement, node_name: str) -> bool:
    wanted = list(requirement.values or [])
    if len(wanted) != 1:
        return False
    # metadata.name is the only field a Node offers; any other key reads as empty.
    value = node_name if requirement.key == NODE_NAME_FIELD else ""
    if requirement.operator == "In":
        return value == wanted[0]
    if requirement.operator == "NotIn":
        return value != wanted[0]
    return False


def term_matches(term: V1NodeSelectorTerm, *, labels: Mapping[str, str],
                 node_name: str | None) -> bool:
    """One term: all its expressions and (with a known ``node_name``) all its fields."""
    expressions, fields = term.match_expressions or [], term.match_fields or []
    if not expressions and not fields:
        return False
    if not all(_expression_matches(r, labels) for r in expressions):
        return False
    if not node_name:
        return True
    return all(_field_matches(r, node_name) for r in fields)


def node_selector_matches(terms: Iterable[V1NodeSelectorTerm], *, labels: Mapping[str, str],
                          node_name: str | None) -> bool:
    """Whether some term matches the node (``labels``, and ``node_name`` when known)."""
    return any(term_matches(term, labels=labels, node_name=node_name) for term in terms)


def selector_terms(required: Mapping[str, object]) -> list[V1NodeSelectorTerm]:
    """A ``NodeSelector`` as the API's JSON has it, as the client's model terms."""
    def requirements(items: object) -> list[V1NodeSelectorRequirement] | None:
        if not isinstance(items, list):
            return None
        return [V1NodeSelectorRequirement(key=str(item.get("key") or ""),
                                          operator=str(item.get("operator") or ""),
                                          values=list(item.get("values") or []) or None)
                for item in items if isinstance(item, Mapping)] or None

    terms = required.get("nodeSelectorTerms")
    return [V1NodeSelectorTerm(match_expressions=requirements(term.get("matchExpressions")),
                               match_fields=requirements(term.get("matchFields")))
            for term in (terms if isinstance(terms, list) else []) if isinstance(term, Mapping)]


__all__ = ["NODE_NAME_FIELD", "node_selector_matches", "selector_terms", "term_matches"]
