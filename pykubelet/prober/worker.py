"""One probe worker: the periodic probing of one container for one probe type.

This mirrors upstream ``worker.go``. A worker is created per (pod, container,
probe type) when the pod is added and lives until the pod is removed or
becomes terminal. It follows the container across restarts by reading the
latest API status of its pod: each time the container id changes, the verdict
of the old instance is dropped and the new one starts from the probe type's
initial value (readiness Failure, liveness Success, startup Unknown), so that
a restarted container is judged on its own behaviour.

Probing rules, all upstream's:

- nothing is probed before the container has an id, and a container that is
  not running is a Failure without being probed (an exec into it would fail);
- ``initialDelaySeconds`` counts from the container's ``startedAt``;
- the startup probe runs until the container is started; liveness and
  readiness wait for it;
- a verdict changes only after ``failureThreshold`` consecutive failures or
  ``successThreshold`` consecutive successes;
- after a liveness Failure (or any startup verdict) the worker holds still
  until it sees a new container id: the container is about to be killed and
  probing it while it stops only produces noise;
- a probe that could not run (the prober raised, or answered UNKNOWN, which
  is how ``Prober`` reports an error after its retries) leaves the verdict and
  the consecutive count alone; it is counted with ``result="unknown"``.

Beyond upstream, the issue asks readiness to be false while the pod is
terminating: the readiness worker then reports Failure instead of probing.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

from kubernetes_asyncio.client import V1Container, V1ContainerStatus, V1Pod, V1PodStatus, V1Probe

from pykubelet.api import pod_ref, pod_uid
from pykubelet.container import ContainerID, ProbeResult
from pykubelet.container.helpers import is_restartable_init_container
from pykubelet.prober import metrics
from pykubelet.prober.results import ResultsManager
from pykubelet.util import klog

# The API server's defaults for a probe; static pods may reach us undefaulted.
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_TIMEOUT_SECONDS = 1
DEFAULT_SUCCESS_THRESHOLD = 1
DEFAULT_FAILURE_THRESHOLD = 3

# A handler gives up by itself after timeoutSeconds and reports a Failure with
# its own message; the prober may try up to three times on errors (upstream's
# maxProbeRetries). This guard sits beyond all of that and only protects the
# worker from a handler that hangs, so one stuck call cannot silence a
# container forever.
PROBER_ATTEMPTS = 3
HUNG_PROBE_SLACK_SECONDS = 5.0

TERMINAL_PHASES = frozenset({"Failed", "Succeeded"})


class ProbeType(enum.StrEnum):
    LIVENESS = "liveness"
    READINESS = "readiness"
    STARTUP = "startup"

    @property
    def metric_label(self) -> str:
        """Upstream prints probe types capitalised in metric labels and logs."""
        return self.value.capitalize()

    def initial_value(self) -> ProbeResult:
        """The verdict of a fresh container before its first counted probe."""
        if self is ProbeType.READINESS:
            return ProbeResult.FAILURE
        if self is ProbeType.LIVENESS:
            return ProbeResult.SUCCESS
        return ProbeResult.UNKNOWN

    def spec_of(self, container: V1Container) -> V1Probe | None:
        if self is ProbeType.READINESS:
            return container.readiness_probe
        if self is ProbeType.LIVENESS:
            return container.liveness_probe
        return container.startup_probe


class ProberLike(Protocol):
    """Runs one check of a container (``pykubelet.prober.prober.Prober``)."""

    async def probe(self, probe_type: str, pod: V1Pod, status: V1PodStatus,
                    container: V1Container, container_id: ContainerID) -> ProbeResult: ...


StatusProvider = Callable[[str], V1PodStatus | None]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]




def find_container_status(status: V1PodStatus, name: str) -> V1ContainerStatus | None:
    """The status of the named container with an id, app containers first as upstream."""
    for statuses in (status.container_statuses, status.init_container_statuses):
        for candidate in statuses or []:
            if candidate.name == name and candidate.container_id:
                return candidate
    return None


def is_running(container_status: V1ContainerStatus) -> bool:
    state = container_status.state
    return state is not None and state.running is not None


class ProbeWorker:
    """Probes one container for one probe type every ``periodSeconds``.

    ``run`` is the task body; ``do_probe`` is one step of it and returns
    whether the worker should keep going (tests drive it directly).
    ``clock`` is wall-clock Unix seconds because ``startedAt`` is a wall-clock
    time; ``sleep`` waits that many seconds of the same clock.
    """

    def __init__(
        self,
        probe_type: ProbeType,
        pod: V1Pod,
        container: V1Container,
        *,
        prober: ProberLike,
        results: ResultsManager,
        status_provider: StatusProvider,
        is_terminating: Callable[[str], bool] = lambda uid: False,
        on_exit: Callable[[ProbeWorker], None] = lambda worker: None,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
        initial_jitter: float = 0.0,
    ) -> None:
        spec = probe_type.spec_of(container)
        if spec is None:
            raise ValueError(f"container {container.name!r} has no {probe_type} probe")
        self.probe_type = probe_type
        self.pod = pod
        self.container = container
        self.spec = spec
        self.container_id: ContainerID | None = None
        self.on_hold = False
        self._prober = prober
        self._results = results
        self._status_provider = status_provider
        self._is_terminating = is_terminating
        self._on_exit = on_exit
        self._clock = clock
        self._sleep = sleep
        self._initial_jitter = initial_jitter
        self._last_result: ProbeResult | None = None
        self._result_run = 0
        self._stopped = False
        self._wake = asyncio.Event()

        meta = pod.metadata
        name = (meta.name if meta is not None else None) or ""
        namespace = (meta.namespace if meta is not None else None) or ""
        self._duration_labels = {"probe_type": probe_type.metric_label,
                                 "container": container.name, "pod": name,
                                 "namespace": namespace}
        self._total_labels = {**self._duration_labels, "pod_uid": pod_uid(pod)}

    # -- thresholds and timings, with the API server's defaults ------------------

    @property
    def period_seconds(self) -> float:
        return float(self.spec.period_seconds or DEFAULT_PERIOD_SECONDS)

    @property
    def timeout_seconds(self) -> float:
        return float(self.spec.timeout_seconds or DEFAULT_TIMEOUT_SECONDS)

    @property
    def success_threshold(self) -> int:
        return self.spec.success_threshold or DEFAULT_SUCCESS_THRESHOLD

    @property
    def failure_threshold(self) -> int:
        return self.spec.failure_threshold or DEFAULT_FAILURE_THRESHOLD

    @property
    def initial_delay_seconds(self) -> int:
        return self.spec.initial_delay_seconds or 0

    # -- control -------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to exit after its current probe; safe to call repeatedly."""
        self._stopped = True
        self._wake.set()

    def trigger(self) -> None:
        """Probe now instead of at the next tick (upstream's manual trigger)."""
        self._wake.set()

    async def run(self) -> None:
        try:
            if self._initial_jitter > 0:
                await self._wait(self._initial_jitter)
            next_tick = self._clock() + self.period_seconds
            while not self._stopped and await self._probe_surviving_crashes():
                delay = max(0.0, next_tick - self._clock())
                triggered = await self._wait(delay)
                now = self._clock()
                if triggered:
                    # As Go's ticker after a manual run: next periodic probe one period later.
                    next_tick = now + self.period_seconds
                else:
                    # Drift-free ticks; ticks missed during a slow probe are dropped.
                    while next_tick <= now:
                        next_tick += self.period_seconds
        finally:
            self._clean_up()

    async def _probe_surviving_crashes(self) -> bool:
        """One probe; a bug in it is logged with its traceback and probing goes on.

        Upstream recovers a panicking probe the same way and keeps the worker
        running, so one bad probe never silently stops a container's checks.
        """
        try:
            return await self.do_probe()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            klog.exception("Probe worker crashed; probing continues", err,
                           probeType=str(self.probe_type), pod=pod_ref(self.pod),
                           containerName=self.container.name)
            return True

    async def _wait(self, seconds: float) -> bool:
        """Wait ``seconds`` or until woken by ``trigger`` or ``stop``.

        Returns True only when the wait ended because of a manual trigger, so that
        the caller can restart its period from now. A trigger that arrived
        while a probe was running is kept and ends the next wait at once, as
        upstream's one-slot trigger channel does.
        """
        if not self._wake.is_set():
            sleeper = asyncio.ensure_future(self._sleep(seconds))
            waker = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                # Cancelled helpers need no awaiting; awaiting them here could swallow
                # a cancellation of the worker itself.
                sleeper.cancel()
                waker.cancel()
        if self._stopped:
            return False
        triggered = self._wake.is_set()
        self._wake.clear()
        return triggered

    def _clean_up(self) -> None:
        if self.container_id is not None:
            self._results.remove(self.container_id)
        for result in (metrics.RESULT_SUCCESSFUL, metrics.RESULT_FAILED, metrics.RESULT_UNKNOWN):
            labels = {**self._total_labels, "result": result}
            metrics.PROBE_TOTAL.remove(*(labels[key] for key in metrics.PROBE_TOTAL_LABELS))
        metrics.PROBE_DURATION.remove(
            *(self._duration_labels[key] for key in metrics.PROBE_DURATION_LABELS))
        self._on_exit(self)

    # -- one probe -------------------------------------------------------------------

    async def do_probe(self) -> bool:
        """Probe once if the container is ready for it and record the verdict."""
        try:
            return await self._do_probe()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            # As upstream's crash handler: a bug in one step must not end the worker.
            klog.error("Probe worker step failed", err, probeType=self.probe_type.metric_label,
                       pod=pod_ref(self.pod), containerName=self.container.name)
            return True

    async def _do_probe(self) -> bool:
        started = time.monotonic()
        uid = pod_uid(self.pod)
        status = self._status_provider(uid)
        if status is None:
            klog.v(3).info("No status for pod", pod=pod_ref(self.pod))
            return True
        if status.phase in TERMINAL_PHASES:
            klog.v(3).info("Pod is terminal, probe worker exits", pod=pod_ref(self.pod),
                           phase=status.phase)
            return False

        container_status = find_container_status(status, self.container.name)
        if container_status is None:
            klog.v(3).info("Container to probe not found yet", pod=pod_ref(self.pod),
                           containerName=self.container.name)
            return True

        container_id = ContainerID.parse(container_status.container_id)
        if container_id != self.container_id:
            self._follow_new_container(container_id)

        if self.on_hold:
            return True

        if not is_running(container_status):
            klog.v(3).info("Container is not running, not probing it", pod=pod_ref(self.pod),
                           containerName=self.container.name)
            self._results.set(container_id, ProbeResult.FAILURE, self.pod)
            return self._container_may_run_again(container_status)

        deleting = (self.pod.metadata is not None
                    and self.pod.metadata.deletion_timestamp is not None)
        if deleting and self.probe_type in (ProbeType.LIVENESS, ProbeType.STARTUP):
            klog.v(3).info("Pod is being deleted, reporting a last success",
                           probeType=self.probe_type.metric_label, pod=pod_ref(self.pod),
                           containerName=self.container.name)
            # A last Success keeps a terminating container from being killed by its probe.
            self._results.set(container_id, ProbeResult.SUCCESS, self.pod)
            return False

        if self.probe_type is ProbeType.READINESS and (deleting or self._is_terminating(uid)):
            self._results.set(container_id, ProbeResult.FAILURE, self.pod)
            return True

        if int(self._clock() - self._started_at(container_status)) < self.initial_delay_seconds:
            return True

        if container_status.started:
            # The startup probe has done its job; the worker stays for the next instance.
            if self.probe_type is ProbeType.STARTUP:
                return True
        elif self.probe_type is not ProbeType.STARTUP:
            # Liveness and readiness wait until the container has started.
            return True

        try:
            answer = await asyncio.wait_for(
                self._prober.probe(str(self.probe_type), self.pod, status, self.container,
                                   container_id),
                timeout=PROBER_ATTEMPTS * self.timeout_seconds + HUNG_PROBE_SLACK_SECONDS)
        except TimeoutError:
            klog.warning("Probe hung past its timeout, counting a failure",
                         probeType=self.probe_type.metric_label, pod=pod_ref(self.pod),
                         containerName=self.container.name, timeout=self.timeout_seconds)
            answer = ProbeResult.FAILURE
        except asyncio.CancelledError:
            raise
        except Exception as err:
            klog.v(1).info("Probe errored", probeType=self.probe_type.metric_label,
                           pod=pod_ref(self.pod), containerName=self.container.name,
                           err=err)
            answer = ProbeResult.UNKNOWN

        result = ProbeResult(answer)
        self._record_metrics(result, time.monotonic() - started)
        if result is ProbeResult.UNKNOWN:
            # The probe could not run (the prober raised, or reported UNKNOWN after
            # its retries): that says nothing about the container, so neither the
            # verdict nor the run of consecutive results changes, as upstream.
            return True
        self._count(result)
        if ((result is ProbeResult.FAILURE and self._result_run < self.failure_threshold)
                or (result is ProbeResult.SUCCESS
                    and self._result_run < self.success_threshold)):
            return True

        self._results.set(container_id, result, self.pod)
        if ((self.probe_type is ProbeType.LIVENESS and result is ProbeResult.FAILURE)
                or self.probe_type is ProbeType.STARTUP):
            # The container is about to be restarted (or has started): nothing to
            # learn from probing this instance again.
            self.on_hold = True
            self._result_run = 0
        return True

    def _started_at(self, container_status: V1ContainerStatus) -> float:
        assert container_status.state is not None and container_status.state.running is not None
        started_at = container_status.state.running.started_at
        if isinstance(started_at, datetime):
            return started_at.timestamp()
        # A running container always has a start time; a missing one counts as
        # "just started" rather than as the epoch, which would skip the delay.
        return self._clock()

    def _follow_new_container(self, container_id: ContainerID) -> None:
        if self.container_id is not None:
            self._results.remove(self.container_id)
        self.container_id = container_id
        self._results.set(container_id, self.probe_type.initial_value(), self.pod)
        self.on_hold = False
        # Consecutive counts belong to one instance; a new one starts from zero.
        self._last_result = None
        self._result_run = 0

    def _container_may_run_again(self, container_status: V1ContainerStatus) -> bool:
        state = container_status.state
        if state is None or state.terminated is None:
            return True
        restart_policy = (self.pod.spec.restart_policy if self.pod.spec is not None else None)
        if restart_policy != "Never":
            return True
        # A sidecar restarts whatever the pod's policy says.
        init_names = {c.name for c in (self.pod.spec.init_containers or [])}
        return self.container.name in init_names and is_restartable_init_container(self.container)

    def _count(self, result: ProbeResult) -> None:
        if result == self._last_result:
            self._result_run += 1
        else:
            self._last_result = result
            self._result_run = 1

    def _record_metrics(self, result: ProbeResult, seconds: float) -> None:
        if result is ProbeResult.SUCCESS:
            label = metrics.RESULT_SUCCESSFUL
        elif result is ProbeResult.FAILURE:
            label = metrics.RESULT_FAILED
        else:
            label = metrics.RESULT_UNKNOWN
        metrics.PROBE_TOTAL.labels(**self._total_labels, result=label).inc()
        # Upstream times only the probes that answered without failing.
        if result is not ProbeResult.FAILURE:
            metrics.PROBE_DURATION.labels(**self._duration_labels).observe(seconds)
