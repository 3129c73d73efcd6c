"""The kubelet's own Prometheus metrics, defined once (upstream ``pkg/kubelet/metrics``).

Dashboards, alerts and SLO tooling written for the Go kubelet read these
series by name, so names, label keys, help texts and histogram buckets follow
upstream's definitions; the subsystems only call the small helpers below at
the moment something happens (a PLEG relist, a pod worker sync, a CRI call,
a pod start). Everything here lands in ``KUBELET_REGISTRY``, which
``/metrics`` serves together with the process metrics (``process_*``).

This is ground floor: any layer may import it, it imports nothing of the
kubelet's. ``exposition`` renders a registry in the Prometheus text format
the way Go's client does (no ``_created`` series, counters keep upstream's
names even when those lack ``_total``).
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# Go's client exposes no "_created" series; neither do we.
disable_created_metrics()

KUBELET_REGISTRY: Final = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=KUBELET_REGISTRY)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Go's ``prometheus.ExponentialBuckets``."""
    return tuple(start * factor ** i for i in range(count))


# Go's prometheus.DefBuckets (prometheus_client's defaults differ).
DEF_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
POD_STARTUP_BUCKETS: Final = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300,
                              360, 480, 600, 900, 1200, 1800, 2700, 3600)

# Upstream counters whose names do not end in _total (prometheus_client would add it).
_COUNTERS_WITHOUT_TOTAL: set[str] = set()


def _counter(name: str, doc: str, labels: Iterable[str] = ()) -> Counter:
    if not name.endswith("_total"):
        _COUNTERS_WITHOUT_TOTAL.add(name)
    return Counter(name, doc, labelnames=tuple(labels), registry=KUBELET_REGISTRY)


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> Gauge:
    return Gauge(name, doc, labelnames=tuple(labels), registry=KUBELET_REGISTRY)


def _histogram(name: str, doc: str, buckets: Iterable[float],
               labels: Iterable[str] = ()) -> Histogram:
    return Histogram(name, doc, labelnames=tuple(labels), buckets=tuple(buckets),
                     registry=KUBELET_REGISTRY)


# -- node and pods ---------------------------------------------------------------------

NODE_NAME: Final = _gauge("kubelet_node_name", "The node's name. The count is always 1.",
                          ["node"])
CONTAINERS_PER_POD_COUNT: Final = _histogram(
    "kubelet_containers_per_pod_count", "The number of containers per pod.",
    exponential_buckets(1, 2, 5))
POD_WORKER_DURATION: Final = _histogram(
    "kubelet_pod_worker_duration_seconds",
    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, "
    "or sync", DEF_BUCKETS, ["operation_type"])
POD_WORKER_START_DURATION: Final = _histogram(
    "kubelet_pod_worker_start_duration_seconds",
    "Duration in seconds from kubelet seeing a pod to starting a worker.", DEF_BUCKETS)
POD_START_DURATION: Final = _histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    POD_STARTUP_BUCKETS)
POD_START_SLI_DURATION: Final = _histogram(
    "kubelet_pod_start_sli_duration_seconds",
    "Duration in seconds to start a pod, excluding time to pull images and run init containers, "
    "measured from pod creation timestamp to when all its containers are reported as started and "
    "observed via watch", POD_STARTUP_BUCKETS, ["first_with_network"])
POD_START_TOTAL_DURATION: Final = _histogram(
    "kubelet_pod_start_total_duration_seconds",
    "Duration in seconds to start a pod since creation, including time to pull images and run "
    "init containers, measured from pod creation timestamp to when all its containers are "
    "reported as started and observed via watch", POD_STARTUP_BUCKETS, ["first_with_network"])
POD_STATUS_SYNC_DURATION: Final = _histogram(
    "kubelet_pod_status_sync_duration_seconds",
    "Duration in seconds to sync a pod status update. Measures time from detection of a change to "
    "pod status until the API is successfully updated for that pod, even if multiple intevening "
    "changes to pod status occur.", (0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60))
RUNNING_PODS: Final = _gauge("kubelet_running_pods",
                             "Number of pods that have a running pod sandbox")
RUNNING_CONTAINERS: Final = _gauge("kubelet_running_containers",
                                   "Number of containers currently running", ["container_state"])
DESIRED_PODS: Final = _gauge(
    "kubelet_desired_pods", "The number of pods the kubelet is being instructed to run. static "
    "is true if the pod is not from the apiserver.", ["static"])
ACTIVE_PODS: Final = _gauge(
    "kubelet_active_pods", "The number of pods the kubelet considers active and which are being "
    "considered when admitting new pods. static is true if the pod is not from the apiserver.",
    ["static"])
