"""One probe run for one container (upstream ``pkg/kubelet/prober/prober.go``).

The probe workers decide *when* to probe and what a run of results means;
this module decides *how*: it turns a ``V1Probe`` of a container into one
exec, HTTP, TCP or gRPC check, fills in what the spec leaves out (host = the
pod IP, named ports, ``$(VAR)`` in exec commands, the 1 second default
timeout), and tells the user about failures with an ``Unhealthy`` event on
the container (``Liveness probe failed: <output>``).

Internal errors (an unresolvable port, a runtime that did not answer the exec)
are retried a few times, as upstream does, because they say nothing about the
application; if they persist the run is reported as ``UNKNOWN`` ("errored")
and the worker drops it instead of counting it towards a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import V1Container, V1Pod, V1PodStatus, V1Probe

from pykubelet.api.expansion import expand
from pykubelet.container import ContainerID, ProbeResult
from pykubelet.events import WARNING, EventRecorder, container_field_path, describe
from pykubelet.probe import resolve_container_port
from pykubelet.probe.exec import CommandRunner, exec_probe
from pykubelet.probe.grpc import grpc_probe
from pykubelet.probe.http import check_http, request_for_http_get_action
from pykubelet.probe.tcp import tcp_probe
from pykubelet.util import klog

LIVENESS = "liveness"
READINESS = "readiness"
STARTUP = "startup"
PROBE_TYPES = (LIVENESS, READINESS, STARTUP)

# Upstream retries a probe whose run errored (not failed) this many times in all.
MAX_PROBE_RETRIES = 3
# The API default of timeoutSeconds, for probes built without defaulting.
DEFAULT_TIMEOUT_SECONDS = 1

REASON_UNHEALTHY = "Unhealthy"
REASON_PROBE_WARNING = "ProbeWarning"


class ProbeError(Exception):
    """A probe could not be run at all (bad spec); the run is "errored", not "failed"."""


@dataclass(frozen=True)
class _Check:
    result: ProbeResult
    output: str
    warning: bool = False


def probe_of(probe_type: str, container: V1Container) -> V1Probe | None:
    if probe_type == LIVENESS:
        return container.liveness_probe
    if probe_type == READINESS:
        return container.readiness_probe
    if probe_type == STARTUP:
        return container.startup_probe
    raise ValueError(f"unknown probe type: {probe_type!r}")


def static_env_expander(container: V1Container) -> dict[str, str]:
    """Env values known without the API (no ``valueFrom``): what exec probes may expand."""
    return {env.name: env.value or "" for env in container.env or []
            if env.value_from is None}


def _timeout_seconds(probe: V1Probe) -> float:
    timeout = probe.timeout_seconds
    return float(timeout if timeout and timeout > 0 else DEFAULT_TIMEOUT_SECONDS)


class Prober:
    """Runs the probes of containers against the runtime (exec) and the pod network."""

    def __init__(self, runtime_service: CommandRunner, recorder: EventRecorder) -> None:
        self.runtime_service = runtime_service
        self.recorder = recorder

    async def probe(self, probe_type: str, pod: V1Pod, status: V1PodStatus,
                    container: V1Container, container_id: ContainerID) -> ProbeResult:
        """Run the container's ``probe_type`` probe once and report failures as events.

        SUCCESS or FAILURE is a verdict; UNKNOWN means the probe errored after
        its retries and must not be counted (upstream throws such runs away).
        """
        spec = probe_of(probe_type, container)
        if spec is None:
            klog.info("Probe is nil", probeType=probe_type, pod=describe(pod),
                      containerName=container.name)
            return ProbeResult.SUCCESS
        title = probe_type.capitalize()
        try:
            check = await self._run_with_retries(spec, pod, status, container, container_id)
        except Exception as err:
            klog.v(1).info("Probe errored", probeType=probe_type, pod=describe(pod),
                           containerName=container.name, err=str(err))
            self._record(pod, container, REASON_UNHEALTHY, f"{title} probe errored: {err}")
            return ProbeResult.UNKNOWN
        if check.result != ProbeResult.SUCCESS:
            klog.v(1).info("Probe failed", probeType=probe_type, pod=describe(pod),
                           containerName=container.name, probeResult=str(check.result),
                           output=check.output)
            self._record(pod, container, REASON_UNHEALTHY, f"{title} probe failed: {check.output}")
            return ProbeResult.FAILURE
        if check.warning:
            klog.v(3).info("Probe succeeded with a warning", probeType=probe_type,
                           pod=describe(pod), containerName=container.name, output=check.output)
            self._record(pod, container, REASON_PROBE_WARNING,
                         f"{title} probe warning: {check.output}")
        else:
            klog.v(3).info("Probe succeeded", probeType=probe_type, pod=describe(pod),
                           containerName=container.name)
        return ProbeResult.SUCCESS

    def _record(self, pod: V1Pod, container: V1Container, reason: str, message: str) -> None:
        self.recorder.event(pod, WARNING, reason, message,
                            field_path=container_field_path(pod, container))

    async def _run_with_retries(self, spec: V1Probe, pod: V1Pod, status: V1PodStatus,
                                container: V1Container, container_id: ContainerID) -> _Check:
        last_error: Exception | None = None
        for _ in range(MAX_PROBE_RETRIES):
            try:
                return await self._run(spec, pod, status, container, container_id)
            except Exception as err:
                last_error = err
        assert last_error is not None
        raise last_error

    async def _run(self, spec: V1Probe, pod: V1Pod, status: V1PodStatus,
                   container: V1Container, container_id: ContainerID) -> _Check:
        timeout = _timeout_seconds(spec)
        pod_ip: str = getattr(status, "pod_ip", None) or ""
        if spec._exec is not None:
            env = static_env_expander(container)
            command = [expand(part, env.get) for part in spec._exec.command or []]
            klog.v(4).info("Exec-Probe runProbe", pod=describe(pod), containerName=container.name,
                           execCommand=command)
            result, output = await exec_probe(self.runtime_service, container_id.id, command,
                                              timeout)
            return _Check(result, output)
        if spec.http_get is not None:
            request = request_for_http_get_action(spec.http_get, container, pod_ip)
            klog.v(4).info("HTTP-Probe", url=request.url, timeout=timeout,
                           headers=_loggable(request.headers))
            outcome = await check_http(request.url, request.headers, timeout)
            return _Check(outcome.result, outcome.output, outcome.warning)
        if spec.tcp_socket is not None:
            port = resolve_container_port(spec.tcp_socket.port, container)
            host = spec.tcp_socket.host or pod_ip
            klog.v(4).info("TCP-Probe", host=host, port=port, timeout=timeout)
            result, output = await tcp_probe(host, port, timeout)
            return _Check(result, output)
        if spec.grpc is not None:
            service = spec.grpc.service or ""
            klog.v(4).info("GRPC-Probe", host=pod_ip, service=service, port=spec.grpc.port,
                           timeout=timeout)
            result, output = await grpc_probe(pod_ip, int(spec.grpc.port), service, timeout)
            return _Check(result, output)
        raise ProbeError(f"missing probe handler for {describe(pod)}:{container.name}")


def _loggable(headers: dict[str, list[str]]) -> dict[str, Any]:
    # Probe headers may carry credentials; log their names only.
    return {name: "<redacted>" if name.lower() == "authorization" else values
            for name, values in headers.items()}


__all__ = [
    "LIVENESS",
    "MAX_PROBE_RETRIES",
    "PROBE_TYPES",
    "READINESS",
    "REASON_PROBE_WARNING",
    "REASON_UNHEALTHY",
    "STARTUP",
    "ProbeError",
    "Prober",
    "probe_of",
    "static_env_expander",
]
