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


@pytest.mark.parametrize(("script", "daemon", "subdir", "timed_out"), [
    ("containerd.sh", "containerd", "c", "no socket after"),
    ("registry.sh", "docker-registry", "r", "not listening after"),
])
def test_a_daemon_that_dies_at_start_up_is_reported_with_its_last_words(
        short_dir: Path, tmp_path: Path, script: str, daemon: str, subdir: str,
        timed_out: str) -> None:
    words = f"stand-in {daemon}: its directory is unusable"
    env = dying_daemon(tmp_path / "path", daemon, words)
    argv = [str(SCRIPTS_DIR / script), "start", str(short_dir / subdir)]
    try:
        result = run(argv, env)
    finally:
        run([argv[0], "stop", argv[2]], dict(os.environ))

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"{daemon} exited during start-up" in output
    assert words in output
    assert timed_out not in output
