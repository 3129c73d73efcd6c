"""``/metrics/resource`` and ``/metrics/cadvisor``: the summary as Prometheus series.

``/metrics/resource`` is what metrics-server scrapes (and so ``kubectl top``
and the HorizontalPodAutoscaler see): cumulative CPU and working-set memory
of the node, each pod and each container, with the sample's own timestamp,
and ``resource_scrape_error`` (plus the deprecated ``scrape_error``) when the
stats could not be had — upstream's ``resource_metrics.go`` names.

``/metrics/cadvisor`` carries the cAdvisor series dashboards use
(``container_cpu_usage_seconds_total``, ``container_memory_working_set_bytes``,
``container_memory_rss``, ``container_network_*_bytes_total``,
``container_fs_*``...), labelled ``container``, ``pod``, ``namespace``,
``name``, ``image`` as the kubelet labels them; pod-level series have an
empty ``container`` label, as cAdvisor's pod cgroups do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pykubelet.util import klog

Families = Callable[[], Awaitable[list[Metric]]]


class SummarySource(Protocol):
    async def summary(self, only_cpu_and_memory: bool = False) -> dict[str, Any]: ...


def _seconds(time_text: str | None) -> float | None:
    if not time_text:
        return None
    from datetime import datetime

    return datetime.fromisoformat(time_text.replace("Z", "+00:00")).timestamp()


def resource_metrics(source: SummarySource) -> Families:
    """The ``/metrics/resource`` families, computed per scrape."""

    async def collect() -> list[Metric]:
        node_cpu = CounterMetricFamily(
            "node_cpu_usage_seconds", "Cumulative cpu time consumed by the node in core-seconds")
        node_memory = GaugeMetricFamily("node_memory_working_set_bytes",
                                        "Current working set of the node in bytes")
        container_start = GaugeMetricFamily(
            "container_start_time_seconds",
            "Start time of the container since unix epoch in seconds",
            labels=["container", "pod", "namespace"])
        container_cpu = CounterMetricFamily(
            "container_cpu_usage_seconds",
            "Cumulative cpu time consumed by the container in core-seconds",
            labels=["container", "pod", "namespace"])
        container_memory = GaugeMetricFamily(
            "container_memory_working_set_bytes",
            "Current working set of the container in bytes",
            labels=["container", "pod", "namespace"])
        pod_cpu = CounterMetricFamily(
            "pod_cpu_usage_seconds", "Cumulative cpu time consumed by the pod in core-seconds",
            labels=["pod", "namespace"])
        pod_memory = GaugeMetricFamily("pod_memory_working_set_bytes",
                                       "Current working set of the pod in bytes",
                                       labels=["pod", "namespace"])
        families: list[Metric] = [node_cpu, node_memory, container_start, container_cpu,
                                  container_memory, pod_cpu, pod_memory]
        errors = 0.0
        try:
            summary = await source.summary(only_cpu_and_memory=True)
        except Exception as err:
            errors = 1.0
            klog.error("Error getting summary for resourceMetric prometheus endpoint", err)
            summary = {"node": {}, "pods": []}
        node = summary["node"]
        cpu, memory = node.get("cpu") or {}, node.get("memory") or {}
        if "usageCoreNanoSeconds" in cpu:
            node_cpu.add_metric([], cpu["usageCoreNanoSeconds"] / 1e9,
                                timestamp=_seconds(cpu.get("time")))
        if "workingSetBytes" in memory:
            node_memory.add_metric([], memory["workingSetBytes"],
                                   timestamp=_seconds(memory.get("time")))
        for pod in summary["pods"]:
            ref = pod["podRef"]
            for container in pod.get("containers", []):
                labels = [container["name"], ref["name"], ref["namespace"]]
                started = _seconds(container.get("startTime"))
                if started and started > 0:
                    container_start.add_metric(labels, started)
                ccpu, cmem = container.get("cpu") or {}, container.get("memory") or {}
                if "usageCoreNanoSeconds" in ccpu:
                    container_cpu.add_metric(labels, ccpu["usageCoreNanoSeconds"] / 1e9,
                                             timestamp=_seconds(ccpu.get("time")))
                if "workingSetBytes" in cmem:
                    container_memory.add_metric(labels, cmem["workingSetBytes"],
                                                timestamp=_seconds(cmem.get("time")))
            pcpu, pmem = pod.get("cpu") or {}, pod.get("memory") or {}
            if "usageCoreNanoSeconds" in pcpu:
                pod_cpu.add_metric([ref["name"], ref["namespace"]],
                                   pcpu["usageCoreNanoSeconds"] / 1e9,
                                   timestamp=_seconds(pcpu.get("time")))
            if "workingSetBytes" in pmem:
                pod_memory.add_metric([ref["name"], ref["namespace"]], pmem["workingSetBytes"],
                                      timestamp=_seconds(pmem.get("time")))
        for name in ("scrape_error", "resource_scrape_error"):
            gauge = GaugeMetricFamily(
                name, "1 if there was an error while getting container metrics, 0 otherwise")
            gauge.add_metric([], errors)
            families.append(gauge)
        return families

    return collect


_CADVISOR_LABELS = ["container", "id", "image", "name", "namespace", "pod"]


def cadvisor_metrics(source: SummarySource, images: Callable[[], dict[str, str]] | None = None,
                     machine: Callable[[], dict[str, Any]] | None = None) -> Families:
    """The ``/metrics/cadvisor`` families (``images`` maps pod/container to image)."""

    async def collect() -> list[Metric]:
        try:
            summary = await source.summary()
        except Exception as err:
            klog.error("Error getting summary for cadvisor prometheus endpoint", err)
            return []
        image_of = images() if images is not None else {}

        def family(kind: type[CounterMetricFamily] | type[GaugeMetricFamily], name: str,
                   doc: str, extra: list[str] | None = None) -> Any:
            return kind(name, doc, labels=[*_CADVISOR_LABELS, *(extra or [])])

        cpu = family(CounterMetricFamily, "container_cpu_usage_seconds",
                     "Cumulative cpu time consumed in seconds.", ["cpu"])
        working_set = family(GaugeMetricFamily, "container_memory_working_set_bytes",
                             "Current working set in bytes.")
        usage = family(GaugeMetricFamily, "container_memory_usage_bytes",
                       "Current memory usage in bytes, including all memory regardless of "
                       "when it was accessed")
        rss = family(GaugeMetricFamily, "container_memory_rss",
                     "Size of RSS in bytes.")
        failures = family(CounterMetricFamily, "container_memory_failures",
                          "Cumulative count of memory allocation failures.",
                          ["failure_type", "scope"])
        rx = family(CounterMetricFamily, "container_network_receive_bytes",
                    "Cumulative count of bytes received", ["interface"])
        tx = family(CounterMetricFamily, "container_network_transmit_bytes",
                    "Cumulative count of bytes transmitted", ["interface"])
        rx_errors = family(CounterMetricFamily, "container_network_receive_errors",
                           "Cumulative count of errors encountered while receiving",
                           ["interface"])
        tx_errors = family(CounterMetricFamily, "container_network_transmit_errors",
                           "Cumulative count of errors encountered while transmitting",
                           ["interface"])
        fs_usage = family(GaugeMetricFamily, "container_fs_usage_bytes",
                          "Number of bytes that are consumed by the container on this "
                          "filesystem.", ["device"])
        fs_limit = family(GaugeMetricFamily, "container_fs_limit_bytes",
                          "Number of bytes that can be consumed by the container on this "
                          "filesystem.", ["device"])
        fs_inodes = family(GaugeMetricFamily, "container_fs_inodes_total",
                           "Number of Inodes", ["device"])
        start = family(GaugeMetricFamily, "container_start_time_seconds",
                       "Start time of the container since unix epoch in seconds.")
        last_seen = family(GaugeMetricFamily, "container_last_seen",
                           "Last time a container was seen by the exporter")
        families: list[Metric] = [cpu, working_set, usage, rss, failures, rx, tx, rx_errors,
                                  tx_errors, fs_usage, fs_limit, fs_inodes, start, last_seen]

        def memory_series(labels: list[str], memory: dict[str, Any]) -> None:
            stamp = _seconds(memory.get("time"))
            if "workingSetBytes" in memory:
                working_set.add_metric(labels, memory["workingSetBytes"], timestamp=stamp)
            if "usageBytes" in memory:
                usage.add_metric(labels, memory["usageBytes"], timestamp=stamp)
            if "rssBytes" in memory:
                rss.add_metric(labels, memory["rssBytes"], timestamp=stamp)
            if "pageFaults" in memory:
                failures.add_metric([*labels, "pgfault", "container"], memory["pageFaults"],
                                    timestamp=stamp)
            if "majorPageFaults" in memory:
                failures.add_metric([*labels, "pgmajfault", "container"],
                                    memory["majorPageFaults"], timestamp=stamp)

        node = summary["node"]
        root = ["", "/", "", "", "", ""]
        if "usageCoreNanoSeconds" in (node.get("cpu") or {}):
            cpu.add_metric([*root, "total"], node["cpu"]["usageCoreNanoSeconds"] / 1e9,
                           timestamp=_seconds(node["cpu"].get("time")))
        memory_series(root, node.get("memory") or {})

        for pod in summary["pods"]:
            ref = pod["podRef"]
            pod_id = f"/kubepods/pod{ref['uid']}"
            pod_labels = ["", pod_id, "", "", ref["namespace"], ref["name"]]
            if "usageCoreNanoSeconds" in (pod.get("cpu") or {}):
                cpu.add_metric([*pod_labels, "total"], pod["cpu"]["usageCoreNanoSeconds"] / 1e9,
                               timestamp=_seconds(pod["cpu"].get("time")))
            memory_series(pod_labels, pod.get("memory") or {})
            network = pod.get("network") or {}
            stamp = _seconds(network.get("time"))
            for interface in network.get("interfaces", []):
                labels = [*pod_labels, interface["name"]]
                rx.add_metric(labels, interface.get("rxBytes", 0), timestamp=stamp)
                tx.add_metric(labels, interface.get("txBytes", 0), timestamp=stamp)
                rx_errors.add_metric(labels, interface.get("rxErrors", 0), timestamp=stamp)
                tx_errors.add_metric(labels, interface.get("txErrors", 0), timestamp=stamp)
            for container in pod.get("containers", []):
                image = image_of.get(f"{ref['uid']}/{container['name']}", "")
                labels = [container["name"], f"{pod_id}/{container['name']}", image,
                          container["name"], ref["namespace"], ref["name"]]
                ccpu = container.get("cpu") or {}
                if "usageCoreNanoSeconds" in ccpu:
                    cpu.add_metric([*labels, "total"], ccpu["usageCoreNanoSeconds"] / 1e9,
                                   timestamp=_seconds(ccpu.get("time")))
                memory_series(labels, container.get("memory") or {})
                rootfs = container.get("rootfs") or {}
                if "usedBytes" in rootfs:
                    stamp = _seconds(rootfs.get("time"))
                    fs_usage.add_metric([*labels, "rootfs"], rootfs["usedBytes"], timestamp=stamp)
                    if "capacityBytes" in rootfs:
                        fs_limit.add_metric([*labels, "rootfs"], rootfs["capacityBytes"],
                                            timestamp=stamp)
                    if "inodesUsed" in rootfs:
                        fs_inodes.add_metric([*labels, "rootfs"], rootfs["inodesUsed"],
                                             timestamp=stamp)
                started = _seconds(container.get("startTime"))
                if started:
                    start.add_metric(labels, started)
                seen = _seconds(ccpu.get("time"))
                if seen:
                    last_seen.add_metric(labels, seen)

        if machine is not None:
            info = machine()
            cores = GaugeMetricFamily("machine_cpu_cores", "Number of logical CPU cores.")
            cores.add_metric([], info.get("num_cores", 0))
            memory_bytes = GaugeMetricFamily("machine_memory_bytes",
                                             "Amount of memory installed on the machine.")
            memory_bytes.add_metric([], info.get("memory_capacity", 0))
            families += [cores, memory_bytes]
        return families

    return collect


__all__ = ["Families", "cadvisor_metrics", "resource_metrics"]
