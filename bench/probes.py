"""CPU cost and latency of pykubelet's probing, beside the same probe calls made directly.

The issue's goal: with 100 containers each probed for readiness every
second, pykubelet stays below 15 % of one core, and the probe latency p99 is
known. This script measures and prints; it only exits non-zero when the
measurement itself broke (see ``bench/README.md``).

pykubelet's side is read from the process itself (``/proc/<pid>/stat``) and
from what it publishes on ``/metrics/probes``: the number of probes is the
delta of ``prober_probe_total`` over the window, the latency comes from the
deltas of the ``prober_probe_duration_seconds`` buckets, so its percentiles
are only as fine as upstream's bucket bounds.

The lower bound is measured in the same run on the same containers: once
pykubelet has been stopped (stopping leaves pods running), the benchmark
process makes one call per container per period itself, in one asyncio loop
(CRI ``ExecSync``, an HTTP GET on a fresh connection, or a TCP connect), and
its own CPU time over an equally long window is the raw cost of the calls.
Doing this after pykubelet has stopped keeps the two sides from sharing
containerd and the CPUs at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import (
    KUBELET_ARGS,
    KUBELET_CONFIG,
    RSS_SAMPLE_SECONDS,
    SLEEP_COMMAND,
    BenchmarkError,
    check_alive,
    client_log_lines,
    cpu_seconds,
    percentile,
    rss_kib,
    run_on_testbed,
    verdict,
)
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.prober.metrics import PROBE_DURATION_BUCKETS
from testsupport.kubelet_process import KubeletProcess
from testsupport.testbed import Testbed

CPU_PERCENT_TARGET = 15.0
PROBE_PERIOD_SECONDS = 1.0
# Within a pod the containers share one network namespace, so each serves its own port.
FIRST_PORT = 8000
PROBE_KINDS = ("exec", "http", "tcp")
EXEC_PROBE_COMMAND = ["true"]
# Upstream's default timeoutSeconds; the raw calls get the same limit.
PROBE_TIMEOUT_SECONDS = 1.0
READY_TIMEOUT_SECONDS = 300.0
READY_POLL_SECONDS = 1.0
INF = float("inf")


# --- the pods -------------------------------------------------------------------------------------

def containers_per_pod(containers: int, pods: int) -> list[int]:
    """``containers`` spread over ``pods`` as evenly as possible."""
    base, extra = divmod(containers, pods)
    return [base + (1 if index < extra else 0) for index in range(pods)]


def container_name(index: int) -> str:
    return f"c{index:02d}"


def port_of(container: str) -> int:
    return FIRST_PORT + int(container[1:])


def probed_container(kind: str, index: int, image: str) -> dict[str, Any]:
    name = container_name(index)
    port = port_of(name)
    # httpd answers 404 on "/" without an index file; the probe needs a 2xx.
    serve = ["sh", "-c", f"echo ok > /tmp/index.html && exec httpd -f -p {port} -h /tmp"]
    handlers: dict[str, tuple[list[str], dict[str, Any]]] = {
        "exec": (SLEEP_COMMAND, {"exec": {"command": EXEC_PROBE_COMMAND}}),
        "http": (serve, {"httpGet": {"port": port, "path": "/"}}),
        "tcp": (serve, {"tcpSocket": {"port": port}}),
    }
    command, handler = handlers[kind]
    return {"name": name, "image": image, "command": command,
            "readinessProbe": {**handler, "periodSeconds": int(PROBE_PERIOD_SECONDS),
                               "timeoutSeconds": int(PROBE_TIMEOUT_SECONDS)}}


def pod_manifests(kind: str, image: str, containers: int, pods: int) -> list[dict[str, Any]]:
    # Grace period 0 and dnsPolicy Default for the same reasons as in pod_startup.py:
    # sleep as PID 1 ignores SIGTERM, and the testbed has no cluster DNS.
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"probes-{pod:02d}"},
             "spec": {"terminationGracePeriodSeconds": 0, "dnsPolicy": "Default",
                      "containers": [probed_container(kind, index, image)
                                     for index in range(count)]}}
            for pod, count in enumerate(containers_per_pod(containers, pods))]


@dataclass(frozen=True)
class ProbeTarget:
    """One probed container as the raw baseline needs it: CRI id, pod IP and port."""

    container_id: str
    pod_ip: str
    port: int


def ready_targets(pods: Iterable[dict[str, Any]]) -> list[ProbeTarget]:
    """The containers ``/pods`` shows Ready, with what a direct probe call needs."""
    targets = []
    for pod in pods:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            if container.get("ready") and container.get("containerID"):
                targets.append(ProbeTarget(container["containerID"].split("://", 1)[-1],
                                           status.get("podIP") or "",
                                           port_of(container["name"])))
    return targets


async def wait_all_ready(kubelet: KubeletProcess, expected: int) -> list[ProbeTarget]:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    targets: list[ProbeTarget] = []
    while time.monotonic() < deadline:
        check_alive(kubelet)
        targets = ready_targets(await asyncio.to_thread(kubelet.pods))
        if len(targets) >= expected:
            return targets
        await asyncio.sleep(READY_POLL_SECONDS)
    raise BenchmarkError(f"only {len(targets)} of {expected} containers Ready on /pods after "
                         f"{READY_TIMEOUT_SECONDS:g}s")


# --- figures --------------------------------------------------------------------------------------

@dataclass
class ProbeCounters:
    """Probe counts by result and the latency histogram, summed over all containers."""

    by_result: dict[str, float] = field(default_factory=dict)
    # Cumulative counts keyed by the bucket's upper bound, +Inf included.
    buckets: dict[float, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_result.values())

    def minus(self, earlier: ProbeCounters) -> ProbeCounters:
        return ProbeCounters(
            {key: value - earlier.by_result.get(key, 0.0) for key, value in self.by_result.items()},
            {key: value - earlier.buckets.get(key, 0.0) for key, value in self.buckets.items()})


def parse_probe_metrics(text: str) -> ProbeCounters:
    counters = ProbeCounters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "prober_probe_total":
                result = sample.labels.get("result", "")
                counters.by_result[result] = counters.by_result.get(result, 0.0) + sample.value
            elif sample.name == "prober_probe_duration_seconds_bucket":
                bound = float(sample.labels["le"])
                counters.buckets[bound] = counters.buckets.get(bound, 0.0) + sample.value
    return counters


def histogram_of(latencies: Sequence[float]) -> dict[float, float]:
    """Raw latencies put into the kubelet's buckets, so both sides are read the same way."""
    return {bound: float(sum(1 for latency in latencies if latency <= bound))
            for bound in (*PROBE_DURATION_BUCKETS, INF)}


