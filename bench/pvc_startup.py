"""What a bound local PersistentVolume costs a pod start, beside the same pod with an emptyDir.

One real control plane (``testsupport/controlplane.py``, v1.20) and the
testbed's containerd. Each kubelet in turn, pykubelet and then the Go
kubelet 1.20 (when ``controlplane-build.sh`` built it; ``--no-go`` leaves it
out), joins as a node under a name of its own and gets ``--runs`` pairs of
pods, one pod at a time, each created with ``spec.nodeName`` (no scheduler):

- emptyDir: one busybox container that touches ``/data/started`` and
  sleeps, an ``emptyDir`` at ``/data``;
- PVC: the same container with a ``persistentVolumeClaim`` at ``/data``, its
  claim already bound (before the clock starts) to a ``local`` PV of its own:
  a directory of the work directory, with a node affinity to the node. A PV
  directory without the mark afterwards fails the benchmark: its pod ran
  without the PV.

Reported: API create -> ``Running`` in the API (an admin watch), p50 / p99 of
each; the PVC pod's extra time and its ratio to the emptyDir pod's on the
same kubelet; pykubelet's figure over the Go kubelet's; and both against the
floor: a raw CRI start of the same pod (``RunPodSandbox``, ``CreateContainer``,
``StartContainer``, before any kubelet runs) plus the API server's own round
trip of the create. A cold pair is left out of the figures. FailedMount
events are counted (the Node authorizer's graph may lag a new pod: a first
read of its claim refused, then retried, would be in the PVC figure).

Run as root, after the control plane binaries are built
(``scripts/testbed/controlplane-build.sh``): ``bash scripts/bench.sh
pvc_startup`` (``--runs 10``) takes about four minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from bench.harness import (
    KUBELET_ARGS,
    SINGLE_RUN_PAUSE_SECONDS,
    BenchmarkError,
    RunningWatcher,
    percentile,
    remove_all_sandboxes,
    run_on_testbed,
    time_raw_single,
    uninterruptible,
)
from bench.peer_cluster import create_namespace, remove_namespace_logs, time_node_ready
from bench.peer_figures import GO, PYKUBELET
from bench.peer_render import Row, table
from bench.peer_rounds import kubelet_turn, new_kubelet
from pykubelet.api import pod_from_dict
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.cluster import host_ip
from testsupport.controlplane import (
    ControlPlane,
    ControlPlaneError,
    cached_binaries,
    go_kubelet_binary,
)
from testsupport.kubelet_process import KubeletProcess, unmount_pod_volumes
from testsupport.podwatch import ApiRunningWatcher
from testsupport.testbed import Testbed

HOSTNAME_LABEL = "kubernetes.io/hostname"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
EMPTY_DIR, PVC = "emptyDir", "PVC"
BIND_TIMEOUT_SECONDS = 60.0
# Every pod leaves a mark in its volume: the PV directories show they were mounted.
STARTED_FILE = "started"
STARTED_COMMAND = f"touch /data/{STARTED_FILE}; sleep 3600"


@dataclass
class SideFigures:
    """One kubelet's runs (ms), by pod kind, and the FailedMount events of its pods."""

    ms: dict[str, list[float]] = field(default_factory=lambda: {EMPTY_DIR: [], PVC: []})
    failed_mounts: int = 0
    first_failed_mount: str = ""


@dataclass
class Results:
    runs: int
    server_version: str = ""
    go_version: str = ""
    raw_ms: list[float] = field(default_factory=list)         # the raw CRI start
    api_create_ms: list[float] = field(default_factory=list)  # the create's round trip
    sides: dict[str, SideFigures] = field(default_factory=dict)


def pod_manifest(name: str, node: str, image: str, claim: str | None) -> client.V1Pod:
    volume: dict[str, Any] = ({"name": "data", "persistentVolumeClaim": {"claimName": claim}}
                              if claim else {"name": "data", "emptyDir": {}})
    return pod_from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                          "spec": {
        "nodeName": node, "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False, "dnsPolicy": "Default",
        "volumes": [volume],
        "containers": [{"name": "sleep", "image": image, "command": ["sh", "-c", STARTED_COMMAND],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}})


