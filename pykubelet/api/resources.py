"""A pod's effective requests and limits, summed the way the scheduler and kubelet agree on.

One home for upstream's ``PodRequests`` / ``PodLimits`` (component-helpers
``resource``): the cgroup of a pod, the eviction manager's "usage above
requests" ranking and admission all need the same totals.

- App containers are summed; restartable init containers (sidecars) run
  alongside them and are added too.
- Each plain init container runs alone (plus the sidecars started before
  it), so the pod needs at least the largest of those; the result is the
  per-resource maximum of the two.
- ``spec.overhead`` (the RuntimeClass's cost) is added last.
- Pod-level ``spec.resources``, when set, replaces the container sums for the
  resources it names.

Values are exact ``Fraction`` s (cpu in cores, memory in bytes); a resource no
container mentions is absent from the result, as upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import is_restartable_init_container
from pykubelet.api.qos import container_limits, container_requests
from pykubelet.api.quantity import parse_quantity
from pykubelet.api.validation import qualified_name_errors

ResourceTotals = dict[str, Fraction]


# Extended resources (upstream ``IsExtendedResourceName``): what device plugins
# advertise and what admission counts against the node's allocatable like cpu.
NATIVE_RESOURCE_PREFIX = "kubernetes.io/"
DEFAULT_RESOURCE_REQUESTS_PREFIX = "requests."


def is_extended_resource_name(name: str) -> bool:
    """Fully qualified, outside ``kubernetes.io/``, and still a qualified name once
    quota's ``requests.`` prefix is put in front (``example.com/gpu``)."""
    if "/" not in name or NATIVE_RESOURCE_PREFIX in name:
        return False
    if name.startswith(DEFAULT_RESOURCE_REQUESTS_PREFIX):
        return False
    return not qualified_name_errors(DEFAULT_RESOURCE_REQUESTS_PREFIX + name)


def _add(into: ResourceTotals, values: dict[str, Any]) -> None:
    """Add a container's quantities (API strings or numbers) into ``into``."""
    _sum_into(into, {name: parse_quantity(value) for name, value in values.items()})


def _sum_into(into: ResourceTotals, values: ResourceTotals) -> None:
    for name, value in values.items():
        into[name] = into.get(name, Fraction(0)) + value


def _max_into(into: ResourceTotals, values: ResourceTotals) -> None:
    for name, value in values.items():
        if value > into.get(name, Fraction(0)):
            into[name] = value


def _aggregate(pod: V1Pod, per_container: Callable[[V1Container], dict[str, Any]],
               overhead_on_absent: bool = True) -> ResourceTotals:
    spec = pod.spec
    if spec is None:
        return {}
    total: ResourceTotals = {}
    for container in spec.containers or []:
        _add(total, per_container(container))
    sidecars: ResourceTotals = {}
    init_peak: ResourceTotals = {}
    for container in spec.init_containers or []:
        own: ResourceTotals = {}
        _add(own, per_container(container))
        if is_restartable_init_container(container):
            _sum_into(sidecars, own)
            _sum_into(total, own)
            # A sidecar is running while the later init containers run.
            _max_into(init_peak, sidecars)
        else:
            running: ResourceTotals = dict(own)
            _sum_into(running, sidecars)
            _max_into(init_peak, running)
    _max_into(total, init_peak)
    for name, value in (spec.overhead or {}).items():
        # Limits: an unlimited resource stays unlimited whatever the overhead.
        if overhead_on_absent or name in total:
            total[name] = total.get(name, Fraction(0)) + parse_quantity(value)
    return total


def pod_requests(pod: V1Pod) -> ResourceTotals:
    """Upstream ``PodRequests``: what the pod reserves on the node."""
    total = _aggregate(pod, container_requests)
    level = pod.spec.resources if pod.spec is not None else None
    if level is not None:
        explicit = dict(level.limits or {}) | dict(level.requests or {})
        for name, value in explicit.items():
            total[name] = parse_quantity(value)
    return total


def pod_limits(pod: V1Pod, missing: set[str] | None = None) -> ResourceTotals:
    """Upstream ``PodLimits``; ``missing`` collects cpu/memory when some container has no limit.

    A container without a cpu (memory) limit means the pod as a whole is not
    cpu (memory) limited, so the caller must not apply the partial sum.
    """

    def limits_of(container: V1Container) -> dict[str, Any]:
        values = container_limits(container)
        if missing is not None:
            for name in ("cpu", "memory"):
                if name not in values or parse_quantity(values[name]) == 0:
                    missing.add(name)
        return values

    total = _aggregate(pod, limits_of, overhead_on_absent=False)
    level = pod.spec.resources if pod.spec is not None else None
    if level is not None and level.limits:
        for name, value in level.limits.items():
            total[name] = parse_quantity(value)
            if missing is not None:
                missing.discard(name)
    return total


__all__ = ["DEFAULT_RESOURCE_REQUESTS_PREFIX", "NATIVE_RESOURCE_PREFIX", "ResourceTotals",
           "is_extended_resource_name", "pod_limits", "pod_requests"]
