"""Kubernetes events the kubelet records (upstream ``record.EventRecorder``).

Events such as ``Unhealthy``, ``Killing`` or ``FailedPostStartHook`` are how a
user learns why a container restarted. In standalone mode there is no API
server to post them to, so the recorder writes each one as a klog line
(``"Event occurred" object=... type=Warning reason=Unhealthy message=...``),
as the Go kubelet's event broadcaster also logs them. Cluster mode will add a
recorder that posts ``v1.Event`` objects; subsystems only see the Protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pykubelet.util import klog

NORMAL = "Normal"
WARNING = "Warning"


def describe(obj: Any) -> str:
    """``namespace/name`` of a Kubernetes object (pod, node), for logs and events."""
    metadata = getattr(obj, "metadata", None)
    if metadata is None:
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
class Event:
    object: str
    type: str
    reason: str
    message: str
    field_path: str = ""


class EventRecorder(Protocol):
    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "") -> None: ...


class LoggingRecorder:
    """Writes every event to the log; optional listeners see them too (tests, API sink)."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[Event], None]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "") -> None:
        recorded = Event(describe(obj), event_type, reason, message, field_path)
        # The header names the recording code (prober.py, container.py...), not this file.
        klog.info_depth(1, "Event occurred", object=recorded.object, fieldPath=field_path,
                        type=event_type, reason=reason, message=message)
        for listener in self.listeners:
            listener(recorded)
