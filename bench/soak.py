"""Churn soak: pods created and deleted through the API at a steady rate, for a long time.

A kubelet runs for months; this shows whether what it holds grows with the
number of pods it has seen. One real control plane
(``testsupport/controlplane.py``) and the testbed's containerd; the kubelet
(pykubelet, the Go kubelet 1.20, or both one after the other, as
``bench/peer.py`` runs them: ``bench/peer_rounds.py``) is a node of it, and the
benchmark creates pods bound to that node at ``--rate`` pods a second for
``--minutes``, each deleted ``--pod-seconds`` after it was created, so the
number of live pods stays bounded. The pods cycle through a mix
(``MIX``): plain pods, a pod with a ConfigMap, a Secret and a projected
service-account token volume, a pod with a readiness probe, a pod whose
container fails and is restarted, and a pod deleted while it starts.

Per window of ``--window-minutes``: pods started (first seen ``phase:
Running`` by an admin watch), create -> Running p50/p99 of the pods created
in the window, the kubelet's RSS, open fds, threads and CPU % of one core,
and its task count: pykubelet's ``pykubelet_asyncio_tasks`` gauge, the Go
kubelet's ``go_goroutines``, both from ``/metrics`` on the read-only port.

Before the churn (the node Ready, a quiet ``--quiet-seconds``) and after it
(every pod gone from the API, then as quiet a while), what the kubelet holds
is counted (``Leftovers``): pod directories under its root directory, pod
cgroups under its cgroupRoot in every mounted hierarchy, CNI host-local leases
of the benchmark's pods (lease files, in the directory the testbed's
``host-local`` IPAM keeps them, that name one of the pods' IPs or sandboxes),
sandboxes and containers in the runtime, mounts below the root directory, the
watches the API server holds open (all clients of the benchmark's private
control plane), the kubelet's TCP connections to the API server (pykubelet
holds one per watch plus idle pooled ones; the Go client multiplexes over one
HTTP/2 connection), and for pykubelet the entries of its in-memory tables
(status manager, pod workers, probe workers, pod cache, PLEG, ConfigMap and
Secret managers; the ``pykubelet_tracked_pods`` gauge, which this benchmark
introduced with ``pykubelet_asyncio_tasks``).

Pass: every leftover back to its value before; RSS and fds of the last
window within ``FLAT_TOLERANCE`` of the second (the first is warm-up); p99
create -> Running within the pod-start SLO (5 s, images present).

Per pod lifecycle, for each kubelet and as their ratio when both ran
(``per_pod_table``): CPU seconds, create -> Running p50/p99, the API requests
the API server audited for the kubelet's node user by verb and resource
(``bench/audit.py``: the control plane runs with its audit log on), and the
watch events the API server sent, by kind (``apiserver_watch_events_total``
deltas: every watcher of the private control plane, which differ between the
two kubelets only by the kubelet, as they run one at a time), counted from the
first create until ``COUNT_TAIL_SECONDS`` after the API forgot the last pod.

With ``--events-sample N``, the Events of the namespace are listed once the
churn is over and their number has stopped changing (a kubelet may still be
writing a backlog: the Go kubelet 1.20's own event client is limited to
``eventRecordQPS``), and printed per kubelet: the Event objects and their
``count`` per pod by pod kind, reason and ``fieldPath``, and every event of the
first N pods (``events_tables``).

Prints the tables; exits 1 only when the measurement itself broke, 130 when
interrupted (see ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from bench import audit
from bench.harness import (
    API_CLIENT_SETTINGS,
    KUBELET_ARGS,
    BenchmarkError,
    check_alive,
    cpu_seconds,
    percentile,
    rss_kib,
    run_on_testbed,
    uninterruptible,
    verdict,
)
from bench.peer_cluster import create_namespace, remove_namespace_logs, time_node_ready
from bench.peer_figures import GO, PYKUBELET
from bench.peer_rounds import kubelet_turn, new_kubelet
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.cluster import host_ip
from testsupport.controlplane import ControlPlane, ControlPlaneError, go_kubelet_binary
from testsupport.kubelet_process import KubeletProcess
from testsupport.podwatch import ApiRunningWatcher
from testsupport.soak import (
    CONFIG_MAP,
    DELETED_STARTING,
    MIX,
    NODE_ROWS,
    SECRET,
    TABLE_ROWS,
    Churn,
    kubelet_metrics,
    node_leftovers,
    pod_cgroups_by_hierarchy,
    pod_life,
    read_metric,
)
from testsupport.testbed import Testbed

POD_START_SLO_SECONDS = 5.0
# RSS and fds count as flat when the last window is within this fraction of the second.
FLAT_TOLERANCE = 0.05
SAMPLE_SECONDS = 1.0
# The request and watch event counts run until this long after the API forgot the last
# pod: the status manager's periodic sync (10 s) has then seen every pod gone.
COUNT_TAIL_SECONDS = 10.0
# --events-sample: the namespace's events are read once their number stayed the same this
# long (or after EVENTS_SETTLE_TIMEOUT).
EVENTS_SETTLE_SECONDS = 5.0
EVENTS_SETTLE_TIMEOUT = 180.0
PY_SOAK_NODE, GO_SOAK_NODE = "soak-py", "soak-go"


# --- what the kubelet holds -----------------------------------------------------------------------

def task_count(side: str, metrics_text: str) -> float | None:
    """pykubelet's asyncio tasks, or the Go kubelet's goroutines."""
    return read_metric(metrics_text, "go_goroutines" if side == GO else "pykubelet_asyncio_tasks")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status_file:
        for line in status_file:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise BenchmarkError(f"no Threads in /proc/{pid}/status")


def tcp_connections_to(pid: int, port: int) -> int:
    """Established TCP connections of ``pid`` to any address on ``port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}",
                                                encoding="ascii") as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


