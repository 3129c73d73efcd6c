"""The exec check (upstream ``pkg/probe/exec``): run a command in the container via CRI.

A command that exits 0 is healthy, any other exit is unhealthy, and a command
that outlives the probe's timeout is unhealthy too (upstream's
``ExecProbeTimeout`` behaviour, on by default): the runtime kills it and the
output says it timed out. Any other runtime error (container gone, runtime
down) is not a verdict about the application, so it is raised for the prober
to retry and report as "errored".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pykubelet.container import ProbeResult
from pykubelet.cri.errors import ExecTimeoutError
from pykubelet.cri.runtime import ExecSyncResult
from pykubelet.probe import MAX_OUTPUT_BYTES
from pykubelet.util import klog


class CommandRunner(Protocol):
    """The part of the CRI runtime client a command check needs (``RemoteRuntimeService``)."""

    async def exec_sync(self, container_id: str, cmd: Sequence[str],
                        timeout_seconds: float) -> ExecSyncResult: ...


def timed_out_message(command: Sequence[str]) -> str:
    """Upstream's text for a command killed at its timeout."""
    return f'command "{" ".join(command)}" timed out'


def combined_output(result: ExecSyncResult, limit: int | None = MAX_OUTPUT_BYTES) -> str:
    """stdout then stderr, as upstream concatenates them, cut at ``limit`` bytes."""
    data = result.stdout + result.stderr
    if limit is not None:
        data = data[:limit]
    return data.decode(errors="replace")


async def exec_probe(runtime: CommandRunner, container_id: str, command: Sequence[str],
                     timeout: float) -> tuple[ProbeResult, str]:
    """Run ``command`` in the container with ``timeout`` seconds; the exit code decides."""
    try:
        result = await runtime.exec_sync(container_id, list(command), timeout)
    except ExecTimeoutError:
        return ProbeResult.FAILURE, timed_out_message(command)
    output = combined_output(result)
    klog.v(4).info("Exec probe response", containerID=container_id, exitCode=result.exit_code,
                   output=output)
    if result.exit_code == 0:
        return ProbeResult.SUCCESS, output
    return ProbeResult.FAILURE, output


__all__ = ["CommandRunner", "combined_output", "exec_probe", "timed_out_message"]
