"""What the benchmarks share: the runtime-side detector, process figures, set-up and clean-up.

Every benchmark here measures a real kubelet process on a private containerd
(``testsupport/testbed.py``) beside a floor measured in the same run. The pieces
they all need live here once: reading a process's CPU time and RSS, the CRI
poll that sees a pod's container RUNNING (the same detector for every side),
raw CRI pod starts built with pykubelet's own config generators, and the
start-measure-clean-up frame that leaves no containerd, pod or temp file
behind on exit, Ctrl-C or SIGTERM.
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
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cri_api.v1 import api_pb2

from pykubelet.api import pod_from_dict
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime.container import MINIMUM_GRACE_PERIOD_SECONDS
from pykubelet.kuberuntime.container_config import (
    ContainerOptions,
    generate_container_config,
)
from pykubelet.kuberuntime.labels import POD_NAME_LABEL
from pykubelet.kuberuntime.sandbox_config import (
    SandboxOptions,
    generate_pod_sandbox_config,
)
from testsupport.kubelet_process import NODE_NAME
from testsupport.podwatch import START_TIMEOUT_SECONDS
from testsupport.testbed import Testbed, TestbedError

# Upstream defaults, so the idle figure is what a default node would pay;
# the test helper's shorter periods are meant to make tests fast, not realistic.
KUBELET_CONFIG: dict[str, Any] = {"syncFrequency": "1m", "fileCheckFrequency": "20s"}
# The API client limits every cluster-mode comparison gives both kubelets: v1.35's
# defaults (upstream's since 1.27), for requests and for events. The Go kubelet
# 1.20's own are 5 and 10 for each, and with those its figures measure its rate
# limiters rather than its work (issue 37).
API_QPS, API_BURST = 50, 100
API_CLIENT_CONFIG: dict[str, Any] = {"kubeAPIQPS": API_QPS, "kubeAPIBurst": API_BURST,
                                     "eventRecordQPS": API_QPS, "eventBurst": API_BURST}
API_CLIENT_SETTINGS = (f"kubeAPIQPS {API_QPS}, kubeAPIBurst {API_BURST}, "
                       f"eventRecordQPS {API_QPS}, eventBurst {API_BURST}")
# The verbosity a production node runs with; --v=4 logging would be measured as work.
KUBELET_ARGS = ["--v=2"]

# Between single-pod runs: a kubelet's work for a pod goes on after its container
# started (status writes, events, the relist that reports it Running), and each
# kubelet does it at another time (pykubelet at once, the Go kubelet 1.20 at its
# next relist, up to 1 s later). A run started in that wake would measure it too.
SINGLE_RUN_PAUSE_SECONDS = 1.0
CLEANUP_TIMEOUT_SECONDS = 60.0
RSS_SAMPLE_SECONDS = 0.5
SLEEP_COMMAND = ["sh", "-c", "sleep 3600"]


class BenchmarkError(RuntimeError):
    """The benchmark could not measure what it set out to (not a missed target)."""


class MeasuredProcess(Protocol):
    """A kubelet process being measured (``KubeletProcess`` or the Go kubelet's handle)."""

    @property
    def process(self) -> Any: ...

    def stop(self) -> int: ...

    def log_text(self) -> str: ...


# --- figures --------------------------------------------------------------------------------------

def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: with few samples p99 is simply the slowest one."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


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
    """Polls the runtime for RUNNING containers and tells when each pod's container started.

    Pods are told apart by the pod-name label both pykubelet and the raw
    baseline put on containers. The time reported is the runtime's own
    ``startedAt`` of the container first seen RUNNING, read once all the
    waited-for pods are seen, so a figure carries neither the poll period nor
    an extra CRI call made while other pods are still starting. A container
    gone before its status is read keeps the time its poll saw it.
    """

    def __init__(self, runtime: RemoteRuntimeService, poll_seconds: float) -> None:
        self._runtime = runtime
        self._poll_seconds = poll_seconds
        # pod name: (time the poll saw its container RUNNING, that container's id)
        self._first_seen: dict[str, tuple[float, str]] = {}
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
                    self._first_seen.setdefault(pod_name, (seen_at, container.id))
            await asyncio.sleep(self._poll_seconds)

    def forget(self, pod_names: Sequence[str]) -> None:
        for name in pod_names:
            self._first_seen.pop(name, None)
            self.first_running.pop(name, None)

    async def _started_at(self, pod_name: str) -> float:
        """When the runtime started ``pod_name``'s container, on the monotonic clock."""
        seen_at, container_id = self._first_seen[pod_name]
        try:
            response = await self._runtime.container_status(container_id)
        except Exception:
            return seen_at
        started_ns = response.status.started_at
        if not started_ns:
            return seen_at
        # Both clocks read back to back: the wall-clock start moved onto the monotonic clock.
        return started_ns / 1e9 - time.time() + time.monotonic()

    async def wait_running(self, pod_names: Sequence[str], kubelet: MeasuredProcess | None = None,
                           timeout: float = START_TIMEOUT_SECONDS) -> list[float]:
        """When each of ``pod_names`` started running, once every one has been seen."""
        deadline = time.monotonic() + timeout
        while not all(name in self._first_seen for name in pod_names):
            if self._task is not None and self._task.done():
                self._task.result()  # the poll failed: surface its error
            check_alive(kubelet)
            if time.monotonic() > deadline:
                missing = [n for n in pod_names if n not in self._first_seen]
                raise BenchmarkError(f"{len(missing)} pod(s) not RUNNING after {timeout:g}s: "
                                     f"{', '.join(missing[:5])}")
            await asyncio.sleep(self._poll_seconds / 2)
        unread = [name for name in pod_names if name not in self.first_running]
        for name, started in zip(unread, await asyncio.gather(
                *(self._started_at(name) for name in unread)), strict=True):
            self.first_running[name] = started
        return [self.first_running[name] for name in pod_names]


async def remove_all_sandboxes(runtime: RemoteRuntimeService) -> None:
    for sandbox in await runtime.list_pod_sandboxes():
        await runtime.stop_pod_sandbox(sandbox.id)
        await runtime.remove_pod_sandbox(sandbox.id)


def check_alive(kubelet: MeasuredProcess | None) -> None:
    """Fail at once, not at a timeout, when the kubelet being measured has died."""
    if kubelet is not None and kubelet.process is not None and kubelet.process.poll() is not None:
        raise BenchmarkError(f"the kubelet exited ({kubelet.process.returncode}) during the "
                             f"benchmark; its log: {kubelet.log_text()[-2000:]}")


async def wait_pods_gone(runtime: RemoteRuntimeService, pod_names: Sequence[str],
                         poll_seconds: float, kubelet: MeasuredProcess | None,
                         timeout: float = CLEANUP_TIMEOUT_SECONDS,
                         exited: dict[str, float] | None = None) -> float:
    """Until the runtime has no ready sandbox and no running container left for any of
    ``pod_names``; the time (monotonic) of the poll that first saw none. ``exited``
    gets, for each pod, the time of the poll that first saw none of its containers
    running."""
    wanted = set(pod_names)
    ready = api_pb2.PodSandboxFilter(
        state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY))
    running = api_pb2.ContainerFilter(
        state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))
    deadline = time.monotonic() + timeout
    left: set[str] = wanted
    while time.monotonic() < deadline:
        check_alive(kubelet)
        sandboxes, containers = await asyncio.gather(runtime.list_pod_sandboxes(ready),
                                                     runtime.list_containers(running))
        seen_at = time.monotonic()
        with_running = {c.labels.get(POD_NAME_LABEL, "") for c in containers}
        if exited is not None:
            for name in wanted - with_running:
                exited.setdefault(name, seen_at)
        left = wanted & ({s.labels.get(POD_NAME_LABEL, "") for s in sandboxes} | with_running)
        if not left:
            return seen_at
        await asyncio.sleep(poll_seconds)
    raise BenchmarkError(f"{len(left)} pod(s) still running {timeout:g}s after their manifests "
                         f"went: {', '.join(sorted(left)[:5])}")