def apiserver_watch_events(plane: ControlPlane) -> dict[str, float]:
    """The API server's ``apiserver_watch_events_total`` by kind."""
    return audit.watch_events(plane.kubectl("get", "--raw", "/metrics").stdout)


def audited_requests(plane: ControlPlane, node_name: str, since: datetime,
                     until: datetime) -> dict[str, int] | None:
    """The node's requests the API server received in [since, until), by "verb resource";
    None when the control plane keeps no audit log."""
    log = plane.env.get(audit.AUDIT_LOG_KEY)
    if not log:
        return None
    return dict(audit.count(audit.select(audit.read_log(Path(log)),
                                         user=audit.node_user(node_name),
                                         since=since, until=until)))


def apiserver_watches(plane: ControlPlane) -> int:
    """Watches the API server holds open, from every client (its ``apiserver_longrunning_gauge``
    of verb WATCH): on the benchmark's private control plane the other clients' watches stay
    the same before and after, so a change is the kubelet's."""
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    return int(sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
                   if line.startswith("apiserver_longrunning_gauge{") and 'verb="WATCH"' in line))


LEFT_ROWS = (*NODE_ROWS, "API watches (API server, all clients)",
             "TCP connections to the API server", *TABLE_ROWS)


async def count_leftovers(side: str, kubelet: KubeletProcess, runtime: RemoteRuntimeService,
                          plane: ControlPlane, pod_ips: set[str],
                          sandbox_ids: set[str]) -> dict[str, float | None]:
    """Every ``LEFT_ROWS`` count (None: the kubelet has no such table). The private
    containerd holds only this kubelet's sandboxes and containers, so all count."""
    assert kubelet.process is not None
    counts = await node_leftovers(kubelet, runtime, pod_ips=pod_ips, sandbox_ids=sandbox_ids,
                                  pykubelet_tables=side != GO)
    counts["API watches (API server, all clients)"] = await asyncio.to_thread(
        apiserver_watches, plane)
    counts["TCP connections to the API server"] = tcp_connections_to(
        kubelet.process.pid, int(plane.server.rsplit(":", 1)[1].rstrip("/")))
    return {row: counts[row] for row in LEFT_ROWS}


