"""Stopping the conformance harness (SIGTERM, as a background run is stopped) takes the
suite's processes with it: ginkgo and the e2e.test processes it started."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testsupport import conformance
from testsupport.conformance import _stop_on_sigterm, run_ginkgo
from testsupport.polling import wait_until


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return True
    return state == "Z"  # killed, waiting for init to reap it


def test_sigterm_during_the_suite_kills_ginkgo_and_its_children(tmp_path: Path) -> None:
    child = tmp_path / "child"
    # Like ginkgo: a child of its own (e2e.test); then the harness is sent SIGTERM.
    command = ["sh", "-c", f"sleep 300 & echo $! > {child}; kill -TERM {os.getpid()}; wait"]
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        with (tmp_path / "out").open("wb") as output, pytest.raises(KeyboardInterrupt):
            run_ginkgo(command, output=output, cwd=tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    pid = int(child.read_text())
    wait_until(lambda: gone(pid), 10, f"the suite's child process {pid} gone")


def test_sigterm_while_ginkgo_is_being_started_still_kills_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The signal lands after the fork, before run_ginkgo has the process in hand.
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_sigterm(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process = real_popen(*args, **kwargs)
        started.append(process)
        signal.raise_signal(signal.SIGTERM)
        return process

    monkeypatch.setattr(conformance.subprocess, "Popen", popen_then_sigterm)
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        with (tmp_path / "out").open("wb") as output, pytest.raises(KeyboardInterrupt):
            run_ginkgo(["sleep", "300"], output=output, cwd=tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
        left_running = [process for process in started if process.poll() is None]
        for process in left_running:  # never leave it behind, whatever happened
            process.kill()
            process.wait()
    assert len(started) == 1
    assert not left_running, "ginkgo was left running after the harness stopped"