# --- raw CRI pods ---------------------------------------------------------------------------------

def pod_manifest(name: str, image: str,
                 command: Sequence[str] = SLEEP_COMMAND) -> dict[str, Any]:
    # Grace period 0: the benchmark measures start-up, and sleep as PID 1 ignores SIGTERM.
    # dnsPolicy Default: the testbed node has no cluster DNS to point ClusterFirst at.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0, "dnsPolicy": "Default",
                     "containers": [{"name": "sleep", "image": image,
                                     "command": list(command)}]}}


@dataclass
class RawPod:
    name: str
    sandbox_config: api_pb2.PodSandboxConfig
    container_config: api_pb2.ContainerConfig


def raw_pod(name: str, image: str, work_dir: Path,
            command: Sequence[str] = SLEEP_COMMAND) -> RawPod:
    """The CRI configs pykubelet would send for the benchmark pod, built before the clock runs."""
    manifest = pod_manifest(name, image, command)
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


async def time_raw_single(runtime: RemoteRuntimeService, watcher: RunningWatcher, image: str,
                          work_dir: Path, name: str) -> float:
    """Milliseconds from the first CRI call until the pod's container is seen RUNNING;
    the pod is removed again afterwards (as every sandbox on the runtime)."""
    pod = raw_pod(name, image, work_dir)
    started = time.monotonic()
    await start_raw(runtime, pod)
    (running_at,) = await watcher.wait_running([name])
    await remove_all_sandboxes(runtime)
    return (running_at - started) * 1000