# --- windows --------------------------------------------------------------------------------------

@dataclass
class Window:
    start_s: float
    end_s: float
    created: int = 0
    started: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    never_running: int = 0
    rss_mib: float = 0.0
    rss_max_mib: float = 0.0
    fds: int = 0
    tasks: float | None = None
    threads: int = 0
    cpu_percent: float = 0.0


@dataclass
class SideResult:
    side: str
    minutes: float
    rate: float
    windows: list[Window] = field(default_factory=list)
    before: dict[str, float | None] = field(default_factory=dict)
    after: dict[str, float | None] = field(default_factory=dict)
    pods_created: int = 0
    create_errors: int = 0
    server_version: str = ""
    # Pod cgroups per hierarchy after the run, where any is left.
    cgroups_left: dict[str, int] = field(default_factory=dict)
    # What the API server counted from the first create to COUNT_TAIL_SECONDS after the
    # last pod was gone: the kubelet's requests by "verb resource" (None: no audit log),
    # and the watch events it sent by kind.
    requests: dict[str, int] | None = None
    watch_events: dict[str, float] = field(default_factory=dict)
    # --events-sample: the namespace's events, and each pod's kind and creation order.
    events: list[PodEvent] = field(default_factory=list)
    pod_kinds: dict[str, str] = field(default_factory=dict)
    events_settled: bool = True


@dataclass(frozen=True)
class PodEvent:
    """One Event object about a pod, as the API server keeps it."""

    pod: str
    type: str
    reason: str
    message: str
    count: int
    field_path: str
    component: str


async def settled_events(api: client.CoreV1Api, namespace: str) -> tuple[list[PodEvent], bool]:
    """The namespace's events about pods, once their number and counts stopped changing
    for EVENTS_SETTLE_SECONDS; and whether they did before EVENTS_SETTLE_TIMEOUT."""
    deadline = time.monotonic() + EVENTS_SETTLE_TIMEOUT
    last: tuple[int, int] | None = None
    stable_since = time.monotonic()
    while True:
        listed = await api.list_namespaced_event(namespace)
        events = [PodEvent(pod=e.involved_object.name or "", type=e.type or "",
                           reason=e.reason or "", message=e.message or "", count=e.count or 1,
                           field_path=e.involved_object.field_path or "",
                           component=(e.source.component if e.source else "") or "")
                  for e in listed.items if e.involved_object.kind == "Pod"]
        now = time.monotonic()
        shape = (len(events), sum(e.count for e in events))
        if shape != last:
            last, stable_since = shape, now
        elif now - stable_since >= EVENTS_SETTLE_SECONDS:
            return events, True
        if now >= deadline:
            return events, False
        await asyncio.sleep(1.0)


async def sample_process(side: str, kubelet: KubeletProcess, window: Window,
                         cpu_before: float, started: float) -> None:
    assert kubelet.process is not None
    pid = kubelet.process.pid
    window.rss_mib = rss_kib(pid) / 1024
    window.fds = open_fds(pid)
    window.threads = threads(pid)
    window.tasks = task_count(side, await asyncio.to_thread(kubelet_metrics, kubelet))
    window.cpu_percent = 100 * (cpu_seconds(pid) - cpu_before) / (time.monotonic() - started)