MIRROR_PODS: Final = _gauge(
    "kubelet_mirror_pods",
    "The number of mirror pods the kubelet will try to create (one per admitted static pod)")
STARTED_PODS_TOTAL: Final = _counter("kubelet_started_pods_total",
                                     "Cumulative number of pods started")
STARTED_PODS_ERRORS_TOTAL: Final = _counter("kubelet_started_pods_errors_total",
                                            "Cumulative number of errors when starting pods")
STARTED_CONTAINERS_TOTAL: Final = _counter("kubelet_started_containers_total",
                                           "Cumulative number of containers started",
                                           ["container_type"])
STARTED_CONTAINERS_ERRORS_TOTAL: Final = _counter(
    "kubelet_started_containers_errors_total",
    "Cumulative number of errors when starting containers", ["container_type", "code"])
RESTARTED_PODS_TOTAL: Final = _counter(
    "kubelet_restarted_pods_total",
    "Number of pods that have been restarted because they were deleted and recreated with the "
    "same UID while the kubelet was watching them (common for static pods, extremely uncommon "
    "for API pods)", ["static"])
ORPHANED_RUNTIME_PODS_TOTAL: Final = _counter(
    "kubelet_orphaned_runtime_pods_total",
    "Number of pods that have been detected in the container runtime without being already "
    "known to the pod worker. This typically indicates the kubelet was restarted while a pod was "
    "force deleted in the API or in the local configuration, which is unusual.")
EVICTIONS: Final = _counter("kubelet_evictions",
                            "Cumulative number of pod evictions by eviction signal",
                            ["eviction_signal"])
PREEMPTIONS: Final = _counter("kubelet_preemptions",
                              "Cumulative number of pod preemptions by preemption resource",
                              ["preemption_signal"])

# Values of container_type.
CONTAINER: Final = "container"
INIT_CONTAINER: Final = "init_container"
EPHEMERAL_CONTAINER: Final = "ephemeral_container"

# -- device plugins ------------------------------------------------------------------

DEVICE_PLUGIN_REGISTRATIONS: Final = _counter(
    "kubelet_device_plugin_registration_total",
    "Cumulative number of device plugin registrations. Broken down by resource name.",
    ["resource_name"])
DEVICE_PLUGIN_ALLOC_DURATION: Final = _histogram(
    "kubelet_device_plugin_alloc_duration_seconds",
    "Duration in seconds to serve a device plugin Allocation request. Broken down by resource "
    "name.", DEF_BUCKETS, ["resource_name"])

# -- pod-resources API (label: the API version served) -----------------------------------

POD_RESOURCES_REQUESTS_TOTAL: Final = _counter(
    "kubelet_pod_resources_endpoint_requests_total",
    "Number of requests to the PodResource endpoint. Broken down by server api version.",
    ["server_api_version"])
POD_RESOURCES_REQUESTS_LIST: Final = _counter(
    "kubelet_pod_resources_endpoint_requests_list",
    "Number of requests to the PodResource List endpoint. Broken down by server api version.",
    ["server_api_version"])
POD_RESOURCES_REQUESTS_GET_ALLOCATABLE: Final = _counter(
    "kubelet_pod_resources_endpoint_requests_get_allocatable",
    "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by "
    "server api version.", ["server_api_version"])
POD_RESOURCES_REQUESTS_GET: Final = _counter(
    "kubelet_pod_resources_endpoint_requests_get",
    "Number of requests to the PodResource Get endpoint. Broken down by server api version.",
    ["server_api_version"])
POD_RESOURCES_ERRORS_GET: Final = _counter(
    "kubelet_pod_resources_endpoint_errors_get",
    "Number of requests to the PodResource Get endpoint which returned error. Broken down by "
    "server api version.", ["server_api_version"])

# -- PLEG ------------------------------------------------------------------------------

PLEG_RELIST_DURATION: Final = _histogram(
    "kubelet_pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.",
    DEF_BUCKETS)
PLEG_RELIST_INTERVAL: Final = _histogram(
    "kubelet_pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG.",
    DEF_BUCKETS)
PLEG_LAST_SEEN: Final = _gauge("kubelet_pleg_last_seen_seconds",
                               "Timestamp in seconds when PLEG was last seen active.")
PLEG_DISCARD_EVENTS: Final = _counter("kubelet_pleg_discard_events",
                                      "The number of discard events in PLEG.")

# -- CRI -------------------------------------------------------------------------------

RUNTIME_OPERATIONS: Final = _counter(
    "kubelet_runtime_operations_total",
    "Cumulative number of runtime operations by operation type.", ["operation_type"])
