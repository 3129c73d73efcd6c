"""pykubelet side by side with the upstream Go kubelet (v1.20) on the same containerd.

Raw CRI calls are the floor; the Go kubelet is what a user would run
instead. Both kubelets run standalone (static pods from a manifests
directory, cgroupfs, no API server) on one private containerd 1.6
(``testsupport/testbed.py``), one at a time, in alternating order from round to
round so that a noisy stretch of time hits both alike. Each round also
measures the raw CRI floor first, with no kubelet running (a kubelet kills
pods it does not know).

What each kubelet goes through in a round, on a fresh root directory:

1. process start until ``/healthz`` answers ``ok`` (polled every ``--poll-ms``);
2. one pod, manifest written until its container started, ``--runs`` times
   (plus a first, cold run left out), each a second after the one before runs
   (so that no start meets the wake of the one before: the status writes,
   events and relist each kubelet does at its own time once a container
   started); the earlier pods keep running until the last has started, then
   all are removed;
3. ``--pods`` manifests written at once until every container is RUNNING,
   then (once ``/pods`` shows them Running) all removed at once until the
   runtime has no running container and no ready sandbox of theirs left
   (counting the pods whose container was gone within the 2 s grace period,
   which a kubelet that waits it out never kills so soon); then the same with
   ``--pods`` pods whose shell exits on SIGTERM, as most servers do, so that
   the deletion measures the kubelet's own teardown rather than the grace
   period (the raw floor stops them with the same calls);
4. ``--idle-pods`` pods running, CPU (user+system, all threads) over
   ``--idle-seconds`` and RSS, after ``--settle-seconds``.

"Running" and "gone" are seen on the runtime side, with the same CRI polls
for every side; "Running" is the container's ``startedAt`` in the runtime.
The pods are one busybox container running ``sleep`` with
``terminationGracePeriodSeconds: 0``, which both kubelets raise to their
minimum of 2 s (upstream's rule, also in v1.35): ``sleep`` as PID 1 ignores
SIGTERM, so every deletion but the SIGTERM one waits out those 2 s.

The Go kubelet is the binary built by ``scripts/testbed/controlplane-build.sh``
from Debian's ``kubernetes`` source (see ``testsupport/controlplane.py``). It is kept
from touching the host: no iptables chains, its own root, cert, log and
cgroupRoot; it runs in a mount namespace of its own where the six kernel settings
it would otherwise rewrite (``protectKernelDefaults: false``) are files already
holding the values it wants, so it finds nothing to change.

With ``--cluster`` (or ``--cluster-only``, which skips the standalone kubelets
but keeps the raw CRI floor), the same two kubelets then run as nodes of one
real control plane (``testsupport/controlplane.py``), one at a time, in alternating
order, each round under a new node name with that node's own client
certificate (``system:node:NAME``) and the same settings as above, plus the
host's address as ``--node-ip`` for both. Through the API, as a user sees it
(pods bound with ``spec.nodeName``, so the scheduler is not measured):
process start until the Node is Ready; one pod, API create until an admin
watch shows ``phase: Running`` (``--runs`` times after a cold one, each a
second after the one before was Running); ``--pods`` pods created at once
until all are Running; their CPU and RSS over
``--idle-seconds``; then all deleted through the API (their own grace period,
0, so the API forgets them at once) until the runtime has no running
container and no ready sandbox of theirs. The API calls' own round trips are
printed beside them as the floor. The control plane is removed at the end.

Prints the figures; exits 1 only when the measurement itself broke, 130 when
interrupted (see ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from bench.cluster_pod_startup import ApiRunningWatcher
from bench.cluster_pod_startup import pod_manifest as pod_for_node
from bench.harness import (
    KUBELET_ARGS,
    KUBELET_CONFIG,
    SINGLE_RUN_PAUSE_SECONDS,
    START_TIMEOUT_SECONDS,
    TERM_EXITING_COMMAND,
    BenchmarkError,
    RunningWatcher,
    check_alive,
    client_log_lines,
    measure_idle,
    percentile,
    pod_manifest,
    remove_all_sandboxes,
    run_on_testbed,
    time_raw_concurrent,
    time_raw_delete,
    time_raw_serial,
    time_raw_single,
    time_static_singles,
    uninterruptible,
    wait_all_reported_running,
    wait_pods_gone,
)
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime.container import MINIMUM_GRACE_PERIOD_SECONDS
from testsupport.cluster import host_ip
from testsupport.controlplane import ControlPlane, ControlPlaneError, go_kubelet_binary
from testsupport.go_kubelet import (
    GO_CONTAINER_LOGS,
    GO_POD_LOGS,
    GoKubeletProcess,
    remove_container_log_links,
)
from testsupport.kubelet_process import KubeletProcess
from testsupport.testbed import Testbed

PY_NODE = "peer-py"
GO_NODE = "peer-go"
def keep_log(kubelet: KubeletProcess, into: Path | None) -> None:
    """A copy of the kubelet's log, named after its work directory (``--keep-logs``)."""
    if into is not None and kubelet.log_file.exists():
        into.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kubelet.log_file, into / f"{kubelet.base.name}.log")


