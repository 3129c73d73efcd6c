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
import functools
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from bench.harness import (
    KUBELET_ARGS,
    RunningWatcher,
    add_common_arguments,
    check_alive,
    check_common_arguments,
    measure_idle,
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
from bench.peer_cluster import remove_namespace_logs, run_cluster
from bench.peer_figures import GO, RawFigures, Results, SideFigures
from bench.peer_render import render
from bench.peer_rounds import GO_NODE, PY_NODE, killed_early, kubelet_turn, new_kubelet
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.controlplane import ControlPlane, ControlPlaneError, go_kubelet_binary
from testsupport.go_kubelet import remove_container_log_links
from testsupport.kubelet_process import TERM_EXITING_COMMAND, KubeletProcess
from testsupport.testbed import Testbed

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
        figures.single.add_round(await time_static_singles(
            runtime, watcher, kubelet, image, [f"single-{run}" for run in range(args.runs)],
            poll_seconds))

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
        figures.single.add_round([await time_raw_single(runtime, watcher, image, work_dir,
                                                        f"{prefix}-single-{run}")
                                  for run in range(args.runs)])
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
            if args.cluster_only:
                continue  # the raw CRI floor only, for the cluster table
            for side in results.standalone.start_round(round_index):
                node = GO_NODE if side == GO else PY_NODE
                kubelet = new_kubelet(side, work_dir / f"{side}{round_index}", testbed.endpoint,
                                      binary, node, KUBELET_ARGS)
                print(f"round {round_index + 1}: {side} ...", file=sys.stderr, flush=True)
                async with kubelet_turn(kubelet, runtime, kubelet_holder, args.keep_logs,
                                        functools.partial(remove_container_log_links, node)):
                    await measure_side(runtime, kubelet, image, args,
                                       results.standalone.of(side))
    finally:
        await runtime.close()
    if plane is not None:
        await run_cluster(testbed, work_dir, args, results, binary, plane, kubelet_holder)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="pykubelet beside the upstream Go kubelet 1.20 and raw CRI calls.")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds, each kubelet once per round, order alternating (default 2)")
    add_common_arguments(parser, runs=15, runs_help="single-pod runs per kubelet per round",
                         pods_help="pods written, then removed, at once", idle_seconds=30.0)
    parser.add_argument("--idle-pods", type=int, default=100,
                        help="pods running during the idle window (default 100)")
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
    check_common_arguments(parser, args, counts=("rounds", "runs", "pods", "idle_pods"))
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