async def churn_windows(*, api: client.CoreV1Api, runtime: RemoteRuntimeService, side: str,
                        kubelet: KubeletProcess, namespace: str, image: str,
                        args: argparse.Namespace,
                        sandbox_ids: set[str]) -> tuple[list[Window], Churn]:
    """Pods at ``args.rate`` for ``args.minutes``; the figures of every window."""
    assert kubelet.process is not None
    pid = kubelet.process.pid
    churn = Churn()
    total = args.minutes * 60
    window_s = args.window_minutes * 60
    bounds = [(start, min(start + window_s, total))
              for start in (i * window_s for i in range(int(-(-total // window_s))))]
    windows = [Window(start, end) for start, end in bounds]
    began = time.monotonic()
    index = 0
    for window in windows:
        cpu_before, window_began = cpu_seconds(pid), time.monotonic()
        while (due := began + index / args.rate) < began + window.end_s:
            check_alive(kubelet)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            name = f"soak-{index}"
            task = asyncio.create_task(pod_life(
                api, namespace, name, MIX[index % len(MIX)], kubelet.node_name, image, churn,
                args.pod_seconds), name=f"pod-life-{name}")
            churn.tasks.add(task)
            task.add_done_callback(churn.tasks.discard)
            window.created += 1
            index += 1
            if index % int(max(1, args.rate)) == 0:
                sandbox_ids.update(s.id for s in await runtime.list_pod_sandboxes())
            window.rss_max_mib = max(window.rss_max_mib, rss_kib(pid) / 1024)
        await asyncio.sleep(max(0.0, began + window.end_s - time.monotonic()))
        await sample_process(side, kubelet, window, cpu_before, window_began)
        print(f"  {side}: window {window.start_s / 60:g}-{window.end_s / 60:g} min, "
              f"{window.created} pods created", file=sys.stderr, flush=True)
    return windows, churn


def fill_latencies(windows: Sequence[Window], churn: Churn, watcher: ApiRunningWatcher,
                   began: float) -> None:
    """Pods started per window (first Running), and create -> Running of those created in it."""
    def window_of(at: float) -> Window | None:
        return next((w for w in windows if w.start_s <= at - began < w.end_s), None)

    for running_at in watcher.first_running.values():
        if (window := window_of(running_at)) is not None:
            window.started += 1
    for name, created_at in churn.created_at.items():
        window = window_of(created_at)
        if window is None or churn.kinds[name] == DELETED_STARTING:
            continue
        if name in watcher.first_running:
            window.latencies_ms.append((watcher.first_running[name] - created_at) * 1000)
        else:
            window.never_running += 1


# --- one side -------------------------------------------------------------------------------------

async def soak_side(*, api: client.CoreV1Api, runtime: RemoteRuntimeService, side: str,
                    kubelet: KubeletProcess, namespace: str, image: str, plane: ControlPlane,
                    args: argparse.Namespace) -> SideResult:
    result = SideResult(side, args.minutes, args.rate, server_version=plane.version)
    await create_namespace(api, namespace)
    await api.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=CONFIG_MAP), data={"key": "value"}))
    await api.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET), string_data={"key": "value"}))
    watcher = ApiRunningWatcher(api, namespace)
    await watcher.start()
    sandbox_ids: set[str] = set()
    try:
        await time_node_ready(api, kubelet, 0.1)
        await asyncio.sleep(args.quiet_seconds)
        result.before = await count_leftovers(side, kubelet, runtime, plane, watcher.pod_ips,
                                              sandbox_ids)
        events_before = await asyncio.to_thread(apiserver_watch_events, plane)
        counted_from = datetime.now(UTC)
        began = time.monotonic()
        windows, churn = await churn_windows(
            api=api, runtime=runtime, side=side, kubelet=kubelet, namespace=namespace,
            image=image, args=args, sandbox_ids=sandbox_ids)
        if churn.tasks:
            await asyncio.gather(*churn.tasks)
        await watcher.wait_gone(list(churn.created_at), timeout=120)
        fill_latencies(windows, churn, watcher, began)
        result.windows, result.pods_created, result.create_errors = (
            windows, len(churn.created_at), churn.errors)
        print(f"  {side}: quiet for {args.quiet_seconds:g} s ...", file=sys.stderr, flush=True)
        tail = min(COUNT_TAIL_SECONDS, args.quiet_seconds)
        await asyncio.sleep(tail)
        counted_to = datetime.now(UTC)
        result.watch_events = audit.delta(
            await asyncio.to_thread(apiserver_watch_events, plane), events_before)
        await asyncio.sleep(args.quiet_seconds - tail)
        result.requests = await asyncio.to_thread(audited_requests, plane, kubelet.node_name,
                                                  counted_from, counted_to)
        if args.events_sample:
            result.events, result.events_settled = await settled_events(api, namespace)
            result.pod_kinds = dict(churn.kinds)
        check_alive(kubelet)
        result.after = await count_leftovers(side, kubelet, runtime, plane, watcher.pod_ips,
                                             sandbox_ids)
        result.cgroups_left = {hierarchy: count for hierarchy, count in (
            await asyncio.to_thread(pod_cgroups_by_hierarchy, kubelet.cgroup_root)).items()
            if count}
    finally:
        await watcher.stop()
        with contextlib.suppress(ApiException):
            await api.delete_namespace(namespace)
    return result