# --- figures --------------------------------------------------------------------------------------

@dataclass
class KubeletFigures:
    """What both modes measure of one kubelet, one entry per round (single-pod runs pooled)."""

    single_ms: list[float] = field(default_factory=list)
    single_p50_ms: list[float] = field(default_factory=list)
    many_ms: list[float] = field(default_factory=list)
    delete_ms: list[float] = field(default_factory=list)
    # Of the pods deleted (whose sleep ignores SIGTERM), how many had no running
    # container within MINIMUM_GRACE_PERIOD_SECONDS of their deletion: a kubelet that
    # honours the grace period cannot have killed any so soon.
    killed_early: list[float] = field(default_factory=list)
    idle_cpu_percent: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)


@dataclass
class SideFigures(KubeletFigures):
    """One standalone kubelet's figures."""

    start_s: list[float] = field(default_factory=list)
    # The pods' process exits on SIGTERM: no grace period to wait out.
    delete_term_ms: list[float] = field(default_factory=list)


@dataclass
class RawFigures:
    single_ms: list[float] = field(default_factory=list)
    single_p50_ms: list[float] = field(default_factory=list)
    serial_ms: list[float] = field(default_factory=list)
    concurrent_ms: list[float] = field(default_factory=list)
    delete_ms: list[float] = field(default_factory=list)
    delete_term_ms: list[float] = field(default_factory=list)


@dataclass
class ClusterSideFigures(KubeletFigures):
    """One kubelet's figures as a node of the control plane."""

    ready_s: list[float] = field(default_factory=list)
    single_runtime_p50_ms: list[float] = field(default_factory=list)


@dataclass
class ApiFloor:
    """The API server's own share: the calls the benchmark makes, answered (both sides)."""

    create_ms: list[float] = field(default_factory=list)
    create_p50_ms: list[float] = field(default_factory=list)
    many_create_ms: list[float] = field(default_factory=list)
    many_delete_ms: list[float] = field(default_factory=list)


@dataclass
class Results:
    rounds: int
    runs: int
    pods: int
    idle_pods: int
    idle_seconds: float
    go_version: str = ""
    py: SideFigures = field(default_factory=SideFigures)
    go: SideFigures = field(default_factory=SideFigures)
    raw: RawFigures = field(default_factory=RawFigures)
    order: list[str] = field(default_factory=list)
    client_log: dict[str, int] = field(default_factory=dict)
    cluster: bool = False
    server_version: str = ""
    cpy: ClusterSideFigures = field(default_factory=ClusterSideFigures)
    cgo: ClusterSideFigures = field(default_factory=ClusterSideFigures)
    api: ApiFloor = field(default_factory=ApiFloor)
    cluster_order: list[str] = field(default_factory=list)


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """The median over rounds, and the range when there is more than one round."""
    if not values:
        return "-"
    middle = fmt(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} ({fmt(min(values))}-{fmt(max(values))})"


