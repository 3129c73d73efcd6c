"""Supervision end to end: a task killed on purpose inside a real kubelet on the testbed.

The kubelet runs in this process (the start-up chain of ``pykubelet.cmd.server``
with the real containerd), so a test can break one of its loops and watch what
an operator would see: the crash in the log with its traceback, and then
either pods still coming up (a restarted loop) or the kubelet stopping with an
error that names the failed task (the sync loop).
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

import pykubelet.cm.manager
import pykubelet.kubelet.kubelet as kubelet_module
from pykubelet.cm.devicemanager import DeviceManager
from pykubelet.cm.kernel_tunables import setup_kernel_tunables
from pykubelet.cmd.options import parse_command_line
from pykubelet.cmd.server import StartupError, run, unsecured_dependencies
from pykubelet.pleg.generic import GenericPLEG
from testsupport.kubelet_process import (
    NODE_NAME,
    KubeletProcess,
    busybox_pod,
    remove_everything,
    write_kernel_tunables,
)
from testsupport.polling import wait_until_async
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd


@pytest.fixture(autouse=True)
def kept_off_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kubelet run in this process is in the host's mount namespace: its container
    manager checks and sets the kernel tunables in files of the test's instead, and its
    device manager serves its registration socket in a directory of the test's."""
    tunables = write_kernel_tunables(tmp_path / "kernel-tunables")

    def in_test_files(**kwargs: Any) -> None:
        setup_kernel_tunables(**{**kwargs, "sysctl_dir": str(tunables)})

    monkeypatch.setattr(pykubelet.cm.manager, "setup_kernel_tunables", in_test_files)
    monkeypatch.setattr(kubelet_module, "DeviceManager", functools.partial(
        DeviceManager, plugin_dir=str(tmp_path / "device-plugins")))


def in_process_kubelet(tmp_path: Path, testbed: Testbed) -> tuple[KubeletProcess, list[str]]:
    """The files and ports of a KubeletProcess, with the argv to run it in this process."""
    files = KubeletProcess(tmp_path, testbed.endpoint)
    argv = ["--config", str(files.config_path), "--root-dir", str(files.root),
            "--hostname-override", NODE_NAME, "--node-ip", "127.0.0.1"]
    return files, argv


async def test_a_crashed_pleg_is_logged_restarted_and_pods_still_run(
        testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    real_run = GenericPLEG.run
    crashes: list[int] = []

    async def crash_first_time(self: GenericPLEG) -> None:
        if not crashes:
            crashes.append(1)
            raise RuntimeError("injected PLEG failure")
        await real_run(self)

    monkeypatch.setattr(GenericPLEG, "run", crash_first_time)
    files, argv = in_process_kubelet(tmp_path, testbed)
    server = parse_command_line(argv)
    stopping = asyncio.Event()
    kubelet = asyncio.create_task(run(server, unsecured_dependencies(server), stopping))
    try:
        files.write_pod(busybox_pod("survivor", [{"name": "app", "command": ["sleep", "3600"]}],
                                    testbed.busybox_image))
        # The phase only becomes Running from PLEG's view of the runtime: the
        # restarted PLEG is what brings it there.
        # The status is read in a thread: the kubelet runs in this event loop.
        await wait_until_async(
            lambda: asyncio.to_thread(lambda: files.status("survivor").get("phase") == "Running"),
            90, "the pod to run after the PLEG crash", ignore=(OSError, KeyError, ValueError))
        assert crashes == [1]
        assert "Task crashed; restarting it after back-off" in caplog.text
        assert 'task="pleg"' in caplog.text and "injected PLEG failure" in caplog.text
        assert "Traceback" in caplog.text
        assert not kubelet.done()
    finally:
        stopping.set()
        await asyncio.wait_for(kubelet, 60)
        await asyncio.to_thread(remove_everything, testbed.endpoint)


async def test_a_crashed_sync_loop_stops_the_kubelet_naming_it(
        testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:

    async def broken_sync_loop(*_: Any) -> None:
        await asyncio.sleep(0.2)
        raise RuntimeError("injected sync loop failure")

    monkeypatch.setattr(kubelet_module, "sync_loop", broken_sync_loop)
    files, argv = in_process_kubelet(tmp_path, testbed)
    server = parse_command_line(argv)
    with pytest.raises(StartupError) as failure:
        await asyncio.wait_for(run(server, unsecured_dependencies(server), asyncio.Event()), 60)
    assert str(failure.value) == "kubelet failed: injected sync loop failure"
    assert "Task failed; stopping the kubelet" in caplog.text and "Traceback" in caplog.text
    # Stopped in order: the servers no longer answer.
    assert await asyncio.to_thread(files.healthz) is None
