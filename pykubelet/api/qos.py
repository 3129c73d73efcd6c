"""Pod QoS classes and the OOM-killer priority they give containers.

The QoS class (``Guaranteed``, ``Burstable``, ``BestEffort``) is derived from
the CPU and memory requests and limits of a pod's containers with upstream's
rules (``pkg/apis/core/v1/helper/qos``); it is reported in ``status.qosClass``
and decides each container's ``oom_score_adj`` (``pkg/kubelet/qos/policy.go``),
i.e. which pods the kernel kills first when the node runs out of memory.

Pods read from static files may not have had API defaulting applied, so a
resource with a limit but no request counts its limit as its request, which
is what the API server's defaulting would have written.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api.kubetypes import is_node_critical_pod
from pykubelet.api.quantity import memory_to_bytes, parse_quantity

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000
# Where the kubelet itself and node-critical daemons live, below every pod.
KUBELET_OOM_SCORE_ADJ = -999

_QOS_RESOURCES = ("cpu", "memory")


def _resource_map(values: Any) -> dict[str, Any]:
    return dict(values or {})


def _defaulted_requests(requests: Any, limits: Any) -> dict[str, Any]:
    return _resource_map(limits) | _resource_map(requests)


def container_requests(container: V1Container) -> dict[str, Any]:
    """Requests with API defaulting applied: a limit without a request is also the request."""
    resources = container.resources
    if resources is None:
        return {}
    return _defaulted_requests(resources.requests, resources.limits)


def container_limits(container: V1Container) -> dict[str, Any]:
    return _resource_map(container.resources.limits if container.resources else None)


def _positive_qos_resources(values: dict[str, Any]) -> dict[str, Fraction]:
    found: dict[str, Fraction] = {}
    for name in _QOS_RESOURCES:
        if name in values:
            quantity = parse_quantity(values[name])
            if quantity > 0:
                found[name] = quantity
    return found


def compute_pod_qos(pod: V1Pod) -> str:
    """The QoS class from the pod's spec alone (upstream ``ComputePodQOS``)."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    spec = pod.spec
    pod_level = spec.resources if spec is not None else None
    if pod_level is not None and (pod_level.requests or pod_level.limits):
        sources = [(_defaulted_requests(pod_level.requests, pod_level.limits),
                    _resource_map(pod_level.limits))]
    else:
        containers = [*(spec.containers or []), *(spec.init_containers or [])] if spec else []
        sources = [(container_requests(c), container_limits(c)) for c in containers]
    for raw_requests, raw_limits in sources:
        for name, quantity in _positive_qos_resources(raw_requests).items():
            requests[name] = requests.get(name, Fraction(0)) + quantity
        container_limit = _positive_qos_resources(raw_limits)
        for name, quantity in container_limit.items():
            limits[name] = limits.get(name, Fraction(0)) + quantity
        if set(container_limit) != set(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and any(limits.get(name) != value for name, value in requests.items()):
        guaranteed = False
    if guaranteed and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE


def get_pod_qos(pod: V1Pod) -> str:
    """The pod's QoS class: the one in its status when set (it never changes), else computed."""
    if pod.status is not None and pod.status.qos_class:
        return str(pod.status.qos_class)
    return compute_pod_qos(pod)


def container_oom_score_adjust(pod: V1Pod, container: V1Container, memory_capacity: int) -> int:
    """The ``oom_score_adj`` for one container on a node with ``memory_capacity`` bytes."""
    if is_node_critical_pod(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = get_pod_qos(pod)
    if qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    # Burstable: the larger the memory request relative to the node, the safer the container.
    memory_request = container_requests(container).get("memory")
    request_bytes = memory_to_bytes(memory_request) if memory_request is not None else 0
    adjust = 1000 - (1000 * request_bytes) // max(memory_capacity, 1)
    # Never as safe as a Guaranteed container, never as exposed as a BestEffort one.
    floor = 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adjust < floor:
        return floor
    if adjust >= BEST_EFFORT_OOM_SCORE_ADJ:
        return BEST_EFFORT_OOM_SCORE_ADJ - 1
    return adjust


__all__ = [
    "BEST_EFFORT",
    "BURSTABLE",
    "GUARANTEED",
    "compute_pod_qos",
    "container_limits",
    "container_oom_score_adjust",
    "container_requests",
    "get_pod_qos",
]