RUNTIME_OPERATIONS_DURATION: Final = _histogram(
    "kubelet_runtime_operations_duration_seconds",
    "Duration in seconds of runtime operations. Broken down by operation type.",
    exponential_buckets(0.005, 2.5, 14), ["operation_type"])
RUNTIME_OPERATIONS_ERRORS: Final = _counter(
    "kubelet_runtime_operations_errors_total",
    "Cumulative number of runtime operation errors by operation type.", ["operation_type"])
RUN_PODSANDBOX_DURATION: Final = _histogram(
    "kubelet_run_podsandbox_duration_seconds",
    "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
    DEF_BUCKETS, ["runtime_handler"])
RUN_PODSANDBOX_ERRORS: Final = _counter(
    "kubelet_run_podsandbox_errors_total",
    "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
    ["runtime_handler"])

# The operation_type of each CRI method, as upstream's instrumented services name them.
CRI_OPERATIONS: Final[Mapping[str, str]] = {
    "Version": "version", "Status": "status",
    "RunPodSandbox": "run_podsandbox", "StopPodSandbox": "stop_podsandbox",
    "RemovePodSandbox": "remove_podsandbox", "PodSandboxStatus": "podsandbox_status",
    "ListPodSandbox": "list_podsandbox",
    "CreateContainer": "create_container", "StartContainer": "start_container",
    "StopContainer": "stop_container", "RemoveContainer": "remove_container",
    "ListContainers": "list_containers", "ContainerStatus": "container_status",
    "UpdateContainerResources": "update_container", "ReopenContainerLog": "reopen_container_log",
    "ExecSync": "exec_sync", "Exec": "exec", "Attach": "attach", "PortForward": "port_forward",
    "ContainerStats": "container_stats", "ListContainerStats": "list_container_stats",
    "PodSandboxStats": "podsandbox_stats", "ListPodSandboxStats": "list_podsandbox_stats",
    "UpdateRuntimeConfig": "update_runtime_config",
    "ListImages": "list_images", "ImageStatus": "image_status", "PullImage": "pull_image",
    "RemoveImage": "remove_image", "ImageFsInfo": "image_fs_info",
}


def record_runtime_operation(method: str, started: float, failed: bool,
                             runtime_handler: str = "") -> None:
    """Count one CRI call (``started`` from ``time.monotonic()``)."""
    operation = CRI_OPERATIONS.get(method, method.lower())
    elapsed = time.monotonic() - started
    RUNTIME_OPERATIONS.labels(operation).inc()
    RUNTIME_OPERATIONS_DURATION.labels(operation).observe(elapsed)
    if failed:
        RUNTIME_OPERATIONS_ERRORS.labels(operation).inc()
    if method == "RunPodSandbox":
        RUN_PODSANDBOX_DURATION.labels(runtime_handler).observe(elapsed)
        if failed:
            RUN_PODSANDBOX_ERRORS.labels(runtime_handler).inc()


# -- the kubelet's HTTP servers (upstream pkg/kubelet/server/metrics) -----------------------

HTTP_REQUESTS: Final = _counter(
    "kubelet_http_requests_total", "Number of the http requests received since the server "
    "started", ["method", "path", "server_type", "long_running"])
HTTP_REQUESTS_DURATION: Final = _histogram(
    "kubelet_http_requests_duration_seconds", "Duration in seconds to serve http requests",
    DEF_BUCKETS, ["method", "path", "server_type", "long_running"])
HTTP_INFLIGHT_REQUESTS: Final = _gauge(
    "kubelet_http_inflight_requests", "Number of the inflight http requests",
    ["method", "path", "server_type", "long_running"])

# -- the API client (client-go's rest_client_* metrics) -------------------------------------

REST_CLIENT_REQUESTS: Final = _counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"])
REST_CLIENT_REQUEST_DURATION: Final = _histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0), ["verb", "host"])

# pykubelet's own breakdown of the same requests, by client (main, events, heartbeat),
# resource and verb: what a node costs the API server.
API_CLIENT_REQUESTS: Final = _counter(
    "pykubelet_api_client_requests_total",
    "API server requests by kubelet client (main, events, heartbeat), resource, verb and code.",
    ["client", "resource", "method", "code"])

# -- certificates (upstream certificate manager metrics) ------------------------------------

CERTIFICATE_MANAGER_CLIENT_TTL: Final = _gauge(
    "kubelet_certificate_manager_client_ttl_seconds",
    "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in "
    "seconds until certificate expiry (negative if already expired). If client certificate is "
    "invalid or unused, the value will be +INF.")
