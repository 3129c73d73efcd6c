"""Prometheus metrics of the probe workers, served on ``/metrics/probes``.

Upstream registers ``prober_probe_total`` and ``prober_probe_duration_seconds``
on a registry of their own so that the kubelet can expose them on a separate
endpoint; ``PROBER_REGISTRY`` plays that part here. Names, label keys, label
values and histogram buckets follow upstream so that dashboards and alerts
written for the Go kubelet keep working.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

PROBER_REGISTRY = CollectorRegistry(auto_describe=True)

# Values of the ``result`` label, as upstream spells them.
RESULT_SUCCESSFUL = "successful"
RESULT_FAILED = "failed"
RESULT_UNKNOWN = "unknown"

PROBE_TOTAL_LABELS = ("probe_type", "result", "container", "pod", "namespace", "pod_uid")
PROBE_DURATION_LABELS = ("probe_type", "container", "pod", "namespace")

# Prometheus' classic default buckets, which upstream's histogram inherits;
# prometheus_client's own defaults differ, so they are spelled out.
PROBE_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

PROBE_TOTAL = Counter(
    "prober_probe_total",
    "How many liveness, readiness and startup probes ran against a container, by result.",
    labelnames=PROBE_TOTAL_LABELS,
    registry=PROBER_REGISTRY,
)

PROBE_DURATION = Histogram(
    "prober_probe_duration_seconds",
    "Seconds a probe took to answer (successful and unknown results only).",
    labelnames=PROBE_DURATION_LABELS,
    buckets=PROBE_DURATION_BUCKETS,
    registry=PROBER_REGISTRY,
)