# --- the tables -----------------------------------------------------------------------------------

def flat(windows: Sequence[Window], value: str) -> tuple[bool, float]:
    """Is the last window's ``value`` within FLAT_TOLERANCE of the second's (the first is
    warm-up; with two windows, of the first)? And the relative change."""
    reference = windows[1] if len(windows) > 2 else windows[0]
    first, last = getattr(reference, value), getattr(windows[-1], value)
    change = (last - first) / first if first else 0.0
    return abs(change) <= FLAT_TOLERANCE, change


def render_side(result: SideResult) -> list[str]:
    windows = result.windows
    lines = [f"{result.side}: {result.minutes:g} min at {result.rate:g} pods/s "
             f"({result.pods_created} pods created, {result.create_errors} creates refused), "
             f"mix {', '.join(MIX)}",
             f"  {'window min':>10} {'started':>8} {'p50 ms':>8} {'p99 ms':>8} {'late':>5} "
             f"{'RSS MiB':>8} {'max MiB':>8} {'fds':>5} {'tasks':>6} {'thr':>4} {'CPU %':>6}"]
    for w in windows:
        p50 = f"{percentile(w.latencies_ms, 0.5):8.0f}" if w.latencies_ms else f"{'-':>8}"
        p99 = f"{percentile(w.latencies_ms, 0.99):8.0f}" if w.latencies_ms else f"{'-':>8}"
        tasks = f"{w.tasks:6.0f}" if w.tasks is not None else f"{'-':>6}"
        lines.append(f"  {f'{w.start_s / 60:g}-{w.end_s / 60:g}':>10} {w.started:8d} {p50} "
                     f"{p99} {w.never_running:5d} {w.rss_mib:8.1f} {w.rss_max_mib:8.1f} "
                     f"{w.fds:5d} {tasks} {w.threads:4d} {w.cpu_percent:6.1f}")
    lines.append("  (tasks: asyncio tasks for pykubelet, goroutines for the Go kubelet; late: "
                 "created in the window, never Running before deletion)")
    left_lines, left_ok = render_leftovers(result.before, result.after, result.cgroups_left)
    lines += ["", *left_lines]
    all_ms = [ms for w in windows for ms in w.latencies_ms]
    run_p99 = percentile(all_ms, 0.99) if all_ms else float("inf")
    rss_ok, rss_change = flat(windows, "rss_mib")
    fds_ok, fds_change = flat(windows, "fds")
    lines += ["",
              f"  every leftover back to its value before: {verdict(left_ok)}",
              f"  RSS last window vs {'second' if len(windows) > 2 else 'first'}: "
              f"{rss_change:+.1%} (within {FLAT_TOLERANCE:.0%}) {verdict(rss_ok)}",
              f"  fds last window vs {'second' if len(windows) > 2 else 'first'}: "
              f"{fds_change:+.1%} (within {FLAT_TOLERANCE:.0%}) {verdict(fds_ok)}",
              f"  CPU per pod lifecycle (create -> Running -> delete -> gone): "
              f"{cpu_per_pod(result):.3f} CPU-s (mean CPU of the windows / the create rate)",
              f"  create -> Running p99 over the run: {run_p99:.0f} ms "
              f"(SLO {POD_START_SLO_SECONDS * 1000:.0f} ms) "
              f"{verdict(run_p99 <= POD_START_SLO_SECONDS * 1000)}"]
    return lines