async def time_raw_serial(runtime: RemoteRuntimeService, watcher: RunningWatcher, image: str,
                          work_dir: Path, prefix: str, count: int) -> tuple[float, float]:
    """``count`` pods started one after another: ms until the last and the first is RUNNING."""
    pods = [raw_pod(f"{prefix}-{i}", image, work_dir) for i in range(count)]
    started = time.monotonic()
    for pod in pods:
        await start_raw(runtime, pod)
    running = await watcher.wait_running([pod.name for pod in pods])
    await remove_all_sandboxes(runtime)
    return (max(running) - started) * 1000, (min(running) - started) * 1000


async def time_raw_concurrent(runtime: RemoteRuntimeService, watcher: RunningWatcher, image: str,
                              work_dir: Path, prefix: str, count: int,
                              command: Sequence[str] = SLEEP_COMMAND) -> tuple[float, float]:
    """``count`` pods started all at once, each pod's three calls in order (what a
    kubelet's pod workers do with new pods, on one gRPC channel): ms until the
    last and the first is RUNNING. The pods are left running."""
    pods = [raw_pod(f"{prefix}-{i}", image, work_dir, command) for i in range(count)]
    started = time.monotonic()
    await asyncio.gather(*(start_raw(runtime, pod) for pod in pods))
    running = await watcher.wait_running([pod.name for pod in pods])
    return (max(running) - started) * 1000, (min(running) - started) * 1000


async def time_raw_delete(runtime: RemoteRuntimeService, prefix: str, count: int,
                          poll_seconds: float) -> float:
    """The running pods ``<prefix>-0..count-1`` (from ``time_raw_concurrent``) stopped all
    at once as a kubelet stops a deleted pod (upstream ``killPodWithSyncResult``): each pod's
    containers with ``StopContainer`` and the kubelets' minimum grace period, then its
    sandbox with ``StopPodSandbox``. Ms until the runtime has none running or ready, seen
    by the same poll as the kubelets' deletions."""
    names = [f"{prefix}-{i}" for i in range(count)]
    wanted = set(names)
    sandboxes = [s for s in await runtime.list_pod_sandboxes()
                 if s.labels.get(POD_NAME_LABEL) in wanted]
    containers = [c for c in await runtime.list_containers()
                  if c.labels.get(POD_NAME_LABEL) in wanted]

    async def stop_pod(sandbox_id: str) -> None:
        await asyncio.gather(*(runtime.stop_container(c.id, MINIMUM_GRACE_PERIOD_SECONDS)
                               for c in containers if c.pod_sandbox_id == sandbox_id))
        await runtime.stop_pod_sandbox(sandbox_id)

    started = time.monotonic()
    stopping = asyncio.gather(*(stop_pod(s.id) for s in sandboxes))
    try:
        gone_at = await wait_pods_gone(runtime, names, poll_seconds, None)
    finally:
        await stopping
    return (gone_at - started) * 1000