@dataclass(frozen=True)
class BucketQuantile:
    """A percentile read from a histogram: the bucket it falls in and a linear estimate."""

    estimate: float
    lower: float
    upper: float

    def __str__(self) -> str:
        if self.upper == INF:
            return f"> {self.lower * 1000:g} ms"
        return (f"~{self.estimate * 1000:.1f} ms "
                f"({self.lower * 1000:g}-{self.upper * 1000:g})")


def bucket_quantile(buckets: dict[float, float], fraction: float) -> BucketQuantile | None:
    """Prometheus' ``histogram_quantile``: linear within the bucket holding the rank."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = fraction * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == INF:
                return BucketQuantile(lower, lower, INF)
            share = (rank - below) / (count - below) if count > below else 1.0
            return BucketQuantile(lower + (bound - lower) * share, lower, bound)
        lower, below = bound, count
    return None


def machine_cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, for the machine's load beside the figures."""
    with open("/proc/stat", encoding="ascii") as stat_file:
        values = [int(value) for value in stat_file.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # guest time is already inside user
    return total - idle, total


@dataclass
class Window:
    """What one side cost over its measuring window."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    counters: ProbeCounters = field(default_factory=ProbeCounters)
    machine_busy: float = 0.0  # fraction of all CPUs
    rss_start_kib: int = 0
    rss_max_kib: int = 0
    exact_latencies: list[float] = field(default_factory=list)

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_seconds / self.seconds

    @property
    def cpu_ms_per_probe(self) -> float:
        total = self.counters.total
        return 1000.0 * self.cpu_seconds / total if total else math.nan


@dataclass
class Results:
    kind: str
    containers: int
    pods: int
    kubelet: Window = field(default_factory=Window)
    raw: Window = field(default_factory=Window)
    ready_at_end: int = 0
    client_log: dict[str, int] = field(default_factory=dict)


class MachineLoad:
    """Busy fraction of all CPUs between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self._start = machine_cpu_jiffies()

    def stop(self) -> float:
        busy, total = machine_cpu_jiffies()
        return (busy - self._start[0]) / max(1, total - self._start[1])


def results_line(counters: ProbeCounters) -> str:
    return ", ".join(f"{name} {int(value)}" for name, value in sorted(counters.by_result.items())
                     if value) or "none"


def render(results: Results) -> str:
    kub, raw = results.kubelet, results.raw
    spread = containers_per_pod(results.containers, results.pods)
    layout = (f"{results.pods} pods x {spread[0]} containers" if len(set(spread)) == 1
              else f"{results.pods} pods of {min(spread)}-{max(spread)} containers")
    ratio = kub.cpu_ms_per_probe / raw.cpu_ms_per_probe
    raw_p50 = percentile(raw.exact_latencies, 0.5) * 1000 if raw.exact_latencies else math.nan
    raw_p99 = percentile(raw.exact_latencies, 0.99) * 1000 if raw.exact_latencies else math.nan
    cores = os.cpu_count() or 1

    def row(label: str, window: Window) -> str:
        p50 = bucket_quantile(window.counters.buckets, 0.5)
        p99 = bucket_quantile(window.counters.buckets, 0.99)
        return (f"  {label:11}{int(window.counters.total):>8}{window.cpu_seconds:>9.2f}"
                f"{window.cpu_percent:>8.2f}{window.cpu_ms_per_probe:>9.3f}"
                f"{window.machine_busy * 100:>8.1f}   p50 {p50!s:22} p99 {p99}")

    lines = [
        f"pykubelet probe benchmark: {results.kind} readiness probes",
        f"  {results.containers} containers ({layout}), readinessProbe periodSeconds "
        f"{PROBE_PERIOD_SECONDS:g}, timeoutSeconds {PROBE_TIMEOUT_SECONDS:g}",
        f"  pykubelet flags {' '.join(KUBELET_ARGS)}, config {KUBELET_CONFIG}; "
        f"machine: {cores} CPUs",
        "",
        f"over {kub.seconds:.0f} s (pykubelet) and {raw.seconds:.0f} s (raw calls)",
        f"  {'':11}{'probes':>8}{'CPU s':>9}{'% core':>8}{'ms/probe':>9}{'mach %':>8}"
        "   latency (bucket resolution)",
        row("pykubelet", kub),
        row("raw calls", raw),
        f"  pykubelet probes by result: {results_line(kub.counters)}; "
        f"containers Ready at the end: {results.ready_at_end}/{results.containers}",
        f"  raw calls by result: {results_line(raw.counters)}; "
        f"raw latency exact p50 {raw_p50:.1f} ms, p99 {raw_p99:.1f} ms",
        f"  CPU per probe pykubelet/raw: {ratio:.2f}x",
        f"  pykubelet RSS: {kub.rss_start_kib / 1024:.1f} MiB at start, "
        f"{kub.rss_max_kib / 1024:.1f} MiB max",
        f"  pykubelet CPU: {kub.cpu_percent:.2f} % of one core  "
        f"(target < {CPU_PERCENT_TARGET:g} %) "
        f"{verdict(kub.cpu_percent < CPU_PERCENT_TARGET)}",
        *client_log_lines(results.client_log),
    ]
    return "\n".join(lines)


# --- pykubelet ------------------------------------------------------------------------------------

async def measure_kubelet(kubelet: KubeletProcess, seconds: float, window: Window) -> None:
    assert kubelet.process is not None
    pid = kubelet.process.pid
    before = parse_probe_metrics(await asyncio.to_thread(kubelet.probe_metrics))
    load = MachineLoad()
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    window.rss_start_kib = window.rss_max_kib = rss_kib(pid)
    while (elapsed := time.monotonic() - started) < seconds:
        await asyncio.sleep(min(RSS_SAMPLE_SECONDS, seconds - elapsed))
        check_alive(kubelet)
        window.rss_max_kib = max(window.rss_max_kib, rss_kib(pid))
    window.cpu_seconds = cpu_seconds(pid) - cpu_before
    window.seconds = time.monotonic() - started
    window.machine_busy = load.stop()
    # Read after the CPU figure: serving the metrics is not probing work.
    after = parse_probe_metrics(await asyncio.to_thread(kubelet.probe_metrics))
    window.counters = after.minus(before)


# --- raw calls ------------------------------------------------------------------------------------

ProbeCall = Callable[[ProbeTarget], Awaitable[bool]]


class RawProber:
    """One loop per container, a call every period, all in this process's event loop.

    Each loop starts at a random offset within the period, as upstream's
    workers do, so the calls are spread out rather than fired in bursts.
    Only calls that finish while ``recording`` is set are counted.
    """

    def __init__(self, call: ProbeCall, targets: Sequence[ProbeTarget]) -> None:
        self._call = call
        self._targets = targets
        self._tasks: list[asyncio.Task[None]] = []
        self.recording = False
        self.latencies: list[float] = []
        self.results: dict[str, float] = {}

    async def __aenter__(self) -> RawProber:
        self._tasks = [asyncio.create_task(self._loop(target)) for target in self._targets]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self, target: ProbeTarget) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(random.uniform(0, PROBE_PERIOD_SECONDS))
        next_at = loop.time()
        while True:
            started = time.perf_counter()
            try:
                ok = await self._call(target)
            except Exception:
                ok = False
            latency = time.perf_counter() - started
            if self.recording:
                # Upstream only times probes that answered; failures are counted, not timed.
                result = "successful" if ok else "failed"
                self.results[result] = self.results.get(result, 0.0) + 1
                if ok:
                    self.latencies.append(latency)
            next_at += PROBE_PERIOD_SECONDS
            await asyncio.sleep(max(0.0, next_at - loop.time()))