def ratio(py: Sequence[float], go: Sequence[float]) -> str:
    if not py or not go or statistics.median(go) == 0:
        return "-"
    return f"{statistics.median(py) / statistics.median(go):.2f}"


def ms(value: float) -> str:
    return f"{value:.0f} ms"


def secs(value: float) -> str:
    return f"{value:.2f} s"


def pct(value: float) -> str:
    return f"{value:.2f} %"


def mib(value: float) -> str:
    return f"{value:.0f} MiB"


GRACE = f"{MINIMUM_GRACE_PERIOD_SECONDS} s grace"


def count(value: float) -> str:
    return f"{value:.0f}"


def in_seconds(values: Sequence[float]) -> list[float]:
    return [value / 1000 for value in values]


def pooled(samples: Sequence[float]) -> str:
    """p50 / p99 over every run of every round."""
    if not samples:
        return "-"
    return f"{percentile(samples, .5):.0f} / {percentile(samples, .99):.0f} ms"


Row = tuple[str, str, str, str, str]


def table(headers: Row, rows: Sequence[Row]) -> list[str]:
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(5)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in (headers, *rows)]


def render(results: Results) -> str:
    py, go, raw = results.py, results.go, results.raw
    rows: list[Row] = [
        (f"single pod, manifest -> RUNNING, p50 of {results.runs}",
         spread(py.single_p50_ms, ms), spread(go.single_p50_ms, ms),
         ratio(py.single_p50_ms, go.single_p50_ms), spread(raw.single_p50_ms, ms)),
        ("  (all rounds pooled: p50 / p99)", pooled(py.single_ms), pooled(go.single_ms), "",
         pooled(raw.single_ms)),
        (f"{results.pods} pods at once -> all RUNNING",
         spread(in_seconds(py.many_ms), secs), spread(in_seconds(go.many_ms), secs),
         ratio(py.many_ms, go.many_ms),
         f"{spread(in_seconds(raw.concurrent_ms), secs)} concurrent"),
        ("", "", "", "", f"{spread(in_seconds(raw.serial_ms), secs)} serial"),
        (f"delete {results.pods} pods -> none running/ready",
         spread(in_seconds(py.delete_ms), secs),
         spread(in_seconds(go.delete_ms), secs), ratio(py.delete_ms, go.delete_ms),
         f"{spread(in_seconds(raw.delete_ms), secs)} concurrent"),
        (f"  of the {results.pods}, killed within {GRACE}", spread(py.killed_early, count),
         spread(go.killed_early, count), "", f"({GRACE} minimum)"),
        (f"delete {results.pods} pods exiting on SIGTERM",
         spread(in_seconds(py.delete_term_ms), secs),
         spread(in_seconds(go.delete_term_ms), secs), ratio(py.delete_term_ms, go.delete_term_ms),
         f"{spread(in_seconds(raw.delete_term_ms), secs)} concurrent"),
        (f"idle CPU, {results.idle_pods} pods, % of a core",
         spread(py.idle_cpu_percent, pct), spread(go.idle_cpu_percent, pct),
         ratio(py.idle_cpu_percent, go.idle_cpu_percent), ""),
        (f"RSS, {results.idle_pods} pods (max over the window)", spread(py.rss_mib, mib),
         spread(go.rss_mib, mib), ratio(py.rss_mib, go.rss_mib), ""),
        ("process start -> healthz", spread(py.start_s, secs), spread(go.start_s, secs),
         ratio(py.start_s, go.start_s), ""),
    ]
    headers = ("", "pykubelet", f"Go kubelet {results.go_version}", "py/Go", "raw CRI")
    if not results.order:  # --cluster-only
        return "\n".join([*render_cluster(results), *client_log_lines(results.client_log)])
    lines = [
        "pykubelet beside the Go kubelet, standalone static pods on one containerd",
        f"  {results.rounds} round(s), order {' | '.join(results.order)}; median over rounds "
        "(min-max); flags --v=2, syncFrequency 1m, fileCheckFrequency 20s; "
        f"idle window {results.idle_seconds:g} s",
        "",
        *table(headers, rows),
    ]
    if results.cluster:
        lines += ["", *render_cluster(results)]
    return "\n".join([*lines, *client_log_lines(results.client_log)])


