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
poll (every ``--poll-ms``) that first shows the pod's container in state
RUNNING stops the clock. Polling ``/pods`` would add pykubelet's status
reporting delay, which is not start-up work; using one detector for both
sides also makes its own granularity cancel out in the comparison.

The raw baseline runs before pykubelet starts: a kubelet kills running pods
it does not know, so the two cannot share the runtime at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from cri_api.v1 import api_pb2  # noqa: E402

from pykubelet.api import pod_from_dict  # noqa: E402
from pykubelet.cri.runtime import RemoteRuntimeService  # noqa: E402
from pykubelet.kuberuntime.container_config import (  # noqa: E402
    ContainerOptions,
    generate_container_config,
)
from pykubelet.kuberuntime.labels import POD_NAME_LABEL  # noqa: E402
from pykubelet.kuberuntime.sandbox_config import (  # noqa: E402
    SandboxOptions,
    generate_pod_sandbox_config,
)
from tests.integration.kubelet_process import NODE_NAME, KubeletProcess  # noqa: E402
from tests.testbed import Testbed, TestbedError  # noqa: E402

SINGLE_POD_OVERHEAD_TARGET_MS = 150.0
MANY_PODS_RATIO_TARGET = 1.5
IDLE_CPU_PERCENT_TARGET = 2.0

# Upstream defaults, so the idle figure is what a default node would pay;
# the test helper's shorter periods are meant to make tests fast, not realistic.
KUBELET_CONFIG: dict[str, Any] = {"syncFrequency": "1m", "fileCheckFrequency": "20s"}
# The verbosity a production node runs with; --v=4 logging would be measured as work.
KUBELET_ARGS = ["--v=2"]

START_TIMEOUT_SECONDS = 120.0
CLEANUP_TIMEOUT_SECONDS = 60.0
RSS_SAMPLE_SECONDS = 0.5
SLEEP_COMMAND = ["sh", "-c", "sleep 3600"]


class BenchmarkError(RuntimeError):
    """The benchmark could not measure what it set out to (not a missed target)."""


# --- figures --------------------------------------------------------------------------------------

def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: with few samples p99 is simply the slowest one."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


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


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


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
        "same detector for raw CRI and pykubelet",
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


def client_log_lines(counts: dict[str, int]) -> list[str]:
    """A footnote on what pykubelet's client code logged in the benchmark process, if any."""
    if not counts:
        return []
    return ["", "benchmark process: pykubelet's CRI client logged (kept out of the output above)",
            *(f"  {count:5d} x {message}" for message, count in sorted(counts.items()))]


@contextlib.contextmanager
def client_logs_counted(counts: dict[str, int]) -> Iterator[None]:
    """Count, instead of print, what pykubelet modules log in the benchmark process.

    The benchmark drives the runtime through pykubelet's CRI client, which logs a
    failed call (an exec that timed out, a pod already gone) as a klog line. With no
    handler, Python would print those bare between the progress lines and the
    tables; here they are tallied by message for a footnote instead.
    """
    logger = logging.getLogger("pykubelet")

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            # A klog line is the quoted message, then key=value pairs.
            text = record.getMessage()
            message = text.split('" ', 1)[0].strip('"') if text.startswith('"') else text
            counts[message] = counts.get(message, 0) + 1

    handler = Counter(logging.WARNING)
    saved = (logger.handlers[:], logger.propagate)
    logger.handlers[:] = [handler]
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate = saved


# --- the process being measured -------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat_file:
        # The command name may contain spaces; the fields after it are fixed.
        fields = stat_file.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status_file:
        for line in status_file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise BenchmarkError(f"no VmRSS in /proc/{pid}/status")


# --- the runtime-side detector --------------------------------------------------------------------

