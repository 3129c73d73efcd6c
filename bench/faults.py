"""Faults under load: kill -9, a runtime restart, an API outage, a hung kubelet and a full
disk during a churn, with nothing lost, nothing run twice and nothing left behind (issue 39).

One real control plane and the testbed's containerd, as ``bench/soak.py`` has
them; the kubelet (pykubelet, the Go kubelet 1.20, or both one after the other)
joins as a node on a root directory that is a small tmpfs of its own
(``--root-mib``), and gets the soak's churn (``testsupport/soak.py``'s mix at
``--rate`` for ``--minutes``) plus ``--counted-pods`` pods that live the whole
churn and count the starts of their container in a hostPath file
(``testsupport/faults.py``: ``restartPolicy: Never`` ones that keep running or
exit 0, ``restartPolicy: Always`` ones that crash once and then run).

During the churn, on a schedule (``testsupport.faults.schedule``): the kubelet
killed with SIGKILL every ``--kill-every-minutes`` and started again at once;
containerd stopped and started on its state; the API server frozen with
SIGSTOP for 30 s (below the 40 s node-monitor grace period); the kubelet
frozen with SIGSTOP for 20 s; its root directory filled to 100 %, the kubelet
killed while it is full, the disk freed and the kubelet started. After each
fault, how long until the node settled (every pod created before the clear
past Pending, nothing running of a pod deleted before it), whether the Node
was seen not Ready or tainted, and pods deleted or evicted that the churn did
not delete. After the churn: the counted pods' verdicts (Never: started exactly
once; Always: one running container, starts = restartCount + 1; the API's
container the runtime's running one), then every pod deleted and, after a quiet
``--quiet-seconds``, the soak's "left" counts against their values before the
churn, and the kubelet's RSS and fds.

Both kubelets run with the same API client limits (``kubeAPIQPS`` 50,
``kubeAPIBurst`` 100) and with ``evictionHard`` of memory only: a root
directory filled on purpose must not have either evict the pods whose starts
are counted.

Prints the tables; exits 1 only when the measurement itself broke, 130 when
interrupted (see ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from bench.harness import (
    KUBELET_ARGS,
    KUBELET_CONFIG,
    check_alive,
    rss_kib,
    run_on_testbed,
    uninterruptible,
    verdict,
)
from bench.peer_cluster import create_namespace, remove_namespace_logs, time_node_ready
from bench.peer_figures import GO, PYKUBELET
from bench.peer_rounds import kubelet_turn
from bench.soak import FLAT_TOLERANCE, count_leftovers, open_fds, render_leftovers
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.cluster import host_ip
from testsupport.controlplane import ControlPlane, ControlPlaneError, go_kubelet_binary
from testsupport.faults import (
    ALWAYS,
    ALWAYS_CRASHES,
    API_OUTAGE,
    FAULTS,
    KILL,
    NEVER_DONE,
    NEVER_RUNNING,
    CountedReport,
    FaultChurn,
    FaultDurations,
    FaultRecord,
    FaultTargets,
    KubeletDidNotStart,
    NodeWatcher,
    check_counted,
    churn_pods,
    dedicated_root_filesystem,
    delete_counted,
    run_faults,
    schedule,
)
from testsupport.go_kubelet import GoKubeletProcess
from testsupport.kubelet_process import KubeletProcess
from testsupport.podwatch import ApiRunningWatcher
from testsupport.soak import CONFIG_MAP, MIX, SECRET, pod_cgroups_by_hierarchy
from testsupport.testbed import Testbed

API_QPS, API_BURST = 50, 100
# Both kubelets alike: the API client's limits, and no eviction for a disk filled on purpose.
FAULTS_CONFIG: dict[str, Any] = {
    **KUBELET_CONFIG, "kubeAPIQPS": API_QPS, "kubeAPIBurst": API_BURST,
    "evictionHard": {"memory.available": "100Mi"}}
PY_NODE, GO_NODE = "faults-py", "faults-go"
KIND_ROWS = ((NEVER_RUNNING, "restartPolicy Never, keeps running"),
             (NEVER_DONE, "restartPolicy Never, exits 0"),
             (ALWAYS, f"restartPolicy Always, {ALWAYS_CRASHES} crash then runs"))


@dataclass
class Sample:
    when: str
    rss_mib: float
    fds: int


@dataclass
class SideResult:
    side: str
    minutes: float
    rate: float
    planned: list[tuple[float, str]] = field(default_factory=list)
    records: list[FaultRecord] = field(default_factory=list)
    counted: CountedReport = field(default_factory=CountedReport)
    samples: list[Sample] = field(default_factory=list)
    before: dict[str, float | None] = field(default_factory=dict)
    after: dict[str, float | None] = field(default_factory=dict)
    cgroups_left: dict[str, int] = field(default_factory=dict)
    pods_created: int = 0
    create_errors: int = 0
    # Why the run of this side stopped early (a kubelet that did not start again).
    broken: str = ""


def sample(kubelet: KubeletProcess, when: str) -> Sample:
    assert kubelet.process is not None
    pid = kubelet.process.pid
    return Sample(when, rss_kib(pid) / 1024, open_fds(pid))


def new_kubelet(side: str, base: Path, endpoint: str, binary: Path, node: str,
                args: Sequence[str]) -> KubeletProcess:
    if side == GO:
        return GoKubeletProcess(base, endpoint, binary, node, FAULTS_CONFIG, list(args))
    return KubeletProcess(base, endpoint, extra_config=FAULTS_CONFIG, extra_args=list(args),
                          node_name=node)


# --- one side -------------------------------------------------------------------------------------

async def faults_side(*, api: client.CoreV1Api, runtime: RemoteRuntimeService, side: str,
                      kubelet: KubeletProcess, namespace: str, testbed: Testbed,
                      plane: ControlPlane, starts_dir: Path,
                      args: argparse.Namespace) -> SideResult:
    result = SideResult(side, args.minutes, args.rate)
    await create_namespace(api, namespace)
    await api.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=CONFIG_MAP), data={"key": "value"}))
    await api.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET), string_data={"key": "value"}))
    watcher = ApiRunningWatcher(api, namespace)
    await watcher.start()
    node_watch = NodeWatcher(api, kubelet.node_name)
    run = FaultChurn()
    seconds = args.minutes * 60
    try:
        await time_node_ready(api, kubelet, 0.1)
        await node_watch.start()
        await asyncio.sleep(args.quiet_seconds)
        result.before = await count_leftovers(side, kubelet, runtime, plane, watcher.pod_ips,
                                              run.sandbox_ids)
        result.samples.append(sample(kubelet, "before"))
        kills = max(1, int(args.minutes / args.kill_every_minutes)) if KILL in args.faults else 0
        result.planned = schedule(args.faults, kills, seconds, FaultDurations())
        total_pods = int(seconds * args.rate)
        counted_every = max(1, total_pods // args.counted_pods) if args.counted_pods else 0
        began = time.monotonic()
        churning = asyncio.create_task(churn_pods(
            api=api, runtime=runtime, namespace=namespace, node=kubelet.node_name,
            image=testbed.busybox_image, run=run, began=began, seconds=seconds,
            rate=args.rate, pod_seconds=args.pod_seconds, counted_every=counted_every,
            starts_dir=starts_dir), name="churn")

        async def between() -> None:
            result.samples.append(sample(kubelet, f"{time.monotonic() - began:.0f} s"))
            print(f"  {side}: {time.monotonic() - began:.0f} s, "
                  f"{len(run.churn.created_at)} pods created", file=sys.stderr, flush=True)

        try:
            result.records = await run_faults(
                api=api, runtime=runtime, namespace=namespace,
                targets=FaultTargets(kubelet, testbed, plane), planned=result.planned,
                run=run, watcher=watcher, node_watch=node_watch, began=began,
                settle_bound=args.settle_seconds, between=between,
                records_into=result.records)
        except KubeletDidNotStart as err:
            result.broken = f"the kubelet did not start again: {str(err)[-1500:]}"
            churning.cancel()
            for task in list(run.churn.tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await churning
            return result
        await churning
        print(f"  {side}: churn over, waiting for the counted pods ...", file=sys.stderr,
              flush=True)
        result.counted = await check_counted(api, runtime, namespace, run.counted, starts_dir,
                                             args.settle_seconds)
        await delete_counted(api, namespace, run)
        await watcher.wait_gone(list(run.churn.created_at), timeout=120)
        result.pods_created, result.create_errors = len(run.churn.created_at), run.churn.errors
        print(f"  {side}: quiet for {args.quiet_seconds:g} s ...", file=sys.stderr, flush=True)
        await asyncio.sleep(args.quiet_seconds)
        check_alive(kubelet)
        result.after = await count_leftovers(side, kubelet, runtime, plane, watcher.pod_ips,
                                             run.sandbox_ids)
        result.samples.append(sample(kubelet, "after"))
        result.cgroups_left = {hierarchy: count for hierarchy, count in (
            await asyncio.to_thread(pod_cgroups_by_hierarchy, kubelet.cgroup_root)).items()
            if count}
    finally:
        await node_watch.stop()
        await watcher.stop()
        with contextlib.suppress(ApiException):
            await api.delete_namespace(namespace)
    return result


# --- the tables -----------------------------------------------------------------------------------

def fault_ok(record: FaultRecord) -> bool:
    """Started again, settled within the bound, nothing evicted; and for the API outage
    the Node never seen not Ready nor tainted."""
    ok = record.started and record.settle_s is not None and record.evicted == 0
    if record.fault == API_OUTAGE:
        ok &= record.not_ready == 0 and not record.taints
    return ok


def render_side(result: SideResult, args: argparse.Namespace) -> list[str]:
    lines = [f"{result.side}: {result.minutes:g} min at {result.rate:g} pods/s "
             f"({result.pods_created} pods created, {result.create_errors} creates refused), "
             f"mix {', '.join(MIX)} + {len(result.counted.pods)} counted pods",
             f"  {'fault':20} {'at s':>6} {'lasted s':>8} {'restarts':>8} {'started':>7} "
             f"{'settled s':>9} {'NotReady':>8} {'taints':>6} {'evicted':>7}"]
    for record in result.records:
        settled = f"{record.settle_s:9.1f}" if record.settle_s is not None else f"{'>bound':>9}"
        lines.append(
            f"  {record.fault:20} {record.at_s:6.0f} {record.lasted_s:8.1f} "
            f"{record.restarts:8d} {'yes' if record.started else 'NO':>7} {settled} "
            f"{record.not_ready:8d} {len(record.taints):6d} {record.evicted:7d}  "
            f"{verdict(fault_ok(record))}{'  ' + record.note.lstrip('; ') if record.note else ''}")
        if record.unsettled:
            lines.append(f"    not settled: {'; '.join(record.unsettled[:5])}")
        if record.taints:
            lines.append(f"    taints: {', '.join(sorted(record.taints))}")
    lines.append(f"  (settled: after the fault cleared, until every pod created before it was "
                 f"past Pending and nothing of a pod deleted before it ran, bound "
                 f"{args.settle_seconds:g} s; NotReady: Node states seen with Ready not True "
                 f"from the fault's start to its settling, a PASS condition for the API outage "
                 f"only; evicted: pods evicted, or deleted by someone else than the churn)")
    if result.broken:
        return [*lines, f"  run stopped: {result.broken}"]
    report = result.counted
    lines += ["", f"  {'counted pods (live the whole churn)':40} {'pods':>5} {'ok':>5} "
                  f"{'starts':>7}"]
    for kind, label in KIND_ROWS:
        pods = report.of_kind(kind)
        starts = sorted(p.starts for _, p in pods)
        span = f"{starts[0]}-{starts[-1]}" if starts else "-"
        ok = sum(1 for _, p in pods if p.verdict == "ok")
        lines.append(f"  {label:40} {len(pods):5d} {ok:5d} {span:>7}  "
                     f"{verdict(ok == len(pods))}")
    converged = (f"{report.converged_s:.0f} s after the churn" if report.converged_s is not None
                 else f"not within {args.settle_seconds:g} s")
    lines.append(f"  (Never: one start; Always: starts = restartCount + 1, one running "
                 f"container, the API's container the runtime's; converged {converged})")
    for name, why in sorted(report.failures().items())[:8]:
        lines.append(f"    {name}: {why}")
    left_lines, left_ok = render_leftovers(result.before, result.after, result.cgroups_left)
    lines += ["", *left_lines]
    lines += ["", f"  every leftover back to its value before: {verdict(left_ok)}",
              "  kubelet RSS MiB / fds at: " + ", ".join(
                  f"{s.when} {s.rss_mib:.0f}/{s.fds}" for s in result.samples)]
    if len(result.samples) > 2:
        reference, last = result.samples[1], result.samples[-1]
        rss_change = (last.rss_mib - reference.rss_mib) / reference.rss_mib
        fds_change = (last.fds - reference.fds) / reference.fds if reference.fds else 0.0
        lines += [f"  RSS after vs first churn sample: {rss_change:+.1%} "
                  f"(growth within {FLAT_TOLERANCE:.0%}) {verdict(rss_change <= FLAT_TOLERANCE)}",
                  f"  fds after vs first churn sample: {fds_change:+.1%} "
                  f"(growth within {FLAT_TOLERANCE:.0%}) {verdict(fds_change <= FLAT_TOLERANCE)}"]
    return lines


def render(results: Sequence[SideResult], args: argparse.Namespace, version: str) -> str:
    lines = [f"faults under a churn, control plane {version}, pods bound with spec.nodeName; "
             f"both kubelets kubeAPIQPS {API_QPS}, kubeAPIBurst {API_BURST}, evictionHard "
             f"memory.available<100Mi only, root dir a {args.root_mib} MiB tmpfs of its own",
             f"  faults: {', '.join(args.faults)}; kill -9 every {args.kill_every_minutes:g} min"]
    for result in results:
        lines += ["", *render_side(result, args)]
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------------

async def run_faults_benchmark(testbed: Testbed, work_dir: Path, args: argparse.Namespace,
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
    ip_args = ["--node-ip", node_ip] if node_ip else []
    try:
        for side in args.sides:
            node = f"{GO_NODE if side == GO else PY_NODE}-{secrets.token_hex(2)}"
            kubeconfig = await asyncio.to_thread(plane.node_kubeconfig, node)
            base = work_dir / f"faults-{side}"
            kubelet = new_kubelet(side, base, testbed.endpoint, binary, node,
                                  [*KUBELET_ARGS, "--kubeconfig", str(kubeconfig), *ip_args])
            starts_dir = base / "starts"
            starts_dir.mkdir(parents=True, exist_ok=True)
            print(f"{side}: churn of {args.minutes:g} min with faults ...", file=sys.stderr,
                  flush=True)
            with dedicated_root_filesystem(kubelet.root, args.root_mib):
                async with kubelet_turn(kubelet, runtime, kubelet_holder, args.keep_logs,
                                        functools.partial(remove_namespace_logs,
                                                          args.namespace_prefix)):
                    results.append(await faults_side(
                        api=api, runtime=runtime, side=side, kubelet=kubelet,
                        namespace=f"{args.namespace_prefix}{side}", testbed=testbed,
                        plane=plane, starts_dir=starts_dir, args=args))
            for kind, namespace in (("nodes", ""), ("leases", "kube-node-lease")):
                await asyncio.to_thread(plane.kubectl, "delete", kind, node,
                                        *(["-n", namespace] if namespace else []),
                                        "--ignore-not-found", "--wait=false", check=False)
    finally:
        await runtime.close()
        await admin.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Faults during a churn of API pods: kill -9, a containerd restart, an API "
                    "server outage, a frozen kubelet, a full root dir; what holds after each.")
    parser.add_argument("--kubelet", choices=(PYKUBELET, GO, "both"), default="both",
                        help="which kubelet; both: pykubelet, then the Go kubelet (default)")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="churn duration per kubelet (default 10)")
    parser.add_argument("--kill-every-minutes", type=float, default=2.0,
                        help="one kill -9 of the kubelet per this many minutes (default 2)")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"comma-separated, of: {', '.join(FAULTS)} (default all)")
    parser.add_argument("--rate", type=float, default=2.0,
                        help="pods created per second (default 2)")
    parser.add_argument("--pod-seconds", type=float, default=15.0,
                        help="each mix pod is deleted this long after its creation (default 15)")
    parser.add_argument("--counted-pods", type=int, default=30,
                        help="pods that live the whole churn and count their starts "
                             "(default 30)")
    parser.add_argument("--settle-seconds", type=float, default=90.0,
                        help="bound for the node to settle after a fault, and for the counted "
                             "pods to converge after the churn (default 90)")
    parser.add_argument("--quiet-seconds", type=float, default=60.0,
                        help="quiet time before the counts before and after (default 60)")
    parser.add_argument("--root-mib", type=int, default=256,
                        help="size of the kubelet's root dir tmpfs (default 256)")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="copy every kubelet's own log into DIR before it is removed")
    args = parser.parse_args(argv)
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    if unknown := [f for f in args.faults if f not in FAULTS]:
        parser.error(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    if min(args.minutes, args.kill_every_minutes, args.rate, args.pod_seconds,
           args.settle_seconds) <= 0 or args.quiet_seconds < 0 or args.root_mib < 16:
        parser.error("durations and --rate must be > 0, --root-mib at least 16")
    args.sides = (PYKUBELET, GO) if args.kubelet == "both" else (args.kubelet,)
    args.namespace_prefix = f"faults-{secrets.token_hex(3)}-"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("run as root (containerd, cgroups, mounts)", file=sys.stderr)
        return 1
    try:
        binary = go_kubelet_binary()
    except ControlPlaneError as err:
        print(f"benchmark failed: {err}", file=sys.stderr)
        return 1
    plane = ControlPlane.fresh()
    results: list[SideResult] = []
    version = ""

    async def body(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
        nonlocal version
        await run_faults_benchmark(testbed, work_dir, args, plane, binary, results,
                                   kubelet_holder)
        version = plane.version

    try:
        status = run_on_testbed(body, {}, errors=(ControlPlaneError, ApiException))
    finally:
        with uninterruptible("stopping the control plane"):
            if plane.dir.exists():
                with contextlib.suppress(ControlPlaneError, OSError):
                    version = version or plane.version
                try:
                    plane.stop()
                except ControlPlaneError as err:
                    print(f"control plane stop failed: {err}", file=sys.stderr)
            remove_namespace_logs(args.namespace_prefix)
        if results:
            print(render(results, args, version), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
