"""Static pod identity and manifest decoding (upstream ``pkg/kubelet/config/common.go``).

A static pod has no API server to give it a UID, so the kubelet derives one
from the manifest's content: the one the Go kubelet 1.20 derives
(``pykubelet.api.gospew_pod``), an md5 of the decoded pod alone, so that a node
swapped between the two kubelets keeps its static pods running. Upstream meant
to mix in the node name and the file or URL too, but its hasher is reset before
the pod is written: the same manifest has the same UID on any node and path.
The same manifest therefore keeps its UID across kubelet restarts (so running
containers are adopted, not restarted), and any edit yields a new UID (so the
old pod is torn down and the new one started). The pod's name is suffixed with
the node name so that the mirror pods of several nodes do not collide in the
API server.

Both the file source and the URL source decode bytes here: YAML or JSON, one
``Pod`` (or for URLs a ``PodList``), then the static identity, the API server's
defaults and validation. The bytes come from outside the kubelet, so the
contract is strict: whatever they hold, the result is validated pods or a
``ManifestError`` naming the file or URL and the field (or line) at fault.
The document reader (``pykubelet.api.yamlsafe``) bounds size, nesting and
alias expansion; ``decode_pod`` checks every type and number range while it
builds the API model.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client.models import (
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1Toleration,
)

from pykubelet.api import to_dict, yamlsafe
from pykubelet.api.defaults import apply_pod_defaults
from pykubelet.api.gospew_pod import UnrenderablePod, go120_static_pod_uid
from pykubelet.api.kubetypes import (
    CONFIG_FIRST_SEEN_ANNOTATION_KEY,
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
    FILE_SOURCE,
    NAMESPACE_DEFAULT,
)
from pykubelet.api.validation import decode_pod, validate_pod
from pykubelet.api.yamlsafe import render
from pykubelet.util import klog

MAX_REPORTED_ERRORS = 20  # field errors quoted in one message; the rest are counted


class ManifestError(ValueError):
    """A manifest that cannot become a runnable pod: ``location`` (the file or URL) and
    ``reason`` (naming the field or line at fault)."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"{location}: {reason}" if location else reason)
        self.location = location
        self.reason = reason


def load_document(data: bytes | str, location: str = "") -> Any:
    """Parse one YAML or JSON document; more than one document in the data is an error."""
    try:
        document = yamlsafe.load_document(data)
    except yamlsafe.DocumentError as err:
        raise ManifestError(location, f"invalid YAML or JSON: {err}") from None
    if document is None:
        raise ManifestError(location, "empty manifest")
    return document