def render_cluster(results: Results) -> list[str]:
    py, go, raw, api = results.cpy, results.cgo, results.raw, results.api
    pods = results.pods
    rows: list[Row] = [
        (f"single pod, API create -> Running in the API, p50 of {results.runs}",
         spread(py.single_p50_ms, ms), spread(go.single_p50_ms, ms),
         ratio(py.single_p50_ms, go.single_p50_ms), f"{spread(raw.single_p50_ms, ms)} CRI"),
        ("  (all rounds pooled: p50 / p99)", pooled(py.single_ms), pooled(go.single_ms), "",
         f"{spread(api.create_p50_ms, ms)} API create"),
        ("  of which API create -> container RUNNING, p50", spread(py.single_runtime_p50_ms, ms),
         spread(go.single_runtime_p50_ms, ms),
         ratio(py.single_runtime_p50_ms, go.single_runtime_p50_ms), ""),
        (f"{pods} pods created at once -> all Running in the API",
         spread(in_seconds(py.many_ms), secs), spread(in_seconds(go.many_ms), secs),
         ratio(py.many_ms, go.many_ms),
         f"{spread(in_seconds(raw.concurrent_ms), secs)} CRI concurrent"),
        ("", "", "", "", f"{spread(in_seconds(api.many_create_ms), secs)} {pods} API creates"),
        (f"API delete of {pods} pods -> none running/ready",
         spread(in_seconds(py.delete_ms), secs), spread(in_seconds(go.delete_ms), secs),
         ratio(py.delete_ms, go.delete_ms),
         f"{spread(in_seconds(api.many_delete_ms), secs)} {pods} API deletes"),
        (f"  of the {pods}, killed within {GRACE}", spread(py.killed_early, count),
         spread(go.killed_early, count), "", f"({GRACE} minimum)"),
        (f"idle CPU, {pods} pods, % of a core", spread(py.idle_cpu_percent, pct),
         spread(go.idle_cpu_percent, pct), ratio(py.idle_cpu_percent, go.idle_cpu_percent), ""),
        (f"RSS, {pods} pods (max over the window)", spread(py.rss_mib, mib),
         spread(go.rss_mib, mib), ratio(py.rss_mib, go.rss_mib), ""),
        ("process start -> Node Ready in the API", spread(py.ready_s, secs),
         spread(go.ready_s, secs), ratio(py.ready_s, go.ready_s), ""),
    ]
    headers = ("", "pykubelet", f"Go kubelet {results.go_version}", "py/Go", "floor")
    return [
        f"the same two kubelets as nodes of one control plane ({results.server_version}), "
        "pods bound with spec.nodeName (no scheduler)",
        f"  {results.rounds} round(s), order {' | '.join(results.cluster_order)}; "
        "Running seen through an admin watch; node status every 10 s (default); "
        f"idle window {results.idle_seconds:g} s",
        "",
        *table(headers, rows),
    ]


# --- one round of one kubelet ---------------------------------------------------------------------

async def time_start(kubelet: KubeletProcess, poll_seconds: float) -> float:
    """Seconds from spawning the process until /healthz first answers ok."""
    started = time.monotonic()
    starting = asyncio.create_task(asyncio.to_thread(kubelet.start))
    healthy_at: float | None = None
    while healthy_at is None and not starting.done():
        if await asyncio.to_thread(kubelet.healthz) == "ok":
            healthy_at = time.monotonic()
        else:
            await asyncio.sleep(poll_seconds)
    await starting
    return (healthy_at or time.monotonic()) - started


def killed_early(exited: dict[str, float], deleted_at: float) -> int:
    """How many pods had no running container before a grace period of the minimum
    could have run out after ``deleted_at``."""
    return sum(1 for at in exited.values() if at - deleted_at < MINIMUM_GRACE_PERIOD_SECONDS)