async def exec_call_maker(endpoint: str, stack: contextlib.AsyncExitStack) -> ProbeCall:
    runtime = RemoteRuntimeService(endpoint, 60)
    await runtime.connect()
    stack.push_async_callback(runtime.close)

    async def call(target: ProbeTarget) -> bool:
        result = await runtime.exec_sync(target.container_id, EXEC_PROBE_COMMAND,
                                         PROBE_TIMEOUT_SECONDS)
        return result.exit_code == 0

    return call


async def http_call_maker(endpoint: str, stack: contextlib.AsyncExitStack) -> ProbeCall:
    # A fresh connection per call, as probes must; one session, which is the cheapest way.
    session = await stack.enter_async_context(aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True),
        timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_SECONDS)))

    async def call(target: ProbeTarget) -> bool:
        async with session.get(f"http://{target.pod_ip}:{target.port}/") as response:
            await response.read()
            return 200 <= response.status < 400

    return call


async def tcp_call_maker(endpoint: str, stack: contextlib.AsyncExitStack) -> ProbeCall:
    async def call(target: ProbeTarget) -> bool:
        async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
            _, writer = await asyncio.open_connection(target.pod_ip, target.port)
        writer.close()
        await writer.wait_closed()
        return True

    return call


CALL_MAKERS: dict[str, Callable[[str, contextlib.AsyncExitStack], Awaitable[ProbeCall]]] = {
    "exec": exec_call_maker,
    "http": http_call_maker,
    "tcp": tcp_call_maker,
}