def cpu_per_pod(result: SideResult) -> float:
    """CPU seconds per pod lifecycle: in steady churn each window starts and ends
    ``rate`` pods a second, so a core fraction over the rate is seconds per pod."""
    if not result.windows or result.rate <= 0:
        return float("nan")
    mean = sum(w.cpu_percent for w in result.windows) / len(result.windows)
    return mean / 100 / result.rate


def render_leftovers(before: Mapping[str, float | None], after: Mapping[str, float | None],
                     cgroups_left: Mapping[str, int]) -> tuple[list[str], bool]:
    """The "left" table (each ``LEFT_ROWS`` count before and after, pod cgroups left by
    hierarchy) and whether every count is back to its value before; shared with
    ``bench/faults.py``."""
    lines = [f"  {'left after a quiet minute':36} {'before':>7} {'after':>7}"]
    left_ok = True
    for row in LEFT_ROWS:
        was, now = before.get(row), after.get(row)
        if was is None and now is None:
            continue
        same = was == now
        left_ok &= same
        lines.append(f"  {row:36} {_count(was):>7} {_count(now):>7}  {verdict(same)}")
        if row == LEFT_ROWS[1] and cgroups_left:
            lines.append("    in " + ", ".join(f"{hierarchy} {count}" for hierarchy, count
                                              in sorted(cgroups_left.items())))
    return lines, left_ok


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def per_pod_table(results: Sequence[SideResult]) -> list[str]:
    """Each kubelet's cost per pod lifecycle, a column each, and their ratio when both ran:
    CPU, create -> Running, and what the API server counted (``bench/audit.py``)."""
    if not results:
        return []
    labels = {PYKUBELET: "pykubelet", GO: "Go kubelet"}
    columns = [audit.Column(labels.get(r.side, r.side), r.pods_created, r.requests or {},
                            r.watch_events) for r in results]
    pair = len(results) == 2

    def row(label: str, values: Sequence[float], fmt: str) -> str:
        text = f"  {label:34}" + "".join(f"{value:14{fmt}}" for value in values)
        if pair and values[1]:
            text += f"{values[0] / values[1]:8.2f}"
        return text

    def latency(result: SideResult, q: float) -> float:
        samples = [ms for w in result.windows for ms in w.latencies_ms]
        return percentile(samples, q) if samples else float("nan")

    lines = [f"per pod lifecycle (create -> Running -> delete -> gone), "
             f"{', '.join(f'{c.label} {c.pods} pods' for c in columns)}; counted from the "
             f"first create to {COUNT_TAIL_SECONDS:g} s after the API forgot the last pod",
             f"  {'':34}" + "".join(f"{c.label:>14}" for c in columns)
             + (f"{'py/Go':>8}" if pair else ""),
             row("CPU seconds", [cpu_per_pod(r) for r in results], ".3f"),
             row("create -> Running p50 ms", [latency(r, 0.5) for r in results], ".0f"),
             row("create -> Running p99 ms", [latency(r, 0.99) for r in results], ".0f")]
    if any(r.requests is None for r in results):
        lines.append("  (no audit log: the control plane ran without "
                     f"{audit.AUDIT_SETTING}=1)")
    return lines + audit.per_pod_table(columns, width=34, header=False)


# How v1.35's messages name a pod: name_namespace(uid).
_POD_IN_MESSAGE = re.compile(r"\S+_\S+\([0-9a-f-]{36}\)")


def _template(message: str, pod: str) -> str:
    """An event's message with what differs between pods and runs left out."""
    head = _POD_IN_MESSAGE.sub("<pod>", message).replace(pod, "<pod>")
    if head.startswith(("error killing pod:", "Failed to create pod sandbox:")):
        return head.split(":", 1)[0] + ": ..."
    for marker in (" in ", ": "):
        if marker in head and head.startswith(("Successfully pulled", "Readiness probe",
                                                "Liveness probe", "Error:")):
            return head.split(marker, 1)[0] + marker + "..."
    return head


