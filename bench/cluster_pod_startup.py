"""Cluster-mode pod start-up: pod created in the API -> Running in the API's status.

What a cluster user waits for after ``kubectl create``: the pod, bound to
pykubelet's node, shows ``phase: Running`` in the API. This script measures
that on the real control plane (``testsupport/controlplane.py``) and the testbed's
containerd, and puts it beside the raw CRI bound measured in the same run
(``RunPodSandbox`` + ``CreateContainer`` + ``StartContainer`` called
directly, from ``bench/pod_startup.py``):

- one pod at a time, ``--runs`` times: create -> Running in the API status,
  p50 / p99, and create -> container RUNNING in the runtime for the split;
- ``--pods`` pods created at once: per-pod create -> Running p50 / p99, and the
  time until the last is Running (against the raw serial start of as many);
- API requests pykubelet makes per pod start, by verb and resource, counted
  by a proxy in front of the API server (``bench/apiproxy.py``), and the
  requests per minute while ``--pods`` pods run and nothing changes (target:
  no status write when nothing changed). The one-pod-at-a-time requests are also
  counted by the API server itself (its audit log, ``bench/audit.py``), from the
  first create to ``AUDIT_TAIL_SECONDS`` after the last pod is gone, so the
  requests about each pod that come after its deletion count too;
  ``--keep-audit FILE`` keeps the log (``python -m bench.audit FILE --user
  system:node:NAME --namespace NS`` lists each pod's requests in order).

"Running in the API" is observed through a watch (an admin list+watch of the
benchmark namespace), so the figure includes the status write and the watch
delivery, as a user's ``kubectl get -w`` would see it.

Run as root, after the control plane binaries are built
(``scripts/testbed/controlplane-build.sh``). pykubelet registers its own Node
and renews its lease through the proxy, so those requests are counted too.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from bench import audit
from bench.apiproxy import CountingProxy, write_kubeconfig
from bench.harness import (
    API_CLIENT_CONFIG,
    API_CLIENT_SETTINGS,
    KUBELET_ARGS,
    SLEEP_COMMAND,
    BenchmarkError,
    RunningWatcher,
    cpu_seconds,
    percentile,
    remove_all_sandboxes,
)
from bench.pod_startup import Results, measure_raw
from pykubelet.api import pod_from_dict
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.controlplane import ControlPlane, cached_binaries
from testsupport.kubelet_process import KubeletProcess
from testsupport.podwatch import ApiRunningWatcher
from testsupport.testbed import Testbed

KUBELET_CONFIG: dict[str, Any] = {"syncFrequency": "1m", "fileCheckFrequency": "20s",
                                  "maxPods": 110, **API_CLIENT_CONFIG}
# The audited one-at-a-time requests are counted until this long after the last pod is
# gone: a status sync period (10 s), so requests about deleted pods are in.
AUDIT_TAIL_SECONDS = 10.0


@dataclass
class ClusterResults:
    runs: int
    pods: int
    raw: Results
    single_api_ms: list[float] = field(default_factory=list)
    single_runtime_ms: list[float] = field(default_factory=list)
    single_cold_ms: float = 0.0
    many_api_ms: list[float] = field(default_factory=list)
    many_last_ms: float = 0.0
    many_cpu_seconds: float = 0.0
    requests_single: collections.Counter[str] = field(default_factory=collections.Counter)
    requests_many: collections.Counter[str] = field(default_factory=collections.Counter)
    idle_seconds: float = 0.0
    idle_requests: collections.Counter[str] = field(default_factory=collections.Counter)
    idle_cpu_seconds: float = 0.0
    # The API server's count (audit log) of the node's requests over the one-at-a-time
    # runs; None without an audit log.
    audited_single: collections.Counter[str] | None = None
    node_name: str = ""
    namespace: str = ""


def pod_manifest(name: str, node: str, image: str) -> client.V1Pod:
    return pod_from_dict({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": False, "dnsPolicy": "Default",
                 "containers": [{"name": "sleep", "image": image, "command": SLEEP_COMMAND}]}})


async def wait_default_service_account(api: client.CoreV1Api, namespace: str,
                                       timeout: float = 60) -> None:
    """Pods are refused until the controller manager made the namespace's account."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await api.read_namespaced_service_account("default", namespace)
            return
        except client.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise BenchmarkError(f"no default service account in {namespace}") from err
        await asyncio.sleep(0.2)


