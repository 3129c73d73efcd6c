"""Downward API values: ``fieldRef`` and ``resourceFieldRef`` of a pod (upstream ``fieldpath``).

Environment variables (``env[].valueFrom``) and downwardAPI volume files
(``downwardAPI.items``, projected ``downwardAPI`` sources) read the same pod
fields the same way, so the rule lives here, on the ground floor, and both
the runtime manager and the volume plugins call it. Errors are
``FieldPathError`` with upstream's wording; callers turn them into their own
failure (``CreateContainerConfigError``, a ``FailedMount``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api.qos import container_limits, container_requests
from pykubelet.api.quantity import QuantityError, cpu_to_millis, memory_to_bytes, parse_quantity
from pykubelet.util.gotext import go_quote


class FieldPathError(ValueError):
    """The selector names a field or resource the kubelet cannot resolve."""


def format_map(values: Mapping[str, str]) -> str:
    """``key="value"`` lines, sorted by key (labels and annotations as one value).

    Values are quoted as Go's ``%q`` quotes them, as upstream writes them: programs
    in the pod parse this text.
    """
    return "\n".join(f"{key}={go_quote(values[key])}" for key in sorted(values))


def field_ref_value(pod: V1Pod, path: str, *, node_name: str = "",
                    pod_ips: Sequence[str] = (), host_ips: Sequence[str] = ()) -> str:
    """The value of ``fieldRef.fieldPath`` ``path`` for ``pod``."""
    meta = pod.metadata
    spec = pod.spec
    labels = (meta.labels if meta else None) or {}
    annotations = (meta.annotations if meta else None) or {}
    if path.endswith("']") and "['" in path:
        base, _, rest = path.partition("['")
        key = rest[:-2]
        if base == "metadata.labels":
            return str(labels.get(key, ""))
        if base == "metadata.annotations":
            return str(annotations.get(key, ""))
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: (meta.name if meta else None) or "",
        "metadata.namespace": lambda: (meta.namespace if meta else None) or "",
        "metadata.uid": lambda: (meta.uid if meta else None) or "",
        "metadata.labels": lambda: format_map(labels),
        "metadata.annotations": lambda: format_map(annotations),
        "spec.nodeName": lambda: (spec.node_name if spec else None) or node_name,
        "spec.serviceAccountName": lambda: (spec.service_account_name if spec else None) or "",
        "status.podIP": lambda: pod_ips[0] if pod_ips else "",
        "status.podIPs": lambda: ",".join(pod_ips),
        "status.hostIP": lambda: host_ips[0] if host_ips else "",
        "status.hostIPs": lambda: ",".join(host_ips),
    }
    if path not in simple:
        raise FieldPathError(f"unsupported fieldPath: {path}")
    return simple[path]()


def find_container(pod: V1Pod, name: str) -> V1Container:
    spec = pod.spec
    candidates = [*(spec.containers or []), *(spec.init_containers or [])] if spec else []
    found = next((c for c in candidates if c.name == name), None)
    if found is None:
        raise FieldPathError(f"container {name} not found in pod")
    return found


def _divisor(divisor: object) -> object:
    """The divisor to use: one when none is given or it is zero.

    The API server stores an omitted divisor as the zero quantity (``"0"``), so
    zero, written any way (``"0"``, ``"0m"``, ``"0Mi"``), means the default.
    """
    if divisor is None or divisor == "":
        return 1
    return 1 if parse_quantity(divisor) == 0 else divisor


def _unset_or_zero(values: Mapping[str, object], resource: str) -> bool:
    value = values.get(resource)
    return value is None or parse_quantity(value) == 0


def resource_field_value(container: V1Container, resource_name: str, divisor: object, *,
                         node_cpu_millis: int, node_memory: int) -> str:
    """``resourceFieldRef`` of ``container``, rounded up in units of ``divisor``.

    ``resource_name`` is ``requests.`` or ``limits.`` followed by ``cpu``, ``memory``,
    ``ephemeral-storage`` or ``hugepages-<size>``. CPU is counted in millicores and
    the divisor too (so ``1m`` gives millicores, the default ``1`` whole cores, rounded
    up); the others in bytes, the divisor's own value rounded up to a whole byte.
    A cpu or memory limit the container does not set (or sets to zero) reads as the
    node's allocatable amount, ``node_cpu_millis`` and ``node_memory``.
    """
    kind, _, resource = (resource_name or "").partition(".")
    if kind not in ("limits", "requests"):
        raise FieldPathError(f"unsupported container resource : {resource_name}")
    limits = kind == "limits"
    values = container_limits(container) if limits else container_requests(container)
    try:
        unit = _divisor(divisor)
        if resource == "cpu":
            millis = (node_cpu_millis if limits and _unset_or_zero(values, "cpu")
                      else cpu_to_millis(values.get("cpu", 0)))
            return str(math.ceil(Fraction(millis, cpu_to_millis(unit))))
        if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
            amount = (node_memory if limits and resource == "memory"
                      and _unset_or_zero(values, "memory")
                      else memory_to_bytes(values.get(resource, 0)))
            return str(math.ceil(Fraction(amount, memory_to_bytes(unit))))
    except (QuantityError, ZeroDivisionError) as err:
        raise FieldPathError(f"invalid resourceFieldRef {resource_name}: {err}") from err
    raise FieldPathError(f"unsupported container resource : {resource_name}")


__all__ = ["FieldPathError", "field_ref_value", "find_container", "format_map",
           "resource_field_value"]
