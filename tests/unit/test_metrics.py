"""The kubelet's metrics: names and text format as the Go kubelet exposes them."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio.client import Configuration, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from pykubelet import metrics
from pykubelet.client.apiclient import KubeletApiClient
from pykubelet.client.kubeconfig import Credentials, RestConfig


def test_counters_keep_upstream_names_with_or_without_total() -> None:
    metrics.EVICTIONS.labels("memory.available").inc()
    metrics.STARTED_PODS_TOTAL.inc()
    text = metrics.exposition([metrics.KUBELET_REGISTRY]).decode()
    assert "# TYPE kubelet_evictions counter\n" in text
    assert 'kubelet_evictions{eviction_signal="memory.available"} ' in text
    assert "kubelet_evictions_total" not in text
    assert "# TYPE kubelet_started_pods_total counter\n" in text
    assert "_created" not in text
    # Prometheus' own parser reads it.
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"kubelet_evictions", "kubelet_started_pods"} <= names


def test_histograms_use_go_default_buckets() -> None:
    registry = CollectorRegistry()
    Histogram("h_seconds", "help", buckets=metrics.DEF_BUCKETS, registry=registry).observe(0.3)
    text = metrics.exposition([registry]).decode()
    bounds = [line.split('le="')[1].split('"')[0] for line in text.splitlines()
              if line.startswith("h_seconds_bucket")]
    assert bounds == ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5",
                      "5.0", "10.0", "+Inf"]


def test_runtime_operation_durations_use_upstream_buckets() -> None:
    assert metrics.exponential_buckets(0.005, 2.5, 14)[:3] == (0.005, 0.0125, 0.03125)
    metrics.record_runtime_operation("ListPodSandbox", started=0.0, failed=True)
    text = metrics.exposition([metrics.KUBELET_REGISTRY]).decode()
    assert 'kubelet_runtime_operations_total{operation_type="list_podsandbox"}' in text
    assert 'kubelet_runtime_operations_errors_total{operation_type="list_podsandbox"}' in text


def test_label_values_are_escaped() -> None:
    registry = CollectorRegistry()
    Counter("c", "a \\ help\nline", ["l"], registry=registry).labels('x"y\n').inc()
    text = metrics.exposition([registry]).decode()
    assert '# HELP c_total a \\\\ help\\nline' in text
    assert 'c_total{l="x\\"y\\n"} 1.0' in text


async def test_api_client_requests_are_counted_by_code_method_and_host() -> None:
    async def pods(request: web.Request) -> web.Response:
        if request.match_info["ns"] == "secret":
            return web.json_response({"kind": "Status", "code": 403}, status=403)
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": []})

    app = web.Application()
    app.add_routes([web.get("/api/v1/namespaces/{ns}/pods", pods)])
    server = TestServer(app)
    await server.start_server()
    host = f"127.0.0.1:{server.port}"
    configuration = Configuration(host=f"http://{host}")
    rest = RestConfig("test.kubeconfig", f"http://{host}", configuration, Credentials())
    try:
        async with KubeletApiClient(rest, name="kube", qps=100, burst=100) as client:
            api = CoreV1Api(client)
            await api.list_namespaced_pod("default")
            with pytest.raises(ApiException):
                await api.list_namespaced_pod("secret")
    finally:
        await server.close()
    samples = {(s.labels["code"], s.labels["method"]): s.value
               for family in text_string_to_metric_families(
                   metrics.exposition([metrics.KUBELET_REGISTRY]).decode())
               if family.name == "rest_client_requests"
               for s in family.samples if s.labels.get("host") == host}
    assert samples == {("200", "GET"): 1.0, ("403", "GET"): 1.0}