class RunningWatcher:
    """Polls the runtime and remembers when each pod's container was first seen RUNNING.

    Pods are told apart by the pod-name label both pykubelet and the raw
    baseline put on containers; a seen time is taken when the poll's answer
    arrives, so both sides pay the same detection delay.
    """

    def __init__(self, runtime: RemoteRuntimeService, poll_seconds: float) -> None:
        self._runtime = runtime
        self._poll_seconds = poll_seconds
        self.first_running: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunningWatcher:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _poll(self) -> None:
        running = api_pb2.ContainerFilter(
            state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))
        while True:
            containers = await self._runtime.list_containers(running)
            seen_at = time.monotonic()
            for container in containers:
                pod_name = container.labels.get(POD_NAME_LABEL)
                if pod_name is not None:
                    self.first_running.setdefault(pod_name, seen_at)
            await asyncio.sleep(self._poll_seconds)

    def forget(self, pod_names: Sequence[str]) -> None:
        for name in pod_names:
            self.first_running.pop(name, None)

    async def wait_running(self, pod_names: Sequence[str], kubelet: KubeletProcess | None = None,
                           timeout: float = START_TIMEOUT_SECONDS) -> list[float]:
        """The first-RUNNING times of all ``pod_names``, once every one has been seen."""
        deadline = time.monotonic() + timeout
        while not all(name in self.first_running for name in pod_names):
            if self._task is not None and self._task.done():
                self._task.result()  # the poll failed: surface its error
            check_alive(kubelet)
            if time.monotonic() > deadline:
                missing = [n for n in pod_names if n not in self.first_running]
                raise BenchmarkError(f"{len(missing)} pod(s) not RUNNING after {timeout:g}s: "
                                     f"{', '.join(missing[:5])}")
            await asyncio.sleep(self._poll_seconds / 2)
        return [self.first_running[name] for name in pod_names]


async def remove_all_sandboxes(runtime: RemoteRuntimeService) -> None:
    for sandbox in await runtime.list_pod_sandboxes():
        await runtime.stop_pod_sandbox(sandbox.id)
        await runtime.remove_pod_sandbox(sandbox.id)


def check_alive(kubelet: KubeletProcess | None) -> None:
    """Fail at once, not at a timeout, when the pykubelet being measured has died."""
    if kubelet is not None and kubelet.process is not None and kubelet.process.poll() is not None:
        raise BenchmarkError(f"pykubelet exited ({kubelet.process.returncode}) during the "
                             f"benchmark; its log: {kubelet.log_text()[-2000:]}")


