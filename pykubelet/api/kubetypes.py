"""The kubelet's own vocabulary (upstream ``pkg/kubelet/types``): pod updates, sources, pod kinds.

Every pod source (static files, the manifest URL, the API server) speaks to
the pod config merger in ``PodUpdate`` messages, and the merger speaks to the
sync loop in the same messages; the pod workers are told why they sync in
``SyncPodType``. It sits on the ground floor because sources, the sync loop,
pod workers, status and QoS all read it. The annotation keys below are how the kubelet
marks a pod with where it came from and when it first saw it; other parts of
the kubelet (status manager, mirror pods, eviction) read them back through the
helpers here rather than poking at annotations themselves.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kubernetes_asyncio.client.models import V1Pod

from pykubelet.api import pod_uid

CONFIG_SOURCE_ANNOTATION_KEY = "kubernetes.io/config.source"
CONFIG_MIRROR_ANNOTATION_KEY = "kubernetes.io/config.mirror"
CONFIG_FIRST_SEEN_ANNOTATION_KEY = "kubernetes.io/config.seen"
CONFIG_HASH_ANNOTATION_KEY = "kubernetes.io/config.hash"

# Labels the kubelet puts on every sandbox and container it creates (upstream
# pkg/kubelet/types/labels.go): the runtime manager writes them, the stats
# provider and log tooling read them.
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

FILE_SOURCE = "file"
HTTP_SOURCE = "http"
API_SOURCE = "api"
ALL_SOURCES = "*"
KNOWN_SOURCES: tuple[str, ...] = (FILE_SOURCE, HTTP_SOURCE, API_SOURCE)

NAMESPACE_DEFAULT = "default"

# Priorities at or above this value mark system-critical pods (scheduling.SystemCriticalPriority).
SYSTEM_CRITICAL_PRIORITY = 2 * 1_000_000_000
SYSTEM_NODE_CRITICAL_PRIORITY_CLASS = "system-node-critical"


class PodOperation(enum.IntEnum):
    """What a ``PodUpdate`` means; the numbering follows upstream's iota order."""

    SET = 0
    """The complete set of pods of one source (what sources send)."""
    ADD = 1
    """Pods the kubelet has not seen before."""
    DELETE = 2
    """Pods being gracefully deleted (``deletionTimestamp`` set by the API server)."""
    REMOVE = 3
    """Pods gone from their source: stop them now."""
    UPDATE = 4
    """Pods whose spec, labels or annotations changed."""
    RECONCILE = 5
    """Pods whose only change is in status, which the kubelet owns."""


class SyncPodType(enum.StrEnum):
    """Why a pod worker is syncing a pod; printed in logs as upstream does."""

    SYNC = "sync"
    UPDATE = "update"
    CREATE = "create"
    KILL = "kill"


@dataclass
class PodUpdate:
    """One message on a source channel or on the merged updates channel."""

    pods: list[V1Pod] = field(default_factory=list)
    op: PodOperation = PodOperation.SET
    source: str = ""


def _annotations(pod: V1Pod) -> dict[str, str]:
    if pod.metadata is None or pod.metadata.annotations is None:
        return {}
    annotations: dict[str, str] = pod.metadata.annotations
    return annotations


def get_pod_source(pod: V1Pod) -> str:
    """The source that produced ``pod``; raises ``ValueError`` when it was never annotated."""
    source = _annotations(pod).get(CONFIG_SOURCE_ANNOTATION_KEY)
    if source is None:
        raise ValueError(f"cannot get source of pod {pod_uid(pod)!r}")
    return source


def is_static_pod(pod: V1Pod) -> bool:
    """A pod the kubelet runs on its own authority (file or URL), not the API server's."""
    try:
        return get_pod_source(pod) != API_SOURCE
    except ValueError:
        return False


def is_mirror_pod(pod: V1Pod) -> bool:
    """The API server's read-only copy of a static pod."""
    return CONFIG_MIRROR_ANNOTATION_KEY in _annotations(pod)


def is_critical_pod_based_on_priority(priority: int) -> bool:
    return priority >= SYSTEM_CRITICAL_PRIORITY


def is_critical_pod(pod: V1Pod) -> bool:
    """Static, mirror and system-critical-priority pods are never evicted first."""
    if is_static_pod(pod) or is_mirror_pod(pod):
        return True
    priority = pod.spec.priority if pod.spec is not None else None
    return priority is not None and is_critical_pod_based_on_priority(priority)


def is_node_critical_pod(pod: V1Pod) -> bool:
    priority_class = pod.spec.priority_class_name if pod.spec is not None else None
    return is_critical_pod(pod) and priority_class == SYSTEM_NODE_CRITICAL_PRIORITY_CLASS


def build_pod_full_name(name: str, namespace: str) -> str:
    return f"{name}_{namespace}"


def pod_full_name(pod: V1Pod) -> str:
    """``<name>_<namespace>``: unique on a node, the key the kubelet logs and dedupes by."""
    meta = pod.metadata
    name = (meta.name if meta is not None else None) or ""
    namespace = (meta.namespace if meta is not None else None) or ""
    return build_pod_full_name(name, namespace)


def parse_pod_full_name(full_name: str) -> tuple[str, str]:
    """Split ``<name>_<namespace>`` (mirror pods are deleted by full name); names cannot
    contain ``_``."""
    parts = full_name.split("_")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f"failed to parse the pod full name {full_name!r}")
    return parts[0], parts[1]


__all__ = [
    "ALL_SOURCES",
    "API_SOURCE",
    "CONFIG_FIRST_SEEN_ANNOTATION_KEY",
    "CONFIG_HASH_ANNOTATION_KEY",
    "CONFIG_MIRROR_ANNOTATION_KEY",
    "CONFIG_SOURCE_ANNOTATION_KEY",
    "CONTAINER_NAME_LABEL",
    "FILE_SOURCE",
    "HTTP_SOURCE",
    "KNOWN_SOURCES",
    "NAMESPACE_DEFAULT",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "POD_UID_LABEL",
    "PodOperation",
    "PodUpdate",
    "SyncPodType",
    "build_pod_full_name",
    "get_pod_source",
    "is_critical_pod",
    "is_mirror_pod",
    "is_node_critical_pod",
    "is_static_pod",
    "parse_pod_full_name",
    "pod_full_name",
]
