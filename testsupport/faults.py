"""Faults injected into a node during a churn, and what must hold after each (issue 39).

``bench/faults.py`` (minutes, both kubelets, every fault) and
``tests/integration/test_faults.py`` (a minute, pykubelet, kill -9 and a
containerd restart) share this module, as the soak shares ``testsupport/soak.py``.

The churn is the soak's (``testsupport.soak.MIX`` through ``pod_life``) plus
*counted* pods that live until the churn ends: each appends one line to a file
of a hostPath directory every time its container starts, so the lines are the
runtime's history of starts, whatever the kubelet remembers. Three kinds:
``restartPolicy: Never`` pods that keep running and ones that exit 0 after a
second (each must have started exactly once, however many kubelet restarts),
and ``restartPolicy: Always`` pods that exit 1 on their first ``ALWAYS_CRASHES``
starts and then keep running (each must end with one running container and
``restartCount + 1`` lines).

The faults (``KILL`` ... ``DISK_FULL``) act on the real processes, on a
schedule (``schedule``) laid over the churn; after each clears, the churn goes
on and the run waits until the node has *settled* (``unsettled``): every pod
created before the clear is past Pending, no container or ready sandbox is
left of a pod the API deleted before it, and every container the API shows
running runs in the runtime. What the kubelet did meanwhile is
watched in the API: its Node's Ready condition and taints (``NodeWatcher``),
and pods deleted or evicted that the churn did not delete.

The kubelet is restarted after a kill as a service manager would: at once, on
the same root directory, without the clean-up a test's ``stop`` does (which
would unmount the root's bind mount). ``dedicated_root_filesystem`` makes that
root a small tmpfs of its own, shared with containerd as the bind mount is,
for the full-disk fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cri_api.v1 import api_pb2
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api import pod_from_dict
from pykubelet.cri.errors import CRIError
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime.labels import POD_NAME_LABEL, POD_NAMESPACE_LABEL
from pykubelet.util.reflector import ApiListWatch, WatchEvent
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import KubeletProcess
from testsupport.podwatch import ApiRunningWatcher
from testsupport.soak import (
    DELETE_WHILE_STARTING_SECONDS,
    DELETED_STARTING,
    MIX,
    RESTARTING,
    Churn,
    pod_life,
    soak_pod,
)
from testsupport.testbed import Testbed

# --- counted pods ---------------------------------------------------------------------------------

NEVER_RUNNING, NEVER_DONE, ALWAYS = "never-running", "never-done", "always"
COUNTED_KINDS = (NEVER_RUNNING, NEVER_DONE, ALWAYS)
# An Always pod's container exits 1 on this many starts, then keeps running.
ALWAYS_CRASHES = 1
STARTS_MOUNT = "/starts"
COUNTED_PREFIX = "counted-"


def counted_pod(name: str, kind: str, node: str, image: str, starts_dir: Path) -> dict[str, Any]:
    """A counted pod of ``kind``: one line in ``starts_dir/<name>`` per start of its container."""
    pod = soak_pod(name, "counted", node, image)
    pod["metadata"]["labels"]["soak-kind"] = kind
    spec = pod["spec"]
    spec["restartPolicy"] = "Always" if kind == ALWAYS else "Never"
    spec["volumes"] = [{"name": "starts", "hostPath": {"path": str(starts_dir),
                                                        "type": "DirectoryOrCreate"}}]
    container = spec["containers"][0]
    container["volumeMounts"] = [{"name": "starts", "mountPath": STARTS_MOUNT}]
    record = f"echo started >> {STARTS_MOUNT}/{name}"
    keep_running = "trap 'exit 0' TERM; sleep 3600 & wait"
    script = {
        NEVER_RUNNING: f"{record}; {keep_running}",
        NEVER_DONE: f"{record}; sleep 1; exit 0",
        ALWAYS: (f"{record}; if [ $(wc -l < {STARTS_MOUNT}/{name}) -le {ALWAYS_CRASHES} ]; "
                 f"then sleep 1; exit 1; fi; {keep_running}"),
    }[kind]
    container["command"] = ["sh", "-c", script]
    return pod


def starts_of(starts_dir: Path, name: str) -> int:
    """How many times the counted pod's container started (the lines it appended)."""
    try:
        return len((starts_dir / name).read_bytes().splitlines())
    except FileNotFoundError:
        return 0


