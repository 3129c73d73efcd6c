"""Which kubectl the cluster helpers and the conformance harness run: the one built with
the control plane, never whatever ``kubectl`` is first on PATH."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testsupport.conformance import ginkgo_command
from testsupport.controlplane import ControlPlane, ControlPlaneError, kubectl_binary


def plane_in(tmp_path: Path, bin_dir: Path) -> ControlPlane:
    """A control plane as ``start`` leaves its facts (nothing runs)."""
    plane_dir = tmp_path / "plane"
    plane_dir.mkdir()
    (plane_dir / "env").write_text(f"KUBERNETES_BIN_DIR={bin_dir}\n"
                                   f"ADMIN_KUBECONFIG={plane_dir}/admin.kubeconfig\n")
    return ControlPlane(plane_dir)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "kubectl").write_text("#!/bin/sh\n")
    (directory / "kubectl").chmod(0o755)
    return directory


def test_cluster_commands_run_the_kubectl_of_the_planes_build(tmp_path: Path,
                                                              bin_dir: Path) -> None:
    plane = plane_in(tmp_path, bin_dir)
    argv = plane.kubectl_argv("get", "nodes")
    assert argv == [str(bin_dir / "kubectl"), "--kubeconfig",
                    str(tmp_path / "plane" / "admin.kubeconfig"), "get", "nodes"]


def test_a_build_without_kubectl_says_to_run_the_build_script(tmp_path: Path) -> None:
    empty = tmp_path / "old-cache"
    empty.mkdir()
    with pytest.raises(ControlPlaneError, match=re.escape("controlplane-build.sh")):
        kubectl_binary(empty)


def test_the_e2e_suite_is_given_the_built_kubectl(tmp_path: Path, bin_dir: Path) -> None:
    command = ginkgo_command(bin_dir=bin_dir, plane=plane_in(tmp_path, bin_dir), focus="x",
                             skip="y", parallel=2, report_dir=tmp_path / "junit")
    suite_flags = command[command.index("--") + 1:]
    assert f"--kubectl-path={bin_dir / 'kubectl'}" in suite_flags