async def measure_raw(kind: str, endpoint: str, targets: Sequence[ProbeTarget], seconds: float,
                      warmup_seconds: float, window: Window) -> None:
    pid = os.getpid()
    async with contextlib.AsyncExitStack() as stack:
        call = await CALL_MAKERS[kind](endpoint, stack)
        async with RawProber(call, targets) as prober:
            await asyncio.sleep(warmup_seconds)
            load = MachineLoad()
            cpu_before = cpu_seconds(pid)
            started = time.monotonic()
            prober.recording = True
            await asyncio.sleep(seconds)
            prober.recording = False
            window.cpu_seconds = cpu_seconds(pid) - cpu_before
            window.seconds = time.monotonic() - started
            window.machine_busy = load.stop()
    window.exact_latencies = prober.latencies
    window.counters = ProbeCounters(dict(prober.results), histogram_of(prober.latencies))


# --- orchestration --------------------------------------------------------------------------------

async def run_benchmark(testbed: Testbed, work_dir: Path, args: argparse.Namespace,
                        results: Results, kubelet_holder: list[KubeletProcess]) -> None:
    kubelet = KubeletProcess(work_dir / "kubelet", testbed.endpoint,
                             extra_config=KUBELET_CONFIG, extra_args=KUBELET_ARGS)
    kubelet_holder.append(kubelet)
    print("starting pykubelet ...", file=sys.stderr, flush=True)
    await asyncio.to_thread(kubelet.start)
    assert kubelet.process is not None
    for manifest in pod_manifests(args.probe, testbed.busybox_image, args.containers, args.pods):
        kubelet.write_pod(manifest)
    print(f"waiting for {args.containers} containers to be Ready ...", file=sys.stderr,
          flush=True)
    await wait_all_ready(kubelet, args.containers)
    await asyncio.sleep(args.settle_seconds)
    print(f"measuring pykubelet (pid {kubelet.process.pid}) for {args.seconds:g} s ...",
          file=sys.stderr, flush=True)
    await measure_kubelet(kubelet, args.seconds, results.kubelet)
    # Taken after the window so that probes that started failing show up here.
    targets = ready_targets(await asyncio.to_thread(kubelet.pods))
    results.ready_at_end = len(targets)
    if not targets:
        raise BenchmarkError("no container was Ready at the end of pykubelet's window")
    # Stopping pykubelet leaves the pods running: the raw calls probe the same containers.
    kubelet.stop()
    print(f"raw {args.probe} calls against {len(targets)} containers for {args.seconds:g} s ...",
          file=sys.stderr, flush=True)
    await measure_raw(args.probe, testbed.endpoint, targets, args.seconds,
                      min(args.settle_seconds, 5.0), results.raw)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="pykubelet's CPU and probe latency with many readiness probes, against "
                    "the same probe calls made directly.")
    parser.add_argument("--containers", type=int, default=100,
                        help="probed containers in total (default 100)")
    parser.add_argument("--pods", type=int, default=10,
                        help="pods the containers are spread over (default 10)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="measuring window for each side (default 60)")
    parser.add_argument("--probe", choices=PROBE_KINDS, default="exec",
                        help="readiness probe handler (default exec)")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="wait after all containers are Ready before measuring")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.containers < args.pods or args.seconds <= 0:
        parser.error("--pods must be >= 1, --containers >= --pods, --seconds > 0")
    if max(containers_per_pod(args.containers, args.pods)) > 100:
        parser.error("at most 100 containers per pod (container names and ports are 2 digits)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = Results(kind=args.probe, containers=args.containers, pods=args.pods)

    async def body(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
        await run_benchmark(testbed, work_dir, args, results, kubelet_holder)

    status = run_on_testbed(body, results.client_log)
    if status == 0:
        print(render(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