CERTIFICATE_MANAGER_CLIENT_EXPIRATION_RENEW_ERRORS: Final = _counter(
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "Counter of certificate renewal errors.")
CERTIFICATE_MANAGER_SERVER_TTL: Final = _gauge(
    "kubelet_certificate_manager_server_ttl_seconds",
    "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is "
    "in seconds until certificate expiry (negative if already expired). If serving certificate "
    "is invalid or unused, the value will be +INF.")
SERVER_EXPIRATION_RENEW_ERRORS: Final = _counter(
    "kubelet_server_expiration_renew_errors",
    "Counter of certificate renewal errors.")
CERTIFICATE_MANAGER_SERVER_ROTATION_SECONDS: Final = _histogram(
    "kubelet_certificate_manager_server_rotation_seconds",
    "Histogram of the number of seconds the previous certificate lived before being rotated.",
    # A minute, an hour, 4 hours, a day, a week, 30, 90 and 180 days, 360 days, 4 x 360 days.
    (60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000))
CERTIFICATE_MANAGER_CLIENT_TTL.set(float("inf"))
CERTIFICATE_MANAGER_SERVER_TTL.set(float("inf"))

# -- features ---------------------------------------------------------------------------

FEATURE_ENABLED: Final = Gauge(
    "kubernetes_feature_enabled",
    "This metric records the data about the stage and enablement of a k8s feature.",
    labelnames=("name", "stage"), registry=KUBELET_REGISTRY)


def set_node_name(name: str) -> None:
    NODE_NAME.labels(name).set(1)


# -- pykubelet's own: sizes of in-memory tables ----------------------------------------------
# No upstream counterpart (a Go kubelet shows goroutines on /debug/pprof instead). A node runs
# for months: these show whether a table grows with the number of pods it has seen
# (bench/soak.py reads them before and after a churn of pods).

ASYNCIO_TASKS: Final = _gauge(
    "pykubelet_asyncio_tasks",
    "Number of asyncio tasks of the kubelet's event loop that are not done.")
TRACKED_PODS: Final = _gauge(
    "pykubelet_tracked_pods",
    "Number of pods with an entry in one of the kubelet's in-memory tables, by table.",
    ("table",))


def _asyncio_tasks() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:
        return math.nan  # scraped outside the event loop (a test rendering the registry)


ASYNCIO_TASKS.set_function(_asyncio_tasks)


def track_table(table: str, size: Callable[[], int]) -> None:
    """``size``, a bound method, gives the number of pods in ``table`` at each scrape. One
    table per name: the latest component to register it wins (one kubelet per process),
    and it is held weakly, so components made by tests are not kept alive."""
    held = weakref.WeakMethod(size)

    def read() -> float:
        method = held()
        return float(method()) if method is not None else 0.0

    TRACKED_PODS.labels(table).set_function(read)


# -- the text format ---------------------------------------------------------------------------

def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


_TYPE_NAMES: Final = {"unknown": "untyped", "info": "gauge", "stateset": "gauge",
                      "gaugehistogram": "histogram"}


def exposition(sources: Iterable[CollectorRegistry | Collector | Iterable[Metric]]) -> bytes:
    """The Prometheus text format (0.0.4) of registries (or families), Go client style."""
    lines: list[str] = []
    for source in sources:
        families = source.collect() if hasattr(source, "collect") else source
        for family in families:
            name = family.name
            samples = [s for s in family.samples if not s.name.endswith("_created")]
            strip_total = family.type == "counter" and name in _COUNTERS_WITHOUT_TOTAL
            if family.type == "counter" and not strip_total:
                name = f"{name}_total"
            lines.append(f"# HELP {name} {_escape_help(family.documentation)}")
            lines.append(f"# TYPE {name} {_TYPE_NAMES.get(family.type, family.type)}")
            for sample in samples:
                sample_name = sample.name
                if strip_total and sample_name.endswith("_total"):
                    sample_name = sample_name[:-len("_total")]
                labels = ""
                if sample.labels:
                    labels = "{" + ",".join(f'{key}="{_escape_label(value)}"'
                                            for key, value in sample.labels.items()) + "}"
                stamp = ""
                if sample.timestamp is not None:
                    stamp = f" {int(float(sample.timestamp) * 1000)}"
                lines.append(f"{sample_name}{labels} {floatToGoString(sample.value)}{stamp}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


__all__ = [
    "ASYNCIO_TASKS",
    "CONTENT_TYPE",
    "CRI_OPERATIONS",
    "DEF_BUCKETS",
    "KUBELET_REGISTRY",
    "TRACKED_PODS",
    "exponential_buckets",
    "exposition",
    "record_runtime_operation",
    "set_node_name",
    "track_table",
]
