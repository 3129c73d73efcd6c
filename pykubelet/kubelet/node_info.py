"""The kubelet's view of its own Node (upstream ``nodeLister`` and ``getNodeAnyWay``).

Admission needs the node's labels, taints and allocatable resources, and a
mirror pod needs the Node's UID for its owner reference. In cluster mode
those come from the Node object itself, kept current by a watch of that one
object (``client.informer.ObjectInformer``, what upstream's node informer with a
``metadata.name`` field selector does). Before the Node exists, and in
standalone mode, ``LocalNode`` describes the node from what the kubelet knows
locally, as upstream's ``initialNode`` does: the well-known labels,
``--node-labels``, ``registerWithTaints`` and the machine's resources.

Allocatable comes from a callable: the kubelet hands in the node status's own
rule (``nodestatus.resources.allocatable_status``), so admission judges a pod
against the allocatable the Node will report.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kubernetes_asyncio.client import V1Node, V1NodeSpec, V1NodeStatus, V1ObjectMeta, V1Taint

from pykubelet.api.wellknown import (
    LABEL_ARCH_BETA,
    LABEL_ARCH_STABLE,
    LABEL_HOSTNAME,
    LABEL_OS_BETA,
    LABEL_OS_STABLE,
    go_arch,
    go_os,
)


class NodeCache(Protocol):
    """The watched Node (``pykubelet.client.informer.ObjectInformer``)."""

    def get(self) -> V1Node | None: ...

    def has_synced(self) -> bool: ...


class LocalNode:
    """The Node as the kubelet would register it, built without the API server."""

    def __init__(self, node_name: str, *, hostname: str | None = None,
                 node_labels: dict[str, str] | None = None,
                 taints: Iterable[Any] = (),
                 allocatable: Callable[[], dict[str, str]]) -> None:
        self.node_name = node_name
        self._hostname = (hostname or socket.gethostname()).lower()
        self._labels = dict(node_labels or {})
        self._taints = [_taint(t) for t in taints]
        self._allocatable = allocatable

    def labels(self) -> dict[str, str]:
        arch, system = go_arch(), go_os()
        return {LABEL_HOSTNAME: self._hostname, LABEL_OS_STABLE: system,
                LABEL_ARCH_STABLE: arch, LABEL_OS_BETA: system, LABEL_ARCH_BETA: arch,
                **self._labels}

    def node(self) -> V1Node:
        allocatable = self._allocatable()
        return V1Node(metadata=V1ObjectMeta(name=self.node_name, labels=self.labels()),
                      spec=V1NodeSpec(taints=list(self._taints) or None),
                      status=V1NodeStatus(capacity=dict(allocatable),
                                          allocatable=dict(allocatable)))


def node_host_ips(node: V1Node | None) -> list[str]:
    """The node's primary IP and, on a dual-stack node, one of the other family
    (upstream ``GetNodeHostIPs``): InternalIP addresses before ExternalIP ones, in
    the Node's order. Empty when the Node is unknown or lists no IP address."""
    addresses = (node.status.addresses if node is not None and node.status is not None
                 else None) or []
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for wanted in ("InternalIP", "ExternalIP"):
        for address in addresses:
            if address.type == wanted:
                with contextlib.suppress(ValueError):
                    candidates.append(ipaddress.ip_address(address.address))
    if not candidates:
        return []
    primary = candidates[0]
    other = next((ip for ip in candidates if ip.version != primary.version), None)
    return [str(primary)] + ([str(other)] if other is not None else [])


def host_ips_any_way(node: V1Node | None, node_ip: str) -> list[str]:
    """The node's IPs, primary first (upstream ``getHostIPsAnyWay``): the Node's
    addresses once it lists some; before that (standalone, or a kubelet whose Node is
    not registered yet) the kubelet's own node IP."""
    return node_host_ips(node) or ([node_ip] if node_ip else [])


def _taint(taint: Any) -> V1Taint:
    if isinstance(taint, V1Taint):
        return taint
    return V1Taint(key=getattr(taint, "key", ""), value=getattr(taint, "value", None) or None,
                   effect=getattr(taint, "effect", ""))


class NodeView:
    """``get_node_any_way``: the API's Node when there is one, else the local description."""

    def __init__(self, local: LocalNode, informer: NodeCache | None = None) -> None:
        self.local = local
        self.informer = informer

    def get_node(self) -> V1Node | None:
        return self.informer.get() if self.informer is not None else None

    def get_node_any_way(self) -> V1Node:
        node = self.get_node()
        if node is None:
            return self.local.node()
        if node.status is None or not node.status.allocatable:
            # Registered, but no status written yet: what the first status will say.
            local = self.local.node()
            node = copy.copy(node)
            node.status = local.status
        return node

    async def node_uid(self) -> str:
        node = self.get_node()
        if node is None or node.metadata is None or not node.metadata.uid:
            raise LookupError(f"node {self.local.node_name!r} not found in the API server")
        return str(node.metadata.uid)


__all__ = ["LocalNode", "NodeCache", "NodeView", "host_ips_any_way", "node_host_ips"]