async def measure_cluster(results: ClusterResults, plane: ControlPlane, testbed: Testbed,
                          work_dir: Path, idle_seconds: float) -> None:
    node_name = f"bench-{secrets.token_hex(3)}"
    namespace = f"bench-{secrets.token_hex(3)}"
    results.node_name, results.namespace = node_name, namespace
    plane.kubectl("create", "namespace", namespace)
    plane.node_kubeconfig(node_name)  # the node's credential: nodes/<name>.crt and .key
    node_files = plane.dir / "nodes" / node_name
    proxy = CountingProxy(plane.server, plane.ca_cert, Path(f"{node_files}.crt"),
                          Path(f"{node_files}.key"))
    port = await proxy.start()
    kubeconfig = write_kubeconfig(work_dir / "proxy.kubeconfig", port,
                                  f"system:node:{node_name}")
    kubelet = KubeletProcess(work_dir / "kubelet", testbed.endpoint, extra_config=KUBELET_CONFIG,
                             extra_args=[*KUBELET_ARGS, "--kubeconfig", str(kubeconfig)],
                             node_name=node_name)
    admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
    api = client.CoreV1Api(admin)
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    watcher = ApiRunningWatcher(api, namespace)
    try:
        print("starting pykubelet in cluster mode ...", file=sys.stderr, flush=True)
        await asyncio.to_thread(kubelet.start)
        await watcher.start()
        async with RunningWatcher(runtime, 0.01) as in_runtime:
            async def one(name: str) -> tuple[float, float, collections.Counter[str]]:
                before = proxy.snapshot()
                started = time.monotonic()
                await api.create_namespaced_pod(
                    namespace, pod_manifest(name, node_name, testbed.busybox_image))
                (running,) = await watcher.wait([name], kubelet)
                (container,) = await in_runtime.wait_running([name], kubelet)
                # Let the status writes that follow Running land before counting.
                await asyncio.sleep(1.0)
                used = proxy.snapshot() - before
                await api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
                await watcher.wait_gone([name])
                return (running - started) * 1000, (container - started) * 1000, used

            print("one pod at a time ...", file=sys.stderr, flush=True)
            results.single_cold_ms, _, _ = await one("cold")
            single_from = datetime.now(UTC)
            for run in range(results.runs):
                api_ms, runtime_ms, used = await one(f"single-{run}")
                results.single_api_ms.append(api_ms)
                results.single_runtime_ms.append(runtime_ms)
                results.requests_single += used
            await asyncio.sleep(AUDIT_TAIL_SECONDS)
            results.audited_single = audited(plane, node_name, single_from, datetime.now(UTC))

            print(f"{results.pods} pods at once ...", file=sys.stderr, flush=True)
            names = [f"many-{i}" for i in range(results.pods)]
            before = proxy.snapshot()
            created: dict[str, float] = {}

            async def create(name: str) -> None:
                created[name] = time.monotonic()
                await api.create_namespaced_pod(
                    namespace, pod_manifest(name, node_name, testbed.busybox_image))

            assert kubelet.process is not None
            many_cpu_before = cpu_seconds(kubelet.process.pid)
            first_create = time.monotonic()
            await asyncio.gather(*(create(n) for n in names))
            running = await watcher.wait(names, kubelet)
            results.many_cpu_seconds = cpu_seconds(kubelet.process.pid) - many_cpu_before
            results.many_api_ms = [(t - created[n]) * 1000 for n, t in zip(names, running,
                                                                          strict=True)]
            results.many_last_ms = (max(running) - first_create) * 1000
            await asyncio.sleep(2.0)
            results.requests_many = proxy.snapshot() - before

        print(f"idle for {idle_seconds:g} s with {results.pods} pods ...", file=sys.stderr,
              flush=True)
        await asyncio.sleep(15)  # the first periodic status check after the last start
        assert kubelet.process is not None
        before, cpu_before, started = proxy.snapshot(), cpu_seconds(kubelet.process.pid), \
            time.monotonic()
        await asyncio.sleep(idle_seconds)
        results.idle_seconds = time.monotonic() - started
        results.idle_cpu_seconds = cpu_seconds(kubelet.process.pid) - cpu_before
        results.idle_requests = proxy.snapshot() - before
    finally:
        await watcher.stop()
        kubelet.stop()
        plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for kind, ns in (("node", []), ("lease", ["-n", "kube-node-lease"])):
            plane.kubectl("delete", kind, *ns, node_name, "--ignore-not-found", "--wait=false",
                          check=False)
        await remove_all_sandboxes(runtime)
        await runtime.close()
        await admin.close()
        await proxy.stop()


