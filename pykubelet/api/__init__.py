"""The Kubernetes API objects pykubelet works with, and their wire codec.

Pods, nodes and their parts are the generated models of ``kubernetes_asyncio``
(``V1Pod``, ``V1Container``...), the same classes the API client returns in
cluster mode, so a static pod read from a file and a pod read from the API
server are one type. This module converts between those models and the
camelCase JSON dictionaries that files, HTTP bodies and the API server use.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
from typing import Any, TypeVar

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.models import V1Container, V1EphemeralContainer, V1Pod

from pykubelet.api.modelcodec import decode

T = TypeVar("T")

# The generated ApiClient holds the serialisation logic, but its constructor
# opens an HTTP connection pool that needs a running event loop. Only the codec
# half is needed here, so the instance is made without __init__.
_codec: Any = ApiClient.__new__(ApiClient)


def from_dict(data: Any, model: type[T]) -> T:
    """Build a model (e.g. ``V1Pod``) from its JSON dictionary; unknown keys are dropped.

    The models are the generated client's, decoded by ``api.modelcodec``'s planned
    decoder (equal to the generated decoder's result, several times faster).
    """
    result: T = decode(data, model.__name__)
    return result


def format_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, second precision, as the API server writes ``metav1.Time``."""
    if value.tzinfo is not None:
        with contextlib.suppress(OverflowError, ValueError):  # kept as written at year 1/9999
            value = value.astimezone(datetime.UTC)
        value = value.replace(tzinfo=None)
    # isoformat, unlike strftime, always writes four year digits.
    return value.replace(microsecond=0).isoformat() + "Z"


def to_dict(obj: Any) -> Any:
    """Serialise a model to its camelCase JSON form, leaving out unset fields.

    The generated serialiser writes times as ``+00:00`` offsets; Kubernetes
    clients expect the API server's ``Z`` form, so times are written here.
    """
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if isinstance(obj, datetime.datetime):
        return format_time(obj)
    if isinstance(obj, datetime.date):
        return obj.isoformat()
    if isinstance(obj, list | tuple):
        return [to_dict(item) for item in obj]
    if isinstance(obj, dict):
        return {key: to_dict(value) for key, value in obj.items()}
    attribute_map = getattr(obj, "attribute_map", None)
    if attribute_map is None:
        return _codec.sanitize_for_serialization(obj)
    return {attribute_map[name]: to_dict(value) for name in obj.openapi_types
            if (value := getattr(obj, name)) is not None}


def pod_from_dict(data: dict[str, Any]) -> V1Pod:
    return from_dict(data, V1Pod)


# Values a copy can share with its original: none of them can be changed in place.
_IMMUTABLE = (str, int, float, bool, bytes, type(None), datetime.datetime, datetime.date,
              datetime.timedelta)


def clone(obj: T) -> T:
    """A deep copy of a model (or a list or dict of them) that shares what cannot change.

    ``copy.deepcopy`` of a generated model also copies the client
    ``Configuration`` every model points to, and keeps a memo of every object
    it visits; a pod status took about 0.3 ms that way. The kubelet copies pods
    and statuses on every sync, so this walks the model's own fields instead:
    strings, numbers and times are shared, lists, dicts and models are new.
    """
    if isinstance(obj, _IMMUTABLE):
        return obj
    if isinstance(obj, list):
        return [clone(item) for item in obj]  # type: ignore[return-value]
    if isinstance(obj, dict):
        return {key: clone(value) for key, value in obj.items()}  # type: ignore[return-value]
    if getattr(obj, "openapi_types", None) is None:
        return copy.deepcopy(obj)
    copied = object.__new__(type(obj))
    fields = dict(obj.__dict__)
    for name, value in fields.items():
        # local_vars_configuration is the client's shared settings object: kept, not copied.
        if name != "local_vars_configuration" and not isinstance(value, _IMMUTABLE):
            fields[name] = clone(value)
    copied.__dict__.update(fields)
    return copied


# Pod phases; a pod in a terminal phase never runs again (its phase never moves back).
POD_PENDING = "Pending"
POD_RUNNING = "Running"
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"
TERMINAL_POD_PHASES = frozenset({POD_SUCCEEDED, POD_FAILED})


def is_terminal_phase(phase: str | None) -> bool:
    return phase in TERMINAL_POD_PHASES


# How pods are named in maps, logs and messages: one spelling each, used everywhere.

def pod_uid(pod: V1Pod) -> str:
    """The pod's UID, the key of every per-pod map in the kubelet ("" when unset)."""
    meta = pod.metadata
    return str(meta.uid or "") if meta is not None else ""


# What a pod's spec says about its containers, the same for every layer that asks.

def is_restartable_init_container(container: V1Container) -> bool:
    """A sidecar: an init container with its own ``restartPolicy: Always``."""
    return getattr(container, "restart_policy", None) == "Always"


def init_then_app_containers(pod: V1Pod) -> list[V1Container]:
    """The pod's init containers, then its app containers: the order they start in."""
    spec = pod.spec
    if spec is None:
        return []
    return [*(spec.init_containers or []), *(spec.containers or [])]


def all_containers(pod: V1Pod) -> list[V1Container | V1EphemeralContainer]:
    """Every container of the pod: init, app, then ephemeral (upstream ``VisitContainers``
    over all of them), for the rules that hold whatever kind a container is."""
    spec = pod.spec
    if spec is None:
        return []
    return [*init_then_app_containers(pod), *(spec.ephemeral_containers or [])]


def pod_ref(pod: V1Pod) -> str:
    """``namespace/name``, how log lines name a pod (klog's ``KObj``)."""
    meta = pod.metadata
    return f"{meta.namespace or ''}/{meta.name or ''}" if meta is not None else ""


def pod_desc(pod: V1Pod) -> str:
    """``name_namespace(uid)``, the pod spelling of upstream's messages and events."""
    meta = pod.metadata
    if meta is None:
        return "_()"
    return f"{meta.name or ''}_{meta.namespace or ''}({meta.uid or ''})"


__all__ = [
    "POD_FAILED",
    "POD_PENDING",
    "POD_RUNNING",
    "POD_SUCCEEDED",
    "TERMINAL_POD_PHASES",
    "all_containers",
    "clone",
    "from_dict",
    "init_then_app_containers",
    "is_restartable_init_container",
    "is_terminal_phase",
    "pod_desc",
    "pod_from_dict",
    "pod_ref",
    "pod_uid",
    "to_dict",
]
