"""The Kubernetes API objects pykubelet works with, and their wire codec.

Pods, nodes and their parts are the generated models of ``kubernetes_asyncio``
(``V1Pod``, ``V1Container``...), the same classes the API client returns in
cluster mode, so a static pod read from a file and a pod read from the API
server are one type. This module converts between those models and the
camelCase JSON dictionaries that files, HTTP bodies and the API server use.
"""

from __future__ import annotations

from typing import Any, TypeVar

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.models import V1Pod

T = TypeVar("T")

# The generated ApiClient holds the (de)serialisation logic, but its
# constructor opens an HTTP connection pool that needs a running event loop.
# Only the codec half is needed here, so the instance is made without __init__.
_codec: Any = ApiClient.__new__(ApiClient)


def from_dict(data: Any, model: type[T]) -> T:
    """Build a model (e.g. ``V1Pod``) from its JSON dictionary; unknown keys are dropped."""
    result: T = _codec._ApiClient__deserialize(data, model.__name__)
    return result


def to_dict(obj: Any) -> Any:
    """Serialise a model to its camelCase JSON form, leaving out unset fields."""
    return _codec.sanitize_for_serialization(obj)


def pod_from_dict(data: dict[str, Any]) -> V1Pod:
    return from_dict(data, V1Pod)


__all__ = ["from_dict", "pod_from_dict", "to_dict"]
