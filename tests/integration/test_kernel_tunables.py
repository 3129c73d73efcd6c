"""``protectKernelDefaults`` on a real pykubelet, over masked kernel tunables.

Each kubelet runs in a mount namespace of its own whose ``/proc/sys`` tunables
are files of the test (``KubeletProcess``), here starting with the wrong
values of the host the issue was found on. The host's own values are read
before and after: no test changes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.cm.kernel_tunables import KERNEL_TUNABLES
from testsupport.kubelet_process import KubeletProcess, read_kernel_tunables
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

WRONG = {"vm/overcommit_memory": 0, "kernel/panic": 1, "kernel/panic_on_oops": 0}
WANTED = {key: str(value) for key, value in KERNEL_TUNABLES.items()}
HOST_SYSCTL = Path("/proc/sys")


@pytest.fixture(autouse=True)
def host_values_unchanged() -> Iterator[None]:
    before = read_kernel_tunables(HOST_SYSCTL)
    yield
    assert read_kernel_tunables(HOST_SYSCTL) == before


def test_protected_kernel_defaults_refuse_to_start_naming_each_wrong_flag(
        testbed: Testbed, tmp_path: Path) -> None:
    kubelet = KubeletProcess(tmp_path, testbed.endpoint,
                             extra_config={"protectKernelDefaults": True},
                             kernel_tunables=WRONG)
    kubelet.launch()
    try:
        assert kubelet.process is not None
        code = kubelet.process.wait(60)
    finally:
        kubelet.stop()
    log = kubelet.log_text()
    assert code != 0, log[-3000:]
    for key, actual in WRONG.items():
        assert (f"invalid kernel flag: {key}, expected value: {KERNEL_TUNABLES[key]}, "
                f"actual value: {actual}") in log, log[-3000:]
    assert kubelet.healthz() is None
    # Checked, never changed.
    assert kubelet.masked_kernel_tunables() == {
        **WANTED, **{key: str(value) for key, value in WRONG.items()}}


def test_unprotected_kernel_defaults_are_set_and_the_kubelet_serves(
        testbed: Testbed, tmp_path: Path) -> None:
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, kernel_tunables=WRONG)
    kubelet.start()
    try:
        assert kubelet.masked_kernel_tunables() == WANTED
        updated = [line for line in kubelet.log_text().splitlines()
                   if '"Updating kernel flag"' in line]
        assert [line.split('flag="')[1].split('"')[0] for line in updated] == list(WRONG)
    finally:
        kubelet.stop()