async def time_delete(runtime: RemoteRuntimeService, kubelet: KubeletProcess,
                      names: Sequence[str], paths: Sequence[Path],
                      poll_seconds: float) -> tuple[float, int]:
    """Once ``/pods`` shows the pods Running: ms from removing their manifests until the
    runtime has none of them running or ready, and how many were killed early."""
    node = kubelet.node_name
    await wait_all_reported_running(kubelet, names, node, poll_seconds * 5)
    started = time.monotonic()
    for path in paths:
        path.unlink()
    exited: dict[str, float] = {}
    gone_at = await wait_pods_gone(runtime, [f"{name}-{node}" for name in names], poll_seconds,
                                   kubelet, exited=exited)
    return (gone_at - started) * 1000, killed_early(exited, started)


async def measure_side(runtime: RemoteRuntimeService, kubelet: KubeletProcess, image: str,
                       args: argparse.Namespace, figures: SideFigures) -> None:
    poll_seconds = args.poll_ms / 1000
    node = kubelet.node_name
    figures.start_s.append(await time_start(kubelet, poll_seconds))
    assert kubelet.process is not None
    async with RunningWatcher(runtime, poll_seconds) as watcher:
        # The first pod pays one-off costs (the kubelet's first sync of a pod): left out.
        await time_static_singles(runtime, watcher, kubelet, image, ["cold"], poll_seconds)
        singles = await time_static_singles(runtime, watcher, kubelet, image,
                                            [f"single-{run}" for run in range(args.runs)],
                                            poll_seconds)
        figures.single_ms += singles
        figures.single_p50_ms.append(percentile(singles, 0.5))

        names = [f"many-{i}" for i in range(args.pods)]
        started = time.monotonic()
        paths = [kubelet.write_pod(pod_manifest(name, image)) for name in names]
        running = await watcher.wait_running([f"{name}-{node}" for name in names], kubelet)
        figures.many_ms.append((max(running) - started) * 1000)
    delete_ms, early = await time_delete(runtime, kubelet, names, paths, poll_seconds)
    figures.delete_ms.append(delete_ms)
    figures.killed_early.append(early)

    names = [f"term-{i}" for i in range(args.pods)]
    paths = [kubelet.write_pod(pod_manifest(name, image, TERM_EXITING_COMMAND))
             for name in names]
    delete_ms, _ = await time_delete(runtime, kubelet, names, paths, poll_seconds)
    figures.delete_term_ms.append(delete_ms)

    names = [f"idle-{i}" for i in range(args.idle_pods)]
    paths = [kubelet.write_pod(pod_manifest(name, image)) for name in names]
    await wait_all_reported_running(kubelet, names, node, 0.5)
    await asyncio.sleep(args.settle_seconds)
    idle = await measure_idle(kubelet.process.pid, args.idle_seconds)
    check_alive(kubelet)
    figures.idle_cpu_percent.append(idle.cpu_percent)
    figures.rss_mib.append(idle.rss_max_kib / 1024)
    for path in paths:
        path.unlink()
    await wait_pods_gone(runtime, [f"{name}-{node}" for name in names], poll_seconds, kubelet,
                         timeout=120)


async def measure_raw(runtime: RemoteRuntimeService, image: str, work_dir: Path,
                      args: argparse.Namespace, figures: RawFigures, round_index: int) -> None:
    poll_seconds = args.poll_ms / 1000
    async with RunningWatcher(runtime, poll_seconds) as watcher:
        prefix = f"raw{round_index}"
        await time_raw_single(runtime, watcher, image, work_dir, f"{prefix}-cold")
        singles = [await time_raw_single(runtime, watcher, image, work_dir,
                                         f"{prefix}-single-{run}") for run in range(args.runs)]
        figures.single_ms += singles
        figures.single_p50_ms.append(percentile(singles, 0.5))
        serial, _ = await time_raw_serial(runtime, watcher, image, work_dir, f"{prefix}-serial",
                                          args.pods)
        figures.serial_ms.append(serial)
        concurrent, _ = await time_raw_concurrent(runtime, watcher, image, work_dir,
                                                  f"{prefix}-concurrent", args.pods)
        figures.concurrent_ms.append(concurrent)
        figures.delete_ms.append(await time_raw_delete(runtime, f"{prefix}-concurrent",
                                                       args.pods, poll_seconds))
        await time_raw_concurrent(runtime, watcher, image, work_dir, f"{prefix}-term",
                                  args.pods, TERM_EXITING_COMMAND)
        figures.delete_term_ms.append(await time_raw_delete(runtime, f"{prefix}-term",
                                                            args.pods, poll_seconds))
        await remove_all_sandboxes(runtime)


