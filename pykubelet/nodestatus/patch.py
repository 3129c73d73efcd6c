"""Deciding whether a node status changed, and the patch that writes the change.

Upstream compares the status it computed with the one it read, ignoring the
conditions' heartbeat times, and writes only when something else changed or
``nodeStatusReportFrequency`` passed. Quantities compare by value
(``1Gi`` equals ``1024Mi``), as ``apiequality.Semantic`` does.

The write is a strategic merge patch of ``nodes/<name>/status`` (upstream
``PatchNodeStatus``) computed from the two objects: maps carry only the keys
that changed (``null`` for removed ones); conditions are merged by ``type``
with ``$setElementOrder`` so a condition another component owns is never
overwritten by a stale copy; addresses, whose declared merge key is wrong for
dual-stack nodes, are replaced whole, as upstream does; other lists (images)
are atomic. Labels and annotations of the metadata travel in the same patch
(the status subresource of a Node accepts them), which is how registration
reconciles the default labels of an existing Node.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client import V1Node, V1NodeStatus

from pykubelet.api import to_dict
from pykubelet.api.quantity import QuantityError, parse_quantity

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
QUANTITY_MAPS = ("capacity", "allocatable")
# Lists of NodeStatus merged element by element, by this key.
MERGE_LISTS = {"conditions": "type"}
# Lists replaced whole with the ``$patch: replace`` directive.
REPLACE_LISTS = ("addresses",)
HEARTBEAT = "lastHeartbeatTime"


def _normalised_quantities(values: dict[str, Any] | None) -> dict[str, Any]:
    normalised: dict[str, Any] = {}
    for name, value in (values or {}).items():
        try:
            normalised[name] = parse_quantity(value)
        except QuantityError:
            normalised[name] = value
    return normalised


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    copy = {key: value for key, value in status.items() if key != "conditions"}
    for key in QUANTITY_MAPS:
        if key in copy:
            copy[key] = _normalised_quantities(copy[key])
    return copy


def _conditions_without_heartbeat(status: dict[str, Any]) -> list[dict[str, Any]]:
    conditions = [{k: v for k, v in c.items() if k != HEARTBEAT}
                  for c in status.get("conditions") or []]
    return sorted(conditions, key=lambda c: str(c.get("type")))


def node_status_has_changed(original: V1NodeStatus | None, status: V1NodeStatus | None) -> bool:
    """Upstream ``nodeStatusHasChanged``: anything but condition heartbeats differs."""
    if original is None and status is None:
        return False
    if original is None or status is None:
        return True
    before, after = to_dict(original), to_dict(status)
    if _conditions_without_heartbeat(before) != _conditions_without_heartbeat(after):
        return True
    return _comparable(before) != _comparable(after)


def _map_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning ``old`` into ``new`` (nested maps recurse, removals are null)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        if isinstance(before, dict) and isinstance(value, dict):
            nested = _map_diff(before, value)
            if nested:
                patch[key] = nested
        else:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def _merge_list_diff(old: list[dict[str, Any]], new: list[dict[str, Any]],
                     merge_key: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(element patches, order directive) for a list merged by ``merge_key``."""
    old_by_key = {item.get(merge_key): item for item in old}
    new_keys = [item.get(merge_key) for item in new]
    elements: list[dict[str, Any]] = []
    for item in new:
        key = item.get(merge_key)
        before = old_by_key.get(key)
        if before is None:
            elements.append(item)
            continue
        changed = _map_diff(before, item)
        if changed:
            elements.append({merge_key: key, **changed})
    for key in old_by_key:
        if key not in new_keys:
            elements.append({merge_key: key, "$patch": "delete"})
    order = [{merge_key: key} for key in new_keys]
    return elements, order


def _status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for key in dict.fromkeys([*new, *old]):
        before, after = old.get(key), new.get(key)
        if key in MERGE_LISTS:
            elements, order = _merge_list_diff(before or [], after or [], MERGE_LISTS[key])
            if elements:
                patch[f"$setElementOrder/{key}"] = order
                patch[key] = elements
        elif key in REPLACE_LISTS:
            if before != after:
                patch[key] = [*(after or []), {"$patch": "replace"}]
        elif before == after:
            continue
        elif isinstance(before, dict) and isinstance(after, dict):
            nested = _map_diff(before, after)
            if nested:
                patch[key] = nested
        else:
            patch[key] = after
    return patch


def node_status_patch(original: V1Node, updated: V1Node) -> dict[str, Any]:
    """The strategic merge patch from ``original`` to ``updated`` (labels, annotations, status)."""
    patch: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        before = getattr(original.metadata, field, None) or {}
        after = getattr(updated.metadata, field, None) or {}
        diff = _map_diff(before, after)
        if diff:
            metadata[field] = diff
    if metadata:
        patch["metadata"] = metadata
    status = _status_patch(to_dict(original.status) or {}, to_dict(updated.status) or {})
    if status:
        patch["status"] = status
    return patch


def patch_body(patch: dict[str, Any]) -> str:
    return json.dumps(patch, separators=(",", ":"))


__all__ = [
    "STRATEGIC_MERGE_PATCH",
    "node_status_has_changed",
    "node_status_patch",
    "patch_body",
]
