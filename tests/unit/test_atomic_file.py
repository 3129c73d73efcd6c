"""``write_file_atomically``: a file is either its old content or its new, never part."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykubelet.util.atomic_file import write_file_atomically


def _disk_full(source: str, target: str) -> None:
    raise OSError(28, "No space left on device")


def test_the_new_content_replaces_the_old(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_bytes(b"old content that is longer than the new")
    write_file_atomically(str(target), b"new")
    assert target.read_bytes() == b"new"


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o640])
def test_the_file_gets_exactly_the_mode_asked_for_whatever_the_umask(
        tmp_path: Path, mode: int) -> None:
    target = tmp_path / "state"
    previous = os.umask(0o077)
    try:
        write_file_atomically(str(target), b"data", mode=mode)
    finally:
        os.umask(previous)
    assert target.stat().st_mode & 0o777 == mode


def test_no_temporary_file_is_left_after_a_write(tmp_path: Path) -> None:
    write_file_atomically(str(tmp_path / "state"), b"data")
    write_file_atomically(str(tmp_path / "state"), b"again")
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state"
    target.write_bytes(b"old")
    monkeypatch.setattr(os, "replace", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_file_atomically(str(target), b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_failed_first_write_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "replace", _disk_full)
    with pytest.raises(OSError):
        write_file_atomically(str(tmp_path / "state"), b"new")
    assert list(tmp_path.iterdir()) == []


def test_the_content_is_on_disk_before_it_replaces_the_old(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # After a power loss the rename may survive while unflushed data does not: a
    # flush that came after the rename could leave an empty file in the old one's place.
    steps: list[str] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        steps.append("fsync")
        fsync(fd)

    def recording_replace(source: str, target: str) -> None:
        steps.append("replace")
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    write_file_atomically(str(tmp_path / "state"), b"data")
    assert steps[:2] == ["fsync", "replace"]
    assert steps.count("fsync") == 2  # the file, then the directory holding the new name


def test_missing_parents_are_created_only_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state"
    with pytest.raises(FileNotFoundError):
        write_file_atomically(str(target), b"data")
    write_file_atomically(str(target), b"data", make_parents=True)
    assert target.read_bytes() == b"data"


def test_a_relative_path_is_written_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_file_atomically("state", b"data")
    assert (tmp_path / "state").read_bytes() == b"data"