# --- cluster mode ---------------------------------------------------------------------------------

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
    deadline = time.monotonic() + 60
    while True:
        try:
            await api.read_namespaced_service_account("default", name)
            return
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


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
        figures.ready_s.append(await time_node_ready(api, kubelet, poll_seconds * 5))
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
        singles = [running for running, _, _ in runs]
        figures.single_ms += singles
        figures.single_p50_ms.append(percentile(singles, 0.5))
        figures.single_runtime_p50_ms.append(percentile([c for _, _, c in runs], 0.5))
        creates = [created for _, created, _ in runs]
        floor.create_ms += creates
        floor.create_p50_ms.append(percentile(creates, 0.5))

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
    image = testbed.busybox_image
    try:
        for round_index in range(args.rounds):
            sides = ["pykubelet", "go"] if round_index % 2 == 0 else ["go", "pykubelet"]
            results.cluster_order.append(", ".join(sides))
            for side in sides:
                base = work_dir / f"cluster-{side}{round_index}"
                # A Node of its own every round: the last round's stays Ready for a while.
                node = f"{GO_NODE if side == 'go' else PY_NODE}-{round_index}"
                kubeconfig = await asyncio.to_thread(plane.node_kubeconfig, node)
                cluster_args = [*KUBELET_ARGS, "--kubeconfig", str(kubeconfig), *ip_args]
                kubelet: KubeletProcess
                if side == "go":
                    kubelet = GoKubeletProcess(base, testbed.endpoint, binary, node,
                                               KUBELET_CONFIG, cluster_args)
                    figures = results.cgo
                else:
                    kubelet = KubeletProcess(base, testbed.endpoint, extra_config=KUBELET_CONFIG,
                                             extra_args=cluster_args, node_name=node)
                    figures = results.cpy
                kubelet_holder.append(kubelet)
                print(f"cluster round {round_index + 1}: {side} ...", file=sys.stderr,
                      flush=True)
                try:
                    await measure_cluster_side(api, runtime, kubelet,
                                               f"{args.namespace_prefix}{side}{round_index}",
                                               image, args, figures, results.api)
                finally:
                    await asyncio.to_thread(kubelet.stop)
                    keep_log(kubelet, args.keep_logs)
                    await remove_all_sandboxes(runtime)
                    remove = getattr(kubelet, "remove_leftovers", None)
                    if remove is not None:
                        await asyncio.to_thread(remove)
                    remove_namespace_logs(args.namespace_prefix)
    finally:
        await runtime.close()
        await admin.close()