async def wait_pod_gone(runtime: RemoteRuntimeService, pod_name: str, poll_seconds: float,
                        kubelet: KubeletProcess, timeout: float = CLEANUP_TIMEOUT_SECONDS) -> None:
    """Until the runtime has no ready sandbox and no running container left for ``pod_name``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_alive(kubelet)
        sandboxes = await runtime.list_pod_sandboxes(api_pb2.PodSandboxFilter(
            state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY),
            label_selector={POD_NAME_LABEL: pod_name}))
        containers = await runtime.list_containers(api_pb2.ContainerFilter(
            state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING),
            label_selector={POD_NAME_LABEL: pod_name}))
        if not sandboxes and not containers:
            return
        await asyncio.sleep(poll_seconds)
    raise BenchmarkError(f"pod {pod_name} still running {timeout:g}s after its manifest went")


# --- raw CRI baseline -----------------------------------------------------------------------------

def pod_manifest(name: str, image: str) -> dict[str, Any]:
    # Grace period 0: the benchmark measures start-up, and sleep as PID 1 ignores SIGTERM.
    # dnsPolicy Default: the testbed node has no cluster DNS to point ClusterFirst at.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0, "dnsPolicy": "Default",
                     "containers": [{"name": "sleep", "image": image,
                                     "command": SLEEP_COMMAND}]}}


@dataclass
class RawPod:
    name: str
    sandbox_config: api_pb2.PodSandboxConfig
    container_config: api_pb2.ContainerConfig


def raw_pod(name: str, image: str, work_dir: Path) -> RawPod:
    """The CRI configs pykubelet would send for the benchmark pod, built before the clock runs."""
    manifest = pod_manifest(name, image)
    manifest["metadata"].update(namespace="default", uid=f"bench-{name}")
    pod = pod_from_dict(manifest)
    logs_dir = str(work_dir / "raw-pod-logs")
    sandbox_config = generate_pod_sandbox_config(pod, 0, SandboxOptions(pod_logs_dir=logs_dir))
    container_config = generate_container_config(
        pod.spec.containers[0], pod, 0, image,
        ContainerOptions(pod_dir=str(work_dir / "raw-pods" / name), node_name=NODE_NAME,
                         pod_logs_dir=logs_dir))
    return RawPod(name, sandbox_config, container_config)


async def start_raw(runtime: RemoteRuntimeService, pod: RawPod) -> None:
    sandbox_id = await runtime.run_pod_sandbox(pod.sandbox_config)
    container_id = await runtime.create_container(sandbox_id, pod.container_config,
                                                  pod.sandbox_config)
    await runtime.start_container(container_id)


async def measure_raw(runtime: RemoteRuntimeService, watcher: RunningWatcher, image: str,
                      work_dir: Path, results: Results) -> None:
    async def one(name: str) -> float:
        pod = raw_pod(name, image, work_dir)
        started = time.monotonic()
        await start_raw(runtime, pod)
        (running_at,) = await watcher.wait_running([name])
        return (running_at - started) * 1000

    # The first sandbox on a fresh containerd pays one-off costs (snapshots, CNI set-up).
    results.raw_cold_ms = await one("raw-cold")
    await remove_all_sandboxes(runtime)
    for run in range(results.runs):
        results.raw_single_ms.append(await one(f"raw-single-{run}"))
        await remove_all_sandboxes(runtime)

    pods = [raw_pod(f"raw-serial-{i}", image, work_dir) for i in range(results.pods)]
    started = time.monotonic()
    for pod in pods:
        await start_raw(runtime, pod)
    running = await watcher.wait_running([pod.name for pod in pods])
    results.raw_serial_ms = (max(running) - started) * 1000
    results.raw_serial_first_ms = (min(running) - started) * 1000
    await remove_all_sandboxes(runtime)

    # All pods at once, each pod's three calls in order: what pykubelet's pod
    # workers do with N new pods, on the same single gRPC channel.
    pods = [raw_pod(f"raw-concurrent-{i}", image, work_dir) for i in range(results.pods)]
    started = time.monotonic()
    await asyncio.gather(*(start_raw(runtime, pod) for pod in pods))
    running = await watcher.wait_running([pod.name for pod in pods])
    results.raw_concurrent_ms = (max(running) - started) * 1000
    results.raw_concurrent_first_ms = (min(running) - started) * 1000
    await remove_all_sandboxes(runtime)


# --- pykubelet ------------------------------------------------------------------------------------

async def wait_all_reported_running(kubelet: KubeletProcess, names: Sequence[str],
                                    poll_seconds: float) -> None:
    """Until ``/pods`` shows every pod Running: the status side has caught up too."""
    wanted = {f"{name}-{NODE_NAME}" for name in names}
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        check_alive(kubelet)
        phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase")
                  for p in await asyncio.to_thread(kubelet.pods)}
        if all(phases.get(name) == "Running" for name in wanted):
            return
        await asyncio.sleep(poll_seconds)
    raise BenchmarkError("pykubelet did not report every pod Running on /pods in time")


async def measure_kubelet(runtime: RemoteRuntimeService, watcher: RunningWatcher,
                          kubelet: KubeletProcess, image: str, settle_seconds: float,
                          results: Results) -> None:
    poll_seconds = results.poll_ms / 1000

    async def one(name: str) -> float:
        started = time.monotonic()
        path = kubelet.write_pod(pod_manifest(name, image))
        (running_at,) = await watcher.wait_running([f"{name}-{NODE_NAME}"], kubelet)
        elapsed = (running_at - started) * 1000
        path.unlink()
        await wait_pod_gone(runtime, f"{name}-{NODE_NAME}", poll_seconds, kubelet)
        return elapsed

    results.kubelet_cold_ms = await one("kubelet-cold")
    for run in range(results.runs):
        results.kubelet_single_ms.append(await one(f"kubelet-single-{run}"))

    names = [f"kubelet-many-{i}" for i in range(results.pods)]
    started = time.monotonic()
    for name in names:
        kubelet.write_pod(pod_manifest(name, image))
    running = await watcher.wait_running([f"{name}-{NODE_NAME}" for name in names], kubelet)
    results.kubelet_many_ms = (max(running) - started) * 1000
    results.kubelet_many_first_ms = (min(running) - started) * 1000
    await wait_all_reported_running(kubelet, names, 0.5)
    await asyncio.sleep(settle_seconds)


async def measure_idle(pid: int, results: Results) -> None:
    """CPU seconds and RSS of pykubelet while nothing but its own loops runs."""
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    results.idle_rss_start_kib = results.idle_rss_max_kib = rss_kib(pid)
    while (elapsed := time.monotonic() - started) < results.idle_seconds:
        await asyncio.sleep(min(RSS_SAMPLE_SECONDS, results.idle_seconds - elapsed))
        results.idle_rss_max_kib = max(results.idle_rss_max_kib, rss_kib(pid))
    results.idle_cpu_seconds = cpu_seconds(pid) - cpu_before
    results.idle_seconds = time.monotonic() - started


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
        await measure_idle(kubelet.process.pid, results)
        check_alive(kubelet)
    finally:
        await runtime.close()


async def clean_runtime(endpoint: str) -> None:
    runtime = RemoteRuntimeService(endpoint, 60)
    await runtime.connect()
    try:
        await remove_all_sandboxes(runtime)
    finally:
        await runtime.close()


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the benchmark like Ctrl-C does, through the same clean-up path."""
    def interrupt(signum: int, frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def uninterruptible(what: str) -> Iterator[None]:
    """A second Ctrl-C must not leave containerd or pods behind half-way through clean-up."""
    def refuse(signum: int, frame: types.FrameType | None) -> None:
        print(f"still {what}, please wait", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, refuse) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cleanup(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
    with uninterruptible("cleaning up"):
        for kubelet in kubelet_holder:
            if kubelet.process is not None:
                kubelet.stop()
        with contextlib.suppress(Exception):
            asyncio.run(clean_runtime(testbed.endpoint))
        try:
            testbed.stop()
        except TestbedError as err:
            print(f"testbed stop failed: {err}", file=sys.stderr)
        shutil.rmtree(work_dir, ignore_errors=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Pod start-up latency and idle cost of pykubelet against raw CRI calls.")
    parser.add_argument("--runs", type=int, default=10,
                        help="single-pod repetitions for each side (default 10)")
    parser.add_argument("--pods", type=int, default=30,
                        help="pods written at once, then left running for the idle figure")
    parser.add_argument("--idle-seconds", type=float, default=60.0,
                        help="idle window for pykubelet's CPU and RSS (default 60)")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="wait after all pods report Running before the idle window")
    parser.add_argument("--poll-ms", type=float, default=20.0,
                        help="period of the CRI ListContainers poll that detects RUNNING")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.pods < 1 or args.idle_seconds <= 0 or args.poll_ms <= 0:
        parser.error("--runs and --pods must be >= 1; --idle-seconds and --poll-ms > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = Results(poll_ms=args.poll_ms, runs=args.runs, pods=args.pods,
                      idle_seconds=args.idle_seconds)
    work_dir = Path(tempfile.mkdtemp(prefix="pyk-bench-", dir="/tmp"))
    testbed = Testbed.fresh()
    kubelet_holder: list[KubeletProcess] = []
    # A shell starting us in the background ignores SIGINT; Ctrl-C must still clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with interrupt_on_sigterm(), client_logs_counted(results.client_log):
        try:
            print(f"starting containerd in {testbed.dir} ...", file=sys.stderr, flush=True)
            with uninterruptible("starting containerd"):
                testbed.build_images()
                testbed.start()
            asyncio.run(run_benchmark(testbed, work_dir, results, args.settle_seconds,
                                      kubelet_holder))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except (BenchmarkError, TestbedError, AssertionError, OSError) as err:
            print(f"benchmark failed: {err}", file=sys.stderr)
            return 1
        finally:
            cleanup(testbed, work_dir, kubelet_holder)
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