def _pod_order(name: str) -> int:
    return int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[-1].isdigit() else 1 << 30


def events_tables(results: Sequence[SideResult], sample: int) -> list[str]:
    """Per kubelet: Event objects and their ``count`` per pod, by pod kind, reason and
    fieldPath (messages as templates); then every event of its first ``sample`` pods."""
    lines: list[str] = []
    labels = {PYKUBELET: "pykubelet", GO: "Go kubelet"}
    for result in results:
        label = labels.get(result.side, result.side)
        pods_by_kind: dict[str, int] = {}
        for kind in result.pod_kinds.values():
            pods_by_kind[kind] = pods_by_kind.get(kind, 0) + 1
        objects: dict[tuple[str, str, str, str], int] = {}
        counts: dict[tuple[str, str, str, str], int] = {}
        from_kubelet = [e for e in result.events if e.component == "kubelet"
                        and e.pod in result.pod_kinds]
        for event in from_kubelet:
            key = (result.pod_kinds[event.pod], event.reason, event.field_path,
                   _template(event.message, event.pod))
            objects[key] = objects.get(key, 0) + 1
            counts[key] = counts.get(key, 0) + event.count
        total_pods = max(1, len(result.pod_kinds))
        lines += [f"events of {label}'s pods ({len(from_kubelet)} Event objects, "
                  f"{sum(e.count for e in from_kubelet)} counted, for {len(result.pod_kinds)} "
                  f"pods: {len(from_kubelet) / total_pods:.2f} objects and "
                  f"{sum(e.count for e in from_kubelet) / total_pods:.2f} counted per pod"
                  + ("" if result.events_settled else
                     f"; still changing after {EVENTS_SETTLE_TIMEOUT:g} s") + ")",
                  f"  {'pod kind':24} {'reason':20} {'objects/pod':>11} {'count/pod':>9}  "
                  "fieldPath, message"]
        for key in sorted(objects, key=lambda k: (MIX.index(k[0]) if k[0] in MIX else 99,
                                                  k[1], k[2], k[3])):
            kind, reason, field_path, message = key
            pods = max(1, pods_by_kind.get(kind, 0))
            lines.append(f"  {kind:24} {reason:20} {objects[key] / pods:11.2f} "
                         f"{counts[key] / pods:9.2f}  {field_path or '-'}, {message}")
        first = sorted(result.pod_kinds, key=_pod_order)[:sample]
        lines.append(f"  the events of the first {len(first)} pods "
                     "(pod, kind: type reason count fieldPath: message)")
        for pod in first:
            events = [e for e in result.events if e.pod == pod]
            if not events:
                lines.append(f"    {pod}, {result.pod_kinds[pod]}: no events")
            for event in events:
                lines.append(f"    {pod}, {result.pod_kinds[pod]}: {event.type} {event.reason} "
                             f"x{event.count} {event.field_path or '-'}: {event.message}")
        lines.append("")
    return lines


def render(results: Sequence[SideResult], events_sample: int = 0) -> str:
    version = results[0].server_version if results else ""
    lines = [f"churn soak, control plane {version}, pods bound with spec.nodeName; "
             f"every kubelet {API_CLIENT_SETTINGS}"]
    for result in results:
        lines += ["", *render_side(result)]
    lines += ["", *per_pod_table(results)]
    if events_sample:
        lines += ["", *events_tables(results, events_sample)]
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------------

