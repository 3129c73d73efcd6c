"""Pod start-up latency and idle cost of pykubelet, beside raw CRI calls on the same containerd.

The project keeps performance goals out of the test suite: this script
measures and prints, and only exits non-zero when the measurement itself
broke. Every pykubelet figure is put next to a lower bound measured in the
same run on the same private containerd, so that a slow machine slows both
sides and the ratio stays meaningful:

- raw CRI: ``RunPodSandbox`` + ``CreateContainer`` + ``StartContainer``
  called directly, one pod at a time; for many pods both one after another
  (serial) and all at once (concurrent, as pykubelet's pod workers start
  them, which is the like-for-like bound for its figure);
- pykubelet: a static pod manifest written into its manifests directory.

"Running" is detected on the runtime side for both: a CRI ``ListContainers``
poll (every ``--poll-ms``) finds the pod's container RUNNING, and the clock
stops at the ``startedAt`` the runtime reports for it. Polling ``/pods`` would
add pykubelet's status reporting delay, which is not start-up work; the
runtime's own timestamp keeps the poll's period out of both figures.

The raw baseline runs before pykubelet starts: a kubelet kills running pods
it does not know, so the two cannot share the runtime at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import (
    KUBELET_ARGS,
    KUBELET_CONFIG,
    SLEEP_COMMAND,
    RunningWatcher,
    add_common_arguments,
    check_alive,
    check_common_arguments,
    client_log_lines,
    measure_idle,
    percentile,
    pod_manifest,
    remove_all_sandboxes,
    run_on_testbed,
    time_raw_concurrent,
    time_raw_serial,
    time_raw_single,
    time_static_singles,
    verdict,
    wait_all_reported_running,
)
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.kubelet_process import NODE_NAME, KubeletProcess
from testsupport.testbed import Testbed

SINGLE_POD_OVERHEAD_TARGET_MS = 150.0
MANY_PODS_RATIO_TARGET = 1.5
IDLE_CPU_PERCENT_TARGET = 2.0


@dataclass
class Results:
    poll_ms: float
    runs: int
    pods: int
    raw_cold_ms: float = 0.0
    raw_single_ms: list[float] = field(default_factory=list)
    raw_serial_ms: float = 0.0
    raw_serial_first_ms: float = 0.0
    raw_concurrent_ms: float = 0.0
    raw_concurrent_first_ms: float = 0.0
    kubelet_cold_ms: float = 0.0
    kubelet_single_ms: list[float] = field(default_factory=list)
    kubelet_many_ms: float = 0.0
    kubelet_many_first_ms: float = 0.0
    idle_seconds: float = 0.0
    idle_cpu_seconds: float = 0.0
    idle_rss_start_kib: int = 0
    idle_rss_max_kib: int = 0
    # Warnings and errors pykubelet's client code logged in this process, by message.
    client_log: dict[str, int] = field(default_factory=dict)


def render(results: Results) -> str:
    raw_p50 = percentile(results.raw_single_ms, 0.5)
    raw_p99 = percentile(results.raw_single_ms, 0.99)
    kub_p50 = percentile(results.kubelet_single_ms, 0.5)
    kub_p99 = percentile(results.kubelet_single_ms, 0.99)
    overhead_p50 = kub_p50 - raw_p50
    many_ratio = results.kubelet_many_ms / results.raw_concurrent_ms
    serial_ratio = results.kubelet_many_ms / results.raw_serial_ms
    cpu_percent = 100.0 * results.idle_cpu_seconds / results.idle_seconds
    lines = [
        "pykubelet pod start-up benchmark",
        f"  detection: CRI ListContainers state=RUNNING polled every {results.poll_ms:g} ms, "
        "clock stopped at the container's startedAt; same detector for raw CRI and pykubelet",
        f"  pod: 1 busybox container {' '.join(SLEEP_COMMAND)!r}; "
        f"pykubelet flags {' '.join(KUBELET_ARGS)}, config {KUBELET_CONFIG}",
        "",
        f"single pod, {results.runs} runs (manifest written -> container RUNNING)",
        f"  {'':24}{'p50 ms':>10}{'p99 ms':>10}{'cold ms':>10}",
        f"  {'raw CRI':24}{raw_p50:10.1f}{raw_p99:10.1f}{results.raw_cold_ms:10.1f}",
        f"  {'pykubelet':24}{kub_p50:10.1f}{kub_p99:10.1f}{results.kubelet_cold_ms:10.1f}",
        f"  {'ratio pykubelet/raw':24}{kub_p50 / raw_p50:10.2f}{kub_p99 / raw_p99:10.2f}",
        f"  overhead at p50: {overhead_p50:.1f} ms  "
        f"(target < {SINGLE_POD_OVERHEAD_TARGET_MS:g} ms) "
        f"{verdict(overhead_p50 < SINGLE_POD_OVERHEAD_TARGET_MS)}",
        "",
        f"{results.pods} pods at once (time until the last / the first container RUNNING)",
        f"  {'':24}{'last ms':>10}{'first ms':>10}",
        f"  {'raw CRI, serial':24}{results.raw_serial_ms:10.1f}"
        f"{results.raw_serial_first_ms:10.1f}",
        f"  {'raw CRI, concurrent':24}{results.raw_concurrent_ms:10.1f}"
        f"{results.raw_concurrent_first_ms:10.1f}",
        f"  {'pykubelet, all written':24}{results.kubelet_many_ms:10.1f}"
        f"{results.kubelet_many_first_ms:10.1f}",
        f"  ratio pykubelet/raw concurrent: {many_ratio:.2f}  "
        f"(target <= {MANY_PODS_RATIO_TARGET:g}) {verdict(many_ratio <= MANY_PODS_RATIO_TARGET)}"
        f"; against raw serial: {serial_ratio:.2f}",
        "",
        f"pykubelet idle with {results.pods} pods running, over {results.idle_seconds:.0f} s",
        f"  CPU: {results.idle_cpu_seconds:.2f} s = {cpu_percent:.2f} % of one core  "
        f"(target < {IDLE_CPU_PERCENT_TARGET:g} %) "
        f"{verdict(cpu_percent < IDLE_CPU_PERCENT_TARGET)}",
        f"  RSS: {results.idle_rss_start_kib / 1024:.1f} MiB at start, "
        f"{results.idle_rss_max_kib / 1024:.1f} MiB max",
        *client_log_lines(results.client_log),
    ]
    return "\n".join(lines)


# --- the process being measured -------------------------------------------------------------------

# --- the runtime-side detector --------------------------------------------------------------------

# --- raw CRI baseline -----------------------------------------------------------------------------

async def measure_raw(runtime: RemoteRuntimeService, watcher: RunningWatcher, image: str,
                      work_dir: Path, results: Results) -> None:
    # The first sandbox on a fresh containerd pays one-off costs (snapshots, CNI set-up).
    results.raw_cold_ms = await time_raw_single(runtime, watcher, image, work_dir, "raw-cold")
    for run in range(results.runs):
        results.raw_single_ms.append(
            await time_raw_single(runtime, watcher, image, work_dir, f"raw-single-{run}"))
    results.raw_serial_ms, results.raw_serial_first_ms = await time_raw_serial(
        runtime, watcher, image, work_dir, "raw-serial", results.pods)
    results.raw_concurrent_ms, results.raw_concurrent_first_ms = await time_raw_concurrent(
        runtime, watcher, image, work_dir, "raw-concurrent", results.pods)
    await remove_all_sandboxes(runtime)


# --- pykubelet ------------------------------------------------------------------------------------

async def measure_kubelet(runtime: RemoteRuntimeService, watcher: RunningWatcher,
                          kubelet: KubeletProcess, image: str, settle_seconds: float,
                          results: Results) -> None:
    poll_seconds = results.poll_ms / 1000

    (results.kubelet_cold_ms,) = await time_static_singles(
        runtime, watcher, kubelet, image, ["kubelet-cold"], poll_seconds)
    results.kubelet_single_ms += await time_static_singles(
        runtime, watcher, kubelet, image,
        [f"kubelet-single-{run}" for run in range(results.runs)], poll_seconds)

    names = [f"kubelet-many-{i}" for i in range(results.pods)]
    started = time.monotonic()
    for name in names:
        kubelet.write_pod(pod_manifest(name, image))
    running = await watcher.wait_running([f"{name}-{NODE_NAME}" for name in names], kubelet)
    results.kubelet_many_ms = (max(running) - started) * 1000
    results.kubelet_many_first_ms = (min(running) - started) * 1000
    await wait_all_reported_running(kubelet, names, NODE_NAME, 0.5)
    await asyncio.sleep(settle_seconds)


# --- orchestration --------------------------------------------------------------------------------

async def run_benchmark(testbed: Testbed, work_dir: Path, results: Results,
                        settle_seconds: float, kubelet_holder: list[KubeletProcess]) -> None:
    poll_seconds = results.poll_ms / 1000
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    try:
        async with RunningWatcher(runtime, poll_seconds) as watcher:
            print("measuring raw CRI ...", file=sys.stderr, flush=True)
            await measure_raw(runtime, watcher, testbed.busybox_image, work_dir, results)

        kubelet = KubeletProcess(work_dir / "kubelet", testbed.endpoint,
                                 extra_config=KUBELET_CONFIG, extra_args=KUBELET_ARGS)
        kubelet_holder.append(kubelet)
        print("starting pykubelet ...", file=sys.stderr, flush=True)
        await asyncio.to_thread(kubelet.start)
        assert kubelet.process is not None
        async with RunningWatcher(runtime, poll_seconds) as watcher:
            print("measuring pykubelet ...", file=sys.stderr, flush=True)
            await measure_kubelet(runtime, watcher, kubelet, testbed.busybox_image,
                                  settle_seconds, results)
        print(f"idle for {results.idle_seconds:g} s ...", file=sys.stderr, flush=True)
        idle = await measure_idle(kubelet.process.pid, results.idle_seconds)
        results.idle_seconds, results.idle_cpu_seconds = idle.seconds, idle.cpu_seconds
        results.idle_rss_start_kib, results.idle_rss_max_kib = idle.rss_start_kib, idle.rss_max_kib
        check_alive(kubelet)
    finally:
        await runtime.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Pod start-up latency and idle cost of pykubelet against raw CRI calls.")
    add_common_arguments(parser, runs=10, runs_help="single-pod repetitions for each side",
                         pods_help="pods written at once, then left running for the idle figure",
                         idle_seconds=60.0)
    args = parser.parse_args(argv)
    check_common_arguments(parser, args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = Results(poll_ms=args.poll_ms, runs=args.runs, pods=args.pods,
                      idle_seconds=args.idle_seconds)

    async def body(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
        await run_benchmark(testbed, work_dir, results, args.settle_seconds, kubelet_holder)

    status = run_on_testbed(body, results.client_log)
    if status == 0:
        print(render(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
