"""Pod admission: may this pod start on this node now? (upstream ``lifecycle/interfaces.go``).

Before a new pod's first sync the kubelet asks each admit handler in turn;
the first refusal rejects the pod for good: its status becomes ``Failed``
with the handler's reason (``OutOfcpu``, ``NodeAffinity``,
``SysctlForbidden``...) and ``Pod was rejected: <message>``, and it never
starts. The scheduler normally checks the same things, so a rejection means
the two disagreed (a pod bound by hand, a static pod, a node that changed in
between).

Handlers here:

- ``PredicateAdmitHandler``: what the scheduler's filters check, against the
  node's allocatable, labels and taints: pods, cpu, memory, ephemeral storage
  and other resources against allocatable minus the other running pods'
  requests; node selector and required node affinity; node name; host port
  conflicts; NoExecute taints the pod does not tolerate (not for static pods);
  the pod's OS.
- ``SysctlAllowlist``: only namespaced sysctls known to be safe, plus the
  node's ``allowedUnsafeSysctls``.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from kubernetes_asyncio.client import (
    V1Node,
    V1Pod,
    V1Taint,
    V1Toleration,
)

from pykubelet.api import init_then_app_containers, pod_ref
from pykubelet.api.kubetypes import is_static_pod
from pykubelet.api.nodeaffinity import node_selector_matches
from pykubelet.api.quantity import parse_quantity
from pykubelet.api.resources import is_extended_resource_name, pod_requests
from pykubelet.util import klog
from pykubelet.util.gotext import go_quote

# Reasons a rejected pod's status carries (upstream lifecycle/predicate.go, sysctl).
OUT_OF_CPU = "OutOfcpu"
OUT_OF_MEMORY = "OutOfmemory"
OUT_OF_EPHEMERAL_STORAGE = "OutOfephemeral-storage"
OUT_OF_PODS = "OutOfpods"
INSUFFICIENT_RESOURCE_PREFIX = "OutOf"
POD_OS_SELECTOR_MISMATCH = "PodOSSelectorNodeLabelDoesNotMatch"
POD_OS_NOT_SUPPORTED = "PodOSNotSupported"
INVALID_NODE_INFO = "InvalidNodeInfo"
SYSCTL_FORBIDDEN = "SysctlForbidden"

# Scheduler plugin names and their failure reasons, as the API shows them.
NODE_AFFINITY = "NodeAffinity"
NODE_AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
NODE_NAME = "NodeName"
NODE_NAME_REASON = "node(s) didn't match the requested node name"
NODE_PORTS = "NodePorts"
NODE_PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"
TAINT_TOLERATION = "TaintToleration"
TAINT_TOLERATION_REASON = "node(s) had taints that the pod didn't tolerate"

LABEL_OS = "kubernetes.io/os"
NODE_OS = "linux"
NO_EXECUTE = "NoExecute"


@dataclass
class PodAdmitAttributes:
    pod: V1Pod
    # The pods already admitted and still alive on the node.
    other_pods: list[V1Pod] = field(default_factory=list)


@dataclass(frozen=True)
class PodAdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


ADMIT = PodAdmitResult(True)


class PodAdmitHandler(Protocol):
    # A coroutine: the resource managers' handler calls their plugins (device plugins'
    # Allocate) while it admits, as upstream's does, so admission may wait.
    async def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult: ...


# --- resources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InsufficientResource:
    resource: str
    requested: int
    used: int
    capacity: int

    def reason(self) -> str:
        return {"cpu": OUT_OF_CPU, "memory": OUT_OF_MEMORY,
                "ephemeral-storage": OUT_OF_EPHEMERAL_STORAGE,
                "pods": OUT_OF_PODS}.get(self.resource,
                                         f"{INSUFFICIENT_RESOURCE_PREFIX}{self.resource}")

    def message(self) -> str:
        return (f"Node didn't have enough resource: {self.resource}, requested: "
                f"{self.requested}, used: {self.used}, capacity: {self.capacity}")


def _scaled(resource: str, value: Fraction) -> int:
    """CPU in millicores, everything else in units, rounded up as ``MilliValue``/``Value``."""
    scaled = value * 1000 if resource == "cpu" else value
    return -(-scaled.numerator // scaled.denominator)


def fits_resources(pod: V1Pod, other_pods: Iterable[V1Pod],
                   allocatable: dict[str, Any]) -> list[InsufficientResource]:
    """The scheduler's ``noderesources.Fits`` for one pod against the node's allocatable."""
    others = list(other_pods)
    allowed = {name: _scaled(name, parse_quantity(value)) for name, value in allocatable.items()}
    failures: list[InsufficientResource] = []
    allowed_pods = allowed.get("pods", 0)
    if len(others) + 1 > allowed_pods:
        failures.append(InsufficientResource("pods", 1, len(others), allowed_pods))

    wanted = {name: _scaled(name, value) for name, value in pod_requests(pod).items()
              # A resource the node does not know at all is a cluster-level one: skip it.
              if not (is_extended_resource_name(name) and name not in allowed)}
    if not any(wanted.values()):
        return failures
    used: dict[str, int] = {}
    for other in others:
        for name, value in pod_requests(other).items():
            used[name] = used.get(name, 0) + _scaled(name, value)
    order = ["cpu", "memory", "ephemeral-storage"]
    for name in order + sorted(n for n in wanted if n not in order):
        request = wanted.get(name, 0)
        if name == "pods" or request <= 0:
            continue
        capacity = allowed.get(name, 0)
        if request > capacity - used.get(name, 0):
            failures.append(InsufficientResource(name, request, used.get(name, 0), capacity))
    return failures


# --- node affinity, node name, ports, taints --------------------------------------------------


def matches_node_selector_and_affinity(pod: V1Pod, node: V1Node) -> bool:
    """``spec.nodeSelector`` and required node affinity against the node's labels."""
    labels = dict((node.metadata.labels if node.metadata is not None else None) or {})
    node_name = (node.metadata.name if node.metadata is not None else None) or ""
    spec = pod.spec
    for key, value in (spec.node_selector or {}).items():
        if labels.get(key) != value:
            return False
    affinity = spec.affinity.node_affinity if spec.affinity is not None else None
    required = (affinity.required_during_scheduling_ignored_during_execution
                if affinity is not None else None)
    if required is None:
        return True
    return node_selector_matches(required.node_selector_terms or [], labels=labels,
                                 node_name=node_name)