async def run_soak(testbed: Testbed, work_dir: Path, args: argparse.Namespace,
                   plane: ControlPlane, binary: Path, results: list[SideResult],
                   kubelet_holder: list[KubeletProcess]) -> None:
    print("starting the control plane ...", file=sys.stderr, flush=True)
    with uninterruptible("starting the control plane"):
        await asyncio.to_thread(plane.start)
    admin = await config.new_client_from_config(str(plane.admin_kubeconfig))
    api = client.CoreV1Api(admin)
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    node_ip = host_ip()
    extra_args = ["--node-ip", node_ip] if node_ip else []
    try:
        for side in args.sides:
            node = f"{GO_SOAK_NODE if side == GO else PY_SOAK_NODE}-{secrets.token_hex(2)}"
            kubeconfig = await asyncio.to_thread(plane.node_kubeconfig, node)
            kubelet = new_kubelet(side, work_dir / f"soak-{side}", testbed.endpoint, binary,
                                  node, [*KUBELET_ARGS, "--kubeconfig", str(kubeconfig),
                                         *extra_args])
            print(f"{side}: soak of {args.minutes:g} min ...", file=sys.stderr, flush=True)
            async with kubelet_turn(kubelet, runtime, kubelet_holder, args.keep_logs,
                                    functools.partial(remove_namespace_logs,
                                                      args.namespace_prefix)):
                results.append(await soak_side(
                    api=api, runtime=runtime, side=side, kubelet=kubelet,
                    namespace=f"{args.namespace_prefix}{side}", image=testbed.busybox_image,
                    plane=plane, args=args))
            for kind, namespace in (("nodes", ""), ("leases", "kube-node-lease")):
                await asyncio.to_thread(plane.kubectl, "delete", kind, node,
                                        *(["-n", namespace] if namespace else []),
                                        "--ignore-not-found", "--wait=false", check=False)
    finally:
        await runtime.close()
        await admin.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Churn soak: pods created and deleted through the API at a steady rate; "
                    "what the kubelet holds before and after.")
    parser.add_argument("--kubelet", choices=(PYKUBELET, GO, "both"), default="both",
                        help="which kubelet; both: pykubelet, then the Go kubelet (default)")
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="churn duration per kubelet (default 30)")
    parser.add_argument("--window-minutes", type=float, default=5.0,
                        help="length of a window in the table (default 5)")
    parser.add_argument("--rate", type=float, default=2.0,
                        help="pods created per second (default 2)")
    parser.add_argument("--pod-seconds", type=float, default=15.0,
                        help="each pod is deleted this long after its creation (default 15)")
    parser.add_argument("--quiet-seconds", type=float, default=60.0,
                        help="quiet time before the counts before and after (default 60)")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="copy every kubelet's own log into DIR before it is removed")
    parser.add_argument("--keep-audit", type=Path, metavar="FILE",
                        help="copy the API server's audit log of the nodes' requests to FILE "
                             "(python -m bench.audit FILE lists them)")
    parser.add_argument("--events-sample", type=int, default=0, metavar="N",
                        help="list the Events of the pods once they settle, and print them by "
                             "pod kind and reason, and every event of the first N pods")
    args = parser.parse_args(argv)
    if min(args.minutes, args.window_minutes, args.rate, args.pod_seconds) <= 0 \
            or args.quiet_seconds < 0:
        parser.error("--minutes, --window-minutes, --rate and --pod-seconds must be > 0")
    args.sides = (PYKUBELET, GO) if args.kubelet == "both" else (args.kubelet,)
    args.namespace_prefix = f"soak-{secrets.token_hex(3)}-"
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
    # The API server's audit log of the nodes' requests (controlplane.sh reads it from
    # the environment the plane's start inherits).
    os.environ[audit.AUDIT_SETTING] = "1"
    plane = ControlPlane.fresh()
    results: list[SideResult] = []

    async def body(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
        await run_soak(testbed, work_dir, args, plane, binary, results, kubelet_holder)

    try:
        status = run_on_testbed(body, {}, errors=(ControlPlaneError, ApiException))
    finally:
        with uninterruptible("stopping the control plane"):
            log = plane.dir / "logs" / "audit.log"
            if args.keep_audit is not None and log.exists():
                shutil.copyfile(log, args.keep_audit)
            if plane.dir.exists():
                try:
                    plane.stop()
                except ControlPlaneError as err:
                    print(f"control plane stop failed: {err}", file=sys.stderr)
            remove_namespace_logs(args.namespace_prefix)
        # What was measured is printed even when a later step (a clean-up) failed.
        if results:
            print(render(results, args.events_sample), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