async def run_benchmark(testbed: Testbed, work_dir: Path, args: argparse.Namespace,
                        results: Results, binary: Path, plane: ControlPlane | None,
                        kubelet_holder: list[KubeletProcess]) -> None:
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    image = testbed.busybox_image
    try:
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}: raw CRI ...", file=sys.stderr, flush=True)
            await measure_raw(runtime, image, work_dir, args, results.raw, round_index)
            sides = ["pykubelet", "go"] if round_index % 2 == 0 else ["go", "pykubelet"]
            if args.cluster_only:
                continue  # the raw CRI floor only, for the cluster table
            results.order.append(", ".join(sides))
            for side in sides:
                base = work_dir / f"{side}{round_index}"
                kubelet: KubeletProcess
                if side == "go":
                    kubelet = GoKubeletProcess(base, testbed.endpoint, binary, GO_NODE,
                                               KUBELET_CONFIG, KUBELET_ARGS)
                    figures = results.go
                else:
                    kubelet = KubeletProcess(base, testbed.endpoint, extra_config=KUBELET_CONFIG,
                                             extra_args=KUBELET_ARGS, node_name=PY_NODE)
                    figures = results.py
                kubelet_holder.append(kubelet)
                print(f"round {round_index + 1}: {side} ...", file=sys.stderr, flush=True)
                try:
                    await measure_side(runtime, kubelet, image, args, figures)
                finally:
                    await asyncio.to_thread(kubelet.stop)
                    keep_log(kubelet, args.keep_logs)
                    await remove_all_sandboxes(runtime)
                    remove = getattr(kubelet, "remove_leftovers", None)
                    if remove is not None:
                        await asyncio.to_thread(remove)
                    remove_container_log_links(kubelet.node_name)
    finally:
        await runtime.close()
    if plane is not None:
        await run_cluster(testbed, work_dir, args, results, binary, plane, kubelet_holder)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="pykubelet beside the upstream Go kubelet 1.20 and raw CRI calls.")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds, each kubelet once per round, order alternating (default 2)")
    parser.add_argument("--runs", type=int, default=15,
                        help="single-pod runs per kubelet per round (default 15)")
    parser.add_argument("--pods", type=int, default=30,
                        help="pods written, then removed, at once (default 30)")
    parser.add_argument("--idle-pods", type=int, default=100,
                        help="pods running during the idle window (default 100)")
    parser.add_argument("--idle-seconds", type=float, default=30.0,
                        help="idle window for CPU and RSS (default 30)")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="wait after the idle pods report Running (default 10)")
    parser.add_argument("--poll-ms", type=float, default=20.0,
                        help="period of the CRI polls that see RUNNING and gone (default 20)")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="copy every kubelet's own log into DIR before it is removed")
    parser.add_argument("--cluster", action="store_true",
                        help="after the standalone rounds, as many rounds with both kubelets as "
                             "nodes of one real control plane (API pods; --pods pods idle)")
    parser.add_argument("--cluster-only", action="store_true",
                        help="the cluster rounds and the raw CRI floor, no standalone kubelets")
    args = parser.parse_args(argv)
    args.cluster = args.cluster or args.cluster_only
    # The benchmark's API namespaces (and so its pod log names) start with this.
    args.namespace_prefix = f"peer-{secrets.token_hex(3)}-"
    if min(args.rounds, args.runs, args.pods, args.idle_pods) < 1 or args.idle_seconds <= 0 \
            or args.poll_ms <= 0:
        parser.error("--rounds, --runs, --pods, --idle-pods must be >= 1; "
                     "--idle-seconds and --poll-ms > 0")
    if args.idle_pods > 105:
        parser.error("--idle-pods at most 105 (both kubelets default to maxPods 110)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("run as root (containerd, cgroups, mount namespaces)", file=sys.stderr)
        return 1
    try:
        binary = go_kubelet_binary()
    except ControlPlaneError as err:
        print(f"benchmark failed: {err}", file=sys.stderr)
        return 1
    # Built with the Go kubelet, by the same script; this run never builds.
    plane = ControlPlane.fresh() if args.cluster else None
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             check=False).stdout.split()
    results = Results(rounds=args.rounds, runs=args.runs, pods=args.pods,
                      idle_pods=args.idle_pods, idle_seconds=args.idle_seconds,
                      go_version=version[-1] if version else "", cluster=args.cluster)

    async def body(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
        await run_benchmark(testbed, work_dir, args, results, binary, plane, kubelet_holder)

    try:
        status = run_on_testbed(body, results.client_log, errors=(ControlPlaneError,
                                                                  ApiException))
    finally:
        # After the kubelets, their pods and containerd are gone (run_on_testbed's clean-up).
        with uninterruptible("stopping the control plane"):
            if plane is not None and plane.dir.exists():
                try:
                    plane.stop()
                except ControlPlaneError as err:
                    print(f"control plane stop failed: {err}", file=sys.stderr)
            if args.cluster:
                remove_namespace_logs(args.namespace_prefix)
    if status == 0:
        print(render(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