def kubectl_create(plane: ControlPlane, manifest: dict[str, Any]) -> None:
    plane.kubectl("create", "-f", "-", input=json.dumps(manifest))


async def bound_claims(plane: ControlPlane, api: client.CoreV1Api, namespace: str,
                       storage_class: str, hostname: str, disks: Path, count: int) -> list[str]:
    """``count`` claims, each bound by the PV binder to a local PV of its own on the node."""
    claims = []
    for index in range(count):
        disk = disks / f"{namespace}-{index}"
        disk.mkdir(parents=True)
        pv, claim = f"{namespace}-{index}", f"data-{index}"
        await asyncio.to_thread(kubectl_create, plane, {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                "claimRef": {"namespace": namespace, "name": claim},  # pre-bound: no guessing
                "local": {"path": str(disk)},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}]}}}})
        await asyncio.to_thread(kubectl_create, plane, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                     "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}})
        claims.append(claim)
    deadline = time.monotonic() + BIND_TIMEOUT_SECONDS
    while True:
        listed = await api.list_namespaced_persistent_volume_claim(namespace)
        if sum(1 for c in listed.items if c.status.phase == "Bound") == count:
            return claims
        if time.monotonic() > deadline:
            raise BenchmarkError(f"claims of {namespace} not Bound after "
                                 f"{BIND_TIMEOUT_SECONDS:g}s")
        await asyncio.sleep(0.2)


async def delete_storage(plane: ControlPlane, namespace: str, storage_class: str) -> None:
    def delete() -> None:
        plane.kubectl("delete", "pvc", "-n", namespace, "--all", "--wait=false", check=False)
        pvs = plane.kubectl("get", "pv", "-o", "name", check=False).stdout.split()
        mine = [pv for pv in pvs if pv.startswith(f"persistentvolume/{namespace}-")]
        if mine:
            plane.kubectl("delete", *mine, "--wait=false", check=False)
        plane.kubectl("delete", "storageclass", storage_class, "--ignore-not-found",
                      check=False)
    await asyncio.to_thread(delete)


async def failed_mounts(api: client.CoreV1Api, namespace: str, figures: SideFigures) -> None:
    events = await api.list_namespaced_event(namespace)
    failed = [e for e in events.items if e.reason == "FailedMount"]
    figures.failed_mounts = sum(e.count or 1 for e in failed)
    figures.first_failed_mount = failed[0].message if failed else ""


async def measure_side(plane: ControlPlane, api: client.CoreV1Api, kubelet: KubeletProcess,
                       namespace: str, image: str, disks: Path, results: Results,
                       figures: SideFigures) -> None:
    node = kubelet.node_name
    await create_namespace(api, namespace)
    storage_class = namespace
    await asyncio.to_thread(kubectl_create, plane, {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": storage_class}, "provisioner": NO_PROVISIONER,
        "volumeBindingMode": "Immediate"})
    watcher = ApiRunningWatcher(api, namespace)
    await watcher.start()
    names: list[str] = []
    try:
        await time_node_ready(api, kubelet, 0.1)
        labels = (await api.read_node(node)).metadata.labels or {}
        claims = await bound_claims(plane, api, namespace, storage_class,
                                    labels.get(HOSTNAME_LABEL, node), disks, results.runs + 1)

        async def one(name: str, claim: str | None) -> float:
            await asyncio.sleep(SINGLE_RUN_PAUSE_SECONDS)
            sent = time.monotonic()
            await api.create_namespaced_pod(namespace, pod_manifest(name, node, image, claim))
            results.api_create_ms.append((time.monotonic() - sent) * 1000)
            names.append(name)
            (running_at,) = await watcher.wait([name], kubelet)
            return (running_at - sent) * 1000

        await one("cold-empty", None)
        await one("cold-pvc", claims[0])
        del results.api_create_ms[-2:]
        for run, claim in enumerate(claims[1:]):
            figures.ms[EMPTY_DIR].append(await one(f"empty-{run}", None))
            figures.ms[PVC].append(await one(f"pvc-{run}", claim))
        await failed_mounts(api, namespace, figures)
        unmarked = [d.name for d in sorted(disks.glob(f"{namespace}-*"))
                    if not (d / STARTED_FILE).exists()]
        if unmarked:
            raise BenchmarkError(f"no pod wrote into the local PVs {unmarked}: not mounted")
        # Deleted through the API, so that the kubelet unmounts the PVs itself.
        await asyncio.gather(*(api.delete_namespaced_pod(n, namespace) for n in names))
        await watcher.wait_gone(names)
    finally:
        await watcher.stop()
        await delete_storage(plane, namespace, storage_class)
        await asyncio.to_thread(plane.kubectl, "delete", "namespace", namespace, "--wait=false",
                                check=False)


async def measure_floor(runtime: RemoteRuntimeService, image: str, work_dir: Path,
                        results: Results) -> None:
    """The raw CRI start of the pod, one at a time, a cold one left out."""
    async with RunningWatcher(runtime, 0.02) as watcher:
        await time_raw_single(runtime, watcher, image, work_dir, "raw-cold")
        for run in range(results.runs):
            results.raw_ms.append(await time_raw_single(runtime, watcher, image, work_dir,
                                                        f"raw-{run}"))
        await remove_all_sandboxes(runtime)


async def run_benchmark(testbed: Testbed, work_dir: Path, plane: ControlPlane,
                        binary: Path | None, prefix: str, results: Results,
                        kubelet_holder: list[KubeletProcess]) -> None:
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    try:
        print("raw CRI floor ...", file=sys.stderr, flush=True)
        await measure_floor(runtime, testbed.busybox_image, work_dir, results)
        print("starting the control plane ...", file=sys.stderr, flush=True)
        with uninterruptible("starting the control plane"):
            await asyncio.to_thread(plane.start)
        results.server_version = plane.version
        admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
        api = client.CoreV1Api(admin)
        node_ip = host_ip()
        try:
            for side in (PYKUBELET, GO) if binary is not None else (PYKUBELET,):
                node = f"pvc-{side}-{secrets.token_hex(2)}"
                kubeconfig = await asyncio.to_thread(plane.node_kubeconfig, node)
                kubelet = new_kubelet(side, work_dir / side, testbed.endpoint,
                                      binary or Path(), node,
                                      [*KUBELET_ARGS, "--kubeconfig", str(kubeconfig),
                                       *(["--node-ip", node_ip] if node_ip else [])])
                print(f"{side} ...", file=sys.stderr, flush=True)
                figures = results.sides.setdefault(side, SideFigures())
                async with kubelet_turn(kubelet, runtime, kubelet_holder, None,
                                        functools.partial(remove_namespace_logs, prefix)):
                    await measure_side(plane, api, kubelet, f"{prefix}{side}",
                                       testbed.busybox_image, work_dir / "disks", results,
                                       figures)
                await asyncio.to_thread(unmount_pod_volumes)
                for kind, ns in (("node", []), ("lease", ["-n", "kube-node-lease"])):
                    await asyncio.to_thread(plane.kubectl, "delete", kind, *ns, node,
                                            "--ignore-not-found", "--wait=false", check=False)
        finally:
            await admin.close()
    finally:
        await runtime.close()


def p50(samples: Sequence[float]) -> float:
    return percentile(samples, 0.5) if samples else float("nan")


def render(results: Results) -> str:
    """A row a figure, pykubelet beside the Go kubelet (``-`` when it did not run)."""
    raw, create = p50(results.raw_ms), p50(results.api_create_ms)
    floor = raw + create
    py, go = results.sides.get(PYKUBELET), results.sides.get(GO)

    def row(label: str, figure: Callable[[SideFigures], float], fmt: str, *,
            compared: bool = False) -> Row:
        def cell(side: SideFigures | None) -> str:
            return "-" if side is None else format(figure(side), fmt)

        py_go = (f"{figure(py) / figure(go):.2f}"
                 if compared and py is not None and go is not None else "")
        return (label, cell(py), cell(go), py_go, f"{floor:.0f} ms" if compared else "")

    def run_row(label: str, kind: str) -> Row:
        def cell(side: SideFigures | None) -> str:
            if side is None:
                return "-"
            return f"{p50(side.ms[kind]):.0f} / {percentile(side.ms[kind], 0.99):.0f} ms"

        _, _, _, py_go, floor_cell = row(label, lambda f: p50(f.ms[kind]), ".0f",
                                         compared=True)
        return (label, cell(py), cell(go), py_go, floor_cell)

    rows = [
        run_row("emptyDir pod, p50 / p99", EMPTY_DIR),
        run_row("PVC pod (bound local PV), p50 / p99", PVC),
        row("PVC - emptyDir, p50 (ms)", lambda f: p50(f.ms[PVC]) - p50(f.ms[EMPTY_DIR]), "+.0f"),
        row("PVC / emptyDir, p50", lambda f: p50(f.ms[PVC]) / p50(f.ms[EMPTY_DIR]), ".2f"),
        row("emptyDir pod / floor, p50", lambda f: p50(f.ms[EMPTY_DIR]) / floor, ".2f"),
        row("PVC pod / floor, p50", lambda f: p50(f.ms[PVC]) / floor, ".2f"),
        row("FailedMount events", lambda f: f.failed_mounts, ".0f"),
    ]
    go_name = f"Go kubelet {results.go_version}" if go is not None else "Go kubelet (not run)"
    notes = [f"  first FailedMount ({name}): {side.first_failed_mount[:300]}"
             for name, side in (("pykubelet", py), ("Go kubelet", go))
             if side is not None and side.failed_mounts]
    return "\n".join([
        "pod with a bound local PV beside the same pod with an emptyDir, API create -> "
        f"Running in the API ({results.server_version}, spec.nodeName set, no scheduler)",
        f"  {results.runs} runs of each kind per kubelet, one pod at a time, a cold pair left "
        f"out; floor = raw CRI start p50 {raw:.0f} ms + API create round trip p50 "
        f"{create:.0f} ms",
        "",
        *table(("", "pykubelet", go_name, "py/Go", "floor"), rows),
        *notes,
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10,
                        help="pods of each kind per kubelet, after a cold pair (default 10)")
    parser.add_argument("--no-go", action="store_true",
                        help="pykubelet only, even when the Go kubelet 1.20 is built")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if os.geteuid() != 0:
        print("run as root (containerd, mounts)", file=sys.stderr)
        return 1
    if cached_binaries() is None:
        print("benchmark failed: no control plane binaries: run "
              "scripts/testbed/controlplane-build.sh", file=sys.stderr)
        return 1
    binary: Path | None = None
    results = Results(runs=args.runs)
    if not args.no_go:
        try:
            binary = go_kubelet_binary()
        except ControlPlaneError as err:
            print(f"pykubelet only: {err}", file=sys.stderr)
        if binary is not None:
            version = subprocess.run([str(binary), "--version"], capture_output=True,
                                     text=True, check=False).stdout.split()
            results.go_version = version[-1] if version else ""
    plane = ControlPlane.fresh()
    prefix = f"pvcb-{secrets.token_hex(3)}-"

    async def body(testbed: Testbed, work_dir: Path,
                   kubelet_holder: list[KubeletProcess]) -> None:
        await run_benchmark(testbed, work_dir, plane, binary, prefix, results, kubelet_holder)

    try:
        status = run_on_testbed(body, errors=(ControlPlaneError, ApiException))
    finally:
        with uninterruptible("stopping the control plane"):
            if plane.dir.exists():
                try:
                    plane.stop()
                except ControlPlaneError as err:
                    print(f"control plane stop failed: {err}", file=sys.stderr)
            remove_namespace_logs(prefix)
    if status == 0:
        print(render(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
