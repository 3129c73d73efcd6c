"""The testbed's control-plane script tells a component that died at start-up
from one still starting.

Its start waits for each component to answer and gives up at once, with the
component's log, when the process has ended. A CI run once failed with "etcd
exited during start-up" and an empty log: etcd was alive but between two execs
(``setsid`` into etcd), when the kernel shows an empty command line. These tests
run the script with stand-ins on PATH and in the binaries' directory: a
component that does die is reported within seconds with its own last words,
and one that is alive but not yet recognisable by its command line is waited
for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from testsupport.controlplane import CONTROLPLANE_SCRIPT, built_binary

pytestmark = pytest.mark.controlplane

# Far less than the script's readiness timeout (120 s): a death must be seen at once.
DEATH_NOTICED_WITHIN_SECONDS = 30.0
# Longer than the script waits for a launched process to show its command line.
UNRECOGNISABLE_SECONDS = 4.0


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def bin_dir_with_dying_apiserver(tmp_path: Path) -> Path:
    """The built binaries, but a kube-apiserver that says why it gives up and exits."""
    built = built_binary("kube-apiserver", "control plane", build=True).parent
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("kube-controller-manager", "kube-scheduler", "kubectl"):
        (bin_dir / name).symlink_to(built / name)
    executable(bin_dir / "kube-apiserver",
               "#!/bin/sh\necho 'stand-in kube-apiserver: refusing to serve' >&2\nexit 3\n")
    return bin_dir


def start(tmp_path: Path, *, path_dir: Path,
          bin_dir: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the script's start in a new directory (then its stop); its result and how
    long the start took."""
    env = dict(os.environ,
               PATH=f"{path_dir}:{os.environ['PATH']}",
               PYKUBELET_K8S_BIN_DIR=str(bin_dir))
    plane_dir = tmp_path / "plane"
    began = time.monotonic()
    try:
        result = subprocess.run([str(CONTROLPLANE_SCRIPT), "start", str(plane_dir)], env=env,
                                capture_output=True, text=True, timeout=180, check=False)
    finally:
        # Whatever the start left running (it stops its components itself on failure).
        subprocess.run([str(CONTROLPLANE_SCRIPT), "stop", str(plane_dir)], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    return result, time.monotonic() - began


def test_a_component_that_dies_is_reported_at_once_with_its_log(tmp_path: Path) -> None:
    path_dir = tmp_path / "path"
    path_dir.mkdir()
    executable(path_dir / "etcd",
               "#!/bin/sh\necho 'stand-in etcd: the data directory is unusable' >&2\nexit 1\n")

    result, took = start(tmp_path, path_dir=path_dir,
                         bin_dir=bin_dir_with_dying_apiserver(tmp_path))

    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "etcd exited during start-up" in output
    assert "stand-in etcd: the data directory is unusable" in output
    assert took < DEATH_NOTICED_WITHIN_SECONDS


def test_a_component_alive_under_another_command_line_is_waited_for(tmp_path: Path) -> None:
    real_etcd = shutil.which("etcd")
    assert real_etcd, "etcd missing: run scripts/testbed/controlplane-build.sh"
    path_dir = tmp_path / "path"
    path_dir.mkdir()
    # Alive for a while as "python3 -c ..." (nothing of the control plane's directory
    # in its command line, as in the moment between two execs), then the real etcd
    # with the arguments it was given, passed through the environment.
    executable(path_dir / "etcd", f"""#!/bin/sh
FAKE_ETCD_ARGS="$(printf '%s\\n' "$@")" exec python3 -c '
import os, time
time.sleep({UNRECOGNISABLE_SECONDS})
args = os.environ.pop("FAKE_ETCD_ARGS").splitlines()
os.execv("{real_etcd}", ["{real_etcd}", *args])
'
""")

    result, _ = start(tmp_path, path_dir=path_dir,
                      bin_dir=bin_dir_with_dying_apiserver(tmp_path))

    output = result.stdout + result.stderr
    assert "etcd exited during start-up" not in output
    # etcd became ready, so start went on to the next component (a stand-in that dies).
    assert "kube-apiserver exited during start-up" in output
    assert "stand-in kube-apiserver: refusing to serve" in output
