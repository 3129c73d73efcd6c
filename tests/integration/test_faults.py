"""A churn survives two kill -9 restarts of the kubelet and a containerd restart (issue 39's CI).

``bench/faults.py`` is the long benchmark (an API outage, a frozen kubelet, a
full disk too, and the Go kubelet beside); this is its minute on the session's
control plane and containerd, asserting counts, never timings. A pykubelet node
gets the soak's mix at one pod a second plus counted pods
(``testsupport/faults.py``) that live the whole churn and append a line to a
hostPath file at each start of their container; during the churn the kubelet
is killed with SIGKILL and started again at once, twice, and containerd is
stopped and started on its state between the two.

Then: the kubelet answered its health check after each restart; every
``restartPolicy: Never`` container started exactly once and every
``restartPolicy: Always`` pod has one running container, the one the API shows,
with ``restartCount + 1`` starts; and once every pod is deleted, the node's
leftovers (pod directories, cgroups, CNI leases, sandboxes and containers of the
namespace, mounts, pykubelet's tables) return to their values before the churn.
A deleted pod's dead sandboxes go on its death events (``kuberuntime/gc.py``),
at the latest at the container GC's pass once a minute, which the last wait
still allows two of.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.cluster import ClusterKubelet, kubelet_and_namespace
from testsupport.controlplane import ControlPlane
from testsupport.faults import (
    CONTAINERD,
    COUNTED_KINDS,
    KILL,
    CountedReport,
    FaultChurn,
    FaultRecord,
    FaultTargets,
    NodeWatcher,
    check_counted,
    churn_pods,
    delete_counted,
    run_faults,
)
from testsupport.podwatch import ApiRunningWatcher
from testsupport.polling import WaitTimeout, wait_until_async
from testsupport.soak import CONFIG_MAP, SECRET, node_leftovers
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]

CHURN_SECONDS = 60.0
PODS_PER_SECOND = 1.0
POD_SECONDS = 8.0
# Every fourth pod is a counted one: 15 in the minute, five of each kind.
COUNTED_EVERY = 4
PLANNED = ((12.0, KILL), (27.0, CONTAINERD), (42.0, KILL))
SETTLE_BOUND = 60.0
CONVERGE_BOUND = 60.0
# Two container GC periods (a minute each) after the last pod is gone from the API.
LEFTOVERS_BOUND = 150.0


async def churn_with_faults(plane: ControlPlane, testbed: Testbed, kubelet: ClusterKubelet,
                            namespace: str, starts_dir: Path
                            ) -> tuple[list[FaultRecord], CountedReport, FaultChurn,
                                       dict[str, float | None], dict[str, float | None] | None]:
    admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
    api = client.CoreV1Api(admin)
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    watcher = ApiRunningWatcher(api, namespace)
    node_watch = NodeWatcher(api, kubelet.node_name)
    run = FaultChurn()
    records: list[FaultRecord] = []

    async def left() -> dict[str, float | None]:
        return await node_leftovers(kubelet, runtime, pod_ips=watcher.pod_ips,
                                    sandbox_ids=run.sandbox_ids, pykubelet_tables=True,
                                    namespace=namespace)

    try:
        await api.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=CONFIG_MAP), data={"key": "value"}))
        await api.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name=SECRET), string_data={"key": "value"}))
        await watcher.start()
        await node_watch.start()
        before = await left()
        began = time.monotonic()
        churning = asyncio.create_task(churn_pods(
            api=api, runtime=runtime, namespace=namespace, node=kubelet.node_name,
            image=testbed.busybox_image, run=run, began=began, seconds=CHURN_SECONDS,
            rate=PODS_PER_SECOND, pod_seconds=POD_SECONDS, counted_every=COUNTED_EVERY,
            starts_dir=starts_dir))
        try:
            await run_faults(api=api, runtime=runtime, namespace=namespace,
                             targets=FaultTargets(kubelet, testbed, plane), planned=PLANNED,
                             run=run, watcher=watcher, node_watch=node_watch, began=began,
                             settle_bound=SETTLE_BOUND, records_into=records)
        finally:
            await churning
        counted = await check_counted(api, runtime, namespace, run.counted, starts_dir,
                                      CONVERGE_BOUND)
        await delete_counted(api, namespace, run)
        await watcher.wait_gone(list(run.churn.created_at), timeout=120)

        async def back_to_before() -> dict[str, float | None] | None:
            now = await left()
            return now if now == before else None

        after: dict[str, float | None] | None
        try:
            after = await wait_until_async(back_to_before, LEFTOVERS_BOUND,
                                           "every leftover back to its value before")
        except WaitTimeout:
            after = await left()  # the assertion then shows which count stayed
        return records, counted, run, before, after
    finally:
        await node_watch.stop()
        await watcher.stop()
        await runtime.close()
        await admin.close()


def test_kill_9_and_a_containerd_restart_lose_no_pod_and_run_none_twice(
        control_plane: ControlPlane, testbed: Testbed, tmp_path: Path) -> None:
    starts_dir = tmp_path / "starts"
    starts_dir.mkdir()
    with kubelet_and_namespace(control_plane, testbed.endpoint, tmp_path,
                               prefix="faults") as (kubelet, namespace):
        records, counted, run, before, after = asyncio.run(
            churn_with_faults(control_plane, testbed, kubelet, namespace, starts_dir))
        # Checked before the clean-up, so that a failing clean-up cannot hide the counts.
        # No kubelet exited by itself (a note says so) and each started again.
        assert [(r.fault, r.restarts, r.started, r.note) for r in records] == [
            (KILL, 1, True, ""), (CONTAINERD, 0, True, ""), (KILL, 1, True, "")]
        assert kubelet.running()
        assert run.churn.errors == 0
        assert sorted(set(run.counted.values())) == sorted(COUNTED_KINDS)
        assert counted.failures() == {}
        assert [r.unsettled for r in records] == [[], [], []]
        assert before["pod directories"] == 0
        assert after == before
