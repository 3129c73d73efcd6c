"""The ``pykubelet`` command as an operator uses it: real processes, real files."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEED_CONFIG = REPO / "examples" / "kubelet-seed004.yaml"


def run_pykubelet(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykubelet", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_version_names_the_program() -> None:
    result = run_pykubelet("--version")
    assert result.returncode == 0
    assert "pykubelet v0.1.0" in result.stdout


def test_version_raw_prints_build_information() -> None:
    result = run_pykubelet("--version=raw")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith('version.Info{Major:"0", Minor:"1", ')
    assert 'GitVersion:"v0.1.0"' in line and 'Compiler:"cpython"' in line
    assert result.stderr == ""


def test_help_lists_upstream_flags_in_groups() -> None:
    result = run_pykubelet("--help")
    assert result.returncode == 0
    for flag in ("--config", "--kubeconfig", "--container-runtime-endpoint", "--max-pods",
                 "--pod-manifest-path", "--eviction-hard", "--feature-gates", "--lock-file"):
        assert flag in result.stdout, flag


def test_print_config_of_the_seed_configuration() -> None:
    result = run_pykubelet("--config", str(SEED_CONFIG), "--print-config")
    assert result.returncode == 0, result.stderr
    effective = json.loads(result.stdout)["kubeletconfig"]
    assert effective["staticPodPath"] == "/etc/kubernetes/manifests"
    assert effective["authentication"]["x509"]["clientCAFile"] == "/etc/kubernetes/pki/ca.pem"
    assert effective["evictionHard"]["memory.available"] == "100Mi"
    assert effective["readOnlyPort"] == 10255
    # A default the file does not set is filled in.
    assert effective["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"


def test_flags_override_the_file_in_print_config() -> None:
    result = run_pykubelet("--config", str(SEED_CONFIG), "--max_pods=42", "--read-only-port=0",
                           "--print-config")
    assert result.returncode == 0, result.stderr
    effective = json.loads(result.stdout)["kubeletconfig"]
    assert effective["maxPods"] == 42
    assert effective.get("readOnlyPort", 0) == 0  # omitted when zero, as upstream (omitempty)


def test_invalid_configuration_exits_1_naming_fields_and_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "healthzPort: 70000\nsyncFrequency: -5s\nimageGCHighThresholdPercent: 50\n"
        "imageGCLowThresholdPercent: 80\n")
    root = tmp_path / "root"
    lock = tmp_path / "lock" / "kubelet.lock"
    result = run_pykubelet("--config", str(config), "--root-dir", str(root),
                           "--lock-file", str(lock))
    assert result.returncode == 1
    for field in ("healthzPort", "syncFrequency", "imageGCLowThresholdPercent"):
        assert field in result.stderr, (field, result.stderr)
    assert not root.exists()
    assert not lock.parent.exists()


def test_a_built_in_cloud_provider_exits_1_and_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    lock = tmp_path / "lock" / "kubelet.lock"
    result = run_pykubelet("--cloud-provider=aws", "--root-dir", str(root),
                           "--lock-file", str(lock), "--container-runtime-endpoint",
                           f"unix://{tmp_path}/none.sock")
    assert result.returncode == 1
    assert ('cloud provider "aws" was specified, but built-in cloud providers are disabled. '
            'Please set --cloud-provider=external') in result.stderr
    assert "Traceback" not in result.stderr
    assert not root.exists()
    assert not lock.parent.exists()


def test_unknown_field_is_rejected_by_name(tmp_path: Path) -> None:
    config = tmp_path / "typo.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "maxPod: 10\n")
    result = run_pykubelet("--config", str(config), "--print-config")
    assert result.returncode == 1
    assert "maxPod" in result.stderr


def test_second_kubelet_on_a_held_lock_refuses_to_start(tmp_path: Path) -> None:
    lock_path = tmp_path / "kubelet.lock"
    holder = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(holder, b"4242\n")
        result = run_pykubelet("--lock-file", str(lock_path), "--root-dir", str(tmp_path / "r"),
                               "--container-runtime-endpoint", f"unix://{tmp_path}/none.sock",
                               timeout=30)
    finally:
        os.close(holder)
    assert result.returncode == 1
    assert "held by another kubelet" in result.stderr
    assert "4242" in result.stderr
    assert not (tmp_path / "r").exists()


def test_missing_runtime_socket_is_one_clear_error(tmp_path: Path) -> None:
    endpoint = f"unix://{tmp_path}/missing/containerd.sock"
    result = run_pykubelet("--container-runtime-endpoint", endpoint,
                           "--root-dir", str(tmp_path / "root"), "--healthz-port", "0",
                           "--read-only-port", "0", timeout=60)
    assert result.returncode == 1
    assert f"{tmp_path}/missing/containerd.sock" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--exit-on-lock-contention"])
def test_exit_on_lock_contention_needs_a_lock_file(flag: str) -> None:
    result = run_pykubelet(flag, "--print-config")
    assert result.returncode == 1
    assert "lock" in result.stderr