def _host_ports(pod: V1Pod) -> list[tuple[str, str, int]]:
    ports = []
    for container in init_then_app_containers(pod):
        for port in container.ports or []:
            if port.host_port and port.host_port > 0:
                ports.append((port.host_ip or "0.0.0.0", port.protocol or "TCP", port.host_port))
    return ports


def host_ports_conflict(pod: V1Pod, other_pods: Iterable[V1Pod]) -> bool:
    """Some hostPort of ``pod`` is taken by another pod (any address overlaps 0.0.0.0)."""
    wanted = _host_ports(pod)
    if not wanted:
        return False
    used = [port for other in other_pods for port in _host_ports(other)]
    for ip, protocol, number in wanted:
        for used_ip, used_protocol, used_number in used:
            if (number, protocol) != (used_number, used_protocol):
                continue
            if "0.0.0.0" in (ip, used_ip) or ip == used_ip:
                return True
    return False


def tolerates(toleration: V1Toleration, taint: V1Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.value or "") == (taint.value or "")


def untolerated_no_execute_taint(pod: V1Pod, node: V1Node) -> V1Taint | None:
    taints = (node.spec.taints if node.spec is not None else None) or []
    tolerations = pod.spec.tolerations or []
    for taint in taints:
        if taint.effect != NO_EXECUTE:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


class PredicateAdmitHandler:
    """Upstream's predicate admit handler: the scheduler's node filters, rerun on the node."""

    def __init__(self, get_node: Callable[[], V1Node]) -> None:
        self._get_node = get_node

    async def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        try:
            node = self._get_node()
        except Exception as err:
            klog.error("Cannot get Node info", err)
            return PodAdmitResult(False, INVALID_NODE_INFO, "Kubelet cannot get node info.")
        pod = attrs.pod
        labels = (node.metadata.labels if node.metadata is not None else None) or {}
        pod_labels = (pod.metadata.labels if pod.metadata is not None else None) or {}
        if LABEL_OS in pod_labels and pod_labels[LABEL_OS] != labels.get(LABEL_OS, NODE_OS):
            return PodAdmitResult(False, POD_OS_SELECTOR_MISMATCH,
                                  "Failed to admit pod as the `kubernetes.io/os` label doesn't "
                                  "match node label")
        if pod.spec.os is not None and pod.spec.os.name != NODE_OS:
            return PodAdmitResult(False, POD_OS_NOT_SUPPORTED,
                                  "Failed to admit pod as the OS field doesn't match node OS")

        allocatable = dict((node.status.allocatable if node.status is not None else None) or {})
        for failure in fits_resources(pod, attrs.other_pods, allocatable):
            klog.v(2).info("Predicate failed on Pod", pod=pod_ref(pod), err=failure.message())
            return PodAdmitResult(False, failure.reason(), failure.message())
        predicates = (
            (NODE_AFFINITY, NODE_AFFINITY_REASON,
             lambda: matches_node_selector_and_affinity(pod, node)),
            (NODE_NAME, NODE_NAME_REASON,
             lambda: not pod.spec.node_name or pod.spec.node_name == node.metadata.name),
            (NODE_PORTS, NODE_PORTS_REASON,
             lambda: not host_ports_conflict(pod, attrs.other_pods)),
            (TAINT_TOLERATION, TAINT_TOLERATION_REASON,
             lambda: is_static_pod(pod) or untolerated_no_execute_taint(pod, node) is None),
        )
        for name, reason, fits in predicates:
            if not fits():
                message = f"Predicate {name} failed: {reason}"
                klog.v(2).info("Predicate failed on Pod", pod=pod_ref(pod), err=message)
                return PodAdmitResult(False, name, message)
        return ADMIT