@dataclass
class CountedPod:
    kind: str
    verdict: str = "not checked"   # "ok" or what is wrong
    starts: int = 0
    restart_count: int | None = None


@dataclass
class CountedReport:
    """Per counted pod, what was found once they converged (or the bound ran out)."""

    pods: dict[str, CountedPod] = field(default_factory=dict)
    converged_s: float | None = None

    def of_kind(self, kind: str) -> list[tuple[str, CountedPod]]:
        return [(name, pod) for name, pod in sorted(self.pods.items()) if pod.kind == kind]

    def failures(self) -> dict[str, str]:
        return {name: pod.verdict for name, pod in self.pods.items() if pod.verdict != "ok"}


def _running_container_ids(containers: Sequence[api_pb2.Container], namespace: str,
                           name: str) -> list[str]:
    return [c.id for c in containers if c.state == api_pb2.CONTAINER_RUNNING
            and c.labels.get(POD_NAMESPACE_LABEL) == namespace
            and c.labels.get(POD_NAME_LABEL) == name]


def judge_counted(kind: str, starts: int, pod: client.V1Pod | None,
                  running_ids: Sequence[str]) -> CountedPod:
    """``CountedPod`` with its verdict: "ok", or the first thing found wrong."""
    found = CountedPod(kind, starts=starts)
    if pod is None:
        found.verdict = "gone from the API"
        return found
    statuses = (pod.status.container_statuses if pod.status else None) or []
    phase = pod.status.phase if pod.status else None
    status = statuses[0] if statuses else None
    found.restart_count = status.restart_count if status is not None else None
    api_id = (status.container_id or "") if status is not None else ""
    running_in_api = bool(status is not None and status.state and status.state.running)
    wanted_running = kind != NEVER_DONE
    if kind == ALWAYS:
        wanted_starts = (found.restart_count or 0) + 1
        if starts != wanted_starts:
            found.verdict = f"{starts} starts, restartCount {found.restart_count}"
            return found
        if starts < ALWAYS_CRASHES + 1:
            found.verdict = f"{starts} starts, not past its {ALWAYS_CRASHES} crash(es) yet"
            return found
    elif starts != 1:
        found.verdict = f"{starts} starts (restartPolicy Never)"
        return found
    wanted_phase = "Running" if wanted_running else "Succeeded"
    if phase != wanted_phase:
        found.verdict = f"phase {phase}, wanted {wanted_phase}"
    elif len(running_ids) != int(wanted_running):
        found.verdict = f"{len(running_ids)} running containers in the runtime"
    elif running_in_api != wanted_running or (
            wanted_running and not api_id.endswith(f"://{running_ids[0]}")):
        found.verdict = f"API container {api_id or '-'} (running {running_in_api}) is not " \
                        f"the runtime's {running_ids[:1]}"
    else:
        found.verdict = "ok"
    return found


async def check_counted(api: client.CoreV1Api, runtime: RemoteRuntimeService, namespace: str,
                        counted: dict[str, str], starts_dir: Path,
                        bound: float) -> CountedReport:
    """Until every counted pod is "ok" or ``bound`` seconds passed: the last verdicts."""
    began = time.monotonic()
    report = CountedReport()
    while True:
        with contextlib.suppress(CRIError):
            pods = {p.metadata.name: p
                    for p in (await api.list_namespaced_pod(namespace)).items}
            containers = await runtime.list_containers()
            report.pods = {
                name: judge_counted(kind, starts_of(starts_dir, name), pods.get(name),
                                    _running_container_ids(containers, namespace, name))
                for name, kind in counted.items()}
            if not report.failures():
                report.converged_s = time.monotonic() - began
                return report
        if time.monotonic() - began > bound:
            return report
        await asyncio.sleep(1.0)


