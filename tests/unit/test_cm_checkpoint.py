"""The resource managers' checkpoint files survive a crash in the middle of a write.

What a user would notice: after a power loss or a failed write the CPU manager's
``cpu_manager_state`` is the old one or the new one, never torn (a torn one stops
the kubelet until the node is drained), and no stray file is left beside it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykubelet.cm import checkpoint
from pykubelet.cm.cpumanager.state import CPUState
from pykubelet.util.gospew import go_spew_checksum


def stored_state(tmp_path: Path) -> CPUState:
    state = CPUState(str(tmp_path / "cpu_manager_state"), "static")
    state.restore()  # writes the fresh checkpoint
    state.set_default_cpu_set(frozenset({0, 1, 2, 3}))
    return state


def test_a_cpu_state_write_reaches_the_disk_before_it_replaces_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = stored_state(tmp_path)
    steps: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        steps.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        steps.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    state.set_cpu_set("pod", "app", frozenset({2}))
    assert steps[:2] == ["fsync", "replace"]
    assert os.listdir(tmp_path) == ["cpu_manager_state"]


def test_a_failed_cpu_state_write_leaves_the_old_file_whole_and_nothing_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = stored_state(tmp_path)
    before = (tmp_path / "cpu_manager_state").read_bytes()

    def disk_full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        state.set_cpu_set("pod", "app", frozenset({2}))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["cpu_manager_state"]
    assert (tmp_path / "cpu_manager_state").read_bytes() == before
    # The kubelet restarts on it.
    restarted = CPUState(str(tmp_path / "cpu_manager_state"), "static")
    restarted.restore()
    assert restarted.default_cpu_set == frozenset({0, 1, 2, 3})


def test_a_missing_checkpoint_reads_as_none_and_a_written_one_reads_back(
        tmp_path: Path) -> None:
    path = str(tmp_path / "kubelet_internal_checkpoint")
    assert checkpoint.read_checkpoint(path) is None
    checkpoint.write_checkpoint(path, b'{"Data":{}}')
    assert checkpoint.read_checkpoint(path) == b'{"Data":{}}'
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_the_checksum_is_upstreams_fnv32a() -> None:
    # FNV-32a's published test vectors.
    assert go_spew_checksum("") == 0x811C9DC5
    assert go_spew_checksum("a") == 0xE40C292C
    assert go_spew_checksum("foobar") == 0xBF9CF968