# --- sysctls -------------------------------------------------------------------------------

IPC_NAMESPACE = "IPC"
NET_NAMESPACE = "Net"
_SYSCTL_NAMESPACES = {
    "kernel.sem": IPC_NAMESPACE, "kernel.shmall": IPC_NAMESPACE,
    "kernel.shmmax": IPC_NAMESPACE, "kernel.shmmni": IPC_NAMESPACE,
    "kernel.msgmax": IPC_NAMESPACE, "kernel.msgmnb": IPC_NAMESPACE,
    "kernel.msgmni": IPC_NAMESPACE, "kernel.shm_rmid_forced": IPC_NAMESPACE,
}
_SYSCTL_PREFIX_NAMESPACES = {"kernel.shm": IPC_NAMESPACE, "kernel.msg": IPC_NAMESPACE,
                             "fs.mqueue.": IPC_NAMESPACE, "net.": NET_NAMESPACE}
# Namespaced sysctls that cannot affect other pods, with the kernel that has them.
SAFE_SYSCTLS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("kernel.shm_rmid_forced", ()),
    ("net.ipv4.ip_local_port_range", ()),
    ("net.ipv4.tcp_syncookies", ()),
    ("net.ipv4.ping_group_range", ()),
    ("net.ipv4.ip_unprivileged_port_start", ()),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
)
_SYSCTL_PATTERN = re.compile(
    r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\*)?$")


def normalize_sysctl_name(name: str) -> str:
    """``net/ipv4/conf/eth0.100/rp_filter`` -> ``net.ipv4.conf.eth0/100.rp_filter``."""
    first = min((i for i in (name.find("."), name.find("/")) if i >= 0), default=-1)
    if first < 0 or name[first] == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def sysctl_namespace(name: str) -> str:
    namespace = _SYSCTL_NAMESPACES.get(name)
    if namespace is not None:
        return namespace
    for prefix, prefix_namespace in _SYSCTL_PREFIX_NAMESPACES.items():
        if name.startswith(prefix):
            return prefix_namespace
    return ""


def kernel_version() -> tuple[int, ...]:
    numbers = re.findall(r"\d+", platform.release())[:2]
    return tuple(int(n) for n in numbers) if numbers else ()


def safe_sysctl_allowlist(kernel: tuple[int, ...] | None = None) -> list[str]:
    running = kernel_version() if kernel is None else kernel
    return [name for name, needs in SAFE_SYSCTLS if not needs or running >= needs]


class SysctlAllowlist:
    """Admits a pod only if every sysctl it sets is allowlisted and isolated from the host."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._sysctls: dict[str, str] = {}
        self._prefixes: dict[str, str] = {}
        for pattern in patterns:
            if not _SYSCTL_PATTERN.match(pattern) or len(pattern) > 253:
                raise ValueError(f"sysctl {pattern!r} must have at most 253 characters and "
                                 f"match regex {_SYSCTL_PATTERN.pattern}")
            prefixed = pattern.endswith("*")
            name = pattern[:-1] if prefixed else normalize_sysctl_name(pattern)
            namespace = sysctl_namespace(name)
            if not namespace:
                raise ValueError(f"the sysctls {name!r} are not known to be namespaced")
            (self._prefixes if prefixed else self._sysctls)[name] = namespace

    @classmethod
    def for_node(cls, allowed_unsafe: Iterable[str]) -> SysctlAllowlist:
        return cls([*safe_sysctl_allowlist(), *allowed_unsafe])

    def _validate(self, name: str, host_network: bool, host_ipc: bool) -> str | None:
        name = normalize_sysctl_name(name)
        namespace = self._sysctls.get(name)
        if namespace is None:
            namespace = next((ns for prefix, ns in self._prefixes.items()
                              if name.startswith(prefix)), None)
        if namespace is None:
            return f"{go_quote(name)} not allowlisted"
        if (namespace == IPC_NAMESPACE and host_ipc) or (namespace == NET_NAMESPACE
                                                         and host_network):
            return f"{go_quote(name)} not allowed with host {namespace} enabled"
        return None

    async def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        spec = attrs.pod.spec
        context = spec.security_context
        for sysctl in (context.sysctls if context is not None else None) or []:
            problem = self._validate(sysctl.name, bool(spec.host_network), bool(spec.host_ipc))
            if problem is not None:
                return PodAdmitResult(False, SYSCTL_FORBIDDEN, f"forbidden sysctl: {problem}")
        return ADMIT


__all__ = [
    "ADMIT",
    "NODE_AFFINITY",
    "OUT_OF_CPU",
    "OUT_OF_MEMORY",
    "OUT_OF_PODS",
    "SYSCTL_FORBIDDEN",
    "TAINT_TOLERATION",
    "PodAdmitAttributes",
    "PodAdmitHandler",
    "PodAdmitResult",
    "PredicateAdmitHandler",
    "SysctlAllowlist",
    "fits_resources",
    "host_ports_conflict",
    "matches_node_selector_and_affinity",
    "untolerated_no_execute_taint",
]
