"""The kubelet's HTTP endpoints (upstream ``pkg/kubelet/server``).

``healthz`` serves the component health contract shared by all Kubernetes
binaries; ``readonly`` serves the unauthenticated read-only port (``/pods``
plus the health endpoints) and owns socket binding for every server.
"""

from pykubelet.server.healthz import HealthChecker, PingCheck, healthz_routes
from pykubelet.server.readonly import (
    PodProvider,
    ServerBindError,
    encode_pod_list,
    readonly_routes,
    start_http_server,
)

__all__ = [
    "HealthChecker",
    "PingCheck",
    "PodProvider",
    "ServerBindError",
    "encode_pod_list",
    "healthz_routes",
    "readonly_routes",
    "start_http_server",
]
