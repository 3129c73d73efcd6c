"""``bench/peer.py --cluster``: both kubelets as nodes of one real control plane.

The cluster rounds (see ``bench/peer.py``'s docstring and ``bench/README.md``):
one control plane, each kubelet a node of it in turn under a new node name a
round, measured through the API as a user sees it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import glob
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from bench.cluster_pod_startup import pod_manifest as pod_for_node
from bench.cluster_pod_startup import wait_default_service_account
from bench.harness import (
    KUBELET_ARGS,
    SINGLE_RUN_PAUSE_SECONDS,
    START_TIMEOUT_SECONDS,
    BenchmarkError,
    RunningWatcher,
    check_alive,
    measure_idle,
    percentile,
    uninterruptible,
    wait_pods_gone,
)
from bench.peer_figures import GO, ApiFloor, ClusterSideFigures, Results
from bench.peer_rounds import GO_NODE, PY_NODE, killed_early, kubelet_turn, new_kubelet
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.cluster import host_ip
from testsupport.controlplane import ControlPlane
from testsupport.go_kubelet import GO_CONTAINER_LOGS, GO_POD_LOGS
from testsupport.kubelet_process import KubeletProcess
from testsupport.podwatch import ApiRunningWatcher
from testsupport.testbed import Testbed


def node_is_ready(node: client.V1Node) -> bool:
    conditions = (node.status.conditions if node.status is not None else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


async def time_node_ready(api: client.CoreV1Api, kubelet: KubeletProcess,
                          poll_seconds: float) -> float:
    """Seconds from spawning the kubelet until the API shows its Node Ready."""
    started = time.monotonic()
    starting = asyncio.create_task(asyncio.to_thread(kubelet.start))
    deadline = started + START_TIMEOUT_SECONDS
    try:
        while True:
            if starting.done():
                starting.result()  # a kubelet that never became healthy
            check_alive(kubelet)
            try:
                if node_is_ready(await api.read_node(kubelet.node_name)):
                    ready_at = time.monotonic()
                    break
            except ApiException as err:
                if err.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise BenchmarkError(f"node {kubelet.node_name} not Ready in the API after "
                                     f"{START_TIMEOUT_SECONDS:g}s")
            await asyncio.sleep(poll_seconds)
    finally:
        await starting  # kubelet.start returns (or fails and stops it) by itself
    return ready_at - started


async def create_namespace(api: client.CoreV1Api, name: str) -> None:
    """A namespace, once its default ServiceAccount exists (pods are refused before that)."""
    await api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    await wait_default_service_account(api, name)


def remove_namespace_logs(prefix: str) -> None:
    """The pod log directories and /var/log/containers links of the benchmark's API pods
    (in namespaces named ``prefix``...): both kubelets write the links there."""
    for path in glob.glob(str(GO_CONTAINER_LOGS / f"*_{prefix}*_*.log")):
        Path(path).unlink(missing_ok=True)
    for path in glob.glob(str(GO_POD_LOGS / f"{prefix}*_*")):
        shutil.rmtree(path, ignore_errors=True)


async def measure_cluster_side(api: client.CoreV1Api, runtime: RemoteRuntimeService,
                               kubelet: KubeletProcess, namespace: str, image: str,
                               args: argparse.Namespace, figures: ClusterSideFigures,
                               floor: ApiFloor) -> None:
    """One kubelet as a node: Node Ready, one pod at a time, N at once, idle, N deleted."""
    poll_seconds = args.poll_ms / 1000
    node = kubelet.node_name
    await create_namespace(api, namespace)
    watcher = ApiRunningWatcher(api, namespace)
    await watcher.start()
    try:
        figures.start_s.append(await time_node_ready(api, kubelet, poll_seconds * 5))
        assert kubelet.process is not None

        async def create(name: str) -> float:
            """Creates the pod; the time it was sent, and the round trip (ms) into ``floor``."""
            sent = time.monotonic()
            await api.create_namespaced_pod(namespace, pod_for_node(name, node, image))
            return sent

        async def one(name: str) -> tuple[float, float, float]:
            sent = await create(name)
            answered = time.monotonic()
            (running_at,) = await watcher.wait([name], kubelet)
            (container_at,) = await in_runtime.wait_running([name], kubelet)
            return ((running_at - sent) * 1000, (answered - sent) * 1000,
                    (container_at - sent) * 1000)

        async def delete(names: Sequence[str]) -> tuple[float, float, int]:
            """Deletes the pods through the API until the runtime has none of them running or
            ready; ms until the API had answered every delete, ms until they were gone, and
            how many were killed early."""
            # No grace period given: the pods' own (0) applies, so the API forgets them at
            # once and the kubelet stops them (2 s minimum) once its watch says so.
            started = time.monotonic()
            await asyncio.gather(*(api.delete_namespaced_pod(name, namespace)
                                   for name in names))
            answered = time.monotonic()
            exited: dict[str, float] = {}
            gone_at = await wait_pods_gone(runtime, names, poll_seconds, kubelet, exited=exited)
            return ((answered - started) * 1000, (gone_at - started) * 1000,
                    killed_early(exited, started))

        # One pod at a time, the earlier ones left running (as with static pods, so that no
        # start overlaps the runtime's teardown of the pod before); the first is left out.
        singles_names = [f"single-{run}" for run in range(args.runs)]
        async with RunningWatcher(runtime, poll_seconds) as in_runtime:
            await one("cold")
            await delete(["cold"])
            runs = []
            for name in singles_names:
                await asyncio.sleep(SINGLE_RUN_PAUSE_SECONDS)
                runs.append(await one(name))
        await delete(singles_names)
        figures.single.add_round([running for running, _, _ in runs])
        figures.single_runtime_p50_ms.append(percentile([c for _, _, c in runs], 0.5))
        floor.create.add_round([created for _, created, _ in runs])

        names = [f"many-{i}" for i in range(args.pods)]
        started = time.monotonic()
        await asyncio.gather(*(create(name) for name in names))
        floor.many_create_ms.append((time.monotonic() - started) * 1000)
        running = await watcher.wait(names, kubelet)
        figures.many_ms.append((max(running) - started) * 1000)

        await asyncio.sleep(args.settle_seconds)
        idle = await measure_idle(kubelet.process.pid, args.idle_seconds)
        check_alive(kubelet)
        figures.idle_cpu_percent.append(idle.cpu_percent)
        figures.rss_mib.append(idle.rss_max_kib / 1024)

        api_ms, gone_ms, early = await delete(names)
        floor.many_delete_ms.append(api_ms)
        figures.delete_ms.append(gone_ms)
        figures.killed_early.append(early)
        await watcher.wait_gone(names)  # long gone from the API: grace 0 removes them at once
    finally:
        await watcher.stop()


async def run_cluster(testbed: Testbed, work_dir: Path, args: argparse.Namespace,
                      results: Results, binary: Path, plane: ControlPlane,
                      kubelet_holder: list[KubeletProcess]) -> None:
    """The cluster rounds: one control plane, each kubelet a node of it in turn."""
    print("starting the control plane ...", file=sys.stderr, flush=True)
    with uninterruptible("starting the control plane"):
        await asyncio.to_thread(plane.start)
    results.server_version = plane.version
    admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
    api = client.CoreV1Api(admin)
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    node_ip = host_ip()
    ip_args = ["--node-ip", node_ip] if node_ip else []
    try:
        for round_index in range(args.rounds):
            for side in results.nodes.start_round(round_index):
                # A Node of its own every round: the last round's stays Ready for a while.
                node = f"{GO_NODE if side == GO else PY_NODE}-{round_index}"
                kubeconfig = await asyncio.to_thread(plane.node_kubeconfig, node)
                kubelet = new_kubelet(side, work_dir / f"cluster-{side}{round_index}",
                                      testbed.endpoint, binary, node,
                                      [*KUBELET_ARGS, "--kubeconfig", str(kubeconfig), *ip_args])
                print(f"cluster round {round_index + 1}: {side} ...", file=sys.stderr,
                      flush=True)
                async with kubelet_turn(kubelet, runtime, kubelet_holder, args.keep_logs,
                                        functools.partial(remove_namespace_logs,
                                                          args.namespace_prefix)):
                    await measure_cluster_side(api, runtime, kubelet,
                                               f"{args.namespace_prefix}{side}{round_index}",
                                               testbed.busybox_image, args,
                                               results.nodes.of(side), results.api)
    finally:
        await runtime.close()
        await admin.close()
