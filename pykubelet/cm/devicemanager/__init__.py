"""The device plugin manager (upstream ``pkg/kubelet/cm/devicemanager``).

``server`` is the registration server on ``kubelet.sock``, ``endpoint`` one
registered plugin, ``pod_devices`` which container holds which devices,
``checkpoint`` the ``kubelet_internal_checkpoint`` file, and ``manager`` the
``DeviceManager`` the kubelet holds: node capacity, allocation at admission, the
containers' device options, and what the pod-resources API reports.
"""

from pykubelet.cm.devicemanager.checkpoint import CHECKPOINT_NAME
from pykubelet.cm.devicemanager.endpoint import ENDPOINT_STOP_GRACE_PERIOD
from pykubelet.cm.devicemanager.manager import (
    ContainerDevices,
    DeviceAllocationError,
    DeviceManager,
    cri_running_containers,
)
from pykubelet.cm.devicemanager.server import DEVICE_PLUGIN_DIR, KUBELET_SOCKET_NAME

__all__ = ["CHECKPOINT_NAME", "DEVICE_PLUGIN_DIR", "ENDPOINT_STOP_GRACE_PERIOD",
           "KUBELET_SOCKET_NAME", "ContainerDevices",
           "DeviceAllocationError", "DeviceManager", "cri_running_containers"]
