"""A fake Node API at the node status manager's seam: an in-memory Node that applies the
strategic merge patches the manager sends, the way the API server merges them."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes_asyncio.client import ApiException, V1Node

from pykubelet.api import from_dict, to_dict


def apply_strategic_merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The subset of strategic merge a node status patch uses."""
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            continue
        order = patch.get(f"$setElementOrder/{key}")
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and any(
                isinstance(v, dict) and v.get("$patch") == "replace" for v in value):
            result[key] = [v for v in value if not (isinstance(v, dict) and "$patch" in v)]
        elif isinstance(value, list) and order is not None:
            existing = {item["type"]: item for item in result.get(key) or []}
            for element in value:
                if element.get("$patch") == "delete":
                    existing.pop(element["type"], None)
                    continue
                merged = apply_strategic_merge(existing.get(element["type"], {}), element)
                existing[element["type"]] = merged
            ordered = [existing.pop(item["type"]) for item in order if item["type"] in existing]
            result[key] = ordered + list(existing.values())
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = apply_strategic_merge(result[key], value)
        else:
            result[key] = value
    return result


class FakeNodeAPI:
    """create/read/patch of Nodes kept in memory; counts calls by kind."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail_patches: list[int] = []
        self.patches: list[dict[str, Any]] = []
        self._version = 0
        self._uid = 0


    def _stamp(self, body: dict[str, Any]) -> V1Node:
        self._version += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        return from_dict(copy.deepcopy(body), V1Node)

    async def create_node(self, body: V1Node, /) -> V1Node:
        self.calls.append("create")
        name = body.metadata.name
        if name in self.nodes:
            raise ApiException(status=409, reason="AlreadyExists")
        data = to_dict(body)
        self._uid += 1
        data["metadata"]["uid"] = f"uid-{self._uid}"
        self.nodes[name] = data
        return self._stamp(data)

    async def read_node(self, name: str, /) -> V1Node:
        self.calls.append("get")
        if name not in self.nodes:
            raise ApiException(status=404, reason="NotFound")
        return from_dict(copy.deepcopy(self.nodes[name]), V1Node)

    async def patch_node_status(self, name: str, body: Any, /) -> V1Node:
        self.calls.append("patch")
        if self.fail_patches:
            raise ApiException(status=self.fail_patches.pop(0), reason="injected")
        if name not in self.nodes:
            raise ApiException(status=404, reason="NotFound")
        self.patches.append(body)
        self.nodes[name] = apply_strategic_merge(self.nodes[name], body)
        return self._stamp(self.nodes[name])


class FakeCache:
    """The node cache: synced, holds what it was last told."""

    def __init__(self) -> None:
        self.node: V1Node | None = None
        self.synced = True

    def get(self) -> V1Node | None:
        return self.node

    def has_synced(self) -> bool:
        return self.synced

    def observe(self, obj: V1Node | None, resource_version: str | None = None) -> None:
        self.node = obj