def rfc3339_nano(epoch_ns: int) -> str:
    """A UTC timestamp in Go's RFC3339Nano layout: nanoseconds, trailing zeros trimmed."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{stamp}.{fraction}Z" if fraction else f"{stamp}Z"


def generate_pod_name(name: str, node_name: str) -> str:
    return f"{name}-{node_name.lower()}"


def static_pod_uid(manifest: Mapping[str, Any]) -> str:
    """The UID the Go kubelet 1.20 gives the static pod ``manifest`` (the decoded document).

    1.20 hashes go-spew's rendering of the pod it decoded, and nothing else: not the node
    name, not the file or URL (1.21 and later mix those in, and v1.35 hashes JSON instead
    of spew: ``pykubelet.api.gospew_pod`` says more). When the pod holds a value
    ``gospew_pod`` cannot render exactly (a timestamp, managed fields), the UID is still a
    digest of the content alone, pykubelet's own: stable across restarts and nodes, new on
    every edit, but not the Go kubelet's, so such a pod is restarted by a swap.
    """
    try:
        return go120_static_pod_uid(manifest)
    except UnrenderablePod as err:
        klog.v(4).info("Static pod UID not the Go kubelet's", reason=str(err))
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str)
    hasher = hashlib.md5(b"pykubelet-static-pod:", usedforsecurity=False)
    # A string that is not UTF-8 reaches Python with its bytes escaped: hash the bytes.
    hasher.update(canonical.encode("utf-8", "surrogateescape"))
    return hasher.hexdigest()


_TOLERATE_ALL_NO_EXECUTE = V1Toleration(operator="Exists", effect="NoExecute")


def _add_toleration(pod: V1Pod, wanted: V1Toleration) -> None:
    assert pod.spec is not None
    tolerations = list(pod.spec.tolerations or [])
    for existing in tolerations:
        if (existing.key, existing.operator, existing.value, existing.effect) == (
                wanted.key, wanted.operator, wanted.value, wanted.effect):
            return
    tolerations.append(V1Toleration(operator=wanted.operator, effect=wanted.effect))
    pod.spec.tolerations = tolerations


def apply_static_identity(pod: V1Pod, *, node_name: str, source: str, location: str,
                          read_at_ns: int | None = None,
                          manifest: Mapping[str, Any] | None = None) -> V1Pod:
    """Give a decoded manifest the identity of a static pod on ``node_name``, in place.

    ``source`` is ``file`` or ``http``; ``location`` is the file path or the URL;
    ``manifest`` the document ``pod`` was decoded from, which the UID is derived from
    (None: the pod's own JSON form, which may have lost an empty list or map the
    document had, and with it the Go kubelet's UID).
    """
    if pod.metadata is None:
        pod.metadata = V1ObjectMeta()
    if pod.spec is None:
        pod.spec = V1PodSpec(containers=[])
    meta = pod.metadata
    if not meta.uid:
        meta.uid = static_pod_uid(manifest if manifest is not None else to_dict(pod))
        klog.v(5).info("Generated UID", pod=meta.name, podUID=meta.uid, source=location)
    meta.name = generate_pod_name(meta.name or "", node_name)
    if not meta.namespace:
        meta.namespace = NAMESPACE_DEFAULT
    pod.spec.node_name = node_name
    annotations = dict(meta.annotations or {})
    annotations[CONFIG_HASH_ANNOTATION_KEY] = meta.uid
    annotations[CONFIG_SOURCE_ANNOTATION_KEY] = source
    seen_ns = read_at_ns if read_at_ns is not None else time.time_ns()
    annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY] = rfc3339_nano(seen_ns)
    meta.annotations = annotations
    if source == FILE_SOURCE:
        # Node problems must not evict the pods that may be what keeps the node running.
        _add_toleration(pod, _TOLERATE_ALL_NO_EXECUTE)
    if pod.status is None:
        pod.status = V1PodStatus()
    pod.status.phase = "Pending"
    return pod


def _field_errors(location: str, what: str, errors: list[str]) -> ManifestError:
    shown = errors[:MAX_REPORTED_ERRORS]
    if len(errors) > MAX_REPORTED_ERRORS:
        shown.append(f"... and {len(errors) - MAX_REPORTED_ERRORS} more errors")
    return ManifestError(location, f"{what}: " + "; ".join(shown))


def _decode_pod_object(obj: Any, *, node_name: str, source: str, location: str,
                       item: str = "") -> V1Pod:
    what = f"{item}: invalid pod" if item else "invalid pod"
    pod, errors = decode_pod(obj)
    if pod is None:
        raise _field_errors(location, what, errors)
    apply_static_identity(pod, node_name=node_name, source=source, location=location,
                          manifest=obj)
    apply_pod_defaults(pod)
    errors = validate_pod(pod)
    if errors:
        raise _field_errors(location, what, errors)
    return pod


def _kind_of(obj: Any, location: str, expected: str) -> tuple[str, str]:
    if not isinstance(obj, dict):
        raise ManifestError(location, f"expected {expected} object, found "
                                      f"{yamlsafe.json_type(obj)}")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    return _text_of(api_version), _text_of(kind)


def _text_of(value: Any) -> str:
    """A type-meta field as text: a string as is, anything else as it would print."""
    if value is None or isinstance(value, str):
        return value or ""
    return render(value)


def decode_static_pod(data: bytes | str, *, node_name: str, source: str,
                      location: str) -> V1Pod:
    """Decode one ``v1`` ``Pod`` manifest into a validated static pod.

    Raises ``ManifestError`` (naming ``location`` and the field) for anything else; the
    work is bounded by the document reader's limits, but may take a good fraction of a
    second for a large manifest, so callers on the event loop run it in a thread.
    """
    obj = load_document(data, location)
    api_version, kind = _kind_of(obj, location, "a Pod")
    if kind != "Pod" or api_version != "v1":
        raise ManifestError(location, f"couldn't parse as pod: expected apiVersion \"v1\" and "
                                      f"kind \"Pod\", found apiVersion {_quoted(api_version)} "
                                      f"and kind {_quoted(kind)}")
    return _decode_pod_object(obj, node_name=node_name, source=source, location=location)


def decode_static_pods(data: bytes | str, *, node_name: str, source: str,
                       location: str) -> list[V1Pod]:
    """Decode a ``Pod`` or a ``PodList``; one bad item rejects the whole list, as upstream."""
    obj = load_document(data, location)
    api_version, kind = _kind_of(obj, location, "a Pod or PodList")
    if api_version != "v1" or kind not in ("Pod", "PodList"):
        raise ManifestError(location, f"couldn't parse as a single pod or a pod list: expected "
                                      f"apiVersion \"v1\" and kind \"Pod\" or \"PodList\", "
                                      f"found apiVersion {_quoted(api_version)} and kind "
                                      f"{_quoted(kind)}")
    if kind == "Pod":
        return [_decode_pod_object(obj, node_name=node_name, source=source, location=location)]
    items = obj.get("items") or []
    if not isinstance(items, list):
        raise ManifestError(location, "invalid pod list: items: expected a list")
    return [_decode_pod_object({} if item is None else item, node_name=node_name,
                               source=source, location=location, item=f"items[{index}]")
            for index, item in enumerate(items)]


def _quoted(text: str) -> str:
    return render(text, 64)


__all__ = [
    "ManifestError",
    "apply_static_identity",
    "decode_static_pod",
    "decode_static_pods",
    "generate_pod_name",
    "load_document",
    "rfc3339_nano",
    "static_pod_uid",
]
