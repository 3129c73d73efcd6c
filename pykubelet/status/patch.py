"""The pod status PATCH the kubelet sends (upstream ``statusutil.PatchPodStatus``).

The kubelet never PUTs a pod: the pod is shared with controllers and the
scheduler, and a full write could undo their concurrent changes. It sends a
two-way strategic merge patch from the status it read to the status it
wants, so only the fields it changed travel, and lists the API marks as
merge lists (``conditions`` keyed by ``type``, ``podIPs`` by ``ip``) are
merged item by item on the server: a condition someone else added in the
meantime survives. Other lists (container statuses) replace as a whole.

The patch also carries ``metadata.uid``, so a pod deleted and recreated
under the same name is never patched with its predecessor's status. A patch
that would carry nothing else is not sent at all.

Both sides are compared in their wire form with empty values dropped, as
the API server's JSON omits them: an empty ``reason`` the kubelet computed
and an absent one on the server are the same status, and must not cost a
request.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import V1PodStatus

from pykubelet.api import to_dict

# PodStatus lists the API declares as strategic merge lists, and their merge keys.
POD_STATUS_MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "podIPs": "ip",
    "hostIPs": "ip",
    "resourceClaimStatuses": "name",
}


def prune(value: Any) -> Any:
    """Drop ``None``, ``""``, ``[]`` and ``{}`` recursively (what ``omitempty`` leaves out)."""
    if isinstance(value, dict):
        pruned = {k: prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if not _empty(v)}
    if isinstance(value, list):
        return [prune(item) for item in value]
    return value


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


Path = tuple[str, ...]
# Container status lists: fields inside their items are tracked per list ("*" is any item).
_CONTAINER_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


def status_wire(status: V1PodStatus | None,
                ignored: frozenset[Path] | set[Path] = frozenset()) -> dict[str, Any]:
    """The pod status as the API server would serialise it, without ``ignored`` fields."""
    wire = prune(to_dict(status)) if status is not None else {}
    if not isinstance(wire, dict):
        return {}
    for path in ignored:
        if len(path) == 1:
            wire.pop(path[0], None)
        elif len(path) == 3 and path[1] == "*":
            for item in wire.get(path[0]) or []:
                if isinstance(item, dict):
                    item.pop(path[2], None)
    return wire


def dropped_fields(sent: dict[str, Any], stored: dict[str, Any]) -> set[Path]:
    """Fields of a written status that the server did not keep: ones it does not know.

    The kubelet may be newer than the API server (pykubelet speaks today's pod
    status to a 1.20 server); a field the server drops would otherwise look
    changed forever and be written again on every check.
    """
    dropped: set[Path] = set()
    for key, value in sent.items():
        if key not in stored:
            dropped.add((key,))
        elif key in _CONTAINER_LISTS and isinstance(value, list):
            stored_by_name = {item.get("name"): item for item in stored[key]
                              if isinstance(item, dict)}
            for item in value:
                other = stored_by_name.get(item.get("name")) if isinstance(item, dict) else None
                if other is not None:
                    dropped.update((key, "*", field) for field in item if field not in other)
    return dropped


def _diff_maps(original: dict[str, Any], modified: dict[str, Any],
               merge_keys: dict[str, str]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for key, new in modified.items():
        old = original.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            nested = _diff_maps(old, new, {})
            if nested:
                patch[key] = nested
        elif key in merge_keys and isinstance(old, list) and isinstance(new, list):
            patch.update(_diff_merge_list(key, old, new, merge_keys[key]))
        else:
            patch[key] = new
    for key in original:
        if key not in modified:
            patch[key] = None
    return patch


def _diff_merge_list(name: str, original: list[Any], modified: list[Any],
                     merge_key: str) -> dict[str, Any]:
    old_by_key = {item.get(merge_key): item for item in original if isinstance(item, dict)}
    new_keys = [item.get(merge_key) for item in modified if isinstance(item, dict)]
    changes: list[dict[str, Any]] = []
    for item in modified:
        key = item.get(merge_key)
        old = old_by_key.get(key)
        if old is None:
            changes.append(item)
        elif old != item:
            changes.append({merge_key: key, **_diff_maps(old, item, {})})
    for key, item in old_by_key.items():
        if key not in new_keys:
            changes.append({merge_key: item.get(merge_key), "$patch": "delete"})
    if not changes:
        return {}
    return {f"$setElementOrder/{name}": [{merge_key: key} for key in new_keys], name: changes}


def pod_status_patch(uid: str, original: V1PodStatus | None, modified: V1PodStatus,
                     ignored: frozenset[Path] | set[Path] = frozenset()
                     ) -> tuple[dict[str, Any], bool]:
    """The strategic merge patch from ``original`` to ``modified``; True when it changes nothing.

    ``ignored`` fields (ones the server drops) are left out of both sides.
    """
    status = _diff_maps(status_wire(original, ignored), status_wire(modified, ignored),
                        POD_STATUS_MERGE_KEYS)
    patch: dict[str, Any] = {"metadata": {"uid": uid}}
    if status:
        patch["status"] = status
    return patch, not status


__all__ = ["POD_STATUS_MERGE_KEYS", "dropped_fields", "pod_status_patch", "prune",
           "status_wire"]