# --- a kubelet's side -----------------------------------------------------------------------------

class PodLister(MeasuredProcess, Protocol):
    def pods(self) -> list[dict[str, Any]]: ...


async def wait_all_reported_running(kubelet: PodLister, names: Sequence[str], node_name: str,
                                    poll_seconds: float,
                                    timeout: float = START_TIMEOUT_SECONDS) -> None:
    """Until ``/pods`` shows every static pod Running: the status side has caught up too."""
    wanted = {f"{name}-{node_name}" for name in names}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_alive(kubelet)
        phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase")
                  for p in await asyncio.to_thread(kubelet.pods)}
        if all(phases.get(name) == "Running" for name in wanted):
            return
        await asyncio.sleep(poll_seconds)
    raise BenchmarkError("the kubelet did not report every pod Running on /pods in time")


class StaticPodKubelet(MeasuredProcess, Protocol):
    node_name: str

    def write_pod(self, manifest: dict[str, Any], filename: str | None = None) -> Path: ...


async def time_static_singles(runtime: RemoteRuntimeService, watcher: RunningWatcher,
                              kubelet: StaticPodKubelet, image: str, names: Sequence[str],
                              poll_seconds: float) -> list[float]:
    """Static pods ``names`` written one at a time, each ``SINGLE_RUN_PAUSE_SECONDS``
    after the one before runs: ms from writing each manifest until its container started.

    The earlier pods keep running until all have started, and are then removed
    together. Removing each before the next would have the next start while
    the runtime still tears the last one down (its network goes after its
    sandbox is no longer ready), which the raw floor's starts never meet.
    """
    node = kubelet.node_name
    paths: list[Path] = []
    singles: list[float] = []
    for index, name in enumerate(names):
        if index:
            await asyncio.sleep(SINGLE_RUN_PAUSE_SECONDS)
        started = time.monotonic()
        paths.append(kubelet.write_pod(pod_manifest(name, image)))
        (running_at,) = await watcher.wait_running([f"{name}-{node}"], kubelet)
        singles.append((running_at - started) * 1000)
    for path in paths:
        path.unlink()
    await wait_pods_gone(runtime, [f"{name}-{node}" for name in names], poll_seconds, kubelet)
    return singles


@dataclass
class IdleFigures:
    seconds: float
    cpu_seconds: float
    rss_start_kib: int
    rss_max_kib: int

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_seconds / self.seconds


async def measure_idle(pid: int, seconds: float) -> IdleFigures:
    """CPU seconds and RSS of a kubelet over ``seconds`` while nothing but its own loops runs."""
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    rss_start = rss_max = rss_kib(pid)
    while (elapsed := time.monotonic() - started) < seconds:
        await asyncio.sleep(min(RSS_SAMPLE_SECONDS, seconds - elapsed))
        rss_max = max(rss_max, rss_kib(pid))
    return IdleFigures(time.monotonic() - started, cpu_seconds(pid) - cpu_before, rss_start,
                       rss_max)


# --- command line --------------------------------------------------------------------------------

def add_common_arguments(parser: argparse.ArgumentParser, *, runs: int, runs_help: str,
                         pods_help: str, idle_seconds: float) -> None:
    """The options of the benchmarks that start pods on a kubelet and then watch it idle
    (``pod_startup.py``, ``peer.py``): ``--runs``, ``--pods``, ``--idle-seconds``,
    ``--settle-seconds`` and ``--poll-ms``; check them with ``check_common_arguments``."""
    parser.add_argument("--runs", type=int, default=runs, help=f"{runs_help} (default {runs})")
    parser.add_argument("--pods", type=int, default=30, help=f"{pods_help} (default 30)")
    parser.add_argument("--idle-seconds", type=float, default=idle_seconds,
                        help=f"idle window for the kubelet's CPU and RSS "
                             f"(default {idle_seconds:g})")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="wait after the idle pods report Running, before the idle window "
                             "(default 10)")
    parser.add_argument("--poll-ms", type=float, default=20.0,
                        help="period of the CRI polls that see a container RUNNING, and gone "
                             "(default 20)")


