"""The labels and annotations pykubelet puts on the sandboxes and containers it creates.

The runtime keeps nothing about a pod except what the kubelet wrote on its
objects. A restarted kubelet, PLEG and the status code therefore rebuild
"which pod, which container, which spec hash, which restart" from these keys,
so they use upstream's exact spelling (``pkg/kubelet/kuberuntime/labels.go``
and ``pkg/kubelet/types/labels.go``): a node moved from the Go kubelet to
pykubelet (or back) still recognises its own containers.

Labels carry identity (filterable by the CRI); annotations carry everything
else, encoded as upstream does (hash in hex, counts in decimal, handlers and
ports as JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import V1Container, V1ContainerPort, V1LifecycleHandler, V1Pod

from pykubelet.api import from_dict, to_dict
from pykubelet.api.gojson import render_go_struct
from pykubelet.api.kubetypes import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
)
from pykubelet.kuberuntime.hash import hash_container
from pykubelet.util import klog

# The Go kubelet names its sandboxes' container "POD" in listings; kept for callers that
# need a container-name for a sandbox (e.g. events), never written as a label by upstream.
POD_INFRA_CONTAINER_NAME = "POD"

POD_DELETION_GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.deletionGracePeriod"
POD_TERMINATION_GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.terminationGracePeriod"
CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"
CONTAINER_RESTART_COUNT_ANNOTATION = "io.kubernetes.container.restartCount"
CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION = "io.kubernetes.container.terminationMessagePath"
CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION = (
    "io.kubernetes.container.terminationMessagePolicy")
CONTAINER_PRE_STOP_HANDLER_ANNOTATION = "io.kubernetes.container.preStopHandler"
CONTAINER_PORTS_ANNOTATION = "io.kubernetes.container.ports"
CONTAINER_TYPE_ANNOTATION = "io.kubernetes.container.type"

CONTAINER_TYPE_INIT = "init"
CONTAINER_TYPE_REGULAR = "container"
CONTAINER_TYPE_EPHEMERAL = "ephemeral"

_IDENTITY_LABELS = frozenset({POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL})


@dataclass
class LabeledPodSandboxInfo:
    """What a sandbox's labels say: its pod's identity and the pod's own labels."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class LabeledContainerInfo:
    container_name: str
    pod_name: str
    pod_namespace: str
    pod_uid: str


@dataclass
class AnnotatedContainerInfo:
    """What a container's annotations say; missing or malformed values read as zero/None."""

    hash: int = 0
    restart_count: int = 0
    termination_message_path: str = ""
    termination_message_policy: str = ""
    pod_deletion_grace_period: int | None = None
    pod_termination_grace_period: int | None = None
    pre_stop_handler: V1LifecycleHandler | None = None
    container_ports: list[V1ContainerPort] = field(default_factory=list)
    container_type: str = ""


def _meta(pod: V1Pod) -> tuple[str, str, str]:
    meta = pod.metadata
    if meta is None:
        return "", "", ""
    return meta.name or "", meta.namespace or "", meta.uid or ""


def new_pod_sandbox_labels(pod: V1Pod) -> dict[str, str]:
    """The pod's own labels plus its identity (identity wins over a clashing pod label)."""
    name, namespace, uid = _meta(pod)
    labels = dict((pod.metadata.labels if pod.metadata else None) or {})
    labels[POD_NAME_LABEL] = name
    labels[POD_NAMESPACE_LABEL] = namespace
    labels[POD_UID_LABEL] = uid
    return labels


def new_pod_sandbox_annotations(pod: V1Pod) -> dict[str, str]:
    return dict((pod.metadata.annotations if pod.metadata else None) or {})


def new_container_labels(container: V1Container, pod: V1Pod) -> dict[str, str]:
    name, namespace, uid = _meta(pod)
    return {
        POD_NAME_LABEL: name,
        POD_NAMESPACE_LABEL: namespace,
        POD_UID_LABEL: uid,
        CONTAINER_NAME_LABEL: container.name or "",
    }


def _container_type(container: V1Container, pod: V1Pod) -> str | None:
    spec = pod.spec
    if spec is None:
        return None
    if any(c.name == container.name for c in spec.init_containers or ()):
        return CONTAINER_TYPE_INIT
    if any(c.name == container.name for c in spec.containers or ()):
        return CONTAINER_TYPE_REGULAR
    if any(c.name == container.name for c in spec.ephemeral_containers or ()):
        return CONTAINER_TYPE_EPHEMERAL
    return None


def _go_json(value: Any, type_name: str) -> str:
    # What the Go kubelet writes (encoding/json, struct field order), so annotations
    # written by either kubelet read the same to the other.
    if isinstance(value, list):
        return "[" + ",".join(render_go_struct(to_dict(item), type_name) for item in value) + "]"
    return render_go_struct(to_dict(value), type_name)


