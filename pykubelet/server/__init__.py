"""The kubelet's HTTP endpoints (upstream ``pkg/kubelet/server``).

``server`` builds the kubelet API: the authenticated HTTPS server on
``port`` (10250) and the unauthenticated read-only one, with their
handlers; ``auth`` decides who may call it, ``tls`` provides its
certificate, ``streaming`` proxies exec/attach/port-forward to the runtime,
``containerlogs`` and ``systemlogs`` serve logs, ``healthz`` the component
health contract (also served alone on ``healthzPort``), ``readonly``
the ``PodList`` encoding and socket binding shared by all of them, and
``plaintext`` the plain-text answer (with ``nosniff``) they all write.
"""

from pykubelet.server.healthz import HealthChecker, PingCheck, healthz_routes
from pykubelet.server.readonly import (
    PodProvider,
    ServerBindError,
    encode_pod_list,
    start_http_server,
)

__all__ = [
    "HealthChecker",
    "PingCheck",
    "PodProvider",
    "ServerBindError",
    "encode_pod_list",
    "healthz_routes",
    "start_http_server",
]