def check_common_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                           counts: Sequence[str] = ("runs", "pods")) -> None:
    """Exits with a usage error unless the ``counts`` options are at least 1 and
    ``--idle-seconds`` and ``--poll-ms`` above 0."""
    if min(getattr(args, name) for name in counts) < 1 or args.idle_seconds <= 0 \
            or args.poll_ms <= 0:
        names = ", ".join(f"--{name.replace('_', '-')}" for name in counts)
        parser.error(f"{names} must be >= 1; --idle-seconds and --poll-ms > 0")


# --- set-up and clean-up --------------------------------------------------------------------------

async def clean_runtime(endpoint: str) -> None:
    runtime = RemoteRuntimeService(endpoint, 60)
    await runtime.connect()
    try:
        await remove_all_sandboxes(runtime)
    finally:
        await runtime.close()


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt where the benchmark is, through one
    clean-up path (also when a shell starting us in the background ignored SIGINT).

    Not Python's default SIGINT handler: with it, ``asyncio.run`` turns Ctrl-C into a
    cancellation of the main task, which code on the way (``asyncio.wait_for`` on 3.11,
    client libraries) can swallow, and the benchmark then runs on to its end.
    """
    def interrupt(signum: int, frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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


def cleanup(testbed: Testbed, work_dir: Path, kubelet_holder: Sequence[MeasuredProcess]) -> None:
    """Stop the kubelets, remove every pod, stop containerd, delete the temp files.

    A kubelet handle with a ``remove_leftovers()`` method (what it made outside
    ``work_dir``, such as cgroups) has it called once the pods are gone.
    """
    with uninterruptible("cleaning up"):
        for kubelet in kubelet_holder:
            if kubelet.process is not None:
                kubelet.stop()
        with contextlib.suppress(Exception):
            asyncio.run(clean_runtime(testbed.endpoint))
        for kubelet in kubelet_holder:
            remove_leftovers = getattr(kubelet, "remove_leftovers", None)
            if remove_leftovers is not None:
                remove_leftovers()
        try:
            testbed.stop()
        except TestbedError as err:
            print(f"testbed stop failed: {err}", file=sys.stderr)
        shutil.rmtree(work_dir, ignore_errors=True)


# What counts as "the measurement broke" (exit status 1) rather than a crash of the script.
BENCHMARK_ERRORS: tuple[type[BaseException], ...] = (BenchmarkError, TestbedError, AssertionError,
                                                     OSError)
BenchmarkBody = Callable[[Testbed, Path, list[Any]], Coroutine[Any, Any, None]]


def run_on_testbed(body: BenchmarkBody, client_log: dict[str, int] | None = None,
                   errors: tuple[type[BaseException], ...] = ()) -> int:
    """Start a private containerd, run ``body`` on it, and always clean up.

    ``body`` gets the testbed, a fresh work directory and a list to append
    every kubelet handle it starts to (so that clean-up can stop it).
    Returns the exit status: 0, 1 when the measurement broke (``errors``
    are counted as that too), 130 when interrupted. With ``client_log``,
    what pykubelet's client code logs in this process is counted there.
    """
    work_dir = Path(tempfile.mkdtemp(prefix="pyk-bench-", dir="/tmp"))
    testbed = Testbed.fresh()
    kubelet_holder: list[Any] = []
    counting = (client_logs_counted(client_log) if client_log is not None
                else contextlib.nullcontext())
    with interrupt_on_signals(), counting:
        try:
            print(f"starting containerd in {testbed.dir} ...", file=sys.stderr, flush=True)
            with uninterruptible("starting containerd"):
                testbed.build_images()
                testbed.start()
            asyncio.run(body(testbed, work_dir, kubelet_holder))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except BENCHMARK_ERRORS + errors as err:
            print(f"benchmark failed: {err}", file=sys.stderr)
            return 1
        finally:
            cleanup(testbed, work_dir, kubelet_holder)
    return 0
