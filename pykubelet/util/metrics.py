"""The registry behind the kubelet's ``/metrics`` (upstream ``legacyregistry``).

Upstream keeps most kubelet metrics (the API client's request counts, the
client certificate's time to live...) in one process-wide registry served on
``/metrics``; metric families with an endpoint of their own (probes on
``/metrics/probes``) keep their own registries. Subsystems register their
collectors here at import time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

LEGACY_REGISTRY = CollectorRegistry(auto_describe=True)

__all__ = ["LEGACY_REGISTRY"]