def audited(plane: ControlPlane, node_name: str, since: datetime,
            until: datetime) -> collections.Counter[str] | None:
    """The node's requests the API server audited in [since, until); None without a log."""
    log = plane.env.get(audit.AUDIT_LOG_KEY)
    if not log:
        return None
    return audit.count(audit.select(audit.read_log(Path(log)), user=audit.node_user(node_name),
                                    since=since, until=until))


def render(results: ClusterResults) -> str:
    raw = results.raw
    raw_p50, raw_p99 = (percentile(raw.raw_single_ms, 0.5), percentile(raw.raw_single_ms, 0.99))
    api_p50, api_p99 = (percentile(results.single_api_ms, 0.5),
                        percentile(results.single_api_ms, 0.99))
    rt_p50 = percentile(results.single_runtime_ms, 0.5)
    many_p50, many_p99 = (percentile(results.many_api_ms, 0.5),
                          percentile(results.many_api_ms, 0.99))

    def per_pod(counter: collections.Counter[str], pods: int) -> str:
        total = sum(counter.values())
        parts = ", ".join(f"{key} {value / pods:.1f}" for key, value in sorted(counter.items()))
        return f"{total / pods:.1f} per pod  ({parts})"

    minutes = results.idle_seconds / 60
    idle_total = sum(results.idle_requests.values())
    idle_writes = sum(v for k, v in results.idle_requests.items()
                      if k.split()[0] in ("PATCH", "PUT", "POST") and "pods" in k)
    idle_parts = ", ".join(f"{k} {v / minutes:.1f}" for k, v in
                           sorted(results.idle_requests.items())) or "none"
    lines = [
        "pykubelet cluster-mode pod start-up (pod created in the API -> Running in its status); "
        f"{API_CLIENT_SETTINGS}",
        "  detection: admin watch of the namespace; raw bound: CRI calls on the same containerd",
        "",
        f"one pod at a time, {results.runs} runs",
        f"  {'':34}{'p50 ms':>10}{'p99 ms':>10}",
        f"  {'raw CRI (sandbox+create+start)':34}{raw_p50:10.1f}{raw_p99:10.1f}",
        f"  {'API create -> container RUNNING':34}{rt_p50:10.1f}"
        f"{percentile(results.single_runtime_ms, 0.99):10.1f}",
        f"  {'API create -> Running in the API':34}{api_p50:10.1f}{api_p99:10.1f}",
        f"  overhead over raw CRI at p50: {api_p50 - raw_p50:.1f} ms  "
        f"(cold first pod: {results.single_cold_ms:.1f} ms)",
        "",
        f"{results.pods} pods created at once",
        f"  per pod, create -> Running in the API: p50 {many_p50:.1f} ms, p99 {many_p99:.1f} ms",
        f"  pykubelet CPU from the first create to the last Running: "
        f"{results.many_cpu_seconds:.2f} s ({results.many_cpu_seconds / results.pods:.3f} s "
        f"per pod, {100 * results.many_cpu_seconds / max(results.many_last_ms / 1000, 1e-9):.0f} % "
        "of one core)",
        f"  first create -> last Running: {results.many_last_ms:.1f} ms  "
        f"(raw CRI serial for {raw.pods}: {raw.raw_serial_ms:.1f} ms, ratio "
        f"{results.many_last_ms / raw.raw_serial_ms:.2f})",
        "",
        "API requests made by pykubelet",
        f"  one pod at a time: {per_pod(results.requests_single, results.runs)}",
        "  one pod at a time, as the API server audited them (create -> "
        f"{AUDIT_TAIL_SECONDS:g} s after the last is gone): "
        + (per_pod(results.audited_single, results.runs) if results.audited_single is not None
           else "no audit log"),
        f"  {results.pods} at once: {per_pod(results.requests_many, results.pods)}",
        f"  idle with {results.pods} pods over {results.idle_seconds:.0f} s: "
        f"{idle_total / minutes:.1f} per minute ({idle_parts})",
        f"  pod status writes while nothing changed: {idle_writes}  (target 0) "
        f"{'PASS' if idle_writes == 0 else 'MISS'}",
        f"  pykubelet CPU while idle: "
        f"{100 * results.idle_cpu_seconds / results.idle_seconds:.2f} % of one core",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> ClusterResults:
    if cached_binaries() is None:
        raise BenchmarkError("no control plane binaries: run scripts/testbed/controlplane-build.sh")
    work_dir = Path(tempfile.mkdtemp(prefix="pykubelet-cluster-bench-"))
    testbed = Testbed.fresh()
    # The API server's audit log of the node's requests (controlplane.sh reads the setting
    # from the environment the plane's start inherits).
    os.environ[audit.AUDIT_SETTING] = "1"
    plane = ControlPlane.fresh()
    try:
        print("starting containerd and the control plane ...", file=sys.stderr, flush=True)
        await asyncio.to_thread(testbed.build_images)
        await asyncio.to_thread(testbed.start)
        await asyncio.to_thread(plane.start)
        raw = Results(poll_ms=10.0, runs=args.runs, pods=args.pods)
        runtime = RemoteRuntimeService(testbed.endpoint, 60)
        await runtime.connect()
        try:
            async with RunningWatcher(runtime, 0.01) as watcher:
                print("measuring raw CRI ...", file=sys.stderr, flush=True)
                await measure_raw(runtime, watcher, testbed.busybox_image, work_dir, raw)
        finally:
            await runtime.close()
        results = ClusterResults(runs=args.runs, pods=args.pods, raw=raw)
        await measure_cluster(results, plane, testbed, work_dir, args.idle_seconds)
        return results
    finally:
        log = plane.env.get(audit.AUDIT_LOG_KEY) if (plane.dir / "env").exists() else None
        if args.keep_audit is not None and log:
            shutil.copyfile(log, args.keep_audit)
        with contextlib.suppress(Exception):
            plane.stop()
        with contextlib.suppress(Exception):
            testbed.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="also print the raw figures as JSON")
    parser.add_argument("--keep-audit", type=Path, metavar="FILE",
                        help="copy the API server's audit log of the node's requests to FILE")
    args = parser.parse_args(argv)
    try:
        results = asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
    except BenchmarkError as err:
        print(f"benchmark failed: {err}", file=sys.stderr)
        return 1
    print(render(results))
    if args.keep_audit is not None:
        print(f"audit log kept in {args.keep_audit}: python -m bench.audit {args.keep_audit} "
              f"--user {audit.node_user(results.node_name)} --namespace {results.namespace}")
    if args.json:
        print(json.dumps({"single_api_ms": results.single_api_ms,
                          "many_api_ms": results.many_api_ms,
                          "requests_single": results.requests_single,
                          "idle_requests": results.idle_requests}, default=dict))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
