"""What ConfigMap and Secret volumes cost a pod start, and the API requests by strategy.

Two pods are started one at a time, ``--runs`` times each, on the real
control plane (``testsupport/controlplane.py``) and the testbed's containerd,
for each ``configMapAndSecretChangeDetectionStrategy`` (``Watch``, ``Cache``,
``Get``), each with a pykubelet of its own:

- plain: one busybox container, no volumes;
- with volumes: the same container with 5 volumes (3 ConfigMaps, 2 Secrets)
  and ``envFrom`` one ConfigMap and one Secret.

Reported: create -> Running in the API status (an admin watch), p50 / p99,
the difference per volume, and the API requests pykubelet made per pod start
(create to Running plus one second, counted by a proxy in front of the API
server, ``bench/apiproxy.py``), by verb and resource. Neither pod mounts the
service-account token, so the figures are the five volumes' alone.

Run as root, after the control plane binaries are built
(``scripts/testbed/controlplane-build.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from bench.apiproxy import CountingProxy, write_kubeconfig
from bench.cluster_pod_startup import wait_default_service_account
from bench.harness import KUBELET_ARGS, BenchmarkError, clean_runtime, percentile
from pykubelet.api import pod_from_dict
from testsupport.controlplane import ControlPlane, cached_binaries
from testsupport.kubelet_process import KubeletProcess, unmount_pod_volumes
from testsupport.podwatch import ApiRunningWatcher
from testsupport.testbed import Testbed

STRATEGIES = ("Watch", "Cache", "Get")
CONFIG_MAPS = ("cm-a", "cm-b", "cm-c")
SECRETS = ("secret-a", "secret-b")
VOLUME_COUNT = len(CONFIG_MAPS) + len(SECRETS)


@dataclass
class StrategyResults:
    strategy: str
    plain_ms: list[float] = field(default_factory=list)
    volumes_ms: list[float] = field(default_factory=list)
    plain_requests: collections.Counter[str] = field(default_factory=collections.Counter)
    volume_requests: collections.Counter[str] = field(default_factory=collections.Counter)
    # FailedMount events pykubelet recorded (the Node authorizer may not know a
    # pod's objects yet when its first sync reads them), and the first message.
    failed_mounts: int = 0
    first_failed_mount: str = ""


def pod_manifest(name: str, node: str, image: str, with_volumes: bool) -> client.V1Pod:
    container: dict[str, Any] = {"name": "sleep", "image": image,
                                 "command": ["sh", "-c", "sleep 3600"]}
    spec: dict[str, Any] = {"nodeName": node, "terminationGracePeriodSeconds": 0,
                            "automountServiceAccountToken": False, "dnsPolicy": "Default",
                            "containers": [container]}
    if with_volumes:
        spec["volumes"] = (
            [{"name": n, "configMap": {"name": n}} for n in CONFIG_MAPS]
            + [{"name": n, "secret": {"secretName": n}} for n in SECRETS])
        container["volumeMounts"] = [{"name": n, "mountPath": f"/etc/{n}"}
                                     for n in (*CONFIG_MAPS, *SECRETS)]
        container["envFrom"] = [{"configMapRef": {"name": CONFIG_MAPS[0]}},
                                {"secretRef": {"name": SECRETS[0]}}]
    return pod_from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                          "spec": spec})


async def create_objects(api: client.CoreV1Api, namespace: str) -> None:
    for name in CONFIG_MAPS:
        await api.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name),
            data={"key_one": f"{name} value", "key_two": "x" * 512}))
    for name in SECRETS:
        await api.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            data={"password": base64.b64encode(secrets.token_bytes(32)).decode()}))


async def measure_strategy(results: StrategyResults, runs: int, plane: ControlPlane,
                           testbed: Testbed, work_dir: Path) -> None:
    node_name = f"vbench-{secrets.token_hex(3)}"
    namespace = f"vbench-{secrets.token_hex(3)}"
    plane.kubectl("create", "namespace", namespace)
    plane.node_kubeconfig(node_name)
    node_files = plane.dir / "nodes" / node_name
    proxy = CountingProxy(plane.server, plane.ca_cert, Path(f"{node_files}.crt"),
                          Path(f"{node_files}.key"))
    port = await proxy.start()
    kubeconfig = write_kubeconfig(work_dir / f"{results.strategy}.kubeconfig", port,
                                  f"system:node:{node_name}")
    kubelet = KubeletProcess(
        work_dir / results.strategy, testbed.endpoint,
        extra_config={"syncFrequency": "1m", "maxPods": 110,
                      "configMapAndSecretChangeDetectionStrategy": results.strategy},
        extra_args=[*KUBELET_ARGS, "--kubeconfig", str(kubeconfig)], node_name=node_name)
    admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
    api = client.CoreV1Api(admin)
    watcher = ApiRunningWatcher(api, namespace)
    try:
        await create_objects(api, namespace)
        await wait_default_service_account(api, namespace)
        print(f"{results.strategy}: starting pykubelet ...", file=sys.stderr, flush=True)
        await asyncio.to_thread(kubelet.start)
        await watcher.start()

        async def one(name: str, with_volumes: bool) -> tuple[float, collections.Counter[str]]:
            before = proxy.snapshot()
            started = time.monotonic()
            await api.create_namespaced_pod(
                namespace, pod_manifest(name, node_name, testbed.busybox_image, with_volumes))
            (running,) = await watcher.wait([name], kubelet)
            await asyncio.sleep(1.0)  # the status writes that follow Running
            used = proxy.snapshot() - before
            await api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            await watcher.wait_gone([name])
            return (running - started) * 1000, used

        await one("warm-up", True)  # image, first watches, first token of the node
        for run in range(runs):
            for with_volumes in (False, True):
                ms, used = await one(f"{'vol' if with_volumes else 'plain'}-{run}",
                                     with_volumes)
                if with_volumes:
                    results.volumes_ms.append(ms)
                    results.volume_requests += used
                else:
                    results.plain_ms.append(ms)
                    results.plain_requests += used
    finally:
        await watcher.stop()
        kubelet.stop()
        failed = [line for line in kubelet.log_text().splitlines()
                  if '"Event occurred"' in line and 'reason="FailedMount"' in line]
        results.failed_mounts = len(failed)
        results.first_failed_mount = failed[0] if failed else ""
        plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for kind, ns in (("node", []), ("lease", ["-n", "kube-node-lease"])):
            plane.kubectl("delete", kind, *ns, node_name, "--ignore-not-found", "--wait=false",
                          check=False)
        await clean_runtime(testbed.endpoint)
        unmount_pod_volumes()
        await admin.close()
        await proxy.stop()


def render(all_results: Sequence[StrategyResults], runs: int) -> str:
    lines = [
        f"pod start-up with {VOLUME_COUNT} ConfigMap/Secret volumes and envFrom, "
        f"beside a plain pod ({runs} runs each, created in the API -> Running in its status)",
        f"  {'strategy':10}{'plain p50':>11}{'p99':>9}{'volumes p50':>13}{'p99':>9}"
        f"{'per volume':>12}",
    ]
    for r in all_results:
        plain50, vol50 = percentile(r.plain_ms, 0.5), percentile(r.volumes_ms, 0.5)
        lines.append(f"  {r.strategy:10}{plain50:11.1f}{percentile(r.plain_ms, 0.99):9.1f}"
                     f"{vol50:13.1f}{percentile(r.volumes_ms, 0.99):9.1f}"
                     f"{(vol50 - plain50) / VOLUME_COUNT:12.1f}")
    lines += ["", "API requests per pod start with the volumes (plain pod's in brackets)"]
    for r in all_results:
        total = sum(r.volume_requests.values()) / runs
        plain = sum(r.plain_requests.values()) / runs
        extra = r.volume_requests - r.plain_requests
        parts = ", ".join(f"{key} {value / runs:.1f}" for key, value in sorted(extra.items()))
        lines.append(f"  {r.strategy:6} {total:5.1f} [{plain:.1f}]  beyond the plain pod: "
                     f"{parts or 'none'}")
    lines += ["", "FailedMount events recorded (all pod starts of the strategy)"]
    for r in all_results:
        lines.append(f"  {r.strategy:6} {r.failed_mounts}"
                     + (f"  first: {r.first_failed_mount[-300:]}" if r.failed_mounts else ""))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> list[StrategyResults]:
    if cached_binaries() is None:
        raise BenchmarkError("no control plane binaries: run scripts/testbed/controlplane-build.sh")
    work_dir = Path(tempfile.mkdtemp(prefix="pykubelet-volume-bench-"))
    testbed = Testbed.fresh()
    plane = ControlPlane.fresh()
    try:
        print("starting containerd and the control plane ...", file=sys.stderr, flush=True)
        await asyncio.to_thread(testbed.build_images)
        await asyncio.to_thread(testbed.start)
        await asyncio.to_thread(plane.start)
        results = []
        for strategy in args.strategies:
            result = StrategyResults(strategy)
            await measure_strategy(result, args.runs, plane, testbed, work_dir)
            results.append(result)
        return results
    finally:
        with contextlib.suppress(Exception):
            plane.stop()
        with contextlib.suppress(Exception):
            testbed.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES),
                        choices=STRATEGIES)
    args = parser.parse_args(argv)
    try:
        results = asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
    except BenchmarkError as err:
        print(f"benchmark failed: {err}", file=sys.stderr)
        return 1
    print(render(results, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
