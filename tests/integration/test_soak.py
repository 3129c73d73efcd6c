"""A short churn of API pods leaves nothing behind on the node (issue 28's CI soak).

``bench/soak.py`` is the long benchmark; this is its two-minute check on the
session's control plane and containerd, asserting counts, never timings: a
pykubelet node gets pods of ``testsupport.soak.MIX`` (plain, with a ConfigMap, a
Secret and a projected token, with a readiness probe, crash-looping, deleted
while it starts) at one a second, each deleted seconds after its create. Once
the API has forgotten them all, every count the soak prints as "left" must
return to its value before the churn: pod directories, pod cgroups in every
mounted hierarchy, CNI leases and runtime sandboxes and containers of the
namespace, mounts below the root directory, the kubelet's in-memory tables and
its asyncio tasks. Dead sandboxes go at the kubelet's container GC, once a
minute, so the wait allows two of those.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime.labels import POD_NAMESPACE_LABEL
from testsupport.cluster import ClusterKubelet, kubelet_and_namespace
from testsupport.controlplane import ControlPlane
from testsupport.podwatch import ApiRunningWatcher
from testsupport.polling import WaitTimeout, wait_until_async
from testsupport.soak import (
    CONFIG_MAP,
    DELETED_STARTING,
    MIX,
    SECRET,
    Churn,
    kubelet_metrics,
    node_leftovers,
    pod_life,
    read_metric,
)
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]

CHURN_SECONDS = 60
PODS_PER_SECOND = 1.0
POD_SECONDS = 8.0
# Two container GC periods (a minute each) after the last pod is gone from the API.
SETTLE_SECONDS = 150.0


async def left_counts(kubelet: ClusterKubelet, runtime: RemoteRuntimeService, namespace: str,
                      pod_ips: set[str], sandbox_ids: set[str]) -> dict[str, float | None]:
    """What ``bench/soak.py`` counts as left on the node, for this kubelet and namespace,
    and its asyncio tasks."""
    counts = await node_leftovers(kubelet, runtime, pod_ips=pod_ips, sandbox_ids=sandbox_ids,
                                  pykubelet_tables=True, namespace=namespace)
    metrics_text = await asyncio.to_thread(kubelet_metrics, kubelet)
    return {**counts, "asyncio tasks": read_metric(metrics_text, "pykubelet_asyncio_tasks")}


async def churn_and_count(plane: ControlPlane, testbed: Testbed, kubelet: ClusterKubelet,
                          namespace: str) -> tuple[dict[str, float | None],
                                                   dict[str, float | None], Churn, set[str]]:
    admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
    api = client.CoreV1Api(admin)
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    watcher = ApiRunningWatcher(api, namespace)
    sandbox_ids: set[str] = set()
    try:
        await api.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=CONFIG_MAP), data={"key": "value"}))
        await api.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name=SECRET), string_data={"key": "value"}))
        await watcher.start()
        before = await left_counts(kubelet, runtime, namespace, watcher.pod_ips, sandbox_ids)
        churn = Churn()
        lives = []
        began = time.monotonic()
        for index in range(int(CHURN_SECONDS * PODS_PER_SECOND)):
            await asyncio.sleep(max(0.0, began + index / PODS_PER_SECOND - time.monotonic()))
            lives.append(asyncio.create_task(pod_life(
                api, namespace, f"soak-{index}", MIX[index % len(MIX)], kubelet.node_name,
                testbed.busybox_image, churn, POD_SECONDS)))
            sandbox_ids.update(s.id for s in await runtime.list_pod_sandboxes()
                               if s.labels.get(POD_NAMESPACE_LABEL) == namespace)
        await asyncio.gather(*lives)
        await watcher.wait_gone(list(churn.created_at), timeout=120)
        started = set(watcher.first_running)

        async def back_to_before() -> dict[str, float | None] | None:
            now = await left_counts(kubelet, runtime, namespace, watcher.pod_ips, sandbox_ids)
            return now if now == before else None

        try:
            after = await wait_until_async(back_to_before, SETTLE_SECONDS,
                                           "every leftover back to its value before")
        except WaitTimeout:
            # The assertion then shows which count stayed.
            after = await left_counts(kubelet, runtime, namespace, watcher.pod_ips,
                                      sandbox_ids)
        return before, after, churn, started
    finally:
        await watcher.stop()
        await runtime.close()
        await admin.close()


def test_a_churn_of_api_pods_leaves_nothing_behind(control_plane: ControlPlane,
                                                   testbed: Testbed, tmp_path: Path) -> None:
    with kubelet_and_namespace(control_plane, testbed.endpoint, tmp_path,
                               prefix="soak") as (kubelet, namespace):
        before, after, churn, started = asyncio.run(
            churn_and_count(control_plane, testbed, kubelet, namespace))
        # Checked before the clean-up, so that a failing clean-up cannot hide the counts.
        assert kubelet.running()
        assert churn.errors == 0
        expected = {name for name, kind in churn.kinds.items() if kind != DELETED_STARTING}
        assert expected <= started, f"never Running: {sorted(expected - started)[:5]}"
        assert before["pod directories"] == 0
        assert after == before
