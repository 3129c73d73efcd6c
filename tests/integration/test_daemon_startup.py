"""The testbed's containerd and registry scripts report a daemon that dies at start-up.

Both scripts start their daemon in the background and wait for it to be usable
(a socket, a logged port). A daemon that gives up must end that wait at once
with the script's "exited during start-up" and the daemon's own last words, not
with a time-out that says nothing of why. These tests put a stand-in daemon on
PATH that explains itself and exits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.testbed import SCRIPTS_DIR

pytestmark = pytest.mark.containerd


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A daemon directory short enough for containerd's socket path (the script's limit)."""
    path = Path(tempfile.mkdtemp(prefix="pkd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def dying_daemon(directory: Path, name: str, last_words: str) -> dict[str, str]:
    """An environment whose PATH finds a NAME that prints LAST_WORDS and exits 1."""
    directory.mkdir()
    stand_in = directory / name
    stand_in.write_text(f"#!/bin/sh\necho '{last_words}' >&2\nexit 1\n")
    stand_in.chmod(0o755)
    return dict(os.environ, PATH=f"{directory}:{os.environ['PATH']}")


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_containerd_that_dies_at_start_up_is_reported_with_its_last_words(
        short_dir: Path, tmp_path: Path) -> None:
    words = "stand-in containerd: the root directory is unusable"
    env = dying_daemon(tmp_path / "path", "containerd", words)
    script = str(SCRIPTS_DIR / "containerd.sh")
    try:
        result = run([script, "start", str(short_dir / "c")], env)
    finally:
        run([script, "stop", str(short_dir / "c")], dict(os.environ))

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "containerd exited during start-up" in output
    assert words in output
    assert "no socket after" not in output


def test_a_registry_that_dies_at_start_up_is_reported_with_its_last_words(
        short_dir: Path, tmp_path: Path) -> None:
    words = "stand-in docker-registry: the storage directory is unusable"
    env = dying_daemon(tmp_path / "path", "docker-registry", words)
    script = str(SCRIPTS_DIR / "registry.sh")
    try:
        result = run([script, "start", str(short_dir / "r")], env)
    finally:
        run([script, "stop", str(short_dir / "r")], dict(os.environ))

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "docker-registry exited during start-up" in output
    assert words in output
    assert "not listening after" not in output
