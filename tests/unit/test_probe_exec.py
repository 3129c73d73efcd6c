"""Exec probes: the exit code decides, a timeout is a failure, runtime errors propagate.

The CRI runtime is faked at its seam (``exec_sync``); the real ExecSync path is
covered by tests/integration/test_probe_handlers.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from pykubelet.container import ProbeResult
from pykubelet.cri.errors import CRIError, ExecTimeoutError
from pykubelet.cri.runtime import ExecSyncResult
from pykubelet.probe import MAX_OUTPUT_BYTES
from pykubelet.probe.exec import exec_probe


class FakeRuntime:
    def __init__(self, answer: ExecSyncResult | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[str, list[str], float]] = []

    async def exec_sync(self, container_id: str, cmd: Sequence[str],
                        timeout_seconds: float) -> ExecSyncResult:
        self.calls.append((container_id, list(cmd), timeout_seconds))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_exit_zero_is_healthy_and_passes_the_timeout() -> None:
    runtime = FakeRuntime(ExecSyncResult(b"ok\n", b"", 0))
    assert await exec_probe(runtime, "abc", ["cat", "/ready"], 3) == (ProbeResult.SUCCESS,
                                                                       "ok\n")
    assert runtime.calls == [("abc", ["cat", "/ready"], 3)]


async def test_non_zero_exit_fails_with_stdout_then_stderr() -> None:
    runtime = FakeRuntime(ExecSyncResult(b"out\n", b"err\n", 2))
    assert await exec_probe(runtime, "abc", ["check"], 1) == (ProbeResult.FAILURE,
                                                               "out\nerr\n")


async def test_output_is_capped() -> None:
    runtime = FakeRuntime(ExecSyncResult(b"o" * MAX_OUTPUT_BYTES, b"e" * 100, 1))
    _, output = await exec_probe(runtime, "abc", ["check"], 1)
    assert output == "o" * MAX_OUTPUT_BYTES


async def test_timeout_fails_with_upstream_message() -> None:
    runtime = FakeRuntime(ExecTimeoutError("sleep 10", 1, "deadline"))
    assert await exec_probe(runtime, "abc", ["sleep", "10"], 1) == (
        ProbeResult.FAILURE, 'command "sleep 10" timed out')


async def test_other_runtime_errors_propagate() -> None:
    runtime = FakeRuntime(CRIError("ExecSync", grpc.StatusCode.NOT_FOUND, "no such container"))
    with pytest.raises(CRIError):
        await exec_probe(runtime, "abc", ["check"], 1)
