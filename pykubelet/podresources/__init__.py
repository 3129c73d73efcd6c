"""The pod-resources API: which pod holds which devices and exclusive CPUs (``server.py``)."""

from pykubelet.podresources.server import (
    CPUsProvider,
    DeviceAssignment,
    DevicesProvider,
    PodResourcesServer,
    PodsProvider,
    Providers,
    pod_resources_socket,
    serve_pod_resources,
)

__all__ = [
    "CPUsProvider",
    "DeviceAssignment",
    "DevicesProvider",
    "PodResourcesServer",
    "PodsProvider",
    "Providers",
    "pod_resources_socket",
    "serve_pod_resources",
]