# --- the faults -----------------------------------------------------------------------------------

KILL, CONTAINERD, API_OUTAGE, KUBELET_STOP, DISK_FULL = (
    "kill -9", "containerd restart", "API server frozen", "kubelet SIGSTOP", "root dir full")
FAULTS = (KILL, CONTAINERD, API_OUTAGE, KUBELET_STOP, DISK_FULL)


class KubeletDidNotStart(AssertionError):
    """The kubelet, restarted after a fault, never answered its health check."""


@dataclass(frozen=True)
class FaultDurations:
    containerd_down_s: float = 5.0
    # Below the node-monitor grace period (40 s), so no controller marks the node.
    api_outage_s: float = 30.0
    kubelet_stop_s: float = 20.0
    disk_full_s: float = 15.0


def schedule(faults: Sequence[str], kills: int, churn_seconds: float,
             durations: FaultDurations) -> list[tuple[float, str]]:
    """(offset from the churn's start, fault): the kills interleaved with the other
    ``faults`` (kill, fault, kill, fault, ..., then the kills left), evenly spaced in
    what the faults' own durations leave of the churn."""
    others = [f for f in faults if f != KILL]
    order: list[str] = []
    for index in range(max(kills, len(others))):
        if index < kills:
            order.append(KILL)
        if index < len(others):
            order.append(others[index])
    lasting = {CONTAINERD: durations.containerd_down_s, API_OUTAGE: durations.api_outage_s,
               KUBELET_STOP: durations.kubelet_stop_s, DISK_FULL: durations.disk_full_s}
    busy = sum(lasting.get(f, 0.0) for f in order)
    gap = max(1.0, (churn_seconds - busy) / (len(order) + 1))
    at, planned = 0.0, []
    for fault in order:
        at += gap
        planned.append((at, fault))
        at += lasting.get(fault, 0.0)
    return planned


def restart_kubelet(kubelet: KubeletProcess) -> None:
    """kill -9, and started again at once on the same root (see the module docstring)."""
    process = kubelet.process
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    kubelet.launch()
    try:
        kubelet.wait_healthy()
    except AssertionError as err:
        raise KubeletDidNotStart(str(err)) from err


@contextlib.asynccontextmanager
async def stopped(pid: int) -> AsyncIterator[None]:
    """``pid`` frozen with SIGSTOP while inside; continued on the way out, whatever happened."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def fill_filesystem(directory: Path) -> Path:
    """A file in ``directory`` written until its filesystem has no byte left; its path."""
    path = directory / ".faults-fill"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return path


def used_percent(directory: Path) -> float:
    stats = os.statvfs(directory)
    return 100.0 * (1 - stats.f_bavail / stats.f_blocks) if stats.f_blocks else 0.0


@contextlib.contextmanager
def dedicated_root_filesystem(root: Path, size_mib: int) -> Iterator[Path]:
    """``root`` a tmpfs of ``size_mib`` of its own, a shared mount alone in its peer group
    (as ``KubeletProcess.share_root_dir`` makes its bind mount); unmounted on the way out
    with whatever is still mounted below it."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0750", "tmpfs",
                    str(root)], check=True)
    try:
        subprocess.run(["mount", "--make-private", str(root)], check=True)
        subprocess.run(["mount", "--make-shared", str(root)], check=True)
        yield root
    finally:
        subprocess.run(["umount", "--lazy", "--recursive", str(root)], check=False,
                       capture_output=True)


@dataclass
class FaultTargets:
    """What the faults act on."""

    kubelet: KubeletProcess
    testbed: Testbed
    plane: ControlPlane
    durations: FaultDurations = field(default_factory=FaultDurations)


