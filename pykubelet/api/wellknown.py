"""Well-known node labels and taints, and the platform names the kubelet reports.

A kubelet labels its own Node (``kubernetes.io/hostname``, ``kubernetes.io/os``,
``kubernetes.io/arch``), may add ``--node-labels`` only in namespaces the
NodeRestriction admission plugin lets a node set, and writes ``linux`` /
``amd64`` as Go spells them (``GOOS`` / ``GOARCH``) in labels and in
``status.nodeInfo``, beside the kubelet version it reports. The command
line validates ``--node-labels`` against the same lists that node
registration uses, so both read them from here
(upstream ``k8s.io/api/core/v1`` well-known labels and ``k8s.io/kubelet/pkg/apis``).
"""

from __future__ import annotations

import platform
import sys
from typing import Final

import pykubelet

# The Kubernetes release whose kubelet pykubelet is modelled on (defaults, API, messages).
KUBERNETES_VERSION: Final = "v1.35"

LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_OS_STABLE: Final = "kubernetes.io/os"
LABEL_ARCH_STABLE: Final = "kubernetes.io/arch"
# The beta spellings are still written, as upstream does, for old selectors.
LABEL_OS_BETA: Final = "beta.kubernetes.io/os"
LABEL_ARCH_BETA: Final = "beta.kubernetes.io/arch"
LABEL_TOPOLOGY_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_TOPOLOGY_REGION: Final = "topology.kubernetes.io/region"
LABEL_FAILURE_DOMAIN_BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
LABEL_FAILURE_DOMAIN_BETA_REGION: Final = "failure-domain.beta.kubernetes.io/region"
LABEL_INSTANCE_TYPE_STABLE: Final = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_BETA: Final = "beta.kubernetes.io/instance-type"

# Label namespaces and keys a kubelet may set on its own Node.
KUBELET_LABEL_NAMESPACES: Final = ("kubelet.kubernetes.io", "node.kubernetes.io")
KUBELET_LABELS: Final = frozenset({
    LABEL_HOSTNAME,
    LABEL_TOPOLOGY_ZONE,
    LABEL_TOPOLOGY_REGION,
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_INSTANCE_TYPE_BETA,
    LABEL_INSTANCE_TYPE_STABLE,
    LABEL_OS_BETA,
    LABEL_ARCH_BETA,
    LABEL_OS_STABLE,
    LABEL_ARCH_STABLE,
})

# Labels registration keeps in step on a Node that already exists (upstream
# updateDefaultLabels); other labels on an existing Node are left alone.
DEFAULT_NODE_LABELS: Final = (
    LABEL_HOSTNAME,
    LABEL_TOPOLOGY_ZONE,
    LABEL_TOPOLOGY_REGION,
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_INSTANCE_TYPE_STABLE,
    LABEL_INSTANCE_TYPE_BETA,
    LABEL_OS_STABLE,
    LABEL_ARCH_STABLE,
    LABEL_OS_BETA,
    LABEL_ARCH_BETA,
)

TAINT_NODE_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"
TAINT_EFFECT_NO_SCHEDULE: Final = "NoSchedule"
TAINT_EFFECT_PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
TAINT_EFFECT_NO_EXECUTE: Final = "NoExecute"

# With ``--cloud-provider=external`` the Node registers with this NoSchedule taint (value
# "true"); the cloud controller manager removes it once it has initialized the Node
# (upstream ``k8s.io/cloud-provider/api``).
TAINT_EXTERNAL_CLOUD_PROVIDER: Final = "node.cloudprovider.kubernetes.io/uninitialized"
# With ``--cloud-provider=external`` and ``--node-ip``, the addresses asked for, for the
# cloud controller manager to honour when it sets the Node's addresses.
ANNOTATION_PROVIDED_NODE_IP: Final = "alpha.kubernetes.io/provided-node-ip"

NAMESPACE_NODE_LEASE: Final = "kube-node-lease"

# Python's machine names for the architectures Kubernetes ships, in Go's spelling.
_GO_ARCH: Final = {
    "x86_64": "amd64", "amd64": "amd64",
    "aarch64": "arm64", "arm64": "arm64",
    "armv7l": "arm", "armv6l": "arm",
    "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
    "i386": "386", "i686": "386",
}


def go_os() -> str:
    """``GOOS`` of this machine: ``linux`` (``sys.platform`` is ``linux`` there too)."""
    return "windows" if sys.platform.startswith("win") else sys.platform


def go_arch() -> str:
    """``GOARCH`` of this machine (``amd64``, ``arm64``...); unknown names pass through."""
    machine = platform.machine().lower()
    return _GO_ARCH.get(machine, machine)


def kubelet_version() -> str:
    """The version pykubelet reports as a kubelet (``nodeInfo.kubeletVersion``, user agent).

    The Kubernetes release pykubelet is modelled on, with pykubelet's own
    version as semver build metadata: version checks in the control plane
    parse it as that release, and people see that it is pykubelet.
    """
    return f"{KUBERNETES_VERSION}.0+pykubelet-{pykubelet.__version__}"


__all__ = [
    "ANNOTATION_PROVIDED_NODE_IP",
    "DEFAULT_NODE_LABELS",
    "KUBELET_LABELS",
    "KUBELET_LABEL_NAMESPACES",
    "LABEL_ARCH_BETA",
    "LABEL_ARCH_STABLE",
    "LABEL_FAILURE_DOMAIN_BETA_REGION",
    "LABEL_FAILURE_DOMAIN_BETA_ZONE",
    "LABEL_HOSTNAME",
    "LABEL_INSTANCE_TYPE_BETA",
    "LABEL_INSTANCE_TYPE_STABLE",
    "LABEL_OS_BETA",
    "LABEL_OS_STABLE",
    "LABEL_TOPOLOGY_REGION",
    "LABEL_TOPOLOGY_ZONE",
    "NAMESPACE_NODE_LEASE",
    "TAINT_EFFECT_NO_EXECUTE",
    "TAINT_EFFECT_NO_SCHEDULE",
    "TAINT_EFFECT_PREFER_NO_SCHEDULE",
    "TAINT_EXTERNAL_CLOUD_PROVIDER",
    "TAINT_NODE_UNSCHEDULABLE",
    "go_arch",
    "go_os",
    "kubelet_version",
]
