"""Kubernetes events the kubelet records (upstream ``record.EventRecorder``).

Events such as ``Unhealthy``, ``Killing`` or ``FailedPostStartHook`` are how a
user learns why a container restarted. In standalone mode there is no API
server to post them to, so the recorder writes each one as a klog line
(``"Event occurred" object=... type=Warning reason=Unhealthy message=...``, from
``--v=3``),
as the Go kubelet's event broadcaster also logs them. In cluster mode an
``EventBroadcaster`` (``broadcaster.py``) listens too and posts them as
``v1.Event`` objects, aggregated and rate-limited by the ``EventCorrelator``
(``correlator.py``); subsystems only see the Protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykubelet.util import klog

NORMAL = "Normal"
WARNING = "Warning"
# Events are written to the log at this --v (upstream makeEventRecorder: StartStructuredLogging(3)).
EVENT_LOG_VERBOSITY = 3


def describe(obj: Any) -> str:
    """``namespace/name`` of a Kubernetes object or object reference, for logs and events."""
    if isinstance(obj, ObjectReference):
        return f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name
    metadata = getattr(obj, "metadata", None)
    if metadata is None:
        # An ObjectReference (node events are about ``{kind: Node, name: ...}``).
        name = getattr(obj, "name", None)
        if name is not None and getattr(obj, "kind", None) is not None:
            namespace = getattr(obj, "namespace", None)
            return f"{namespace}/{name}" if namespace else str(name)
        return str(obj)
    namespace = getattr(metadata, "namespace", None)
    return f"{namespace}/{metadata.name}" if namespace else str(metadata.name)


def container_field_path(pod: Any, container: Any) -> str:
    """The event ``fieldPath`` of a container, e.g. ``spec.containers{app}``."""
    spec = getattr(pod, "spec", None)
    if spec is not None:
        for field_name, containers in (("initContainers", spec.init_containers),
                                       ("ephemeralContainers", spec.ephemeral_containers)):
            if any(c.name == container.name for c in containers or []):
                return f"spec.{field_name}{{{container.name}}}"
    return f"spec.containers{{{container.name}}}"


@dataclass(frozen=True)
class ObjectReference:
    """The ``involvedObject`` of an event: which API object it is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""


def object_reference(obj: Any) -> ObjectReference | None:
    """The reference of a pod or node model (or of an ``ObjectReference`` itself)."""
    if isinstance(obj, ObjectReference):
        return obj
    metadata = getattr(obj, "metadata", None)
    if metadata is None:
        return None
    kind = getattr(obj, "kind", None) or type(obj).__name__.removeprefix("V1")
    name = str(metadata.name or "")
    if kind == "Node":
        return node_reference(name)
    return ObjectReference(kind=kind, name=name, namespace=str(metadata.namespace or ""),
                           uid=str(metadata.uid or ""),
                           api_version=getattr(obj, "api_version", None) or "v1",
                           resource_version=str(metadata.resource_version or ""))


def node_reference(node_name: str) -> ObjectReference:
    """The node as an event's involved object (upstream ``nodeRef``: the name is the UID)."""
    return ObjectReference(kind="Node", name=node_name, uid=node_name)


@dataclass(frozen=True)
class Event:
    object: str
    type: str
    reason: str
    message: str
    field_path: str = ""
    # Left out of comparisons: tests and logs care about what was said, not the UID.
    involved: ObjectReference | None = field(default=None, compare=False)


class EventRecorder(Protocol):
    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "") -> None: ...


class LoggingRecorder:
    """Writes every event to the log; optional listeners see them too (tests, API sink)."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[Event], None]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "") -> None:
        recorded = Event(describe(obj), event_type, reason, message, field_path,
                         object_reference(obj))
        # At --v=3, as upstream's recorder logs them; the header names the recording code
        # (prober.py, container.py...), not this file.
        klog.v(EVENT_LOG_VERBOSITY).info_depth(
            1, "Event occurred", object=recorded.object, fieldPath=field_path, type=event_type,
            reason=reason, message=message)
        for listener in self.listeners:
            listener(recorded)
