"""The container manager (upstream ``pkg/kubelet/cm``): cgroups, QoS classes, node allocatable.

``cgroups`` knows names, drivers and the v1/v2 file formats; ``helpers`` turns
Kubernetes resources into cgroup numbers; ``manager`` owns the pod cgroup tree
and node allocatable.
"""

from pykubelet.cm.cgroups import CgroupError, CgroupManager, detect_version
from pykubelet.cm.helpers import ResourceConfig, resource_config_for_pod
from pykubelet.cm.manager import (
    Capacity,
    ContainerManager,
    ContainerManagerError,
    NodeConfig,
    check_cgroup_version,
    runtime_cgroup_driver_from_status_info,
)

__all__ = [
    "Capacity",
    "CgroupError",
    "CgroupManager",
    "ContainerManager",
    "ContainerManagerError",
    "NodeConfig",
    "ResourceConfig",
    "check_cgroup_version",
    "detect_version",
    "resource_config_for_pod",
    "runtime_cgroup_driver_from_status_info",
]