@dataclass
class FaultRecord:
    fault: str
    at_s: float
    lasted_s: float = 0.0
    restarts: int = 0
    started: bool = True
    settle_s: float | None = None
    unsettled: list[str] = field(default_factory=list)
    not_ready: int = 0
    taints: set[str] = field(default_factory=set)
    evicted: int = 0
    note: str = ""
    # Seconds since the churn's start: from the fault's start to the end of its settling.
    window: tuple[float, float] = (0.0, 0.0)


async def inject(fault: str, targets: FaultTargets, record: FaultRecord) -> None:
    """Run ``fault`` to its end (the node restored); what it did goes into ``record``."""
    kubelet, durations = targets.kubelet, targets.durations
    try:
        if fault == KILL:
            record.restarts += 1
            await asyncio.to_thread(restart_kubelet, kubelet)
        elif fault == CONTAINERD:
            await asyncio.to_thread(targets.testbed.stop_daemon)
            try:
                await asyncio.sleep(durations.containerd_down_s)
            finally:
                await asyncio.to_thread(targets.testbed.start_daemon)
        elif fault == API_OUTAGE:
            pid = targets.plane.pid("kube-apiserver")
            assert pid is not None, "kube-apiserver is not running"
            async with stopped(pid):
                await asyncio.sleep(durations.api_outage_s)
        elif fault == KUBELET_STOP:
            assert kubelet.process is not None
            async with stopped(kubelet.process.pid):
                await asyncio.sleep(durations.kubelet_stop_s)
        elif fault == DISK_FULL:
            fill = await asyncio.to_thread(fill_filesystem, kubelet.root)
            try:
                record.note = f"root dir {used_percent(kubelet.root):.0f} % used"
                await asyncio.sleep(durations.disk_full_s)
                # Killed while the disk is full (mid-write, if it was writing), started
                # once there is room again.
                assert kubelet.process is not None
                if (code := kubelet.process.poll()) is not None:
                    record.note += f"; it exited by itself ({code}) on the full disk"
                kubelet.process.send_signal(signal.SIGKILL)
                await asyncio.to_thread(kubelet.process.wait, 30)
            finally:
                fill.unlink(missing_ok=True)
            record.restarts += 1
            await asyncio.to_thread(restart_kubelet, kubelet)
        else:
            raise ValueError(f"no fault {fault!r}")
    except KubeletDidNotStart:
        record.started = False
        raise


# --- what the API shows ---------------------------------------------------------------------------

