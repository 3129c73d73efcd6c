"""The project set-up on a fresh machine: a venv from Debian's externally-managed Python.

Debian's ``/usr/bin/python3`` refuses ``pip install`` (PEP 668), which is what
broke the README's commands under sudo. ``scripts/setup.sh`` must instead make
a venv from it, install requirements.lock's versions and pykubelet there, leave
the system interpreter alone, and on later runs skip pip unless the lock or
``pyproject.toml`` changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = Path("/usr/bin/python3")
# pip downloads (or takes from its cache) every dependency on the first run.
SETUP_TIMEOUT_SECONDS = 600


def _debian_python_usable() -> bool:
    if not DEBIAN_PYTHON.exists():
        return False
    result = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
        check=False)
    return result.returncode == 0


pytestmark = pytest.mark.skipif(not _debian_python_usable(),
                                reason="no Debian /usr/bin/python3 >= 3.11 on this machine")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a new shell: nothing pointing at this test run's interpreter."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
           and not key.startswith("PYKUBELET_")}
    # Drop the directory of the interpreter running the tests (e.g. .venv/bin) from PATH.
    own_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and p != own_bin)
    env.update(extra)
    return env


def setup_venv(venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh"), "--venv-only"],
        env=clean_env(PYKUBELET_PYTHON=str(DEBIAN_PYTHON), PYKUBELET_VENV=str(venv)),
        cwd="/", capture_output=True, text=True, timeout=SETUP_TIMEOUT_SECONDS, check=False)


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "venv"
    yield path
    shutil.rmtree(path, ignore_errors=True)  # a few hundred MB; not worth keeping


def test_setup_makes_a_working_venv_from_debian_python_and_reuses_it(venv: Path) -> None:
    first = setup_venv(venv)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.strip() == str(venv / "bin" / "python")
    assert "installing pykubelet" in first.stderr
    # The venv really is Debian's interpreter, not the one running the tests.
    pyvenv_cfg = (venv / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in pyvenv_cfg

    version = subprocess.run([str(venv / "bin" / "pykubelet"), "--version"], cwd="/",
                             env=clean_env(), capture_output=True, text=True, timeout=60,
                             check=False)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("pykubelet v")

    # The venv holds the locked versions, not the newest of the day.
    locked = {line.split("==")[0].lower(): line.split("==")[1].split()[0]
              for line in (REPO / "requirements.lock").read_text().splitlines()
              if "==" in line and not line.startswith((" ", "#"))}
    yaml_version = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "from importlib.metadata import version; print(version('PyYAML'))"],
        cwd="/", env=clean_env(), capture_output=True, text=True, timeout=60, check=False)
    assert yaml_version.stdout.strip() == locked["pyyaml"], yaml_version.stderr

    # Nothing went into the system interpreter.
    system = subprocess.run([str(DEBIAN_PYTHON), "-c", "import pykubelet"], cwd="/",
                            env=clean_env(), capture_output=True, text=True, check=False)
    assert system.returncode != 0
    assert "No module named 'pykubelet'" in system.stderr

    # A second run with the same pyproject.toml does not run pip again...
    stamp = venv / ".pykubelet-install"
    stamp_before = stamp.stat().st_mtime_ns
    second = setup_venv(venv)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "up to date" in second.stderr
    assert "installing" not in second.stderr
    assert stamp.stat().st_mtime_ns == stamp_before

    # ...but one after pyproject.toml changed (as the stamp would then differ) does.
    stamp.write_text(stamp.read_text().replace("pyproject=", "pyproject=0", 1))
    third = setup_venv(venv)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "installing pykubelet" in third.stderr
    assert "requirements.lock or pyproject.toml changed" in third.stderr
