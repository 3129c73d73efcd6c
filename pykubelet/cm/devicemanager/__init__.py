"""The device plugin manager (upstream ``pkg/kubelet/cm/devicemanager``).

``server`` is the registration server on ``kubelet.sock``, ``plugin_handler`` the
plugin watcher's way in for plugins that do not call ``Register``, ``endpoint`` one
registered plugin, ``registry`` the registered plugins and their devices (health,
capacity, expiry), ``allocator`` which devices a container gets, ``topology_hints``
the NUMA hints (pure functions), ``pod_devices`` which container holds which
devices, ``checkpoint`` the ``kubelet_internal_checkpoint`` file, and ``manager``
the ``DeviceManager`` facade the kubelet holds.
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