def new_container_annotations(container: V1Container, pod: V1Pod,
                              restart_count: int) -> dict[str, str]:
    annotations = {
        CONTAINER_HASH_ANNOTATION: format(hash_container(container), "x"),
        CONTAINER_RESTART_COUNT_ANNOTATION: str(restart_count),
        CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION: container.termination_message_path or "",
        CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION:
            container.termination_message_policy or "",
    }
    if pod.metadata is not None and pod.metadata.deletion_grace_period_seconds is not None:
        annotations[POD_DELETION_GRACE_PERIOD_ANNOTATION] = str(
            pod.metadata.deletion_grace_period_seconds)
    if pod.spec is not None and pod.spec.termination_grace_period_seconds is not None:
        annotations[POD_TERMINATION_GRACE_PERIOD_ANNOTATION] = str(
            pod.spec.termination_grace_period_seconds)
    if container.lifecycle is not None and container.lifecycle.pre_stop is not None:
        annotations[CONTAINER_PRE_STOP_HANDLER_ANNOTATION] = _go_json(
            container.lifecycle.pre_stop, "Handler")
    if container.ports:
        annotations[CONTAINER_PORTS_ANNOTATION] = _go_json(container.ports, "ContainerPort")
    container_type = _container_type(container, pod)
    if container_type is not None:
        annotations[CONTAINER_TYPE_ANNOTATION] = container_type
    return annotations


def get_pod_sandbox_info_from_labels(labels: Mapping[str, str]) -> LabeledPodSandboxInfo:
    return LabeledPodSandboxInfo(
        pod_name=labels.get(POD_NAME_LABEL, ""),
        pod_namespace=labels.get(POD_NAMESPACE_LABEL, ""),
        pod_uid=labels.get(POD_UID_LABEL, ""),
        labels={k: v for k, v in labels.items() if k not in _IDENTITY_LABELS},
    )


def get_container_info_from_labels(labels: Mapping[str, str]) -> LabeledContainerInfo:
    return LabeledContainerInfo(
        container_name=labels.get(CONTAINER_NAME_LABEL, ""),
        pod_name=labels.get(POD_NAME_LABEL, ""),
        pod_namespace=labels.get(POD_NAMESPACE_LABEL, ""),
        pod_uid=labels.get(POD_UID_LABEL, ""),
    )


def _parse_int(annotations: Mapping[str, str], key: str, base: int = 10) -> int | None:
    text = annotations.get(key)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError as err:
        # A malformed value must not stop the kubelet from managing the container:
        # it is treated as missing, as upstream does.
        klog.error("Unable to get label value from annotations", err, label=key)
        return None


def _parse_json(annotations: Mapping[str, str], key: str) -> Any:
    text = annotations.get(key)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as err:
        klog.error("Unable to get label value from annotations", err, label=key)
        return None


def get_container_info_from_annotations(annotations: Mapping[str, str]) -> AnnotatedContainerInfo:
    info = AnnotatedContainerInfo(
        hash=_parse_int(annotations, CONTAINER_HASH_ANNOTATION, 16) or 0,
        restart_count=_parse_int(annotations, CONTAINER_RESTART_COUNT_ANNOTATION) or 0,
        termination_message_path=annotations.get(CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION, ""),
        termination_message_policy=annotations.get(
            CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION, ""),
        pod_deletion_grace_period=_parse_int(annotations, POD_DELETION_GRACE_PERIOD_ANNOTATION),
        pod_termination_grace_period=_parse_int(
            annotations, POD_TERMINATION_GRACE_PERIOD_ANNOTATION),
        container_type=annotations.get(CONTAINER_TYPE_ANNOTATION, ""),
    )
    pre_stop = _parse_json(annotations, CONTAINER_PRE_STOP_HANDLER_ANNOTATION)
    if isinstance(pre_stop, dict):
        info.pre_stop_handler = from_dict(pre_stop, V1LifecycleHandler)
    ports = _parse_json(annotations, CONTAINER_PORTS_ANNOTATION)
    if isinstance(ports, list):
        info.container_ports = [from_dict(p, V1ContainerPort) for p in ports]
    return info


__all__ = [
    "CONTAINER_HASH_ANNOTATION",
    "CONTAINER_NAME_LABEL",
    "CONTAINER_PORTS_ANNOTATION",
    "CONTAINER_PRE_STOP_HANDLER_ANNOTATION",
    "CONTAINER_RESTART_COUNT_ANNOTATION",
    "CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION",
    "CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION",
    "CONTAINER_TYPE_ANNOTATION",
    "POD_DELETION_GRACE_PERIOD_ANNOTATION",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "POD_TERMINATION_GRACE_PERIOD_ANNOTATION",
    "POD_UID_LABEL",
    "AnnotatedContainerInfo",
    "LabeledContainerInfo",
    "LabeledPodSandboxInfo",
    "get_container_info_from_annotations",
    "get_container_info_from_labels",
    "get_pod_sandbox_info_from_labels",
    "new_container_annotations",
    "new_container_labels",
    "new_pod_sandbox_annotations",
    "new_pod_sandbox_labels",
]
