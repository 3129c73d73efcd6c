"""The device manager's NUMA hints for the topology manager (upstream ``topology_hints.go``).

Pure functions over plain data, so each rule can be held against upstream's
alone: a resource's devices with the NUMA nodes each sits on, the devices free
for the request, those the pod's init containers leave to it, the request, and
the machine's NUMA node ids. The manager gathers that data (after freeing what
gone pods held) and calls these.

For one resource the answer is None when none of its devices has topology (no
preference), [] when the request cannot be met, else one hint per set of NUMA
nodes that can meet it, preferred when no smaller set of nodes could hold the
request on an empty machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set

from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api.quantity import parse_quantity
from pykubelet.api.resources import pod_limits
from pykubelet.cm.topologymanager.bitmask import BitMask, iterate_bit_masks
from pykubelet.cm.topologymanager.policy import TopologyHint

# Device id -> the NUMA nodes it sits on (empty: the plugin gave no topology).
DeviceTopology = Mapping[str, Sequence[int]]


def container_device_request(container: V1Container) -> dict[str, int]:
    """The container's limits as whole numbers: extended resources cannot be
    overcommitted, so requests equal limits and upstream reads the limits only."""
    limits = (container.resources.limits if container.resources is not None else None) or {}
    return {name: int(parse_quantity(value)) for name, value in limits.items()}


def pod_device_request(pod: V1Pod) -> dict[str, int]:
    """What the whole pod holds at once: upstream's ``getPodDeviceRequest`` takes the
    pod's limits (``PodLimits``), the rule admission and the pod cgroup use too
    (sidecars beside the app containers, each plain init container beside the sidecars
    started before it)."""
    return {name: math.ceil(count) for name, count in pod_limits(pod).items()}


def has_topology(devices: DeviceTopology) -> bool:
    """Whether any device names a NUMA node: only then does the resource care about
    alignment."""
    return any(nodes for nodes in devices.values())


def resource_hints(*, devices: DeviceTopology, held: Set[str], available: Set[str],
                   reusable: Set[str], request: int,
                   numa_nodes: Sequence[int]) -> list[TopologyHint] | None:
    """One resource's hints for a request of ``request`` devices.

    ``held``: what the container (or pod) already holds, a restarted kubelet's
    re-admission, whose hints are regenerated from those devices alone.
    """
    if not has_topology(devices):
        return None
    if held:
        if len(held) != request:
            return []
        return device_hints(devices=devices, available=held, reusable=frozenset(),
                            request=request, numa_nodes=numa_nodes)
    if len(available | reusable) < request:
        return []
    return device_hints(devices=devices, available=available, reusable=reusable,
                        request=request, numa_nodes=numa_nodes)


def device_hints(*, devices: DeviceTopology, available: Set[str], reusable: Set[str],
                 request: int, numa_nodes: Sequence[int]) -> list[TopologyHint]:
    """Every set of NUMA nodes on which ``request`` devices can be had: the reusable
    devices with topology must all lie on it, and with the available ones on it they
    must reach the request."""

    def on(mask: BitMask, device_id: str) -> bool:
        return any(mask.is_set(node) for node in devices.get(device_id, ()))

    narrowest = len(numa_nodes)
    found: list[BitMask] = []
    for mask in iterate_bit_masks(numa_nodes):
        # The narrowest mask that could hold the request if nothing were in use.
        if sum(1 for device_id in devices if on(mask, device_id)) >= request:
            narrowest = min(narrowest, mask.count())
        reused = [d for d in reusable if devices.get(d)]
        if not all(on(mask, d) for d in reused):
            continue
        if len(reused) + sum(1 for d in available if on(mask, d)) >= request:
            found.append(mask)
    return [TopologyHint(mask, mask.count() == narrowest) for mask in found]


__all__ = ["DeviceTopology", "container_device_request", "device_hints", "has_topology",
           "pod_device_request", "resource_hints"]