class NodeWatcher:
    """Every state of one Node's Ready condition and taints, as an admin watch sees them
    (times on the monotonic clock, as the events arrive)."""

    def __init__(self, api: client.CoreV1Api, node: str) -> None:
        self._lw = ApiListWatch(functools.partial(api.list_node,
                                                  field_selector=f"metadata.name={node}"))
        self.seen: list[tuple[float, str, tuple[str, ...]]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="node-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                items, version = await self._lw.list("")
                for item in items:
                    self._observe(item)
                while True:
                    async for event in self._lw.watch(version, 300):
                        version = self._event(event) or version
            except Exception:  # a watch broken by an outage: list again
                await asyncio.sleep(1.0)

    def _event(self, event: WatchEvent) -> str:
        if event.type in ("ADDED", "MODIFIED"):
            self._observe(event.object)
        return str((event.object.get("metadata") or {}).get("resourceVersion") or "")

    def _observe(self, node: dict[str, Any]) -> None:
        ready = next((c.get("status", "") for c in (node.get("status") or {}).get(
            "conditions") or [] if c.get("type") == "Ready"), "")
        taints = tuple(sorted(t.get("key", "") for t in (node.get("spec") or {}).get(
            "taints") or []))
        self.seen.append((time.monotonic(), str(ready), taints))

    def not_ready_between(self, start: float, end: float) -> int:
        """States seen in ``[start, end]`` whose Ready was not True."""
        return sum(1 for at, ready, _ in self.seen if start <= at <= end and ready != "True")

    def taints_between(self, start: float, end: float) -> set[str]:
        return {taint for at, _, taints in self.seen if start <= at <= end for taint in taints}


@dataclass
class FaultChurn:
    """The churn of one run: the soak's ``Churn`` of the mix pods, the counted pods, and
    when each pod's deletion was due (a deletion seen earlier was not the churn's)."""

    churn: Churn = field(default_factory=Churn)
    counted: dict[str, str] = field(default_factory=dict)
    delete_due: dict[str, float] = field(default_factory=dict)
    sandbox_ids: set[str] = field(default_factory=set)


async def create_counted(api: client.CoreV1Api, namespace: str, name: str, kind: str,
                         node: str, image: str, starts_dir: Path, run: FaultChurn) -> None:
    created = time.monotonic()
    try:
        await api.create_namespaced_pod(
            namespace, pod_from_dict(counted_pod(name, kind, node, image, starts_dir)))
    except ApiException:
        run.churn.errors += 1
        return
    run.churn.created_at[name] = created
    run.counted[name] = kind
    run.delete_due[name] = float("inf")


async def remember_sandboxes(runtime: RemoteRuntimeService, run: FaultChurn) -> None:
    """The sandboxes now in the runtime: the CNI lease count reads their ids."""
    with contextlib.suppress(CRIError):
        run.sandbox_ids.update(s.id for s in await runtime.list_pod_sandboxes())


async def churn_pods(*, api: client.CoreV1Api, runtime: RemoteRuntimeService, namespace: str,
                     node: str, image: str, run: FaultChurn, began: float, seconds: float,
                     rate: float, pod_seconds: float, counted_every: int,
                     starts_dir: Path) -> None:
    """Pods at ``rate`` for ``seconds`` from ``began``: every ``counted_every``-th a counted
    pod (the kinds in turn, living until the churn ends), the others the soak's mix."""
    index = mixed = 0
    while (due := began + index / rate) < began + seconds:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        name = f"faults-{index}"
        if counted_every and index % counted_every == 0:
            kind = COUNTED_KINDS[(index // counted_every) % len(COUNTED_KINDS)]
            life = create_counted(api, namespace, COUNTED_PREFIX + name, kind, node, image,
                                  starts_dir, run)
        else:
            kind = MIX[mixed % len(MIX)]
            mixed += 1
            linger = DELETE_WHILE_STARTING_SECONDS if kind == DELETED_STARTING else pod_seconds
            run.delete_due[name] = time.monotonic() + linger
            life = pod_life(api, namespace, name, kind, node, image, run.churn, pod_seconds)
        task = asyncio.create_task(life, name=f"pod-life-{name}")
        run.churn.tasks.add(task)
        task.add_done_callback(run.churn.tasks.discard)
        index += 1
        if index % int(max(1, rate)) == 0:
            await remember_sandboxes(runtime, run)
    if run.churn.tasks:
        await asyncio.gather(*run.churn.tasks)


async def unsettled(api: client.CoreV1Api, runtime: RemoteRuntimeService, namespace: str,
                    run: FaultChurn, watcher: ApiRunningWatcher, cleared: float) -> list[str]:
    """What keeps the node from having settled after a fault that cleared at ``cleared``
    (empty: settled): pods created before it still Pending, containers or ready
    sandboxes of pods the API deleted before it, and containers the API shows running
    that the runtime does not run."""
    try:
        pods = (await api.list_namespaced_pod(namespace)).items
        containers, sandboxes = await asyncio.gather(runtime.list_containers(),
                                                     runtime.list_pod_sandboxes())
    except CRIError as err:
        return [f"runtime: {err}"]
    left = [f"{p.metadata.name} Pending" for p in pods
            if p.status is not None and p.status.phase == "Pending"
            and run.churn.created_at.get(p.metadata.name, cleared) < cleared]
    deleted = {name for name, at in watcher.gone.items() if at < cleared}
    mine = [(c.labels.get(POD_NAME_LABEL, ""), "container")
            for c in containers if c.labels.get(POD_NAMESPACE_LABEL) == namespace
            and c.state == api_pb2.CONTAINER_RUNNING]
    mine += [(s.labels.get(POD_NAME_LABEL, ""), "sandbox")
             for s in sandboxes if s.labels.get(POD_NAMESPACE_LABEL) == namespace
             and s.state == api_pb2.SANDBOX_READY]
    left += sorted({f"{name} {what} still up after its deletion" for name, what in mine
                    if name in deleted})
    # The API's running containers are the runtime's (a crash-looping pod's flicker aside).
    running = {c.id for c in containers if c.state == api_pb2.CONTAINER_RUNNING}
    for pod in pods:
        if (pod.metadata.labels or {}).get("soak-kind") == RESTARTING or pod.status is None:
            continue
        for status in pod.status.container_statuses or []:
            if status.state and status.state.running and status.container_id and \
                    status.container_id.split("://", 1)[-1] not in running:
                left.append(f"{pod.metadata.name}: the API's running container is not "
                            f"running in the runtime")
    return left


def gone_unasked(run: FaultChurn, watcher: ApiRunningWatcher, start: float, end: float) -> int:
    """Pods whose deletion the watch saw in ``[start, end]`` before the churn deleted them
    (an eviction, a controller's delete)."""
    return sum(1 for name, at in watcher.gone.items()
               if start <= at <= end and at < run.delete_due.get(name, float("inf")) - 0.05)


async def evicted_pods(api: client.CoreV1Api, namespace: str) -> int:
    pods = (await api.list_namespaced_pod(namespace)).items
    return sum(1 for p in pods if p.status is not None and p.status.reason == "Evicted")


async def revive_if_exited(kubelet: KubeletProcess, record: FaultRecord) -> None:
    """A kubelet that exited by itself during or after a fault is started again, as a
    service manager would, and that is noted: no fault here should make it exit."""
    if kubelet.process is not None and (code := kubelet.process.poll()) is not None:
        record.note += f"; the kubelet exited by itself ({code}), started again"
        record.restarts += 1
        try:
            await asyncio.to_thread(restart_kubelet, kubelet)
        except KubeletDidNotStart:
            record.started = False
            raise


async def run_faults(*, api: client.CoreV1Api, runtime: RemoteRuntimeService, namespace: str,
                     targets: FaultTargets, planned: Sequence[tuple[float, str]],
                     run: FaultChurn, watcher: ApiRunningWatcher, node_watch: NodeWatcher,
                     began: float, settle_bound: float,
                     between: Callable[[], Awaitable[None]] | None = None,
                     records_into: list[FaultRecord] | None = None) -> list[FaultRecord]:
    """Each planned fault at its offset (or once the one before has settled), then the
    wait for the node to settle. ``between`` runs before each fault (the benchmark samples
    the kubelet there). The records go into ``records_into`` as they are made, so that a
    caller keeps those made before a fault that raised."""
    records = records_into if records_into is not None else []
    for at, fault in planned:
        await asyncio.sleep(max(0.0, began + at - time.monotonic()))
        if between is not None:
            await between()
        record = FaultRecord(fault, time.monotonic() - began)
        records.append(record)
        start = time.monotonic()
        await inject(fault, targets, record)
        cleared = time.monotonic()
        record.lasted_s = cleared - start
        while True:
            await revive_if_exited(targets.kubelet, record)
            record.unsettled = await unsettled(api, runtime, namespace, run, watcher, cleared)
            if not record.unsettled:
                record.settle_s = time.monotonic() - cleared
                break
            if time.monotonic() - cleared > settle_bound:
                break
            await asyncio.sleep(0.5)
        end = time.monotonic()
        record.window = (start - began, end - began)
        record.not_ready = node_watch.not_ready_between(start, end)
        record.taints = node_watch.taints_between(start, end)
        record.evicted = gone_unasked(run, watcher, start, end) + await evicted_pods(
            api, namespace)
    return records


async def delete_counted(api: client.CoreV1Api, namespace: str, run: FaultChurn) -> None:
    for name in run.counted:
        run.delete_due[name] = time.monotonic()
        with contextlib.suppress(ApiException):
            await api.delete_namespaced_pod(name, namespace)
